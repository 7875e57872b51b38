//! SVG charts drawn on the server (no script, no library): jobs per hour by outcome, the
//! duration distribution per command, and cost per project over time. Each takes job
//! documents as the API lists them (JSON) and returns an `<svg>` element.

use maud::{Markup, html};
use serde_json::Value;
use std::collections::BTreeMap;

const W: f64 = 720.0;
const H: f64 = 220.0;
const PAD: f64 = 40.0;
const COLOURS: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

fn time(job: &Value, field: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let s = job.get("runtime")?.get(field)?.as_str()?;
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc))
}

fn status(job: &Value) -> &str {
    job.pointer("/runtime/status")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// A number with one decimal.
fn f1(v: f64) -> String {
    format!("{v:.1}")
}

fn frame(title: &str, id: &str, inner: Markup) -> Markup {
    html! {
        figure class="chart" id=(id) {
            figcaption { (title) }
            svg xmlns="http://www.w3.org/2000/svg" viewBox={ "0 0 " (W) " " (H) } width=(W) height=(H)
                role="img" aria-label=(title) {
                (inner)
            }
        }
    }
}

fn empty(title: &str, id: &str) -> Markup {
    frame(
        title,
        id,
        html! { text x=(W / 2.0) y=(H / 2.0) text-anchor="middle" { "no data" } },
    )
}

/// Finished and failed jobs per hour of their end (the last 48 hours that have any).
pub fn jobs_per_hour(jobs: &[Value]) -> Markup {
    let title = "Jobs per hour by outcome";
    let mut hours: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for j in jobs {
        let Some(t) = time(j, "finish_time") else {
            continue;
        };
        let e = hours
            .entry(t.format("%Y-%m-%d %H:00").to_string())
            .or_default();
        match status(j) {
            "finished" => e.0 += 1,
            "failed" => e.1 += 1,
            _ => {}
        }
    }
    let rows: Vec<_> = hours
        .into_iter()
        .rev()
        .take(48)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    if rows.is_empty() {
        return empty(title, "chart-hourly");
    }
    let max = rows
        .iter()
        .map(|(_, (a, b))| a + b)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    // A real time axis: each hour at its place between the first and the last, gaps empty;
    // bars at most 40 px wide (one hour is not a full-width bar).
    let hour_of = |h: &str| {
        chrono::NaiveDateTime::parse_from_str(&format!("{h}:00"), "%Y-%m-%d %H:%M:%S")
            .map(|t| t.and_utc().timestamp() / 3600)
            .unwrap_or(0)
    };
    let first = hour_of(&rows[0].0);
    let last = hour_of(&rows[rows.len() - 1].0);
    let slots = (last - first + 1).max(1) as f64;
    let bw = ((W - 2.0 * PAD) / slots).min(40.0);
    let span = bw * slots;
    let left = PAD + ((W - 2.0 * PAD) - span) / 2.0;
    let base = H - PAD;
    let width = f1((bw - 1.0).max(1.0));
    let label_y = H - PAD + 14.0;
    let s = html! {
        @for (hour, (ok, bad)) in &rows {
            @let x = f1(left + (hour_of(hour) - first) as f64 * bw);
            @let hok = (H - 2.0 * PAD) * f64::from(*ok) / max;
            @let hbad = (H - 2.0 * PAD) * f64::from(*bad) / max;
            g class="bar" data-hour=(hour) data-finished=(ok) data-failed=(bad) {
                title { (hour) ": " (ok) " finished, " (bad) " failed" }
                rect x=(x) y=(f1(base - hok)) width=(width) height=(f1(hok)) fill="#2ca02c" {}
                rect x=(x) y=(f1(base - hok - hbad)) width=(width) height=(f1(hbad)) fill="#d62728" {}
            }
        }
        @if rows.len() == 1 {
            text x=(W / 2.0) y=(label_y) font-size="11" text-anchor="middle" { (rows[0].0) }
        } @else {
            text x=(f1(left)) y=(label_y) font-size="11" { (rows[0].0) }
            text x=(f1(left + span)) y=(label_y) font-size="11" text-anchor="end" { (rows[rows.len() - 1].0) }
        }
        text x="4" y=(PAD) font-size="11" { (max) }
        text x="4" y=(H - PAD) font-size="11" { "0" }
        text x="560" y="14" font-size="11" fill="#2ca02c" { "■ finished" }
        text x="640" y="14" font-size="11" fill="#d62728" { "■ failed" }
    };
    frame(title, "chart-hourly", s)
}

/// Run time (start to end) per command: a bar from the shortest to the longest, the median
/// marked, in seconds.
pub fn durations_per_command(jobs: &[Value]) -> Markup {
    let title = "Duration per command (seconds: min, median, max)";
    let mut by: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for j in jobs {
        let (Some(a), Some(b)) = (time(j, "start_time"), time(j, "finish_time")) else {
            continue;
        };
        let cmd = j
            .pointer("/config/claude_command")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string();
        by.entry(cmd)
            .or_default()
            .push((b - a).num_milliseconds().max(0) as f64 / 1000.0);
    }
    if by.is_empty() {
        return empty(title, "chart-durations");
    }
    let max = by.values().flatten().copied().fold(1.0_f64, f64::max);
    let rows = by.len().min(8);
    let rh = (H - 2.0 * PAD) / rows as f64;
    let x0 = 160.0;
    let scale = (W - x0 - PAD) / max;
    let rows: Vec<(String, Vec<f64>)> = by
        .into_iter()
        .take(8)
        .map(|(cmd, mut v)| {
            v.sort_by(f64::total_cmp);
            (cmd, v)
        })
        .collect();
    let s = html! {
        @for (i, (cmd, v)) in rows.iter().enumerate() {
            @let (lo, hi, med) = (v[0], v[v.len() - 1], v[v.len() / 2]);
            @let y = PAD + i as f64 * rh;
            @let med_x = f1(x0 + med * scale);
            g class="dur" data-command=(cmd) data-count=(v.len()) data-median=(f1(med)) {
                title { (cmd) ": " (v.len()) " jobs, median " (f1(med)) "s" }
                text x="4" y=(f1(y + rh / 2.0 + 4.0)) font-size="12" { (cmd) }
                rect x=(f1(x0 + lo * scale)) y=(f1(y + rh * 0.2)) width=(f1(((hi - lo) * scale).max(2.0)))
                    height=(f1(rh * 0.6)) fill=(COLOURS[i % COLOURS.len()]) {}
                line x1=(med_x) x2=(med_x) y1=(f1(y + rh * 0.1)) y2=(f1(y + rh * 0.9)) stroke="#000" stroke-width="2" {}
            }
        }
        text x=(x0) y=(H - PAD + 14.0) font-size="11" { "0" }
        text x=(W - PAD) y=(H - PAD + 14.0) font-size="11" text-anchor="end" { (format!("{max:.0}s")) }
    };
    frame(title, "chart-durations", s)
}

/// Cost per project per day (USD reported by the agent), one line per project.
pub fn cost_per_project(jobs: &[Value]) -> Markup {
    let title = "Cost per project per day, or per hour within one day (USD)";
    let mut days: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    let mut projects: BTreeMap<String, f64> = BTreeMap::new();
    for j in jobs {
        let Some(cost) = j.pointer("/runtime/cost_usd").and_then(Value::as_f64) else {
            continue;
        };
        let Some(t) = time(j, "finish_time") else {
            continue;
        };
        let p = j
            .pointer("/config/project")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string();
        *days
            .entry(t.format("%Y-%m-%d %H:00").to_string())
            .or_default()
            .entry(p.clone())
            .or_default() += cost;
        *projects.entry(p).or_default() += cost;
    }
    if days.is_empty() {
        return empty(title, "chart-cost");
    }
    // Per day, unless every cost fell on one day: then per hour of that day.
    let one_day = days
        .keys()
        .map(|k| &k[..10])
        .collect::<std::collections::BTreeSet<_>>()
        .len()
        == 1;
    let days: BTreeMap<String, BTreeMap<String, f64>> = if one_day {
        days
    } else {
        let mut by_day: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
        for (k, m) in days {
            let d = by_day.entry(k[..10].to_string()).or_default();
            for (p, v) in m {
                *d.entry(p).or_default() += v;
            }
        }
        by_day
    };
    let max = days
        .values()
        .flat_map(|m| m.values())
        .copied()
        .fold(0.0001_f64, f64::max);
    let n = days.len();
    let dx = if n > 1 {
        (W - 2.0 * PAD) / (n - 1) as f64
    } else {
        0.0
    };
    let x_of = |i: usize| if n > 1 { PAD + i as f64 * dx } else { W / 2.0 };
    let keys: Vec<&String> = days.keys().collect();
    let label_y = H - PAD + 14.0;
    let s = html! {
        @for (pi, (p, total)) in projects.iter().take(8).enumerate() {
            @let colour = COLOURS[pi % COLOURS.len()];
            @let pts: Vec<(String, String)> = keys
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let v = days[*d].get(p).copied().unwrap_or(0.0);
                    (f1(x_of(i)), f1(H - PAD - (H - 2.0 * PAD) * v / max))
                })
                .collect();
            @let points = pts.iter().map(|(x, y)| format!("{x},{y}")).collect::<Vec<_>>().join(" ");
            @let m = money(*total);
            g class="cost" data-project=(p) data-total=(format!("{total:.2}")) {
                title { (p) ": " (m) }
                polyline fill="none" stroke=(colour) stroke-width="2" points=(points) {}
                // A marker at each point: one day (or hour) alone is a point, not a line.
                @for (x, y) in &pts {
                    circle cx=(x) cy=(y) r="3" fill=(colour) {}
                }
                text x=(W - 200.0) y=(14.0 + 13.0 * pi as f64) font-size="11" fill=(colour) { (p) " " (m) }
            }
        }
        @if n == 1 {
            text x=(W / 2.0) y=(label_y) font-size="11" text-anchor="middle" { (keys[0]) }
        } @else {
            text x=(PAD) y=(label_y) font-size="11" { (keys[0]) }
            text x=(W - PAD) y=(label_y) font-size="11" text-anchor="end" { (keys[n - 1]) }
        }
        text x="4" y=(PAD) font-size="11" { (money(max)) }
    };
    frame(title, "chart-cost", s)
}

