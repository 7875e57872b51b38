//! The one way an integration test waits. Each wait awaits something (a condition re-checked
//! when the folders it reads change, a child's exit, a D-Bus name's owner, a line of the
//! events file) under a deadline: a hang guard far above what a healthy run needs on a loaded
//! machine, never a timing assertion. A wait that runs out fails naming what it awaited and
//! how long it waited.
//!
//! There is no fixed sleep here: a test that must see that something does NOT happen awaits
//! the event that proves the product looked (its next pass, its heartbeat), then checks.

use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// The deadline of waits that name none: long enough for a machine running the whole suite
/// three times over beside two CPU-bound processes.
pub const LOADED: Duration = Duration::from_secs(120);

fn timed_out(what: &str, limit: Duration) -> ! {
    panic!("timed out after {limit:?} waiting for {what}")
}

/// Waits (up to `limit`) until `cond` holds, re-checking it on a short tick (5 ms, growing to
/// 100 ms). For conditions no event announces (a process's `/proc` entry, a fake server's
/// request list, a page's text); a condition on files is [`files`]'s.
pub fn wait_until(limit: Duration, what: &str, cond: impl FnMut() -> bool) {
    if !holds_within(limit, cond) {
        timed_out(what, limit)
    }
}

/// [`wait_until`], saying whether `cond` held before `limit` passed instead of failing (for a
/// caller whose failure message shows what it last saw).
pub fn holds_within(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    let mut tick = Duration::from_millis(5);
    while !cond() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(tick);
        tick = (tick * 2).min(Duration::from_millis(100));
    }
    true
}

/// Waits (up to `limit`) until `cond` holds, re-checking it each time something changes in
/// one of `dirs` (inotify: a file created, written, moved or removed there). Folders that do
/// not exist yet are watched through their nearest existing ancestor, and `cond` is also
/// re-checked every second, so a change inotify cannot see (another mount, a folder made
/// later) is still found.
pub fn files(dirs: &[&Path], limit: Duration, what: &str, cond: impl FnMut() -> bool) {
    if !files_within(dirs, limit, cond) {
        timed_out(what, limit)
    }
}

/// [`files`], saying whether `cond` held before `limit` passed instead of failing.
pub fn files_within(dirs: &[&Path], limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    use inotify::{Inotify, WatchMask};
    let deadline = Instant::now() + limit;
    let mut ino = Inotify::init().expect("inotify");
    let mask = WatchMask::CREATE
        | WatchMask::MOVED_TO
        | WatchMask::MOVED_FROM
        | WatchMask::DELETE
        | WatchMask::CLOSE_WRITE
        | WatchMask::MODIFY
        | WatchMask::ATTRIB;
    let watch = |ino: &mut Inotify| {
        for d in dirs {
            let mut at: PathBuf = d.to_path_buf();
            while !at.is_dir() && at.pop() {}
            let _ = ino.watches().add(&at, mask);
        }
    };
    watch(&mut ino);
    let mut buf = [0u8; 4096];
    while !cond() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let slice = left.min(Duration::from_secs(1));
        let mut fds = [nix::poll::PollFd::new(
            ino.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        let ms = u16::try_from(slice.as_millis()).unwrap_or(u16::MAX);
        if nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)).unwrap_or(0) > 0 {
            // Drain what is there (the events only say "look again").
            while ino.read_events(&mut buf).is_ok_and(|e| e.count() > 0) {}
        }
        // Folders made since: watched from now on (adding a watch twice is harmless).
        watch(&mut ino);
    }
    true
}

/// Awaits the heartbeat passes of a daemon of machine `host` (`root/machines/<host>/<file>`,
/// e.g. `queue-manager.q1.json`, `orchestratord.json`: rewritten from the daemon's loop at
/// each `machines.heartbeat_seconds`) until one began at least `span` from now and the one
/// after it began too: the loop is one task, so the first of those passes is over. For a test
/// that must see that something does NOT happen: it awaits the daemon's own passes over the
/// time the product would take, instead of sleeping and hoping the daemon ran meanwhile.
pub fn passes(root: &Path, host: &str, file: &str, span: Duration) {
    let dir = root.join("machines").join(host);
    let beat = dir.join(file);
    let from = std::time::SystemTime::now() + span;
    let mut seen: Vec<std::time::SystemTime> = Vec::new();
    files(
        &[&dir],
        span + LOADED,
        &format!("two heartbeat passes of {host}'s {file} {span:?} from now"),
        || {
            if let Ok(t) = std::fs::metadata(&beat).and_then(|m| m.modified())
                && t >= from
                && !seen.contains(&t)
            {
                seen.push(t);
            }
            seen.len() >= 2
        },
    );
}

