//! The stdio transport of an MCP server: the child in a process group of its own, each
//! line it writes bounded before it is decoded, and the whole group ended with the
//! connection.
//!
//! **Bounded lines.** rmcp's line reader drops a line past its limit without decoding
//! it (memory stays within the limit, whatever the server writes), but the request the
//! line answered then waits for an answer that never comes. [`Watched`] reads the same
//! bytes on their way in and tells [`Oversized`] the id of the request an oversized line
//! answers (found near the line's start or at its end, where JSON-RPC writers put it),
//! so that call fails at once as too large.
//!
//! **The group.** The server's children are in its process group; when the connection
//! ends — the server exited, or was stopped or restarted — the group is killed, so a
//! server that crashed leaves nothing of its own running. (A child that made a session
//! or group of its own is beyond it.) The connection ends when the server exits, not
//! only when its stdout closes: a child that inherited the pipe keeps it open.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use process_wrap::tokio::ChildWrapper;
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::watch;

use super::oversized::Oversized;

/// How many bytes of a line's start and end are kept to find the id of an oversized one.
const KEPT: usize = 512;

/// How long a server whose input was closed has to exit before its group is killed.
const EXIT_WAIT: Duration = Duration::from_secs(2);

/// The child's stdout, passed through as it is read, each line's length watched.
pub(super) struct Watched<R> {
    inner: R,
    max: usize,
    /// Bytes of the current line so far.
    length: usize,
    head: Vec<u8>,
    tail: Vec<u8>,
    /// The current line is past `max`, and its id was not found yet.
    over: bool,
    oversized: Arc<Oversized>,
}

impl<R> Watched<R> {
    pub(super) fn new(inner: R, max: usize, oversized: Arc<Oversized>) -> Self {
        Self {
            inner,
            max,
            length: 0,
            head: Vec::with_capacity(KEPT),
            tail: Vec::with_capacity(2 * KEPT),
            over: false,
            oversized,
        }
    }

    fn saw(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let end = bytes.iter().position(|&b| b == b'\n');
            let (part, rest) = match end {
                Some(at) => (&bytes[..at], &bytes[at + 1..]),
                None => (bytes, &[][..]),
            };
            let room = KEPT.saturating_sub(self.head.len());
            self.head.extend_from_slice(&part[..part.len().min(room)]);
            self.tail
                .extend_from_slice(&part[part.len().saturating_sub(KEPT)..]);
            if self.tail.len() > 2 * KEPT {
                self.tail.drain(..self.tail.len() - KEPT);
            }
            let was = self.length;
            self.length += part.len();
            if was <= self.max && self.length > self.max {
                match top_level_id(&self.head) {
                    Some(id) => self.oversized.found(&id),
                    None => self.over = true,
                }
            }
            if end.is_some() {
                if std::mem::take(&mut self.over)
                    && let Some(id) = trailing_id(&self.tail)
                {
                    self.oversized.found(&id);
                }
                self.length = 0;
                self.head.clear();
                self.tail.clear();
            }
            bytes = rest;
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Watched<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let read = buf.filled()[before..].to_vec();
            self.saw(&read);
        }
        polled
    }
}

/// The `id` of the JSON object that `head` begins, when it is among the first members
/// (`{"jsonrpc":"2.0","id":7,...`), as JSON wrote it.
fn top_level_id(head: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(head);
    let mut depth = 0usize;
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth = depth.saturating_sub(1),
            '"' => {
                // A string: at depth 1 it may be the key `id`.
                let start = at + 1;
                let mut end = start;
                let mut escaped = false;
                for (i, c) in chars.by_ref() {
                    match c {
                        _ if escaped => escaped = false,
                        '\\' => escaped = true,
                        '"' => {
                            end = i;
                            break;
                        }
                        _ => {}
                    }
                }
                if depth == 1 && &text[start..end] == "id" {
                    let rest = text[end + 1..].trim_start().strip_prefix(':')?;
                    return scalar(rest);
                }
            }
            _ => {}
        }
    }
    None
}

/// The `id` that ends the JSON object `tail` ends (`...,"id":7}`), as JSON wrote it.
fn trailing_id(tail: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(tail);
    let text = text.trim_end().strip_suffix('}')?;
    let at = text.rfind("\"id\"")?;
    let value = text[at + 4..].trim_start().strip_prefix(':')?.trim();
    (scalar(value)? == value).then(|| value.to_owned())
}

/// The number or string at the start of `text`.
fn scalar(text: &str) -> Option<String> {
    let text = text.trim_start();
    if let Some(string) = text.strip_prefix('"') {
        let end = string.find('"')?;
        return Some(format!("\"{}\"", &string[..end]));
    }
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '-'))
        .unwrap_or(text.len());
    (end > 0).then(|| text[..end].to_owned())
}

/// The transport to a child server: rmcp's line transport over its stdin and (watched)
/// stdout, and the child, whose process group is killed when the transport closes or is
/// dropped.
pub(super) struct ChildTransport {
    lines: AsyncRwTransport<RoleClient, Watched<ChildStdout>, ChildStdin>,
    /// Taken when the transport closes (the watcher then stops).
    child: Arc<Mutex<Option<Box<dyn ChildWrapper>>>>,
    /// Set once the server has exited.
    exited: watch::Receiver<bool>,
    group: Option<i32>,
}

