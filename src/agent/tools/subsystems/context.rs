//! Context manager — the budget. Two pure functions, no state.
//!
//! * [`fit`] keeps the pinned prefix (the system prompt), the current request and the most
//!   recent groups of messages, drops the middle and says so with an explicit marker.
//! * [`bound`] keeps the head and the tail of an output and marks the cut.
//!
//! The messages belong to L2; this module only sees them through [`ContextItem`].

/// What [`fit`] needs to know about a message.
pub trait ContextItem: Clone {
    /// Estimated size in tokens.
    fn size(&self) -> usize;
    /// Pinned items (the system prompt) at the start are always kept.
    fn is_pinned(&self) -> bool;
    /// A request from the human: the latest one is always kept.
    fn is_request(&self) -> bool;
    /// Whether this item starts a group that may be dropped as a whole (a request, or a model
    /// reply together with the tool results that follow it).
    fn starts_group(&self) -> bool;
    /// A marker saying `dropped` items of about `tokens` tokens were removed here.
    fn marker(dropped: usize, tokens: usize) -> Self;
    /// Whether this item is a marker made by [`ContextItem::marker`].
    fn is_marker(&self) -> bool;
}

/// Rough token estimate for text: four bytes a token, rounded up.
pub fn estimate_tokens(text: &str) -> usize {
    text.len().div_ceil(4)
}

/// Fit `items` into `budget` tokens.
///
/// Guarantees: the output is the input when it already fits; otherwise it is a subsequence of
/// the input with a marker wherever something was dropped; the pinned prefix, the latest
/// request and the last group are always kept (so the output can exceed the budget only when
/// those alone do); groups are never split, so a tool result never loses its call.
pub fn fit<T: ContextItem>(items: &[T], budget: usize) -> Vec<T> {
    let total: usize = items.iter().map(ContextItem::size).sum();
    if total <= budget {
        return items.to_vec();
    }
    let pinned = items.iter().take_while(|i| i.is_pinned()).count();
    let rest = &items[pinned..];
    // Group boundaries: indices into `rest` where a group starts.
    let mut starts: Vec<usize> = (0..rest.len())
        .filter(|&i| i == 0 || rest[i].starts_group())
        .collect();
    if starts.is_empty() {
        return items.to_vec();
    }
    starts.push(rest.len());
    let groups: Vec<(usize, usize)> = starts.windows(2).map(|w| (w[0], w[1])).collect();
    let size_of = |(a, b): (usize, usize)| rest[a..b].iter().map(ContextItem::size).sum::<usize>();
    let request = rest.iter().rposition(ContextItem::is_request);

    let pinned_size: usize = items[..pinned].iter().map(ContextItem::size).sum();
    let marker_size = T::marker(usize::MAX, usize::MAX).size();
    // Always keep the last group.
    let last = groups.len() - 1;
    let mut first_kept = last;
    let mut used = pinned_size + size_of(groups[last]);
    // The latest request, when it lies before the last group, is kept on its own.
    let request_group = request
        .and_then(|r| groups.iter().position(|&(a, b)| a <= r && r < b))
        .filter(|&g| g < last);
    if let Some(g) = request_group {
        used += size_of(groups[g]);
    }
    // Room for up to two markers.
    used += 2 * marker_size;
    while first_kept > 0 {
        let candidate = first_kept - 1;
        if Some(candidate) == request_group {
            first_kept = candidate;
            continue;
        }
        let s = size_of(groups[candidate]);
        if used + s > budget {
            break;
        }
        used += s;
        first_kept = candidate;
    }

    let mut out: Vec<T> = items[..pinned].to_vec();
    let mut dropped = (0usize, 0usize);
    let flush = |out: &mut Vec<T>, dropped: &mut (usize, usize)| {
        if dropped.0 > 0 {
            out.push(T::marker(dropped.0, dropped.1));
            *dropped = (0, 0);
        }
    };
    for (g, &(a, b)) in groups.iter().enumerate() {
        let keep = g >= first_kept || Some(g) == request_group;
        if keep {
            flush(&mut out, &mut dropped);
            out.extend_from_slice(&rest[a..b]);
        } else {
            for item in &rest[a..b] {
                dropped.0 += 1;
                dropped.1 += item.size();
            }
        }
    }
    flush(&mut out, &mut dropped);
    out
}