/// The line of `root`'s events files (`logs/events-*.jsonl`) that `pred` accepts, awaited
/// (up to `limit`) as the files grow.
pub fn event_line(
    root: &Path,
    limit: Duration,
    what: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let logs = root.join("logs");
    let mut found = None;
    files(&[&logs], limit, what, || {
        found = events(root).into_iter().find(|e| pred(e));
        found.is_some()
    });
    found.unwrap_or_default()
}

/// Every line of every events file of `root` (`logs/events-*.jsonl`, per machine or not).
/// Each whole line must be JSON; a last line still being written is left for the next look.
pub fn events(root: &Path) -> Vec<serde_json::Value> {
    let Ok(dir) = std::fs::read_dir(root.join("logs")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.starts_with("events-") && name.ends_with(".jsonl") {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            let whole = text.rfind('\n').map_or("", |end| &text[..end]);
            for l in whole.lines() {
                out.push(serde_json::from_str(l).unwrap_or_else(|err| {
                    panic!(
                        "{}: a line that is not JSON ({err}): {l}",
                        e.path().display()
                    )
                }));
            }
        }
    }
    out
}

/// Waits (up to `limit`) for `child` to exit and returns its status; fails naming `what`
/// when it has not.
pub fn child_exit(child: &mut Child, limit: Duration, what: &str) -> ExitStatus {
    exit_within(child, limit).unwrap_or_else(|| timed_out(what, limit))
}

/// `child`'s exit status once it exits, or `None` when `limit` passes first (the caller
/// decides: kill it, fail). The kernel says when (a pidfd becomes readable); nothing is
/// polled.
pub fn exit_within(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    if let Some(s) = child.try_wait().unwrap() {
        return Some(s);
    }
    let deadline = Instant::now() + limit;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as libc::pid_t, 0) };
    // SAFETY: a fresh descriptor that nothing else owns.
    let pidfd = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) });
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        match &pidfd {
            Some(fd) => {
                let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
                let mut fds = [nix::poll::PollFd::new(
                    fd.as_fd(),
                    nix::poll::PollFlags::POLLIN,
                )];
                let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms));
            }
            // No pidfd (a kernel before 5.3): looked at on a short tick.
            None => std::thread::sleep(left.min(Duration::from_millis(20))),
        }
    }
}

/// Waits (up to [`LOADED`]) until `name` has an owner on the bus at `address`: the bus's
/// NameOwnerChanged is awaited (subscribed before the first look), never polled. Callable
/// from async tests too (it waits on a thread of its own).
pub fn name_on(address: &str, name: &str) {
    let (address, name) = (address.to_string(), name.to_string());
    let what = format!("{name} on the bus");
    let owned = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let conn = zbus::connection::Builder::address(address.as_str())
                .build()
                .await
                .unwrap();
            let dbus = zbus::fdo::DBusProxy::new(&conn).await.unwrap();
            tokio::time::timeout(LOADED, name_owned(&dbus, &name))
                .await
                .is_ok()
        })
    })
    .join()
    .unwrap();
    if !owned {
        timed_out(&what, LOADED)
    }
}

/// Returns once `name` has an owner on `dbus`'s bus (subscribed to NameOwnerChanged before
/// the first look, so an owner that comes in between is not missed).
pub async fn name_owned(dbus: &zbus::fdo::DBusProxy<'_>, name: &str) {
    use futures_util::StreamExt;
    let mut owners = dbus.receive_name_owner_changed().await.unwrap();
    let bus_name = zbus::names::BusName::try_from(name).unwrap();
    if dbus.name_has_owner(bus_name).await.unwrap_or(false) {
        return;
    }
    while let Some(sig) = owners.next().await {
        if sig
            .args()
            .is_ok_and(|a| a.name().as_str() == name && a.new_owner().is_some())
        {
            return;
        }
    }
    panic!("the bus closed while waiting for {name}")
}

/// Runs `f` under the hang guard `limit` (async tests).
pub async fn within<F: std::future::Future<Output = T>, T>(limit: Duration, what: &str, f: F) -> T {
    match tokio::time::timeout(limit, f).await {
        Ok(v) => v,
        Err(_) => timed_out(what, limit),
    }
}
