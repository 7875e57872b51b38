//! How long and how many: the bounds on connections that keep one caller from starving the
//! others (issue 27: 1,100 half-sent requests from one account stopped the API for everyone).
//!
//! - **Who is a caller**: the peer's Unix uid on the Unix socket (`SO_PEERCRED`, from the
//!   kernel). On loopback TCP an address names no account (and the service, in its own network
//!   namespace, cannot ask the kernel whose socket the peer is): a connection is a token-less
//!   caller ([`CallerKey::Loopback`]) until a request on it shows the token, then it counts
//!   in that account's share ([`CallerKey::TcpAccount`], [`Admission::promote`]). The
//!   token-less share is taken over oldest first when full ([`Gate::admit_evicting`]), so a
//!   local account flooding TCP without the token can neither fill the token holder's share
//!   nor keep a new connection from being read; it never touches the Unix socket's.
//! - **How many**: at most [`Limits::per_caller`] open connections per caller and
//!   [`Limits::total`] in all (a semaphore). A connection over either bound is answered `503`
//!   with a canned, non-blocking write and closed at once, in the accept loop, which never waits
//!   on a client.
//! - **How long**: the request head must arrive within [`Limits::header_timeout`] of the server
//!   starting to wait for it (hyper's header-read timer, which on a kept-alive connection starts
//!   when the previous answer went out, so it also closes idle keep-alive connections); a body
//!   within [`Limits::body_timeout`] of its head ([`BodyDeadline`]); and a connection that moves
//!   no byte either way for [`Limits::idle_timeout`] (a stalled body, an answer the client does
//!   not read) is closed ([`IdleIo`]).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::pin::Pin;
use std::sync::Arc;

use parking_lot::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// The bounds on connections (all configurable on the command line, `agentstore-web --help`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Time to send a request's head, from when the server starts waiting for it.
    pub header_timeout: Duration,
    /// Time to send a request's body, from its head.
    pub body_timeout: Duration,
    /// A connection moving no byte either way this long is closed.
    pub idle_timeout: Duration,
    /// Open connections of one caller.
    pub per_caller: usize,
    /// Open connections in all.
    pub total: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            per_caller: 64,
            total: 512,
        }
    }
}

/// Whose connection it is, for the per-caller bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallerKey {
    /// A Unix-socket peer's uid.
    Uid(u32),
    /// A loopback TCP peer that has not yet shown the token: anyone on the machine. These
    /// places are taken over oldest first when full ([`Gate::admit_evicting`]).
    Loopback,
    /// A loopback TCP connection that presented the token of this account (the service's
    /// own: the token names no other), moved here by [`Admission::promote`].
    TcpAccount(u32),
}

impl std::fmt::Display for CallerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallerKey::Uid(u) => write!(f, "uid {u}"),
            CallerKey::Loopback => f.write_str("loopback TCP without a token"),
            CallerKey::TcpAccount(u) => write!(f, "loopback TCP with the token of uid {u}"),
        }
    }
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The caller has its share open.
    #[error("{key} has {limit} connections open (the per-caller bound)")]
    Caller {
        /// Who.
        key: CallerKey,
        /// The bound.
        limit: usize,
    },
    /// The server has its bound open.
    #[error("the server has {limit} connections open (the total bound)")]
    Total {
        /// The bound.
        limit: usize,
    },
}

/// One admitted connection's place: whose share it counts in (`None` once it was taken over)
/// and how its connection learns that it was.
#[derive(Debug)]
struct Place {
    key: Mutex<Option<CallerKey>>,
    evicted: Notify,
}

/// The counts, and the places that may be taken over (oldest first), per caller.
#[derive(Debug, Default)]
struct Counts {
    open: HashMap<CallerKey, usize>,
    evictable: HashMap<CallerKey, VecDeque<Arc<Place>>>,
}

impl Counts {
    fn release(&mut self, key: CallerKey, place: &Arc<Place>) {
        if let Some(n) = self.open.get_mut(&key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.open.remove(&key);
            }
        }
        if let Some(q) = self.evictable.get_mut(&key) {
            q.retain(|p| !Arc::ptr_eq(p, place));
            if q.is_empty() {
                self.evictable.remove(&key);
            }
        }
    }
}

