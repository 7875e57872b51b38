//! `orchestrator doctor`: this machine's set-up checked end to end — the store (found,
//! readable, writable, its configuration valid), the bus, the units, lingering, the agent
//! programs and Claude's credentials for the queues this machine serves, the clock against
//! the other machines' heartbeats, and free disk space — each with what to do about it.
//! Exit status: 0 when nothing failed (warnings allowed), 1 when a check failed.

use super::render::{terminal_width, wrap, write_json};
use super::{CliError, CliResult, Format, GlobalArgs};
use crate::bus::Bus;
use crate::model::Timestamp;
use crate::store::Store;
use crate::store::resolve_root;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Fine.
    Ok,
    /// Works, but something will bite (a job that will wait or fail later).
    Warn,
    /// Broken: jobs cannot run until it is fixed.
    Fail,
}

/// One check's result.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What was checked (`store`, `bus`, `units`, `claude:poplar`…).
    pub check: String,
    /// How it came out.
    pub verdict: Verdict,
    /// What was seen.
    pub detail: String,
    /// What to do, when something is to be done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

pub(super) fn check(
    name: &str,
    verdict: Verdict,
    detail: impl Into<String>,
    fix: Option<String>,
) -> Check {
    Check {
        check: name.to_string(),
        verdict,
        detail: detail.into(),
        fix,
    }
}

/// Below this many free bytes on the store's filesystem, a warning (jobs, logs and sync
/// copies all need room).
const LOW_DISK_BYTES: u64 = 1 << 30;

/// A clock more than this many seconds behind another machine's heartbeat is off.
const CLOCK_SKEW_SECONDS: f64 = 60.0;

/// `orchestrator doctor`.
pub(super) fn run(g: &GlobalArgs, out: &mut dyn Write) -> CliResult {
    let checks = checks(g);
    match g.format {
        Format::Json => write_json(out, &checks)?,
        Format::Text => {
            let width = terminal_width();
            for c in &checks {
                let mark = match c.verdict {
                    Verdict::Ok => "ok  ",
                    Verdict::Warn => "WARN",
                    Verdict::Fail => "FAIL",
                };
                let line = format!("{mark}  {}: {}", c.check, c.detail);
                for (i, l) in wrap(&line, width.saturating_sub(6)).iter().enumerate() {
                    writeln!(out, "{}{l}", if i == 0 { "" } else { "      " })?;
                }
                if let Some(fix) = &c.fix {
                    for l in wrap(&format!("fix: {fix}"), width.saturating_sub(6)) {
                        writeln!(out, "      {l}")?;
                    }
                }
            }
            let fails = checks.iter().filter(|c| c.verdict == Verdict::Fail).count();
            let warns = checks.iter().filter(|c| c.verdict == Verdict::Warn).count();
            let plural = |n: usize, one: &str, many: &str| {
                format!("{n} {}", if n == 1 { one } else { many })
            };
            writeln!(
                out,
                "{}: {} failed, {}",
                plural(checks.len(), "check", "checks"),
                fails,
                plural(warns, "warning", "warnings")
            )?;
        }
    }
    if checks.iter().any(|c| c.verdict == Verdict::Fail) {
        return Err(CliError {
            message: String::new(),
            code: 1,
        });
    }
    Ok(())
}

/// Every check, in the order a person fixes things.
pub fn checks(g: &GlobalArgs) -> Vec<Check> {
    let mut out = Vec::new();
    let (root, source) = resolve_root(g.root.as_deref());
    let bus = g.store_bus();
    let system = bus.is_system();
    let Some(store) = store_checks(&root, &source, &mut out) else {
        // What does not need the store is still checked: fix one thing, not one at a time.
        out.push(bus_check(&bus));
        out.push(units_check(system, &watched_queues(system)));
        if !system {
            out.push(linger_check());
        }
        out.push(disk_check(&root));
        return out;
    };
    out.push(bus_check(&bus));
    let host = crate::store::hostname();
    let machines = store.machines();
    // The queues this machine serves: its managers' heartbeats, and the queues whose
    // `.path` unit is active here (right after `setup`, before any job, no manager has
    // reported yet).
    let mut served: Vec<String> = machines
        .get(&host)
        .map(|m| m.queues.clone())
        .unwrap_or_default();
    for q in watched_queues(system) {
        if !served.contains(&q) {
            served.push(q);
        }
    }
    out.push(units_check(system, &served));
    if !system {
        out.push(linger_check());
    }
    for q in &served {
        out.extend(agent_checks(&store, q, system));
    }
    out.push(queues_check(g, &store, system));
    out.push(clock_check(&machines, &host));
    out.push(disk_check(&root));
    out
}

