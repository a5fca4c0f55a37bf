//! A real HTTP/1.1 server on 127.0.0.1 that answers each connection with the next scripted
//! reply and records what it was sent, so provider tests exercise reqwest, the retry loop and
//! the SSE parser exactly as production does.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One scripted answer.
pub(super) struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    /// Written one by one with a flush in between, so the client sees them as separate reads.
    pieces: Vec<String>,
}

impl Reply {
    /// A 200 `text/event-stream` answer made of `pieces` (the connection closes after them).
    pub(super) fn sse(pieces: &[&str]) -> Reply {
        Reply {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            pieces: pieces.iter().map(|p| (*p).to_owned()).collect(),
        }
    }

    /// A `data: <json>` event per item, then nothing (the caller adds any end marker).
    pub(super) fn sse_data(events: &[Value]) -> Reply {
        let pieces: Vec<String> = events.iter().map(|e| format!("data: {e}\n\n")).collect();
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        Reply::sse(&refs)
    }

    /// An answer with `status` and a plain body.
    pub(super) fn status(status: u16, body: &str) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            pieces: vec![body.to_owned()],
        }
    }

    /// The same answer with one more header.
    pub(super) fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// What the server received.
#[derive(Debug, Clone)]
pub(super) struct Recorded {
    /// Path with query, e.g. `/v1/chat/completions`.
    pub(super) target: String,
    /// Header names lower-cased.
    pub(super) headers: HashMap<String, String>,
    pub(super) body: Value,
}

/// A running fake provider.
pub(super) struct FakeServer {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl FakeServer {
    /// Listens on a free port and answers connections with `replies` in order (a 599 once
    /// they run out, which fails any test that did not expect another request).
    pub(super) async fn start(replies: Vec<Reply>) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let replies = Arc::new(Mutex::new(VecDeque::from(replies)));
        let recorded = Arc::clone(&requests);
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let reply = replies
                    .lock()
                    .expect("replies")
                    .pop_front()
                    .unwrap_or_else(|| Reply::status(599, "no more scripted replies"));
                tokio::spawn(serve(conn, reply, Arc::clone(&recorded)));
            }
        });
        FakeServer { addr, requests }
    }

    /// `http://127.0.0.1:<port>/v1`.
    pub(super) fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The requests received so far.
    pub(super) fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().expect("requests").clone()
    }
}

async fn serve(mut conn: TcpStream, reply: Reply, recorded: Arc<Mutex<Vec<Recorded>>>) {
    let Some(request) = read_request(&mut conn).await else {
        return;
    };
    recorded.lock().expect("recorded").push(request);
    let mut head = format!("HTTP/1.1 {} Scripted\r\n", reply.status);
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    // No Content-Length: the body ends when the connection closes, which is also how a cut
    // stream looks to the client.
    head.push_str("connection: close\r\n\r\n");
    if conn.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    for piece in &reply.pieces {
        if conn.write_all(piece.as_bytes()).await.is_err() || conn.flush().await.is_err() {
            return;
        }
        tokio::task::yield_now().await;
    }
    let _ = conn.shutdown().await;
}

async fn read_request(conn: &mut TcpStream) -> Option<Recorded> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos;
        }
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let target = lines.next()?.split(' ').nth(1)?.to_owned();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&body[..length]).unwrap_or(Value::Null);
    Some(Recorded {
        target,
        headers,
        body,
    })
}