/// Admits connections within the per-caller and total bounds.
#[derive(Debug)]
pub struct Gate {
    total: Arc<Semaphore>,
    total_limit: usize,
    per_caller: usize,
    counts: Mutex<Counts>,
}

/// An admitted connection's place; dropping it frees the place.
#[derive(Debug)]
pub struct Admission {
    gate: Arc<Gate>,
    place: Arc<Place>,
    _permit: OwnedSemaphorePermit,
}

impl Gate {
    /// A gate for `limits` (bounds of 0 are taken as 1).
    pub fn new(limits: &Limits) -> Arc<Gate> {
        let total = limits.total.clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(Gate {
            total: Arc::new(Semaphore::new(total)),
            total_limit: total,
            per_caller: limits.per_caller.max(1),
            counts: Mutex::new(Counts::default()),
        })
    }

    /// A place for a connection of `key`, or why not. Never waits.
    pub fn admit(self: &Arc<Self>, key: CallerKey) -> Result<Admission, Refused> {
        self.admit_as(key, false)
    }

    /// A place for a connection of `key` that nobody has authenticated yet (loopback TCP,
    /// before a request shows the token). When `key` has its share open, the oldest such
    /// place is taken over: that connection is told ([`Admission::evicted`]) and closes.
    /// Whoever opens connections without a token then only shortens the others' wait for
    /// their first request head; a client that sends its request at once is answered and,
    /// with the token, counts in its account's share, which no token-less connection can
    /// take.
    pub fn admit_evicting(self: &Arc<Self>, key: CallerKey) -> Result<Admission, Refused> {
        self.admit_as(key, true)
    }

    fn admit_as(self: &Arc<Self>, key: CallerKey, evicting: bool) -> Result<Admission, Refused> {
        let mut c = self.counts.lock();
        if c.open.get(&key).copied().unwrap_or(0) >= self.per_caller {
            let oldest = if evicting {
                c.evictable.get_mut(&key).and_then(VecDeque::pop_front)
            } else {
                None
            };
            let Some(oldest) = oldest else {
                return Err(Refused::Caller {
                    key,
                    limit: self.per_caller,
                });
            };
            // Its count goes now; its permit of the total when its connection closes.
            *oldest.key.lock() = None;
            c.release(key, &oldest);
            oldest.evicted.notify_one();
        }
        let Ok(permit) = Arc::clone(&self.total).try_acquire_owned() else {
            return Err(Refused::Total {
                limit: self.total_limit,
            });
        };
        *c.open.entry(key).or_insert(0) += 1;
        let place = Arc::new(Place {
            key: Mutex::new(Some(key)),
            evicted: Notify::new(),
        });
        if evicting {
            c.evictable
                .entry(key)
                .or_default()
                .push_back(Arc::clone(&place));
        }
        Ok(Admission {
            gate: Arc::clone(self),
            place,
            _permit: permit,
        })
    }

    /// Open connections of `key`.
    pub fn open_of(&self, key: CallerKey) -> usize {
        self.counts.lock().open.get(&key).copied().unwrap_or(0)
    }
}

impl Admission {
    /// Moves this connection into `to`'s share (a TCP connection that showed the token):
    /// true when it counts there now. False, and nothing changes, when `to` has its share
    /// open or the place was taken over already.
    pub fn promote(&self, to: CallerKey) -> bool {
        let mut c = self.gate.counts.lock();
        let mut key = self.place.key.lock();
        let Some(from) = *key else {
            return false;
        };
        if from == to {
            return true;
        }
        if c.open.get(&to).copied().unwrap_or(0) >= self.gate.per_caller {
            return false;
        }
        c.release(from, &self.place);
        *c.open.entry(to).or_insert(0) += 1;
        *key = Some(to);
        true
    }

    /// Whose share this connection counts in (`None`: taken over).
    pub fn key(&self) -> Option<CallerKey> {
        *self.place.key.lock()
    }

