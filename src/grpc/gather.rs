//! A gRPC connection's socket as HTTP/2 writes to it: what h2 writes between two flushes
//! leaves in one `write`.
//!
//! h2 hands a DATA frame's payload of 256 bytes or more to a socket that writes vectored
//! as a buffer of its own, and flushes the socket before it takes the next frame. A unary
//! answer — HEADERS, DATA, then the trailers that carry `grpc-status` — so left in two
//! writes, and the client woke for each. To a socket that does not write vectored, h2
//! copies payloads under 1 KiB into its buffer with the frames around them; [`Gathered`]
//! says it is such a socket, and holds what h2 writes until h2 flushes, so a larger
//! payload and the frames before it also leave in one write (its trailers in a second).
//!
//! What is held is at most [`GATHER_MAX`]: a write that would pass it sends what is held
//! first, and one at least that large goes to the socket as it is. The buffer keeps at
//! most [`KEEP`] bytes of capacity between flushes, so an idle connection holds little.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most bytes held before they are written.
pub const GATHER_MAX: usize = 64 * 1024;
/// The buffer capacity kept from one flush to the next.
pub const KEEP: usize = 4 * 1024;

/// A socket whose writes are held until they are flushed.
pub struct Gathered<T> {
    io: T,
    held: Vec<u8>,
    /// How much of `held` the socket has taken.
    written: usize,
}

impl<T> Gathered<T> {
    pub fn new(io: T) -> Self {
        Self {
            io,
            held: Vec::new(),
            written: 0,
        }
    }
}

impl<T: AsyncWrite + Unpin> Gathered<T> {
    /// Writes what is held, all of it, before anything else.
    fn poll_write_held(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.held.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.held[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.written = 0;
        if self.held.capacity() > KEEP {
            self.held = Vec::new();
        } else {
            self.held.clear();
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Gathered<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Gathered<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.held.len() + buf.len() > GATHER_MAX {
            ready!(this.poll_write_held(cx))?;
            if buf.len() >= GATHER_MAX {
                return Pin::new(&mut this.io).poll_write(cx, buf);
            }
        }
        this.held.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_write_held(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_write_held(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }

    /// Not vectored: h2 then copies small payloads beside their frames (see the module).
    fn is_write_vectored(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;

    use super::*;

    /// A socket that records each write it takes, taking at most `take` bytes a write
    /// and answering every other write `Pending` when `stall` is set.
    #[derive(Default)]
    struct Socket {
        writes: Vec<Vec<u8>>,
        take: Option<usize>,
        stall: bool,
        stalled: bool,
        flushes: usize,
        shut: bool,
    }

    impl AsyncWrite for Socket {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            if this.stall && !this.stalled {
                this.stalled = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            this.stalled = false;
            let n = this.take.map_or(buf.len(), |take| take.min(buf.len()));
            this.writes.push(buf[..n].to_vec());
            Poll::Ready(Ok(n))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.get_mut().flushes += 1;
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.get_mut().shut = true;
            Poll::Ready(Ok(()))
        }
    }

    async fn write(socket: &mut Gathered<Socket>, bytes: &[u8]) -> usize {
        poll_fn(|cx| Pin::new(&mut *socket).poll_write(cx, bytes))
            .await
            .unwrap()
    }

    async fn flush(socket: &mut Gathered<Socket>) {
        poll_fn(|cx| Pin::new(&mut *socket).poll_flush(cx))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn writes_until_a_flush_reach_the_socket_as_one() {
        let mut socket = Gathered::new(Socket::default());
        assert!(!socket.is_write_vectored());
        assert_eq!(write(&mut socket, b"headers").await, 7);
        assert_eq!(write(&mut socket, b"data").await, 4);
        assert!(
            socket.io.writes.is_empty(),
            "nothing written before the flush"
        );
        flush(&mut socket).await;
        assert_eq!(socket.io.writes, vec![b"headersdata".to_vec()]);
        assert_eq!(socket.io.flushes, 1);
        write(&mut socket, b"trailers").await;
        flush(&mut socket).await;
        assert_eq!(socket.io.writes[1], b"trailers");
    }

    #[tokio::test]
    async fn a_socket_that_takes_part_or_waits_gets_every_byte_in_order() {
        let mut socket = Gathered::new(Socket {
            take: Some(3),
            stall: true,
            ..Socket::default()
        });
        write(&mut socket, b"abcdefgh").await;
        write(&mut socket, b"ij").await;
        flush(&mut socket).await;
        assert_eq!(socket.io.writes.concat(), b"abcdefghij");
        assert_eq!(socket.io.writes.len(), 4, "3 + 3 + 3 + 1 bytes");
        assert!(socket.held.is_empty());
    }

    #[tokio::test]
    async fn past_the_bound_what_is_held_goes_first_and_a_large_write_passes_through() {
        let mut socket = Gathered::new(Socket::default());
        let small = vec![1u8; 100];
        let near = vec![2u8; GATHER_MAX - 50];
        let large = vec![3u8; GATHER_MAX];
        write(&mut socket, &small).await;
        write(&mut socket, &near).await;
        // 100 + (GATHER_MAX - 50) bytes would pass the bound: the first two leave first.
        assert_eq!(socket.io.writes.len(), 1);
        assert_eq!(socket.io.writes[0], small);
        assert_eq!(socket.held, near);
        write(&mut socket, &large).await;
        assert_eq!(socket.io.writes[1], near);
        assert_eq!(socket.io.writes[2], large, "written as it is, not held");
        assert!(socket.held.is_empty());
        assert!(socket.held.capacity() <= KEEP, "a large buffer is let go");
    }

    #[tokio::test]
    async fn shutting_down_writes_what_is_held_first() {
        let mut socket = Gathered::new(Socket::default());
        write(&mut socket, b"goaway").await;
        poll_fn(|cx| Pin::new(&mut socket).poll_shutdown(cx))
            .await
            .unwrap();
        assert_eq!(socket.io.writes, vec![b"goaway".to_vec()]);
        assert!(socket.io.shut);
    }

    #[tokio::test]
    async fn a_socket_that_takes_nothing_is_an_error_not_a_loop() {
        let mut socket = Gathered::new(Socket {
            take: Some(0),
            ..Socket::default()
        });
        write(&mut socket, b"x").await;
        let error = poll_fn(|cx| Pin::new(&mut socket).poll_flush(cx))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::WriteZero);
    }
}
