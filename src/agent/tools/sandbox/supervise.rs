//! Sockets of a confined job, watched by its parent (issue 28): a seccomp filter that hands
//! the socket calls Landlock does not govern to a supervisor thread of the parent (seccomp
//! user notification), which refuses them with `EACCES` and records what was refused, for the
//! job's record.
//!
//! What the filter decides by itself (from the call's registers, nothing the caller can
//! change afterwards): TCP sockets (`AF_INET`/`AF_INET6` stream, protocol 0 or TCP) are
//! created freely, Landlock decides their connect and bind per port; Unix stream and
//! seqpacket sockets are created freely; `socketpair` of streams is free (a pair reaches
//! nothing outside). Refused and recorded: every other socket (UDP, Multipath TCP — which
//! Landlock's TCP rules do not govern —, raw, packet, netlink but `NETLINK_ROUTE`, vsock…)
//! and datagram socket pairs (a Unix datagram can be sent to any named socket). Refused
//! outright: `io_uring_setup` (its operations pass the filter), TCP Fast Open (`MSG_FASTOPEN`
//! sends connect without the connect call), system calls of another ABI.
//!
//! `connect` goes to the supervisor, which reads the address from the caller's memory:
//! - TCP to a port the job may reach: the call goes on (`CONTINUE`), and Landlock decides (the
//!   memory may change after the read; Landlock's check is on what the kernel uses);
//! - TCP elsewhere: refused and recorded (Landlock would refuse it too);
//! - a Unix socket: only the names the job is given (the worker's approval socket) are
//!   reached, and by the supervisor itself: it connects a socket of its own to the name it
//!   read and puts it in place of the caller's (`SECCOMP_IOCTL_NOTIF_ADDFD`), so what the
//!   caller's memory says afterwards changes nothing. Every other Unix socket (a session bus,
//!   `docker.sock`, an ssh or gpg agent, `/run/user/…/systemd/private`) is refused, recorded.
//!
//! Files refused by Landlock are not seen here: the kernel's audit log has them
//! (Landlock ABI ≥ 7 logs each denial when auditing is on).
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
/// Records kept per job (the first ones; later ones are counted).
const MAX_RECORDS: usize = 64;

/// What the supervisor lets through.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SocketRules {
    /// TCP ports a connect may go to (Landlock enforces the same list).
    pub tcp_ports: Vec<u16>,
    /// Abstract Unix socket names (without the leading NUL) the supervisor connects for the
    /// job.
    pub abstract_names: Vec<String>,
    /// Path-named Unix sockets the supervisor connects for the job (systemd-resolved's name
    /// lookup, say), compared as given (no symlink is followed to decide).
    pub paths: Vec<std::path::PathBuf>,
}

/// The refusals seen so far, shared between the supervisor and the job's record.
#[derive(Debug, Clone, Default)]
pub struct Refusals(Arc<Mutex<RefusalLog>>);

#[derive(Debug, Default)]
struct RefusalLog {
    lines: Vec<String>,
    more: usize,
}

impl Refusals {
    fn push(&self, line: String) {
        let mut log = self.0.lock();
        if log.lines.contains(&line) {
            return;
        }
        if log.lines.len() < MAX_RECORDS {
            log.lines.push(line);
        } else {
            log.more += 1;
        }
    }

    /// What was refused, in order, each once; a last line counts what did not fit.
    pub fn lines(&self) -> Vec<String> {
        let log = self.0.lock();
        let mut v = log.lines.clone();
        if log.more > 0 {
            v.push(format!("… and {} more refusals", log.more));
        }
        v
    }
}

/// Whether this architecture has the supervisor's program.
pub fn available() -> bool {
    filter().is_some()
}

/// The seccomp program (see the module text) for this architecture (None where it is not
/// written for it).
pub(super) fn filter() -> Option<Vec<libc::sock_filter>> {
    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    return None;
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    Some(build(
        ARCH,
        |n| u32::try_from(n).unwrap_or(u32::MAX),
        |n| u32::try_from(n).unwrap_or(u32::MAX),
    ))
}