/// Dollars as people read small amounts: `$0.0021`, `$0.125`, `$3.40`.
fn money(v: f64) -> String {
    if v == 0.0 {
        "$0".into()
    } else if v < 0.01 {
        format!("${v:.4}")
    } else if v < 1.0 {
        format!("${v:.3}")
    } else {
        format!("${v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(end: &str, project: &str, cost: f64) -> Value {
        json!({"config": {"project": project, "claude_command": "x"},
               "runtime": {"status": "finished", "start_time": end, "finish_time": end,
                           "cost_usd": cost}})
    }

    #[test]
    fn a_day_of_small_costs_is_drawn_and_labelled() {
        let jobs: Vec<Value> = (0..5)
            .map(|h| job(&format!("2026-12-01T{:02}:10:00Z", 9 + h), "p", 0.002))
            .collect();
        let svg = cost_per_project(&jobs).into_string();
        assert!(!svg.contains("no data"), "{svg}");
        assert_eq!(
            svg.matches("<circle").count(),
            5,
            "one point per hour: {svg}"
        );
        assert!(svg.contains("p $0.010<"), "{svg}");
        assert!(svg.contains(">$0.0020<"), "the axis: {svg}");
        assert!(!svg.contains("$0.00<"), "{svg}");
        // One job: a point, not an empty line.
        let svg = cost_per_project(&jobs[..1]).into_string();
        assert_eq!(svg.matches("<circle").count(), 1, "{svg}");
    }

    #[test]
    fn one_hour_is_one_narrow_bar_labelled_once() {
        let jobs: Vec<Value> = (0..3)
            .map(|_| job("2026-12-01T21:05:00Z", "p", 0.0))
            .collect();
        let svg = jobs_per_hour(&jobs).into_string();
        assert_eq!(svg.matches("2026-12-01 21:00</text>").count(), 1, "{svg}");
        let w: f64 = svg
            .split(r#"width=""#)
            .nth(2)
            .and_then(|r| r.split('"').next())
            .and_then(|v| v.parse().ok())
            .unwrap();
        assert!(w <= 40.0, "bar width {w}: {svg}");
        // Two hours three apart: the gap is on the axis.
        let mut jobs = jobs;
        jobs.push(job("2026-12-02T00:05:00Z", "p", 0.0));
        let svg = jobs_per_hour(&jobs).into_string();
        assert_eq!(svg.matches(r#"class="bar""#).count(), 2, "{svg}");
    }
}