fn store_checks(
    root: &Path,
    source: &crate::store::RootSource,
    out: &mut Vec<Check>,
) -> Option<Store> {
    if !root.is_dir() {
        out.push(check(
            "store",
            Verdict::Fail,
            format!("no AgentStore at {} (chosen by {source})", root.display()),
            Some(format!(
                "orchestrator setup (per-user mode), or orchestrator init --root {}, or point AGENT_STORE_ROOT at the store",
                root.display()
            )),
        ));
        return None;
    }
    let store = match Store::open(root) {
        Ok(s) => s,
        Err(e) => {
            out.push(check(
                "store",
                Verdict::Fail,
                format!("{} (chosen by {source}): {e}", root.display()),
                Some(
                    "correct what the error names (orchestrator validate checks documents)".into(),
                ),
            ));
            return None;
        }
    };
    // Written and removed at once: the user's own right to write, not a guess from modes.
    let probe = root.join(format!(".doctor-{}.tmp", std::process::id()));
    let writable = std::fs::write(&probe, b"").and_then(|()| std::fs::remove_file(&probe));
    match writable {
        Ok(()) => out.push(check(
            "store",
            Verdict::Ok,
            format!("{} (chosen by {source}), writable", root.display()),
            None,
        )),
        Err(e) => out.push(check(
            "store",
            Verdict::Warn,
            format!(
                "{} (chosen by {source}) is not writable by you ({e}): commands go through orchestratord over D-Bus",
                root.display()
            ),
            None,
        )),
    }
    out.push(check("config", Verdict::Ok, "config.yaml is valid", None));
    Some(store)
}

fn bus_check(bus: &Bus) -> Check {
    let reachable = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()
        .is_some_and(|rt| {
            rt.block_on(async {
                tokio::time::timeout(std::time::Duration::from_secs(3), bus.builder().build())
                    .await
                    .is_ok_and(|c| c.is_ok())
            })
        });
    if reachable {
        check("bus", Verdict::Ok, format!("the {bus} bus answers"), None)
    } else {
        check(
            "bus",
            Verdict::Warn,
            format!(
                "the {bus} bus does not answer: the CLI writes the inbox instead of calling the daemons"
            ),
            Some(if *bus == Bus::Session {
                "log in with a session bus (systemd --user with dbus-user-session), or set DBUS_SESSION_BUS_ADDRESS".into()
            } else {
                "start dbus (systemctl start dbus)".into()
            }),
        )
    }
}

