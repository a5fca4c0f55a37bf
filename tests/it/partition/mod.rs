//! Network faults between the project's own hosts: a network namespace and a veth pair
//! (root, private test addresses; nothing leaves the machine), a fault made by setting
//! the link down, and everything removed when the test ends.

mod cluster;
mod lab;

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agent_a2a::cluster::forward::Peer;

/// A namespace `a2a-<pid>` joined to this one by a veth pair: `10.231.<n>.1` here,
/// `10.231.<n>.2` there. Removed when dropped.
struct TestNet {
    name: String,
    host_link: String,
    peer_link: String,
    here: String,
    there: String,
    children: Vec<Child>,
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl TestNet {
    /// The namespace, or `None` (outside CI) where this process may not make one.
    fn new() -> Option<TestNet> {
        let pid = std::process::id();
        let n = pid % 250 + 1;
        let net = TestNet {
            name: format!("a2a-{pid}"),
            host_link: format!("a2a{pid}h"),
            peer_link: format!("a2a{pid}p"),
            here: format!("10.231.{n}.1"),
            there: format!("10.231.{n}.2"),
            children: Vec::new(),
        };
        let peer_link = net.peer_link.clone();
        let made = ip(&["netns", "add", &net.name])
            && ip(&["netns", "exec", &net.name, "ip", "link", "set", "lo", "up"])
            && ip(&[
                "link",
                "add",
                &net.host_link,
                "type",
                "veth",
                "peer",
                "name",
                &peer_link,
            ])
            && ip(&["link", "set", &peer_link, "netns", &net.name])
            && ip(&[
                "addr",
                "add",
                &format!("{}/30", net.here),
                "dev",
                &net.host_link,
            ])
            && ip(&["link", "set", &net.host_link, "up"])
            && ip(&[
                "netns",
                "exec",
                &net.name,
                "ip",
                "addr",
                "add",
                &format!("{}/30", net.there),
                "dev",
                &peer_link,
            ])
            && ip(&[
                "netns", "exec", &net.name, "ip", "link", "set", &peer_link, "up",
            ]);
        if made {
            return Some(net);
        }
        drop(net);
        let why = "cannot make a network namespace (needs root and iproute2)";
        if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
            panic!("{why}");
        }
        eprintln!("skipped: {why}");
        None
    }

    /// Runs `program args` inside the namespace, its stdout piped.
    fn spawn(&mut self, program: &str, args: &[&str]) -> &mut Child {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.name, program])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("a process in the namespace");
        self.children.push(child);
        self.children.last_mut().unwrap()
    }

    /// Cuts the namespace off: its end of the link down, so what this side sends is
    /// dropped on the way — nothing answers and nothing resets, as in a partition. (This
    /// side's end stays up: with it down the kernel has no route to send on, and counts
    /// no keepalive probe as unanswered.)
    fn cut(&self) {
        let down = [
            "netns",
            "exec",
            &self.name,
            "ip",
            "link",
            "set",
            &self.peer_link,
            "down",
        ];
        assert!(ip(&down));
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        ip(&["link", "del", &self.host_link]);
        ip(&["netns", "del", &self.name]);
    }
}

/// An HTTP server that says `asked` on its stdout when a request arrives, then holds
/// the answer for a minute (a blocking send whose turn takes its time).
const SLOW_SERVER: &str = r#"
import http.server, sys, time
class Slow(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        print("asked", flush=True)
        time.sleep(60)
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.HTTPServer((sys.argv[1], int(sys.argv[2])), Slow)
print("listening", flush=True)
server.serve_forever()
"#;

/// A forward to a peer cut off by the network in the middle of a call — its request
/// sent, its answer awaited — fails within `cluster.peer_dead_after_ms`, not at the
/// forward timeout or when the network heals.
#[actix_web::test]
async fn a_forward_to_a_peer_cut_off_mid_call_fails_within_peer_dead_after() {
    let Some(mut net) = TestNet::new() else {
        return;
    };
    let there = net.there.clone();
    let server = net.spawn("python3", &["-c", SLOW_SERVER, &there, "18080"]);
    // Its lines, read off this (single-threaded) runtime.
    let stdout = server.stdout.take().unwrap();
    let (tell, mut said) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tell.send(line);
        }
    });
    let next = tokio::time::timeout(Duration::from_secs(20), said.recv());
    assert_eq!(next.await.unwrap().as_deref(), Some("listening"));
    let peer = Peer::new(
        "secret",
        Duration::from_secs(300),
        Duration::from_millis(2_000),
    )
    .unwrap();
    let base = format!("http://{there}:18080");
    let peer = std::sync::Arc::new(peer);
    let (calling, to) = (peer.clone(), base.clone());
    let call = actix_web::rt::spawn(async move {
        calling
            .call::<_, serde_json::Value>(&to, "node-a", "/forward", &serde_json::json!({}))
            .await
    });
    // The request is there: the peer is working on it when the network goes.
    let next = tokio::time::timeout(Duration::from_secs(20), said.recv());
    assert_eq!(next.await.unwrap().as_deref(), Some("asked"));
    net.cut();
    let cut = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(15), call).await;
    let waited = cut.elapsed();
    let outcome = outcome.expect("the forward ended while the peer was cut off");
    assert!(
        matches!(
            outcome,
            Ok(Err(agent_a2a::error::Error::Unavailable { .. }))
        ),
        "{outcome:?}"
    );
    assert!(
        waited < Duration::from_secs(6),
        "failed {waited:?} after the cut"
    );
    // Found unreachable: the next forward to it fails at once, not after another
    // connection timeout.
    let again = Instant::now();
    let next = peer
        .call::<_, serde_json::Value>(&base, "node-a", "/forward", &serde_json::json!({}))
        .await;
    let waited = again.elapsed();
    assert!(
        matches!(next, Err(agent_a2a::error::Error::Unavailable { .. })),
        "{next:?}"
    );
    assert!(
        waited < Duration::from_millis(200),
        "the next forward failed {waited:?} after it began"
    );
}
