//! A PRD's task graph (issue 30), drawn by the server as inline SVG: one box per task in
//! the column of its depth (a task right of everything it depends on), coloured by state,
//! linked to the job behind it; arrows from each dependency. A dependency on another PRD's
//! task is a grey box in the first column. Every text is escaped.

use super::percent_encode;
use maud::{Markup, html};
use serde_json::Value;
use std::collections::BTreeMap;

const W: usize = 170;
const H: usize = 46;
const GAP_X: usize = 60;
const GAP_Y: usize = 18;

/// The fill of a task state.
pub(super) fn colour(status: &str) -> &'static str {
    match status {
        "pending" => "#d9d9d9",
        "ready" => "#9ecbff",
        "running" => "#ffd166",
        "review" => "#ff9f68",
        "done" => "#8fd19e",
        "failed" => "#f28b82",
        "cancelled" => "#b0b0b0",
        _ => "#ffffff",
    }
}

fn text<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// The SVG of `tasks` (the `list-tasks` answer for one PRD, `prd`).
pub(super) fn svg(prd: &str, tasks: &[Value]) -> Markup {
    // Nodes: the PRD's tasks by id, plus other PRDs' tasks they depend on.
    let mut deps: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut nodes: BTreeMap<String, Option<&Value>> = BTreeMap::new();
    for t in tasks {
        let id = text(t, "id").to_string();
        let ds: Vec<String> = t
            .get("depends_on")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|d| match d.split_once('/') {
                Some((p, x)) if p == prd => x.to_string(),
                _ => d.to_string(),
            })
            .collect();
        nodes.insert(id.clone(), Some(t));
        deps.insert(id, ds);
    }
    for ds in deps.values() {
        for d in ds {
            nodes.entry(d.clone()).or_insert(None);
        }
    }
    // Depth: the longest chain of dependencies before a node (bounded: a cycle, which the
    // store refuses, cannot loop here).
    let mut depth: BTreeMap<&str, usize> = nodes.keys().map(|k| (k.as_str(), 0)).collect();
    for _ in 0..nodes.len() {
        let mut changed = false;
        for (id, ds) in &deps {
            let want = ds
                .iter()
                .map(|d| depth.get(d.as_str()).copied().unwrap_or(0) + 1)
                .max()
                .unwrap_or(0);
            if depth.get(id.as_str()).copied().unwrap_or(0) < want {
                depth.insert(id.as_str(), want);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let mut columns: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
    for (id, d) in &depth {
        columns.entry(*d).or_default().push(id);
    }
    let mut at: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut rows = 0;
    for (c, ids) in &columns {
        rows = rows.max(ids.len());
        for (r, id) in ids.iter().enumerate() {
            at.insert(id, (10 + c * (W + GAP_X), 10 + r * (H + GAP_Y)));
        }
    }
    let width = 20 + columns.len() * (W + GAP_X);
    let height = 20 + rows * (H + GAP_Y);
    // Each dependency: from, to, and where each box is.
    type Edge<'a> = (&'a str, &'a str, (usize, usize), (usize, usize));
    let edges: Vec<Edge> = deps
        .iter()
        .filter_map(|(id, ds)| Some((id, ds, *at.get(id.as_str())?)))
        .flat_map(|(id, ds, to)| {
            ds.iter()
                .filter_map(|d| Some((d.as_str(), id.as_str(), *at.get(d.as_str())?, to)))
                .collect::<Vec<_>>()
        })
        .collect();
    html! {
        svg id="task-graph" xmlns="http://www.w3.org/2000/svg" width=(width) height=(height)
            viewBox={ "0 0 " (width) " " (height) } role="img" aria-label={ "task graph of PRD " (prd) } {
            defs {
                marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" orient="auto" {
                    path d="M0,0 L10,5 L0,10 z" fill="#555" {}
                }
            }
            @for (from, to, (x1, y1), (x2, y2)) in &edges {
                line class="edge" data-from=(from) data-to=(to) x1=(x1 + W) y1=(y1 + H / 2) x2=(x2) y2=(y2 + H / 2)
                    stroke="#555" marker-end="url(#arrow)" {}
            }
            @for (id, t) in &nodes {
                @if let Some(&(x, y)) = at.get(id.as_str()) {
                    @let (status, job, title) = match t {
                        Some(t) => (
                            text(t, "status"),
                            t.get("jobs")
                                .and_then(Value::as_array)
                                .and_then(|j| j.last())
                                .and_then(Value::as_str),
                            text(t, "title"),
                        ),
                        None => ("other PRD", None, ""),
                    };
                    @let fill = if t.is_some() { colour(status) } else { "#eeeeee" };
                    @let node = html! {
                        rect x=(x) y=(y) width=(W) height=(H) rx="6" fill=(fill) stroke="#333" {}
                        text x=(x + 8) y=(y + 18) font-size="13" font-weight="bold" { (short(id, 22)) }
                        text x=(x + 8) y=(y + 36) font-size="11" { (status) }
                        title { (id) ": " (title) " (" (status) ")" }
                    };
                    g class="task" data-task=(id) data-status=(status) {
                        @match job {
                            Some(j) => a href={ "/jobs/" (percent_encode(j)) } data-job=(j) { (node) },
                            None => (node),
                        }
                    }
                }
            }
        }
    }
}

fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_diamond_is_drawn_in_three_columns_escaped_and_linked() {
        let tasks = vec![
            json!({"id": "A", "title": "<b>x</b>", "status": "done", "depends_on": [], "jobs": ["j-a"]}),
            json!({"id": "B", "title": "b", "status": "running", "depends_on": ["A"], "jobs": ["j-b"]}),
            json!({"id": "C", "title": "c", "status": "failed", "depends_on": ["A"], "jobs": []}),
            json!({"id": "D", "title": "d", "status": "pending", "depends_on": ["B", "C", "other/T"], "jobs": []}),
        ];
        let s = svg("p<1>", &tasks).into_string();
        assert!(s.contains("task graph of PRD p&lt;1&gt;"), "{s}");
        assert!(!s.contains("<b>x</b>"), "unescaped title: {s}");
        assert!(s.contains(r#"href="/jobs/j-a""#));
        assert!(s.contains(colour("failed")) && s.contains(colour("running")));
        assert_eq!(s.matches(r#"class="edge""#).count(), 5);
        assert!(s.contains(r#"data-task="other/T" data-status="other PRD""#));
        // A at depth 0, B and C at 1, D at 2: D's box is two columns right of A's.
        let x_of = |id: &str| {
            let g = s.split(&format!(r#"data-task="{id}""#)).nth(1).unwrap();
            let x = g.split("x=\"").nth(1).unwrap();
            x.split('"').next().unwrap().parse::<usize>().unwrap()
        };
        assert_eq!(x_of("D") - x_of("A"), 2 * (W + GAP_X));
        assert_eq!(x_of("B"), x_of("C"));
    }
}