/// The program, assembled with symbolic labels (relative jumps computed here).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn build(
    arch: u32,
    nr: impl Fn(libc::c_long) -> u32,
    k: impl Fn(libc::c_int) -> u32,
) -> Vec<libc::sock_filter> {
    const LD: u16 = 0x20;
    const JEQ: u16 = 0x15;
    const JGE: u16 = 0x35;
    const JSET: u16 = 0x45;
    const AND: u16 = 0x54;
    const RET: u16 = 0x06;
    const ALLOW: u32 = 0x7fff_0000;
    const NOTIFY: u32 = 0x7fc0_0000;
    const DENY: u32 = 0x0005_0000 | 13;
    const FASTOPEN: u32 = 0x2000_0000;
    #[derive(Clone, Copy)]
    enum T {
        Next,
        Allow,
        Deny,
        Notify,
        L(usize),
    }
    struct I(u16, u32, T, T);
    // Labels.
    const SENDTO: usize = 1;
    const SOCKETPAIR: usize = 2;
    const SOCKET: usize = 3;
    const INET: usize = 4;
    const UNIX: usize = 5;
    const NETLINK: usize = 6;
    let mut code: Vec<(Option<usize>, I)> = Vec::new();
    let mut at = |label: Option<usize>, i: I| code.push((label, i));
    use T::*;
    at(None, I(LD, 4, Next, Next));
    at(None, I(JEQ, arch, Next, Deny));
    at(None, I(LD, 0, Next, Next));
    at(None, I(JGE, 0x4000_0000, Deny, Next));
    at(None, I(JEQ, nr(libc::SYS_io_uring_setup), Deny, Next));
    at(None, I(JEQ, nr(libc::SYS_connect), Notify, Next));
    at(None, I(JEQ, nr(libc::SYS_sendmsg), Next, L(SENDTO)));
    at(None, I(LD, 32, Next, Next)); // args[2]
    at(None, I(JSET, FASTOPEN, Deny, Allow));
    at(Some(SENDTO), I(JEQ, nr(libc::SYS_sendto), L(100), Next));
    at(None, I(JEQ, nr(libc::SYS_sendmmsg), L(100), L(SOCKETPAIR)));
    at(Some(100), I(LD, 40, Next, Next)); // args[3]
    at(None, I(JSET, FASTOPEN, Deny, Allow));
    at(
        Some(SOCKETPAIR),
        I(JEQ, nr(libc::SYS_socketpair), Next, L(SOCKET)),
    );
    at(None, I(LD, 24, Next, Next)); // args[1]: type
    at(None, I(AND, 0xf, Next, Next));
    at(None, I(JEQ, k(libc::SOCK_DGRAM), Notify, Allow));
    at(Some(SOCKET), I(JEQ, nr(libc::SYS_socket), Next, Allow));
    at(None, I(LD, 16, Next, Next)); // args[0]: domain
    at(None, I(JEQ, k(libc::AF_INET), L(INET), Next));
    at(None, I(JEQ, k(libc::AF_INET6), L(INET), Next));
    at(None, I(JEQ, k(libc::AF_UNIX), L(UNIX), Next));
    at(None, I(JEQ, k(libc::AF_NETLINK), L(NETLINK), Notify));
    at(Some(INET), I(LD, 24, Next, Next));
    at(None, I(AND, 0xf, Next, Next));
    at(None, I(JEQ, k(libc::SOCK_STREAM), Next, Notify));
    // Plain TCP only: Landlock's TCP rules do not govern Multipath TCP (`IPPROTO_MPTCP`),
    // so its connect would rest on the supervisor's read of the caller's memory alone.
    at(None, I(LD, 32, Next, Next)); // args[2]: protocol
    at(None, I(JEQ, 0, Allow, Next));
    at(None, I(JEQ, k(libc::IPPROTO_TCP), Allow, Notify));
    at(Some(UNIX), I(LD, 24, Next, Next));
    at(None, I(AND, 0xf, Next, Next));
    at(None, I(JEQ, k(libc::SOCK_STREAM), Allow, Next));
    at(None, I(JEQ, k(libc::SOCK_SEQPACKET), Allow, Notify));
    at(Some(NETLINK), I(LD, 32, Next, Next)); // args[2]: protocol
    at(None, I(JEQ, k(libc::NETLINK_ROUTE), Allow, Notify));
    let n = code.len();
    // Three returns at the end: allow, deny, notify.
    let (allow, deny, notify) = (n, n + 1, n + 2);
    let target = |t: T, pc: usize| -> usize {
        match t {
            Next => pc + 1,
            Allow => allow,
            Deny => deny,
            Notify => notify,
            L(l) => code
                .iter()
                .position(|(label, _)| *label == Some(l))
                .unwrap_or(deny),
        }
    };
    let mut out = Vec::with_capacity(n + 3);
    for (pc, (_, I(op, kk, t, f))) in code.iter().enumerate() {
        let rel = |t: T| u8::try_from(target(t, pc) - pc - 1).unwrap_or(0);
        let (jt, jf) = if *op & 0x07 == 0x05 {
            (rel(*t), rel(*f))
        } else {
            (0, 0)
        };
        out.push(libc::sock_filter {
            code: *op,
            jt,
            jf,
            k: *kk,
        });
    }
    for k in [ALLOW, DENY, NOTIFY] {
        out.push(libc::sock_filter {
            code: RET,
            jt: 0,
            jf: 0,
            k,
        });
    }
    out
}

