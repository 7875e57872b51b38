//! Which accesses Landlock refused a job, from the kernel's audit (issue 28, sandbox4).
//!
//! A job's confinement asks the kernel to log the refusals of the programs it runs
//! (`LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON`, Landlock ABI 7; without it a refusal after
//! `exec` is not logged at all). The kernel logs them only while its audit is on
//! (`audit_enabled`, what `auditctl -e 1` or auditd sets), as `LANDLOCK_ACCESS` records
//! (`domain=ID blockers=fs.write_file path="…"`) and one `LANDLOCK_DOMAIN` record naming the
//! process that made the domain (`status=allocated … pid=PID`) and, when the domain is gone,
//! how many refusals it had (`status=deallocated denials=N`). [`AuditWatch`] reads them from
//! the audit multicast group (which needs `CAP_AUDIT_READ`: the system worker, root, has it)
//! and picks the job's by the pid of its agent. Where audit is off or unreadable it says why,
//! and the job's record says that file refusals are not listed.
//!
//! Not covered: refusals in a Landlock domain the job made itself (agentshell confining its
//! own commands: it reports those to the model), and records the kernel dropped (its backlog
//! is small); the deallocation record's count says when some are missing.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::sys::socket::{
    self, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, sockopt,
};
use nix::sys::time::TimeVal;

const AUDIT_GET: u16 = 1000;
const NLMSG_ERROR: u16 = 2;
const AUDIT_LANDLOCK_ACCESS: u16 = 1423;
const AUDIT_LANDLOCK_DOMAIN: u16 = 1424;
/// The multicast group of audit records (`AUDIT_NLGRP_READLOG`).
const AUDIT_NLGRP_READLOG: u32 = 1;
/// Most refusal lines kept in a job's record (the rest counted).
const MAX_LINES: usize = 40;
/// How long to wait, after the job, for the record that its domain is gone.
const SETTLE: Duration = Duration::from_secs(2);
/// How long to wait, after the job, for any record of it.
const QUIET: Duration = Duration::from_millis(300);

fn audit_socket() -> nix::Result<OwnedFd> {
    let fd = socket::socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkAudit,
    )?;
    socket::setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::new(0, 200_000))?;
    Ok(fd)
}

/// The netlink messages in one datagram: (type, payload).
fn messages(buf: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let mut rest = buf;
    while rest.len() >= 16 {
        let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let kind = u16::from_ne_bytes([rest[4], rest[5]]);
        if len < 16 || len > rest.len() {
            break;
        }
        out.push((kind, &rest[16..len]));
        rest = &rest[len.next_multiple_of(4).min(rest.len())..];
    }
    out
}

/// Whether the kernel's audit is on (`AUDIT_GET`'s `enabled`).
fn audit_enabled() -> Result<bool, String> {
    let fd = audit_socket().map_err(|e| format!("no audit socket ({e})"))?;
    let mut msg = Vec::with_capacity(16);
    msg.extend(16u32.to_ne_bytes());
    msg.extend(AUDIT_GET.to_ne_bytes());
    msg.extend(1u16.to_ne_bytes()); // NLM_F_REQUEST
    msg.extend(1u32.to_ne_bytes());
    msg.extend(0u32.to_ne_bytes());
    socket::sendto(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &msg,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )
    .map_err(|e| format!("cannot ask the kernel's audit status ({e})"))?;
    let mut buf = vec![0u8; 8192];
    for _ in 0..4 {
        let n = socket::recv(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            &mut buf,
            MsgFlags::empty(),
        )
        .map_err(|e| format!("no answer from the kernel's audit ({e})"))?;
        for (kind, payload) in messages(&buf[..n]) {
            match kind {
                AUDIT_GET if payload.len() >= 8 => {
                    return Ok(payload[4..8] != [0, 0, 0, 0]);
                }
                NLMSG_ERROR if payload.len() >= 4 => {
                    let errno =
                        i32::from_ne_bytes([payload[0], payload[1], payload[2], payload[3]]);
                    if errno != 0 {
                        return Err(format!(
                            "the kernel's audit status is not readable here ({})",
                            nix::errno::Errno::from_raw(-errno)
                        ));
                    }
                }
                _ => {}
            }
        }
    }
    Err("no audit status from the kernel".into())
}