/// What `systemctl` printed, or `None` where systemd is not running here.
fn systemctl(system: bool, args: &[&str]) -> Option<String> {
    let bus = if system { Bus::System } else { Bus::Session };
    let o = super::daemon::systemctl(&bus, args).ok()?;
    Some(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// Every queue of the store has a machine that serves it (its jobs wait forever otherwise:
/// a fresh install serves none until `queue-manager@<queue>.path` is enabled somewhere).
fn queues_check(g: &GlobalArgs, store: &Store, system: bool) -> Check {
    let ids = store.queue_ids().unwrap_or_default();
    let unserved: Vec<&String> = ids
        .iter()
        .filter(|q| super::machines::unserved(g, store, q).is_some())
        .collect();
    if unserved.is_empty() {
        return check(
            "queues",
            Verdict::Ok,
            format!("served: {}", ids.join(", ")),
            None,
        );
    }
    let names: Vec<&str> = unserved.iter().map(|q| q.as_str()).collect();
    check(
        "queues",
        Verdict::Warn,
        format!(
            "no machine serves {}: jobs sent there wait until one does",
            names.join(", ")
        ),
        Some(format!(
            "on each machine that should run them: systemctl{} enable --now {}",
            if system { "" } else { " --user" },
            names
                .iter()
                .map(|q| format!("queue-manager@{q}.path"))
                .collect::<Vec<_>>()
                .join(" ")
        )),
    )
}

/// The queues whose `queue-manager@<queue>.path` is active on this machine's systemd.
fn watched_queues(system: bool) -> Vec<String> {
    let listed = systemctl(
        system,
        &[
            "list-units",
            "--all",
            "--plain",
            "--no-legend",
            "--state=active",
            "queue-manager@*.path",
        ],
    )
    .unwrap_or_default();
    parse_watched(&listed)
}

/// The queue names in `systemctl list-units --plain --no-legend` lines of path units.
fn parse_watched(listed: &str) -> Vec<String> {
    listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|u| u.strip_prefix("queue-manager@")?.strip_suffix(".path"))
        .filter(|q| crate::model::is_safe_id(q))
        .map(str::to_string)
        .collect()
}

fn units_check(system: bool, served: &[String]) -> Check {
    let user = if system { "" } else { " --user" };
    let mut units = vec!["agentstore-orchestrator.path".to_string()];
    units.extend(served.iter().map(|q| format!("queue-manager@{q}.path")));
    let mut off = Vec::new();
    for u in &units {
        match systemctl(system, &["is-enabled", u]) {
            None => {
                return check(
                    "units",
                    Verdict::Warn,
                    "systemd is not running here: run the daemons in the foreground (orchestratord, queue-manager --queue Q)",
                    None,
                );
            }
            Some(state) if state == "enabled" || state == "static" => {}
            Some(state) => off.push(format!("{u} ({state})")),
        }
    }
    if off.is_empty() {
        check(
            "units",
            Verdict::Ok,
            format!("enabled: {}", units.join(", ")),
            None,
        )
    } else {
        check(
            "units",
            Verdict::Warn,
            format!("not enabled: {}", off.join(", ")),
            Some(format!(
                "systemctl{user} enable --now {}",
                off.iter()
                    .map(|s| s.split(' ').next().unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join(" ")
            )),
        )
    }
}

fn linger_check() -> Check {
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_default();
    if Path::new("/var/lib/systemd/linger").join(&me).exists() {
        check(
            "linger",
            Verdict::Ok,
            format!("on for {me}: jobs go on after you log out"),
            None,
        )
    } else {
        check(
            "linger",
            Verdict::Warn,
            format!("off for {me}: your daemons and jobs stop when you log out"),
            Some(format!("sudo loginctl enable-linger {me}")),
        )
    }
}

/// The queue's agent program is there, and (per-user mode) Claude Code has a login or a key.
fn agent_checks(store: &Store, queue: &str, system: bool) -> Vec<Check> {
    let mut out = Vec::new();
    let Ok(q) = store.queue(queue) else {
        out.push(check(
            &format!("queue:{queue}"),
            Verdict::Fail,
            format!("this machine serves {queue}, but Queues/{queue}/queue.json cannot be read"),
            Some(format!("orchestrator validate Queues/{queue}/queue.json")),
        ));
        return out;
    };
    let name = format!("claude:{queue}");
    let program = q.config.claude_cli_path.clone();
    match find_program(&program) {
        Some(p) => out.push(check(&name, Verdict::Ok, format!("{program} is {}", p.display()), None)),
        None => out.push(check(
            &name,
            Verdict::Fail,
            format!(
                "{program} not found (PATH={}): claude jobs of {queue} fail",
                std::env::var("PATH").unwrap_or_default()
            ),
            Some(format!(
                "install Claude Code (npm install -g @anthropic-ai/claude-code), or orchestrator set-queue {queue} --claude-cli-path /full/path/to/claude"
            )),
        )),
    }
    out.push(super::doctor_codex::codex_check(queue, &q));
    if !system {
        let home = crate::store::home_dir().unwrap_or_default();
        let login = home.join(".claude/.credentials.json").is_file();
        let job_key = super::job_keys::is_set("ANTHROPIC_API_KEY");
        let key = job_key
            || std::env::var_os("ANTHROPIC_API_KEY").is_some()
            || systemctl(false, &["show-environment"])
                .is_some_and(|e| e.lines().any(|l| l.starts_with("ANTHROPIC_API_KEY=")));
        let name = format!("credentials:{queue}");
        if login || key {
            let how = if login {
                "a Claude Code login (~/.claude/.credentials.json)"
            } else if job_key {
                "ANTHROPIC_API_KEY (orchestrator set-job-key)"
            } else {
                "ANTHROPIC_API_KEY"
            };
            out.push(check(&name, Verdict::Ok, format!("jobs find {how}"), None));
        } else {
            out.push(check(
                &name,
                Verdict::Warn,
                "no Claude Code login (~/.claude/.credentials.json) and no ANTHROPIC_API_KEY in the user manager's environment: claude jobs cannot reach the model",
                Some("run `claude` once and log in, or give the queue managers a key: printf %s \"$KEY\" | orchestrator set-job-key ANTHROPIC_API_KEY".into()),
            ));
        }
    } else {
        let name = format!("credentials:{queue}");
        if super::job_keys::is_set_system("ANTHROPIC_API_KEY") {
            out.push(check(
                &name,
                Verdict::Ok,
                "jobs get ANTHROPIC_API_KEY (a credential of queue-manager@.service)",
                None,
            ));
        } else {
            out.push(check(
                &name,
                Verdict::Warn,
                "queue-manager@.service has no job-env.ANTHROPIC_API_KEY credential: claude jobs reach the model only where the account each runs as has logged in to Claude Code",
                Some("printf %s \"$KEY\" | sudo orchestrator set-job-key --system ANTHROPIC_API_KEY (or log each job account in once: sudo -u ACCOUNT claude)".into()),
            ));
        }
    }
    out
}

/// `program` as exec would find it (a path as it is, a name on PATH), if it is a file.
pub(super) fn find_program(program: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").ok();
    crate::trust::programs::locate(program, path.as_deref()).filter(|p| p.is_file())
}

/// This machine's clock against the newest heartbeat of every other machine: a heartbeat
/// written "later" than now by more than a minute means one of the two clocks is off.
fn clock_check(machines: &crate::store::machines::Machines, host: &str) -> Check {
    let now = Timestamp::now();
    let mut ahead: Vec<String> = machines
        .machines
        .iter()
        .filter(|m| m.host != host)
        .filter_map(|m| {
            let by = now.seconds_until(&m.last_seen);
            (by > CLOCK_SKEW_SECONDS).then(|| format!("{} by {:.0} s", m.host, by))
        })
        .collect();
    // Heartbeats so far ahead that the store does not trust them at all.
    ahead.extend(
        machines
            .problems
            .iter()
            .filter(|p| p.contains("ahead of this machine's clock"))
            .cloned(),
    );
    if ahead.is_empty() {
        check(
            "clock",
            Verdict::Ok,
            format!(
                "no other machine's heartbeat is ahead of this clock ({} other machine(s))",
                machines.machines.iter().filter(|m| m.host != host).count()
            ),
            None,
        )
    } else {
        check(
            "clock",
            Verdict::Warn,
            format!(
                "heartbeats ahead of this machine's clock: {}",
                ahead.join(", ")
            ),
            Some(
                "run a time service on every machine (systemctl enable --now systemd-timesyncd)"
                    .into(),
            ),
        )
    }
}

fn disk_check(root: &Path) -> Check {
    match nix::sys::statvfs::statvfs(root) {
        Ok(s) => {
            let free = s.blocks_available().saturating_mul(s.fragment_size());
            let gib = free as f64 / (1u64 << 30) as f64;
            if free < LOW_DISK_BYTES {
                check(
                    "disk",
                    Verdict::Warn,
                    format!("{gib:.2} GiB free under {}", root.display()),
                    Some("free space: job output, logs and sync copies need room".into()),
                )
            } else {
                check("disk", Verdict::Ok, format!("{gib:.1} GiB free"), None)
            }
        }
        Err(e) => check(
            "disk",
            Verdict::Warn,
            format!("cannot tell free space: {e}"),
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn watched_queues_are_read_from_systemctls_lines() {
        let listed = "queue-manager@poplar.path loaded active waiting Watch poplar\n\
                      queue-manager@oak-2.path loaded active waiting Watch oak-2\n\
                      queue-manager@..path loaded active waiting x\n\
                      agentstore-orchestrator.path loaded active waiting x\n";
        assert_eq!(super::parse_watched(listed), ["poplar", "oak-2"]);
        assert!(super::parse_watched("").is_empty());
    }
}