/// In the forked child, before exec: install the program with a listener and hand the
/// listener to the parent over `chan` (one end of a socket pair made before the fork), then
/// close both here (the job must never hold its own listener: it could answer its own
/// calls). System calls only, on data made before the fork.
pub(super) fn install(program: &[libc::sock_filter], chan: RawFd) -> std::io::Result<()> {
    let prog = libc::sock_fprog {
        len: u16::try_from(program.len()).unwrap_or(0),
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: seccomp(2) with a program made before the fork (the kernel copies it);
    // no_new_privs is set by the caller.
    let listener = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &prog as *const libc::sock_fprog,
        )
    };
    if listener < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let listener = RawFd::try_from(listener).unwrap_or(-1);
    let r = send_fd(chan, listener);
    // SAFETY: closing the listener this process owns (`chan` is close-on-exec).
    unsafe {
        libc::close(listener);
    }
    r
}

/// sendmsg(SCM_RIGHTS) of one descriptor, with a buffer on the stack (no allocation).
fn send_fd(chan: RawFd, fd: RawFd) -> std::io::Result<()> {
    #[repr(C, align(8))]
    struct Buf([u8; 64]);
    let mut buf = Buf([0; 64]);
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: a msghdr over buffers that outlive the call; CMSG_* compute within `buf`
    // (CMSG_SPACE(4) = 24 ≤ 64).
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = buf.0.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(4) as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(4) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
        if libc::sendmsg(chan, &msg, libc::MSG_NOSIGNAL) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The descriptor the child sent (after a successful spawn it is there: std's spawn returns
/// once the child has exec'd, after `install`).
fn recv_fd(chan: &OwnedFd) -> std::io::Result<OwnedFd> {
    #[repr(C, align(8))]
    struct Buf([u8; 64]);
    let mut buf = Buf([0; 64]);
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: as in send_fd; the received descriptor is checked before it is owned.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = buf.0.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of::<Buf>() as _;
        let n = libc::recvmsg(
            chan.as_raw_fd(),
            &mut msg,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        );
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null() || (*c).cmsg_level != libc::SOL_SOCKET || (*c).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(std::io::Error::other("no seccomp listener from the child"));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>());
        if fd < 0 {
            return Err(std::io::Error::other("no seccomp listener from the child"));
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// The parent's end of the channel a child sends its listener on.
#[derive(Debug)]
pub struct Channel {
    parent: OwnedFd,
    rules: SocketRules,
    refusals: Refusals,
}

/// A socket pair for one child: (the parent's side, the child's end).
pub(super) fn channel(
    rules: SocketRules,
    refusals: Refusals,
) -> std::io::Result<(Channel, OwnedFd)> {
    let (a, b) = nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )
    .map_err(std::io::Error::from)?;
    Ok((
        Channel {
            parent: a,
            rules,
            refusals,
        },
        b,
    ))
}

/// A running supervisor: ends when the supervised processes are all gone, or at `stop`.
#[derive(Debug)]
pub struct Supervisor {
    stop: Arc<AtomicBool>,
    /// Closed to wake the thread (its poll sees the other end hang up).
    wake: Option<OwnedFd>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Channel {
    /// Once the child is spawned: take its listener and answer its calls on a thread.
    pub fn supervise(self) -> std::io::Result<Supervisor> {
        let listener = recv_fd(&self.parent)?;
        let (woken, wake) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("sandbox-net".into())
            .spawn(move || serve(&listener, &woken, &self.rules, &self.refusals, &s))?;
        Ok(Supervisor {
            stop,
            wake: Some(wake),
            thread: Some(thread),
        })
    }
}

impl Supervisor {
    /// Stop answering (the job is over) and wait for the thread.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.wake.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.wake.take();
    }
}

fn serve(
    listener: &OwnedFd,
    woken: &OwnedFd,
    rules: &SocketRules,
    refusals: &Refusals,
    stop: &AtomicBool,
) {
    let fd = listener.as_raw_fd();
    while !stop.load(Ordering::SeqCst) {
        let mut fds = [
            libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: woken.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: poll on two valid descriptors, no timeout: a call or `stop` wakes it.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        let pfd = fds[0];
        if fds[1].revents != 0 {
            return;
        }
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if pfd.revents & libc::POLLIN == 0 {
            if pfd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                return; // no process uses the filter any more
            }
            continue;
        }
        // SAFETY: zeroed as the kernel requires; filled by the ioctl.
        let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: SECCOMP_IOCTL_NOTIF_RECV into a seccomp_notif we own.
        if unsafe { libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_RECV as _, &mut req) } != 0 {
            continue; // the caller went away (ENOENT) or a signal
        }
        let (val, error, flags) = decide(fd, &req, rules, refusals);
        let mut resp = libc::seccomp_notif_resp {
            id: req.id,
            val,
            error,
            flags,
        };
        // SAFETY: SECCOMP_IOCTL_NOTIF_SEND of a response we own; a caller gone is ENOENT.
        unsafe { libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_SEND as _, &mut resp) };
    }
}