    /// Resolves when the place was taken over by a newer connection of the same caller
    /// ([`Gate::admit_evicting`]); the connection should then close.
    pub async fn evicted(&self) {
        self.place.evicted.notified().await
    }
}

impl Admission {
    /// Gives this connection's place in its caller's share back now (its permit of the total
    /// goes when the admission is dropped). Called before the socket closes
    /// ([`IdleIo::releasing`]), so a client that has seen its connection closed never finds
    /// it still counted against its next one.
    pub fn release_share(&self) {
        let mut c = self.gate.counts.lock();
        let key = self.place.key.lock().take();
        if let Some(key) = key {
            c.release(key, &self.place);
        }
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.release_share();
    }
}

/// The answer to a connection over a bound: written without waiting, then the connection is
/// closed.
pub fn refusal_response(why: &Refused) -> Vec<u8> {
    let body = serde_json::json!({
        "error": "org.agentstore.Error.Busy",
        "message": format!("too many connections: {why}; try again shortly"),
    })
    .to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {}\r\nRetry-After: 1\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// When a request's body must have arrived (set on each request as an extension).
#[derive(Debug, Clone, Copy)]
pub struct BodyDeadline(pub Instant);

/// A stream that fails with `TimedOut` when no byte has moved either way for `idle` while
/// its user waits on it.
#[derive(Debug)]
pub struct IdleIo<S> {
    inner: S,
    idle: Duration,
    timer: Pin<Box<Sleep>>,
    /// The connection's admission, whose share is given back before `inner` is shut down or
    /// closed.
    place: Option<Arc<Admission>>,
}

impl<S> IdleIo<S> {
    /// `inner`, closed after `idle` without traffic.
    pub fn new(inner: S, idle: Duration) -> IdleIo<S> {
        IdleIo {
            inner,
            idle,
            timer: Box::pin(tokio::time::sleep(idle)),
            place: None,
        }
    }

    /// Gives `place`'s share back when this stream is dropped, before its socket closes.
    pub fn releasing(mut self, place: Arc<Admission>) -> IdleIo<S> {
        self.place = Some(place);
        self
    }

    fn moved(&mut self) {
        let at = Instant::now() + self.idle;
        self.timer.as_mut().reset(at);
    }

    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        self.timer.as_mut().poll(cx).is_ready()
    }

    fn timed_out(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no traffic for {:?}: connection closed", self.idle),
        )
    }

    /// What a write of the inner stream came to: bytes moved restart the idle timer, a
    /// write still pending past it is the idle timeout.
    fn written(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match r {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.moved();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending if self.expired(cx) => Poll::Ready(Err(self.timed_out())),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S> Drop for IdleIo<S> {
    fn drop(&mut self) {
        // Fields drop after this: the share is given back before the socket closes.
        if let Some(place) = &self.place {
            place.release_share();
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for IdleIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    this.moved();
                }
                Poll::Ready(r)
            }
            Poll::Pending if this.expired(cx) => Poll::Ready(Err(this.timed_out())),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for IdleIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.written(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.written(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Pending if this.expired(cx) => Poll::Ready(Err(this.timed_out())),
            other => other,
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // The server is closing: the share goes before the client can see the end.
        if let Some(place) = &this.place {
            place.release_share();
        }
        match Pin::new(&mut this.inner).poll_shutdown(cx) {
            Poll::Pending if this.expired(cx) => Poll::Ready(Err(this.timed_out())),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn limits(per_caller: usize, total: usize) -> Limits {
        Limits {
            per_caller,
            total,
            ..Limits::default()
        }
    }

    #[test]
    fn one_caller_cannot_take_the_places_of_another() {
        let gate = Gate::new(&limits(2, 3));
        let a1 = gate.admit(CallerKey::Uid(7)).unwrap();
        let _a2 = gate.admit(CallerKey::Uid(7)).unwrap();
        assert_eq!(
            gate.admit(CallerKey::Uid(7)).unwrap_err(),
            Refused::Caller {
                key: CallerKey::Uid(7),
                limit: 2
            }
        );
        let _b = gate.admit(CallerKey::Uid(8)).unwrap();
        // The total bound holds across callers.
        assert_eq!(
            gate.admit(CallerKey::Loopback).unwrap_err(),
            Refused::Total { limit: 3 }
        );
        assert_eq!(gate.open_of(CallerKey::Loopback), 0);
        drop(a1);
        assert_eq!(gate.open_of(CallerKey::Uid(7)), 1);
        let _c = gate.admit(CallerKey::Loopback).unwrap();
    }

    /// Token-less TCP connections cannot hold out a new one, nor the token holder's.
    #[tokio::test]
    async fn token_less_places_are_taken_over_oldest_first_and_promoted_ones_kept() {
        let gate = Gate::new(&limits(2, 10));
        let account = CallerKey::TcpAccount(42);
        let first = gate.admit_evicting(CallerKey::Loopback).unwrap();
        let second = gate.admit_evicting(CallerKey::Loopback).unwrap();
        // The token holder's connection shows the token: it leaves the token-less share.
        let holder = gate.admit_evicting(CallerKey::Loopback).unwrap();
        // `first` gave way (told at once, its count gone) to `holder`.
        tokio::time::timeout(Duration::from_secs(5), first.evicted())
            .await
            .expect("the oldest token-less connection is told");
        assert_eq!(first.key(), None);
        assert!(holder.promote(account));
        assert_eq!(holder.key(), Some(account));
        assert_eq!(gate.open_of(CallerKey::Loopback), 1);
        assert_eq!(gate.open_of(account), 1);
        // A flood of token-less connections takes over only token-less places.
        let mut flood = Vec::new();
        for _ in 0..6 {
            flood.push(gate.admit_evicting(CallerKey::Loopback).unwrap());
        }
        assert_eq!(gate.open_of(CallerKey::Loopback), 2);
        assert_eq!(holder.key(), Some(account));
        let second_told = tokio::time::timeout(Duration::from_millis(50), second.evicted()).await;
        assert!(
            second_told.is_ok(),
            "the older token-less place was taken over"
        );
        // A promoted place is not given back twice: dropping counts it out of its share.
        drop(first);
        drop(holder);
        assert_eq!(gate.open_of(account), 0);
        assert_eq!(gate.open_of(CallerKey::Loopback), 2);
        // Unix callers never take each other's places.
        let _u1 = gate.admit(CallerKey::Uid(7)).unwrap();
        let _u2 = gate.admit(CallerKey::Uid(7)).unwrap();
        assert!(gate.admit(CallerKey::Uid(7)).is_err());
        // The account's share is bounded like any other: a full one refuses promotion.
        drop(flood);
        assert_eq!(gate.open_of(CallerKey::Loopback), 0);
        let a1 = gate.admit_evicting(CallerKey::Loopback).unwrap();
        let a2 = gate.admit_evicting(CallerKey::Loopback).unwrap();
        assert!(a2.promote(account));
        let a3 = gate.admit_evicting(CallerKey::Loopback).unwrap();
        assert!(a3.promote(account));
        assert!(!a1.promote(account));
        assert_eq!(a1.key(), Some(CallerKey::Loopback));
        assert_eq!(gate.open_of(account), 2);
    }

    #[test]
    fn the_refusal_is_a_whole_http_answer() {
        let r = refusal_response(&Refused::Total { limit: 5 });
        let text = String::from_utf8(r).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
        assert!(body.contains("total bound"), "{body}");
    }

    #[tokio::test]
    async fn a_silent_peer_is_cut_off_and_traffic_keeps_a_connection() {
        let idle = Duration::from_millis(300);
        let (a, mut b) = tokio::io::duplex(64);
        let mut io = IdleIo::new(a, idle);
        let mut buf = [0u8; 8];
        // Traffic within the bound keeps it open past the bound.
        let started = Instant::now();
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_millis(150)).await;
            b.write_all(b"x").await.unwrap();
            assert_eq!(io.read(&mut buf).await.unwrap(), 1);
        }
        assert!(started.elapsed() > idle);
        let e = io.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        // A peer that does not read what is written is cut off too.
        let (a, _b) = tokio::io::duplex(4);
        let mut io = IdleIo::new(a, idle);
        let e = io.write_all(&[0u8; 64]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }
}