/// Tells `exited` when the child in `child` has exited, on each `SIGCHLD` (no polling);
/// stops once the child is taken.
async fn watch_exit(
    child: Arc<Mutex<Option<Box<dyn ChildWrapper>>>>,
    exited: watch::Sender<bool>,
    mut signals: tokio::signal::unix::Signal,
) {
    loop {
        {
            let mut child = child.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(child) = child.as_mut() else { return };
            if !matches!(child.try_wait(), Ok(None)) {
                let _ = exited.send(true);
                return;
            }
        }
        if signals.recv().await.is_none() {
            return;
        }
    }
}

impl ChildTransport {
    /// Over `child` (spawned as the leader of its own process group, its stdin and stdout
    /// piped), every line it writes bounded to `max_line` bytes.
    pub(super) fn new(
        mut child: Box<dyn ChildWrapper>,
        max_line: usize,
        oversized: Arc<Oversized>,
    ) -> std::io::Result<Self> {
        let missing = |what| std::io::Error::other(format!("its {what} was not piped"));
        let stdout = child.stdout().take().ok_or_else(|| missing("stdout"))?;
        let stdin = child.stdin().take().ok_or_else(|| missing("stdin"))?;
        let group = child.id().and_then(|pid| i32::try_from(pid).ok());
        let lines = AsyncRwTransport::new(Watched::new(stdout, max_line, oversized), stdin)
            .with_max_line_length(max_line);
        // Registered before the first look, so that no exit goes unseen.
        let signals = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())?;
        let child = Arc::new(Mutex::new(Some(child)));
        let (told, exited) = watch::channel(false);
        tokio::spawn(watch_exit(child.clone(), told, signals));
        Ok(Self {
            lines,
            child,
            exited,
            group,
        })
    }

    fn take_child(&self) -> Option<Box<dyn ChildWrapper>> {
        self.child
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    fn kill_group(&mut self) {
        if let Some(group) = self.group.take() {
            // SAFETY: killpg has no memory effects; a group already gone is ESRCH.
            unsafe {
                libc::killpg(group, libc::SIGKILL);
            }
        }
    }
}

impl Transport<RoleClient> for ChildTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.lines.send(item)
    }

    /// The next message; none once the server has exited (what it wrote before is read
    /// first).
    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let mut exited = self.exited.clone();
        tokio::select! {
            biased;
            message = self.lines.receive() => message,
            _ = exited.wait_for(|exited| *exited) => None,
        }
    }

    /// Closes its input, gives it [`EXIT_WAIT`] to exit, and kills its group.
    async fn close(&mut self) -> Result<(), Self::Error> {
        let closed = self.lines.close().await;
        let mut exited = self.exited.clone();
        let _ = tokio::time::timeout(EXIT_WAIT, exited.wait_for(|exited| *exited)).await;
        self.kill_group();
        if let Some(mut child) = self.take_child() {
            let _ = Box::into_pin(child.kill()).await;
        }
        closed
    }
}

impl Drop for ChildTransport {
    fn drop(&mut self) {
        self.kill_group();
        if let Some(mut child) = self.take_child() {
            // Reaped off this thread (the group is killed already).
            tokio::spawn(async move {
                let _ = Box::into_pin(child.kill()).await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::RequestId;

    #[test]
    fn the_id_of_an_answer_is_found_at_its_start_or_its_end() {
        assert_eq!(
            top_level_id(br#"{"jsonrpc":"2.0","id":17,"result":{"content":[{"id":3"#).as_deref(),
            Some("17")
        );
        assert_eq!(
            top_level_id(br#"{"result":{"content":[{"type":"text","id":3,"text":"xx"#),
            None
        );
        assert_eq!(
            top_level_id(br#"{"id":"a-1","jsonrpc":"2.0""#).as_deref(),
            Some("\"a-1\"")
        );
        assert_eq!(
            trailing_id(br#"xxxx"}]},"jsonrpc":"2.0","id":5}"#).as_deref(),
            Some("5")
        );
        assert_eq!(trailing_id(br#"xxxx","id":5}]}}"#), None);
    }

    #[tokio::test]
    async fn a_line_past_the_bound_tells_the_call_it_answers_and_no_other() {
        let oversized = Arc::new(Oversized::default());
        let mut big = oversized.listen(&RequestId::Number(2));
        let mut small = oversized.listen(&RequestId::Number(1));
        let mut lines = br#"{"jsonrpc":"2.0","id":1,"result":{}}"#.to_vec();
        lines.push(b'\n');
        lines.extend_from_slice(br#"{"result":{"content":[{"text":""#);
        lines.extend(std::iter::repeat_n(b'x', 10_000));
        lines.extend_from_slice(b"\"}]},\"jsonrpc\":\"2.0\",\"id\":2}\n");
        let mut watched = Watched::new(&lines[..], 1_000, oversized.clone());
        let mut read = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut watched, &mut read)
            .await
            .unwrap();
        assert_eq!(read, lines, "passed through unchanged");
        tokio::time::timeout(Duration::from_secs(1), big.heard())
            .await
            .expect("the call whose answer was too large is told");
        assert!(
            tokio::time::timeout(Duration::from_millis(20), small.heard())
                .await
                .is_err()
        );
    }
}
