//! A unary answer served by the gRPC server's HTTP/2 connection ([`http2`]) to
//! the official generated client, with the server's socket recording each write: the
//! answer's frames leave together.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use a2a_pb::proto::{self, a2a_service_client::A2aServiceClient};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};
use tonic::server::Grpc;
use tonic::transport::Endpoint;

use super::super::codec::{A2aCodec, Decoded};
use super::super::http2;

type Writes = Arc<Mutex<Vec<Vec<u8>>>>;

/// The server's end of the connection, vectored like a TCP socket, recording the bytes
/// each write took.
struct Recorder {
    io: DuplexStream,
    writes: Writes,
}

impl AsyncRead for Recorder {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Recorder {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written {
            this.writes.lock().unwrap().push(buf[..n].to_vec());
        }
        written
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let all: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        self.poll_write(cx, &all)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// An HTTP/2 frame as written: its type, flags and stream, and the writes holding its
/// first and last byte.
#[derive(Debug)]
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    writes: (usize, usize),
}

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const END_STREAM: u8 = 1;

/// The frames the server wrote, after the connection preface's.
fn frames(writes: &[Vec<u8>]) -> Vec<Frame> {
    let ends: Vec<usize> = writes
        .iter()
        .scan(0, |end, w| {
            *end += w.len();
            Some(*end)
        })
        .collect();
    let write_of = |offset: usize| ends.iter().position(|&end| offset < end).unwrap();
    let bytes = writes.concat();
    let mut frames = Vec::new();
    let mut at = 0;
    while at + 9 <= bytes.len() {
        let head = &bytes[at..at + 9];
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        frames.push(Frame {
            kind: head[3],
            flags: head[4],
            stream,
            writes: (write_of(at), write_of(at + 9 + len - 1)),
        });
        at += 9 + len;
    }
    frames
}

/// Answers one `GetTask` call with a task whose id is `id_len` bytes, and returns the
/// frames the server wrote.
async fn serve_one_answer(id_len: usize) -> Vec<Frame> {
    let (server_end, client_end) = tokio::io::duplex(1 << 20);
    let writes = Writes::default();
    let service = hyper::service::service_fn(move |request| async move {
        let mut grpc = Grpc::new(A2aCodec::<proto::Task, proto::GetTaskRequest>::default());
        let answer = tower::service_fn(
            move |_: tonic::Request<Decoded<proto::GetTaskRequest>>| async move {
                Ok::<_, tonic::Status>(tonic::Response::new(proto::Task {
                    id: "t".repeat(id_len),
                    ..Default::default()
                }))
            },
        );
        Ok::<_, std::convert::Infallible>(grpc.unary(answer, request).await)
    });
    let socket = Recorder {
        io: server_end,
        writes: writes.clone(),
    };
    actix_web::rt::spawn(http2(socket, service, 8));
    let client_end = Mutex::new(Some(client_end));
    let channel = Endpoint::from_static("http://grpc.test")
        .connect_with_connector(tower::service_fn(move |_| {
            let io = client_end.lock().unwrap().take();
            async move {
                io.map(TokioIo::new)
                    .ok_or(io::Error::other("one connection"))
            }
        }))
        .await
        .unwrap();
    let task = A2aServiceClient::new(channel)
        .get_task(proto::GetTaskRequest {
            id: "t-1".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(task.id.len(), id_len);
    frames(&writes.lock().unwrap())
}

#[actix_web::test]
async fn a_small_unary_answer_leaves_in_one_write() {
    // 600 bytes: past h2's 256 at which a vectored socket gets the payload apart and a
    // flush before the trailers.
    let frames = serve_one_answer(600).await;
    let answer: Vec<&Frame> = frames.iter().filter(|f| f.stream == 1).collect();
    let kinds: Vec<(u8, u8)> = answer
        .iter()
        .map(|f| (f.kind, f.flags & END_STREAM))
        .collect();
    assert_eq!(
        kinds,
        [(HEADERS, 0), (DATA, 0), (HEADERS, END_STREAM)],
        "{frames:?}"
    );
    let first = answer[0].writes.0;
    assert!(
        answer.iter().all(|f| f.writes == (first, first)),
        "headers, data and trailers in one write: {frames:?}"
    );
}

#[actix_web::test]
async fn a_larger_answer_leaves_with_its_headers_in_one_write() {
    // 5 000 bytes: h2 keeps the payload apart from its buffer and flushes before the
    // trailers; the headers and the whole payload still leave together.
    let frames = serve_one_answer(5_000).await;
    let answer: Vec<&Frame> = frames.iter().filter(|f| f.stream == 1).collect();
    assert_eq!(answer[0].kind, HEADERS);
    assert_eq!(answer[1].kind, DATA);
    let first = answer[0].writes.0;
    assert_eq!(answer[0].writes, (first, first), "{frames:?}");
    assert_eq!(answer[1].writes, (first, first), "{frames:?}");
}
