//! Cost and tokens per agent (issue 35): Claude Code, agentshell and Codex side by side, from
//! the same job fields (`runtime.cost_usd`, `runtime.usage`), for the charts page.

use maud::{Markup, html};
use serde_json::Value;
use std::collections::BTreeMap;

#[derive(Default)]
struct Sum {
    jobs: u64,
    cost: f64,
    unpriced: u64,
    input: u64,
    output: u64,
}

/// A table: per job type that reported anything, the jobs, their cost (and how many had no
/// price) and their tokens.
pub fn cost_per_agent(jobs: &[Value]) -> Markup {
    let mut sums: BTreeMap<String, Sum> = BTreeMap::new();
    for j in jobs {
        let cost = j.pointer("/runtime/cost_usd").and_then(Value::as_f64);
        let tokens = |k: &str| {
            j.pointer(&format!("/runtime/usage/{k}"))
                .and_then(Value::as_u64)
        };
        let (input, output) = (tokens("input_tokens"), tokens("output_tokens"));
        if cost.is_none() && input.is_none() {
            continue;
        }
        let kind = j
            .pointer("/config/jobtype")
            .and_then(Value::as_str)
            .unwrap_or("?");
        let s = sums.entry(kind.to_string()).or_default();
        s.jobs += 1;
        match cost {
            Some(c) => s.cost += c,
            None => s.unpriced += 1,
        }
        s.input += input.unwrap_or(0);
        s.output += output.unwrap_or(0);
    }
    html! {
        section id="chart-agents" {
            h2 { "Cost and tokens per agent" }
            @if sums.is_empty() {
                p { "No job reported a cost or tokens yet." }
            } @else {
                table {
                    tr { th { "agent" } th { "jobs" } th { "cost" } th { "tokens in" } th { "tokens out" } }
                    @for (kind, s) in &sums {
                        tr id={ "agent-" (kind) } {
                            td { (kind) }
                            td { (s.jobs) }
                            td {
                                "$" (format!("{:.4}", s.cost))
                                @if s.unpriced > 0 { " (" (s.unpriced) " without a price)" }
                            }
                            td { (s.input) }
                            td { (s.output) }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn claude_and_codex_side_by_side() {
        let jobs = [
            json!({"config": {"jobtype": "claude"}, "runtime": {"cost_usd": 0.5,
                "usage": {"input_tokens": 10, "output_tokens": 2}}}),
            json!({"config": {"jobtype": "codex"}, "runtime": {"cost_usd": 0.25,
                "usage": {"input_tokens": 100, "output_tokens": 20}}}),
            json!({"config": {"jobtype": "codex"}, "runtime": {
                "usage": {"input_tokens": 1, "output_tokens": 1}}}),
            json!({"config": {"jobtype": "noop"}, "runtime": {}}),
        ];
        let t = cost_per_agent(&jobs).into_string();
        assert!(t.contains(r#"<tr id="agent-claude"><td>claude</td><td>1</td><td>$0.5000</td><td>10</td><td>2</td></tr>"#), "{t}");
        assert!(t.contains(r#"<tr id="agent-codex"><td>codex</td><td>2</td><td>$0.2500 (1 without a price)</td><td>101</td><td>21</td></tr>"#), "{t}");
        assert!(!t.contains("noop"), "{t}");
    }
}