/// The kernel's Landlock audit records, read while a job runs.
#[derive(Debug)]
pub struct AuditWatch {
    records: Arc<Mutex<Vec<(u16, String)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl AuditWatch {
    /// Start reading; `Err` says why refusals cannot be listed here.
    pub fn start() -> Result<AuditWatch, String> {
        if !audit_enabled()? {
            return Err("the kernel's audit is off (auditctl -e 1, or auditd, turns it on)".into());
        }
        let fd = audit_socket().map_err(|e| format!("no audit socket ({e})"))?;
        socket::bind(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            &NetlinkAddr::new(0, AUDIT_NLGRP_READLOG),
        )
        .map_err(|e| format!("reading the kernel's audit needs CAP_AUDIT_READ ({e})"))?;
        let _ = socket::setsockopt(&fd, sockopt::RcvBuf, &(4 << 20));
        let records = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, s) = (Arc::clone(&records), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("landlock-audit".into())
            .spawn(move || {
                let mut buf = vec![0u8; 65536];
                while !s.load(Ordering::Relaxed) {
                    let Ok(n) = socket::recv(
                        std::os::fd::AsRawFd::as_raw_fd(&fd),
                        &mut buf,
                        MsgFlags::empty(),
                    ) else {
                        continue;
                    };
                    for (kind, payload) in messages(&buf[..n]) {
                        if kind == AUDIT_LANDLOCK_ACCESS || kind == AUDIT_LANDLOCK_DOMAIN {
                            let text = String::from_utf8_lossy(payload)
                                .trim_end_matches('\0')
                                .to_string();
                            r.lock().push((kind, text));
                        }
                    }
                }
            })
            .map_err(|e| format!("cannot start the audit reader ({e})"))?;
        Ok(AuditWatch {
            records,
            stop,
            thread: Some(thread),
        })
    }

    /// The refusals of the Landlock domain the job's agent (`pid`) made, one line each
    /// (repeats counted), once the kernel says the domain is gone or [`SETTLE`] passed.
    pub fn finish(mut self, pid: Option<u32>) -> Vec<String> {
        let start = Instant::now();
        let lines = loop {
            let records = self.records.lock().clone();
            let (lines, domains, gone) = job_refusals(&records, pid);
            // The kernel queues a refusal's records as it refuses; they reach this reader
            // within milliseconds. No domain after QUIET: the job was refused nothing.
            if (domains > 0 && gone >= domains)
                || (domains == 0 && start.elapsed() >= QUIET)
                || start.elapsed() >= SETTLE
            {
                break lines;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        lines
    }
}

impl Drop for AuditWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The value of `key=` in an audit record.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.split(' ')
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// The job's refusal lines, how many domains it made that refused something, and how many
/// of them are gone (then their lines are complete).
fn job_refusals(records: &[(u16, String)], pid: Option<u32>) -> (Vec<String>, usize, usize) {
    let Some(pid) = pid.map(|p| p.to_string()) else {
        return (Vec::new(), 0, 0);
    };
    let domains: Vec<&str> = records
        .iter()
        .filter(|(k, t)| {
            *k == AUDIT_LANDLOCK_DOMAIN
                && field(t, "status") == Some("allocated")
                && field(t, "pid") == Some(pid.as_str())
        })
        .filter_map(|(_, t)| field(t, "domain"))
        .collect();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut order = Vec::new();
    for (_, t) in records.iter().filter(|(k, _)| *k == AUDIT_LANDLOCK_ACCESS) {
        if !field(t, "domain").is_some_and(|d| domains.contains(&d)) {
            continue;
        }
        // `blockers=fs.write_file path="/x" dev=… ino=…`: what, and where.
        let what: Vec<&str> = t
            .split(' ')
            .filter(|w| {
                !["audit(", "domain=", "dev=", "ino="]
                    .iter()
                    .any(|p| w.starts_with(p))
            })
            .collect();
        let line = format!("Landlock refused {}", what.join(" "));
        let n = counts.entry(line.clone()).or_insert(0);
        if *n == 0 {
            order.push(line);
        }
        *n += 1;
    }
    let mut total_logged = 0;
    let mut gone = 0;
    let mut told = 0;
    for (_, t) in records.iter().filter(|(k, _)| *k == AUDIT_LANDLOCK_DOMAIN) {
        if field(t, "status") == Some("deallocated")
            && field(t, "domain").is_some_and(|d| domains.contains(&d))
        {
            gone += 1;
            told += field(t, "denials")
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(0);
        }
    }
    let mut lines: Vec<String> = Vec::new();
    for line in order.iter().take(MAX_LINES) {
        let n = counts[line];
        total_logged += n;
        lines.push(if n > 1 {
            format!("{line} ({n} times)")
        } else {
            line.clone()
        });
    }
    let seen: usize = counts.values().sum();
    if order.len() > MAX_LINES {
        lines.push(format!(
            "… and {} more refusals Landlock logged",
            seen - total_logged
        ));
    }
    if gone > 0 && told > seen {
        lines.push(format!(
            "Landlock counted {told} refusals in all; {} of them were not received from the audit log",
            told - seen
        ));
    }
    (lines, domains.len(), gone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_refusals_are_picked_by_the_pid_that_made_its_domain() {
        let r = |k: u16, t: &str| (k, t.to_string());
        let records = [
            r(
                1423,
                "domain=1a blockers=fs.make_reg path=\"/home/u/.ssh\" dev=\"vda\" ino=5",
            ),
            r(
                1424,
                "domain=1a status=allocated mode=enforcing pid=42 uid=0 exe=\"/bin/sh\" comm=\"sh\"",
            ),
            r(
                1423,
                "domain=2b blockers=fs.write_file path=\"/other\" dev=\"vda\" ino=6",
            ),
            r(
                1424,
                "domain=2b status=allocated mode=enforcing pid=7 uid=0 exe=\"/bin/sh\" comm=\"sh\"",
            ),
            r(
                1423,
                "domain=1a blockers=fs.make_reg path=\"/home/u/.ssh\" dev=\"vda\" ino=5",
            ),
        ];
        let (lines, domains, gone) = job_refusals(&records, Some(42));
        assert_eq!(
            lines,
            ["Landlock refused blockers=fs.make_reg path=\"/home/u/.ssh\" (2 times)"]
        );
        assert_eq!((domains, gone), (1, 0), "its domain is not gone yet");
        let mut records = records.to_vec();
        records.push(r(1424, "domain=1a status=deallocated denials=3"));
        let (lines, domains, gone) = job_refusals(&records, Some(42));
        assert_eq!((domains, gone), (1, 1));
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[1].contains("3 refusals in all; 1 of them were not received"),
            "{lines:?}"
        );
    }
}

#[cfg(test)]
mod kernel_tests {
    use super::*;
    use crate::agent::tools::sandbox::{SandboxPolicy, Support, system_read_paths};

    /// Issue 28, sandbox4: a write Landlock refuses a confined program is read back from the
    /// kernel's audit, by the pid of the process that made the domain. Where audit is off or
    /// unreadable the reason is one of those the job's record gives (and nothing is tried).
    #[test]
    fn landlock_refusals_of_a_confined_program_are_read_from_the_audit() {
        let watch = match AuditWatch::start() {
            Ok(w) => w,
            Err(why) => {
                assert!(
                    why.starts_with("the kernel's audit is off")
                        || why.contains("CAP_AUDIT_READ")
                        || why.contains("audit status")
                        || why.contains("audit socket"),
                    "{why}"
                );
                return;
            }
        };
        let support = Support::detect(None);
        if support.abi < 7 {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let (inside, outside) = (t.path().join("in"), t.path().join("out"));
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let policy = SandboxPolicy {
            read: system_read_paths(),
            write: vec![inside.clone()],
            devices: crate::agent::tools::sandbox::standard_devices(),
            log_denials: true,
            ..SandboxPolicy::default()
        };
        let prepared = policy.compile(support).prepare(false).unwrap();
        let mut c = std::process::Command::new("sh");
        c.args([
            "-c",
            &format!(
                "echo x > '{}/f'; echo y > '{}/g'",
                outside.display(),
                inside.display()
            ),
        ])
        .stderr(std::process::Stdio::null());
        prepared.install_std(&mut c);
        let mut child = c.spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let lines = watch.finish(Some(pid));
        assert_eq!(
            lines,
            [format!(
                "Landlock refused blockers=fs.make_reg path=\"{}\"",
                outside.display()
            )]
        );
        assert!(inside.join("g").exists());
    }
}
