//! How long and how many: the bounds on connections that keep one caller from starving the
//! others (issue 27: 1,100 half-sent requests from one account stopped the API for everyone).
//!
//! - **Who is a caller**: the peer's Unix uid on the Unix socket (`SO_PEERCRED`, from the
//!   kernel); on loopback TCP, where an address names no account, every peer is one caller
//!   ([`CallerKey::Loopback`]): a local account flooding TCP can slow TCP callers, never the
//!   Unix socket's.
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

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
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
    /// Any loopback TCP peer.
    Loopback,
}

impl std::fmt::Display for CallerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallerKey::Uid(u) => write!(f, "uid {u}"),
            CallerKey::Loopback => f.write_str("loopback TCP"),
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

/// Admits connections within the per-caller and total bounds.
#[derive(Debug)]
pub struct Gate {
    total: Arc<Semaphore>,
    total_limit: usize,
    per_caller: usize,
    open: Mutex<HashMap<CallerKey, usize>>,
}

/// An admitted connection's place; dropping it frees the place.
#[derive(Debug)]
pub struct Admission {
    gate: Arc<Gate>,
    key: CallerKey,
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
            open: Mutex::new(HashMap::new()),
        })
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<CallerKey, usize>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a connection of `key`, or why not. Never waits.
    pub fn admit(self: &Arc<Self>, key: CallerKey) -> Result<Admission, Refused> {
        let mut open = self.counts();
        let n = open.entry(key).or_insert(0);
        if *n >= self.per_caller {
            return Err(Refused::Caller {
                key,
                limit: self.per_caller,
            });
        }
        let Ok(permit) = Arc::clone(&self.total).try_acquire_owned() else {
            if *n == 0 {
                open.remove(&key);
            }
            return Err(Refused::Total {
                limit: self.total_limit,
            });
        };
        *n += 1;
        Ok(Admission {
            gate: Arc::clone(self),
            key,
            _permit: permit,
        })
    }

    /// Open connections of `key`.
    pub fn open_of(&self, key: CallerKey) -> usize {
        self.counts().get(&key).copied().unwrap_or(0)
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut open = self.gate.counts();
        if let Some(n) = open.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.key);
            }
        }
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
}

impl<S> IdleIo<S> {
    /// `inner`, closed after `idle` without traffic.
    pub fn new(inner: S, idle: Duration) -> IdleIo<S> {
        IdleIo {
            inner,
            idle,
            timer: Box::pin(tokio::time::sleep(idle)),
        }
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