const EACCES: (i64, i32, u32) = (0, -libc::EACCES, 0);
const CONTINUE: (i64, i32, u32) = (0, 0, libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32);

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| format!("pid {pid}"))
}

fn family(af: u64) -> String {
    match i32::try_from(af).unwrap_or(-1) {
        libc::AF_INET => "AF_INET".into(),
        libc::AF_INET6 => "AF_INET6".into(),
        libc::AF_UNIX => "AF_UNIX".into(),
        libc::AF_NETLINK => "AF_NETLINK".into(),
        libc::AF_PACKET => "AF_PACKET".into(),
        libc::AF_VSOCK => "AF_VSOCK".into(),
        n => format!("family {n}"),
    }
}

fn sock_type(t: u64) -> String {
    match i32::try_from(t & 0xf).unwrap_or(-1) {
        libc::SOCK_STREAM => "stream".into(),
        libc::SOCK_DGRAM => "datagram".into(),
        libc::SOCK_RAW => "raw".into(),
        libc::SOCK_SEQPACKET => "seqpacket".into(),
        n => format!("type {n}"),
    }
}

fn decide(
    listener: RawFd,
    req: &libc::seccomp_notif,
    rules: &SocketRules,
    refusals: &Refusals,
) -> (i64, i32, u32) {
    let a = req.data.args;
    let nr = libc::c_long::from(req.data.nr);
    let who = comm(req.pid);
    if nr == libc::SYS_socket || nr == libc::SYS_socketpair {
        let inet = a[0] == libc::AF_INET as u64 || a[0] == libc::AF_INET6 as u64;
        let what = if inet && a[1] & 0xf == libc::SOCK_DGRAM as u64 {
            "UDP socket".to_string()
        } else if inet && a[1] & 0xf == libc::SOCK_STREAM as u64 {
            format!("{} stream socket of protocol {}", family(a[0]), a[2])
        } else {
            format!("{} {} socket", family(a[0]), sock_type(a[1]))
        };
        let call = if nr == libc::SYS_socket {
            "socket"
        } else {
            "socketpair"
        };
        refusals.push(format!(
            "{who}: {call}: a {what} refused (only TCP and Unix stream sockets)"
        ));
        return EACCES;
    }
    if nr != libc::SYS_connect {
        return EACCES;
    }
    let len = usize::try_from(a[2]).unwrap_or(0).min(128);
    let mut addr = [0u8; 128];
    let local = libc::iovec {
        iov_base: addr.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: a[1] as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: reads `len` bytes of the caller's memory into our buffer of 128.
    let got = unsafe {
        libc::process_vm_readv(
            libc::pid_t::try_from(req.pid).unwrap_or(0),
            &local,
            1,
            &remote,
            1,
            0,
        )
    };
    let mut id = req.id;
    // SAFETY: SECCOMP_IOCTL_NOTIF_ID_VALID with the request's id: the memory read above
    // belongs to the process still waiting on this call.
    if unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_ID_VALID as _, &mut id) } != 0 {
        return EACCES;
    }
    let Ok(got) = usize::try_from(got) else {
        refusals.push(format!(
            "{who}: connect refused (its address could not be read)"
        ));
        return EACCES;
    };
    let addr = &addr[..got.min(len)];
    if addr.len() < 2 {
        return EACCES;
    }
    let af = i32::from(u16::from_ne_bytes([addr[0], addr[1]]));
    match af {
        libc::AF_UNSPEC => CONTINUE,
        libc::AF_INET | libc::AF_INET6 if addr.len() >= 8 => {
            let port = u16::from_be_bytes([addr[2], addr[3]]);
            if rules.tcp_ports.contains(&port) {
                // Landlock checks the port the kernel uses.
                return CONTINUE;
            }
            let host = if af == libc::AF_INET {
                std::net::Ipv4Addr::new(addr[4], addr[5], addr[6], addr[7]).to_string()
            } else if addr.len() >= 24 {
                let mut b = [0u8; 16];
                b.copy_from_slice(&addr[8..24]);
                format!("[{}]", std::net::Ipv6Addr::from(b))
            } else {
                "?".into()
            };
            refusals.push(format!(
                "{who}: connect to {host}:{port} refused (TCP port not allowed)"
            ));
            EACCES
        }
        libc::AF_UNIX => {
            let path = &addr[2..];
            if let Some(name) = path.strip_prefix(&[0u8]) {
                if rules.abstract_names.iter().any(|n| n.as_bytes() == name) {
                    return connect_for(listener, req, Target::Abstract(name));
                }
                refusals.push(format!(
                    "{who}: connect to abstract Unix socket @{} refused",
                    String::from_utf8_lossy(name)
                ));
            } else {
                let end = path.iter().position(|b| *b == 0).unwrap_or(path.len());
                let p = std::path::Path::new(std::ffi::OsStr::from_bytes(&path[..end]));
                if rules.paths.iter().any(|a| a == p) {
                    return connect_for(listener, req, Target::Path(p));
                }
                refusals.push(format!(
                    "{who}: connect to Unix socket {} refused",
                    String::from_utf8_lossy(&path[..end])
                ));
            }
            EACCES
        }
        n => {
            refusals.push(format!("{who}: connect on {} refused", family(n as u64)));
            EACCES
        }
    }
}

