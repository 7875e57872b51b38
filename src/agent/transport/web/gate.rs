//! Who may hold a connection open: the bounds on open connections per local account and in
//! all (issue 27), and how a loopback TCP peer's account is known.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::{MAX_CONNECTIONS, MAX_CONNECTIONS_PER_ACCOUNT};

/// The bounds on open connections: per account (the peer's uid: `SO_PEERCRED` on the Unix
/// socket, the peer socket's owner from the kernel on loopback TCP, [`tcp_peer_uid`]; `None`
/// when it cannot be told) and in all, so one local account's slow or idle connections cannot keep the
/// session's owner out (issue 27). Never waits: a connection over a bound is answered 503.
pub(super) struct Gate {
    total: Arc<tokio::sync::Semaphore>,
    open: Mutex<BTreeMap<Option<u32>, usize>>,
}

/// An admitted connection's place; dropping it frees the place.
pub(super) struct Place {
    gate: Arc<Gate>,
    account: Option<u32>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Gate {
    pub(super) fn new() -> Arc<Gate> {
        Arc::new(Gate {
            total: Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS)),
            open: Mutex::new(BTreeMap::new()),
        })
    }

    pub(super) fn admit(self: &Arc<Self>, account: Option<u32>) -> Option<Place> {
        let mut open = self.open.lock();
        let n = open.entry(account).or_insert(0);
        if *n >= MAX_CONNECTIONS_PER_ACCOUNT {
            return None;
        }
        let permit = Arc::clone(&self.total).try_acquire_owned().ok()?;
        *n += 1;
        Some(Place {
            gate: Arc::clone(self),
            account,
            _permit: permit,
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut open = self.gate.open.lock();
        if let Some(n) = open.get_mut(&self.account) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.account);
            }
        }
    }
}

/// The answer to a connection over a bound (one non-blocking write, then it is closed).
pub(super) const BUSY: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n\
Content-Length: 51\r\nRetry-After: 1\r\nConnection: close\r\n\r\n\
{\"error\":\"too many connections; try again shortly\"}";

/// The uid owning the TCP socket at `peer` connected to `local` (both on this machine), asked
/// of the kernel for that one socket (`sock_diag`, netlink: a few microseconds whatever the
/// number of sockets); `None` when it cannot be told.
pub fn tcp_peer_uid(peer: std::net::SocketAddr, local: std::net::SocketAddr) -> Option<u32> {
    use nix::sys::socket::{
        AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, recv, sendto,
        setsockopt, socket, sockopt,
    };
    use std::os::fd::AsRawFd;
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLM_F_REQUEST: u16 = 1;
    const NLMSG_ERROR: u16 = 2;
    fn octets(ip: std::net::IpAddr) -> [u8; 16] {
        let mut out = [0u8; 16];
        match ip {
            std::net::IpAddr::V4(v4) => out[..4].copy_from_slice(&v4.octets()),
            std::net::IpAddr::V6(v6) => out.copy_from_slice(&v6.octets()),
        }
        out
    }
    let family: u8 = if peer.is_ipv4() { 2 } else { 10 };
    // nlmsghdr (16) + inet_diag_req_v2 (56): the socket whose own end is `peer`.
    let mut req = Vec::with_capacity(72);
    req.extend_from_slice(&72u32.to_ne_bytes());
    req.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    req.extend_from_slice(&1u32.to_ne_bytes());
    req.extend_from_slice(&0u32.to_ne_bytes());
    req.extend_from_slice(&[family, 6, 0, 0]);
    req.extend_from_slice(&u32::MAX.to_ne_bytes());
    req.extend_from_slice(&peer.port().to_be_bytes());
    req.extend_from_slice(&local.port().to_be_bytes());
    req.extend_from_slice(&octets(peer.ip()));
    req.extend_from_slice(&octets(local.ip()));
    req.extend_from_slice(&0u32.to_ne_bytes());
    req.extend_from_slice(&u32::MAX.to_ne_bytes());
    req.extend_from_slice(&u32::MAX.to_ne_bytes());
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkSockDiag,
    )
    .ok()?;
    setsockopt(
        &fd,
        sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(1, 0),
    )
    .ok()?;
    sendto(
        fd.as_raw_fd(),
        &req,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )
    .ok()?;
    let mut buf = [0u8; 512];
    let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()).ok()?;
    let msg = buf.get(..n)?;
    let kind = u16::from_ne_bytes([*msg.get(4)?, *msg.get(5)?]);
    if kind != SOCK_DIAG_BY_FAMILY || kind == NLMSG_ERROR {
        return None;
    }
    // inet_diag_msg after the header: family, state, timer, retrans, id (48), expires,
    // rqueue, wqueue, then uid.
    let uid = msg.get(16 + 64..16 + 68)?;
    Some(u32::from_ne_bytes([uid[0], uid[1], uid[2], uid[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_bounded_per_account_and_in_all() {
        let gate = Gate::new();
        let mine: Vec<Place> = (0..MAX_CONNECTIONS_PER_ACCOUNT)
            .map(|_| gate.admit(Some(1000)).unwrap_or_else(|| panic!("refused")))
            .collect();
        assert!(gate.admit(Some(1000)).is_none());
        // Another account still gets in, up to the total.
        let mut others = Vec::new();
        for uid in 0.. {
            match gate.admit(Some(2000 + uid / 16)) {
                Some(p) => others.push(p),
                None => break,
            }
        }
        assert_eq!(mine.len() + others.len(), MAX_CONNECTIONS);
        drop(mine);
        assert!(gate.admit(Some(1000)).is_some());
        let text = String::from_utf8_lossy(BUSY).to_string();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or_default();
        assert!(
            head.contains(&format!("Content-Length: {}", body.len())),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_loopback_peer_is_known_by_its_account() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = l.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let _c = tokio::net::TcpStream::connect(addr)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let (_s, peer) = l.accept().await.unwrap_or_else(|e| panic!("{e}"));
        if std::path::Path::new("/proc/net/tcp").exists() {
            let me =
                std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m));
            assert_eq!(tcp_peer_uid(peer, addr), me.ok());
        }
    }
}