/// Bound `output` to `limit` bytes, keeping the head and the tail and marking the cut.
///
/// Guarantees: unchanged when it fits; otherwise the result is a prefix of the input, a marker
/// line naming the number of bytes cut, and a suffix of the input; its length is at most
/// `max(limit, marker length)`; cuts fall on UTF-8 character boundaries.
pub fn bound(output: &str, limit: usize) -> String {
    if output.len() <= limit {
        return output.to_string();
    }
    // The marker's length depends on the number it names; size it for the worst case.
    let worst_marker = cut_marker(output.len());
    let room = limit.saturating_sub(worst_marker.len());
    let mut head_end = room / 2;
    while !output.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = output.len() - (room - room / 2);
    while !output.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    let omitted = tail_start - head_end;
    let mut out = String::with_capacity(limit);
    out.push_str(&output[..head_end]);
    out.push_str(&cut_marker(omitted));
    out.push_str(&output[tail_start..]);
    out
}

/// The marker [`bound`] puts where it cut `omitted` bytes.
pub fn cut_marker(omitted: usize) -> String {
    format!("\n[... {omitted} bytes omitted by the context manager ...]\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A test message: kind and size.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Item {
        System(usize),
        User(usize, u32),
        Assistant(usize, u32),
        ToolResult(usize, u32),
        Marker(usize, usize),
    }

    impl ContextItem for Item {
        fn size(&self) -> usize {
            match self {
                Item::System(s)
                | Item::User(s, _)
                | Item::Assistant(s, _)
                | Item::ToolResult(s, _) => *s,
                Item::Marker(..) => 10,
            }
        }
        fn is_pinned(&self) -> bool {
            matches!(self, Item::System(_))
        }
        fn is_request(&self) -> bool {
            matches!(self, Item::User(..))
        }
        fn starts_group(&self) -> bool {
            matches!(
                self,
                Item::User(..) | Item::Assistant(..) | Item::Marker(..)
            )
        }
        fn marker(dropped: usize, tokens: usize) -> Self {
            Item::Marker(dropped, tokens)
        }
        fn is_marker(&self) -> bool {
            matches!(self, Item::Marker(..))
        }
    }

    fn conversation() -> impl Strategy<Value = Vec<Item>> {
        (
            0usize..200,
            proptest::collection::vec((0u8..3, 1usize..300), 1..60),
        )
            .prop_map(|(sys, body)| {
                let mut v = vec![Item::System(sys)];
                let mut in_reply = false;
                for (n, (kind, size)) in body.into_iter().enumerate() {
                    let id = n as u32;
                    match kind {
                        0 => {
                            v.push(Item::User(size, id));
                            in_reply = false;
                        }
                        1 => {
                            v.push(Item::Assistant(size, id));
                            in_reply = true;
                        }
                        _ if in_reply => v.push(Item::ToolResult(size, id)),
                        _ => v.push(Item::User(size, id)),
                    }
                }
                v
            })
    }

    fn is_subsequence(out: &[Item], input: &[Item]) -> bool {
        let mut it = input.iter();
        out.iter()
            .filter(|i| !i.is_marker())
            .all(|o| it.any(|i| i == o))
    }

    proptest! {
        #[test]
        fn fit_properties(items in conversation(), budget in 0usize..3000) {
            let out = fit(&items, budget);
            let total: usize = items.iter().map(ContextItem::size).sum();
            if total <= budget {
                prop_assert_eq!(&out, &items);
                return Ok(());
            }
            // a subsequence plus markers, with the system prompt first
            prop_assert!(is_subsequence(&out, &items));
            prop_assert_eq!(&out[0], &items[0]);
            // the last item and the latest request survive
            prop_assert_eq!(out.last(), items.last());
            if let Some(req) = items.iter().rev().find(|i| i.is_request()) {
                prop_assert!(out.contains(req));
            }
            // a marker exactly when something was dropped
            let kept = out.iter().filter(|i| !i.is_marker()).count();
            let markers = out.iter().filter(|i| i.is_marker()).count();
            prop_assert_eq!(kept < items.len(), markers > 0);
            prop_assert!(markers <= 2);
            // tool results never lose their call: each kept result follows a kept reply or result
            for w in out.windows(2) {
                if matches!(w[1], Item::ToolResult(..)) {
                    prop_assert!(matches!(w[0], Item::Assistant(..) | Item::ToolResult(..)));
                }
            }
            // within budget unless the mandatory part alone exceeds it
            let out_size: usize = out.iter().map(ContextItem::size).sum();
            let mandatory = fit(&items, 0).iter().map(ContextItem::size).sum::<usize>();
            prop_assert!(out_size <= budget.max(mandatory));
        }

        #[test]
        fn fit_is_idempotent(items in conversation(), budget in 0usize..3000) {
            let once = fit(&items, budget);
            let twice = fit(&once, budget);
            let once_size: usize = once.iter().map(ContextItem::size).sum();
            if once_size <= budget {
                prop_assert_eq!(twice, once);
            }
        }

        #[test]
        fn bound_properties(s in "\\PC{0,400}", limit in 0usize..500) {
            let out = bound(&s, limit);
            if s.len() <= limit {
                prop_assert_eq!(out, s);
            } else {
                let marker_len = cut_marker(s.len()).len();
                prop_assert!(out.len() <= limit.max(marker_len));
                let start = out.find("\n[... ").unwrap();
                let end = out.find(" ...]\n").unwrap() + " ...]\n".len();
                prop_assert!(s.starts_with(&out[..start]));
                prop_assert!(s.ends_with(&out[end..]));
                let omitted: usize = out[start + 6..].split(' ').next().unwrap().parse().unwrap();
                prop_assert_eq!(start + omitted + (out.len() - end), s.len());
            }
        }
    }

    #[test]
    fn fit_drops_the_middle_with_a_marker() {
        let items = vec![
            Item::System(10),
            Item::User(100, 1),
            Item::Assistant(100, 2),
            Item::ToolResult(100, 3),
            Item::User(20, 4),
            Item::Assistant(20, 5),
        ];
        assert_eq!(
            fit(&items, 100),
            vec![
                Item::System(10),
                Item::Marker(3, 300),
                Item::User(20, 4),
                Item::Assistant(20, 5)
            ]
        );
    }

    #[test]
    fn fit_keeps_the_request_when_its_turn_is_long() {
        let items = vec![
            Item::System(10),
            Item::User(20, 1),
            Item::Assistant(100, 2),
            Item::ToolResult(100, 3),
            Item::Assistant(30, 4),
            Item::ToolResult(30, 5),
        ];
        assert_eq!(
            fit(&items, 130),
            vec![
                Item::System(10),
                Item::User(20, 1),
                Item::Marker(2, 200),
                Item::Assistant(30, 4),
                Item::ToolResult(30, 5),
            ]
        );
    }

    #[test]
    fn bound_keeps_head_and_tail() {
        let s = format!(
            "{}{}{}",
            "H".repeat(100),
            "m".repeat(10_000),
            "T".repeat(100)
        );
        let out = bound(&s, 300);
        assert!(out.len() <= 300);
        assert!(out.starts_with("HHHH"));
        assert!(out.ends_with("TTTT"));
        assert!(out.contains("bytes omitted by the context manager"));
    }
}
