//! The connection under hyper: a write that makes no progress for its timeout fails (a client
//! that does not take its answer or its events off the connection), and closing lingers.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::gate::Place;

/// How long a closing connection reads (and drops) what its client still sends.
const LINGER: Duration = Duration::from_secs(2);

/// A connection that fails a write with `TimedOut` when it makes no progress for
/// `write_timeout`, and that lingers on shutdown: after its end is sent it reads and drops up to
/// `linger_bytes` of what the client still sends (a body that was refused unread), for at most
/// [`LINGER`], so that closing does not reset the connection before the client has read the
/// answer. It holds the connection's place, given back before the socket closes.
pub(super) struct TimedIo<S> {
    /// Declared first: dropped before `inner`, so the place is free before the socket closes.
    place: Option<Place>,
    inner: S,
    write_timeout: Duration,
    timer: Pin<Box<Sleep>>,
    waiting: bool,
    /// The end was sent; draining what is left.
    shut: bool,
    linger_bytes: usize,
}

impl<S> TimedIo<S> {
    pub(super) fn new(
        inner: S,
        place: Place,
        write_timeout: Duration,
        linger_bytes: usize,
    ) -> Self {
        Self {
            place: Some(place),
            inner,
            write_timeout,
            timer: Box::pin(tokio::time::sleep(write_timeout)),
            waiting: false,
            shut: false,
            linger_bytes,
        }
    }

    /// `Pending` from the writer: arms the timer on the first, fails once it has run out.
    fn stalled<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        if !self.waiting {
            self.waiting = true;
            let at = Instant::now() + self.write_timeout;
            self.timer.as_mut().reset(at);
        }
        match self.timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took nothing off the connection in time",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progressed<T>(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match r {
            Poll::Pending => self.stalled(cx),
            done => {
                self.waiting = false;
                done
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for TimedIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TimedIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.progressed(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.progressed(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        this.progressed(cx, r)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.shut {
            let r = Pin::new(&mut this.inner).poll_shutdown(cx);
            std::task::ready!(this.progressed(cx, r))?;
            this.shut = true;
            this.timer.as_mut().reset(Instant::now() + LINGER);
        }
        let mut scratch = [0u8; 8192];
        while this.linger_bytes > 0 {
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut this.inner).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                    this.linger_bytes = this.linger_bytes.saturating_sub(buf.filled().len());
                }
                Poll::Ready(_) => break,
                Poll::Pending if this.timer.as_mut().poll(cx).is_pending() => return Poll::Pending,
                Poll::Pending => break,
            }
        }
        this.place = None;
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_client_that_reads_nothing_is_cut_off_and_closing_drains_its_input() {
        let gate = super::super::gate::Gate::new();
        let place = || gate.admit(Some(7)).unwrap_or_else(|| panic!("refused"));
        // A peer that takes nothing off the connection: the write fails after its timeout.
        let (a, _b) = tokio::io::duplex(16);
        let mut io = TimedIo::new(a, place(), Duration::from_millis(100), 0);
        let e = io.write_all(&[0u8; 64]).await.err().map(|e| e.kind());
        assert_eq!(e, Some(io::ErrorKind::TimedOut));
        // Closing reads (and drops) what the peer still sends, up to the bound, then frees
        // the place.
        let (a, mut b) = tokio::io::duplex(64);
        let mut io = TimedIo::new(a, place(), Duration::from_secs(5), 100);
        let sender = tokio::spawn(async move {
            let _ = b.write_all(&[1u8; 80]).await;
            let mut end = Vec::new();
            let _ = b.read_to_end(&mut end).await;
            // Its close ends the drain.
        });
        io.shutdown().await.unwrap_or_else(|e| panic!("{e}"));
        assert!(io.place.is_none(), "the place is given back at the end");
        drop(io);
        let _ = sender.await;
        assert!(gate.admit(Some(7)).is_some());
    }
}
