//! One accepted HTTP connection. A connection from a trusted proxy may begin with a PROXY
//! protocol v2 header (`service::client_addr`), read before any HTTP byte; the client it
//! names rides with the connection into every request's connection data
//! ([`ProxiedClient`]), where the gate finds it.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use actix_web::rt::net::TcpStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The TCP stream, and the client its PROXY header named.
pub(super) struct Connection {
    stream: TcpStream,
    proxied: Option<SocketAddr>,
}

impl Connection {
    pub(super) fn new(stream: TcpStream, proxied: Option<SocketAddr>) -> Self {
        Self { stream, proxied }
    }

    /// The client named by the connection's PROXY header, if any.
    pub(super) fn proxied(&self) -> Option<SocketAddr> {
        self.proxied
    }
}

/// A request's connection data: the client a trusted proxy named in the PROXY header.
#[derive(Debug, Clone, Copy)]
pub(super) struct ProxiedClient(pub SocketAddr);

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