enum Target<'a> {
    Abstract(&'a [u8]),
    Path(&'a std::path::Path),
}

/// Connect to the allowed socket here and put the connected socket in place of the
/// caller's descriptor (its flags kept: non-blocking, close-on-exec).
fn connect_for(listener: RawFd, req: &libc::seccomp_notif, to: Target<'_>) -> (i64, i32, u32) {
    use std::os::linux::net::SocketAddrExt;
    let target = req.data.args[0];
    let flags = std::fs::read_to_string(format!("/proc/{}/fdinfo/{target}", req.pid))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
        })
        .unwrap_or(0);
    let stream = match to {
        Target::Abstract(name) => std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|a| std::os::unix::net::UnixStream::connect_addr(&a)),
        Target::Path(p) => std::os::unix::net::UnixStream::connect(p),
    };
    let stream = match stream {
        Ok(s) => s,
        Err(e) => return (0, -e.raw_os_error().unwrap_or(libc::ECONNREFUSED), 0),
    };
    if flags & libc::O_NONBLOCK as u32 != 0 {
        let _ = stream.set_nonblocking(true);
    }
    let addfd = libc::seccomp_notif_addfd {
        id: req.id,
        flags: libc::SECCOMP_ADDFD_FLAG_SETFD as u32,
        srcfd: u32::try_from(stream.as_raw_fd()).unwrap_or(0),
        newfd: u32::try_from(target).unwrap_or(0),
        newfd_flags: flags & libc::O_CLOEXEC as u32,
    };
    // SAFETY: SECCOMP_IOCTL_NOTIF_ADDFD with our connected socket; the kernel dups it into
    // the caller at `target`, replacing the socket it made.
    let r = unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_ADDFD as _, &addfd) };
    if r < 0 {
        return EACCES;
    }
    (0, 0, 0)
}
