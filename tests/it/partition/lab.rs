//! A private network for the partition suite: a switch (a network namespace holding a
//! bridge), a namespace per host plugged into it by a veth pair, addresses `10.232.<n>.*`
//! that nothing outside the machine sees; a private Postgres, agent-a2a nodes and HAProxy
//! in their own namespaces. Faults are made where a network makes them:
//!
//! - a **cut** between two hosts drops, in each host's namespace, what arrives from the
//!   other (`iptables -A INPUT -s … -j DROP`): nothing answers and nothing resets;
//! - an **isolated** host has its switch port set down;
//! - **loss** drops arriving packets at random (`iptables … -m statistic`);
//! - **latency**: the kernel has no `sch_netem`, so Postgres listens on its namespace's
//!   loopback and is reached through a delay line beside it (a relay that holds each
//!   chunk, in each direction, for the delay it is told on its standard input).
//!
//! Dropping the lab kills every process and deletes every namespace (their links and
//! firewall rules go with them).

use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The Postgres address's last byte, the balancer's, and the first node's.
pub(super) const DB: u8 = 10;
pub(super) const BALANCER: u8 = 20;
pub(super) const FIRST_NODE: u8 = 11;
/// This host's (the test's, the clients') address on the switch.
const HOST: u8 = 1;

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

pub(super) struct Lab {
    prefix: String,
    subnet: u8,
    switch: String,
    namespaces: Vec<String>,
    children: Vec<Child>,
    /// Postgres' data directory and the nodes' data directories.
    pub(super) dir: tempfile::TempDir,
}

impl Lab {
    /// The switch and this host's port on it, or `None` outside CI where this process
    /// may not make namespaces (root and iproute2).
    pub(super) fn new() -> Option<Lab> {
        let pid = std::process::id();
        // Not `a2a<pid>`, which the peer test's namespace takes in the same process.
        let prefix = format!("a2l{pid}");
        let mut lab = Lab {
            switch: format!("{prefix}-sw"),
            subnet: (pid % 200 + 20) as u8,
            prefix,
            namespaces: Vec::new(),
            children: Vec::new(),
            dir: tempfile::tempdir().unwrap(),
        };
        match lab.make_switch() {
            Ok(()) => Some(lab),
            Err(e) => {
                drop(lab);
                let why = format!("cannot make the partition suite's network: {e}");
                if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
                    panic!("{why}");
                }
                eprintln!("skipped: {why}");
                None
            }
        }
    }

    fn make_switch(&mut self) -> Result<(), String> {
        let switch = self.switch.clone();
        run("ip", &["netns", "add", &switch])?;
        self.namespaces.push(switch.clone());
        run(
            "ip",
            &["-n", &switch, "link", "add", "br0", "type", "bridge"],
        )?;
        run("ip", &["-n", &switch, "link", "set", "br0", "up"])?;
        // This host: its end in the root namespace (a name unique on the machine).
        let here = format!("{}h", self.prefix);
        run(
            "ip",
            &[
                "link", "add", &here, "type", "veth", "peer", "name", "p-host", "netns", &switch,
            ],
        )?;
        run(
            "ip",
            &[
                "-n", &switch, "link", "set", "p-host", "master", "br0", "up",
            ],
        )?;
        run("ip", &["addr", "add", &self.cidr(HOST), "dev", &here])?;
        run("ip", &["link", "set", &here, "up"])
    }

    pub(super) fn addr(&self, host: u8) -> String {
        format!("10.232.{}.{host}", self.subnet)
    }

    fn cidr(&self, host: u8) -> String {
        format!("{}/24", self.addr(host))
    }

    fn namespace(&self, role: &str) -> String {
        format!("{}-{role}", self.prefix)
    }

    /// A namespace for `role` plugged into the switch as `host` (its port `p-<role>`).
    pub(super) fn host(&mut self, role: &str, host: u8) -> Result<String, String> {
        let ns = self.namespace(role);
        run("ip", &["netns", "add", &ns])?;
        self.namespaces.push(ns.clone());
        let port = format!("p-{role}");
        run(
            "ip",
            &[
                "link",
                "add",
                "eth0",
                "netns",
                &ns,
                "type",
                "veth",
                "peer",
                "name",
                &port,
                "netns",
                &self.switch,
            ],
        )?;
        run(
            "ip",
            &[
                "-n",
                &self.switch,
                "link",
                "set",
                &port,
                "master",
                "br0",
                "up",
            ],
        )?;
        run(
            "ip",
            &["-n", &ns, "addr", "add", &self.cidr(host), "dev", "eth0"],
        )?;
        run("ip", &["-n", &ns, "link", "set", "eth0", "up"])?;
        run("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// `program args` in `role`'s namespace, its standard streams as given.
    pub(super) fn command(&self, role: &str, program: &str) -> Command {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.namespace(role), program])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    }

    /// Keeps `child` to kill when the lab goes.
    pub(super) fn keep(&mut self, child: Child) -> &mut Child {
        self.children.push(child);
        self.children.last_mut().unwrap()
    }

    /// What arrives at `role` from `from` is dropped (`add`), or no longer (`!add`).
    pub(super) fn drop_from(&self, role: &str, from: &str, add: bool) {
        let action = if add { "-A" } else { "-D" };
        let ns = self.namespace(role);
        let rule = [
            "netns", "exec", &ns, "iptables", "-w", action, "INPUT", "-s", from, "-j", "DROP",
        ];
        run("ip", &rule).unwrap();
    }

    /// A share `p` of what arrives at `role` from `from` is dropped (`add`), or no longer.
    pub(super) fn lose_from(&self, role: &str, from: &str, p: f64, add: bool) {
        let action = if add { "-A" } else { "-D" };
        let ns = self.namespace(role);
        let p = format!("{p}");
        let rule = [
            "netns",
            "exec",
            &ns,
            "iptables",
            "-w",
            action,
            "INPUT",
            "-s",
            from,
            "-m",
            "statistic",
            "--mode",
            "random",
            "--probability",
            &p,
            "-j",
            "DROP",
        ];
        run("ip", &rule).unwrap();
    }

    /// Cuts `a` and `b` apart (`cut`), or heals the cut.
    pub(super) fn cut(&self, a: (&str, u8), b: (&str, u8), cut: bool) {
        self.drop_from(a.0, &self.addr(b.1), cut);
        self.drop_from(b.0, &self.addr(a.1), cut);
    }

    /// `role`'s switch port up or down: down, nothing reaches it and nothing leaves it.
    pub(super) fn port(&self, role: &str, up: bool) {
        let port = format!("p-{role}");
        let state = if up { "up" } else { "down" };
        run("ip", &["-n", &self.switch, "link", "set", &port, state]).unwrap();
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = run("ip", &["link", "del", &format!("{}h", self.prefix)]);
        for ns in self.namespaces.drain(..).rev() {
            let _ = run("ip", &["netns", "del", &ns]);
        }
    }
}

/// The lines a child writes to `stream`, kept; `marker` told once when one contains it.
pub(super) fn collect_lines(
    stream: impl std::io::Read + Send + 'static,
    marker: &'static str,
) -> (Arc<Mutex<Vec<String>>>, std::sync::mpsc::Receiver<()>) {
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let told = collect_into(stream, marker, lines.clone());
    (lines, told)
}

/// [`collect_lines`] into `kept`.
pub(super) fn collect_into(
    stream: impl std::io::Read + Send + 'static,
    marker: &'static str,
    kept: Arc<Mutex<Vec<String>>>,
) -> std::sync::mpsc::Receiver<()> {
    let (tell, told) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut tell = Some(tell);
        for line in std::io::BufReader::new(stream)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains(marker)
                && let Some(tell) = tell.take()
            {
                let _ = tell.send(());
            }
            kept.lock().unwrap().push(line);
        }
    });
    told
}

/// Holds each chunk for the delay last written to its standard input (`delay <ms>`), in
/// each direction, in order.
const DELAY_LINE: &str = r#"
import asyncio, sys, threading
delay = [0.0]
def control():
    for line in sys.stdin:
        word = line.split()
        if len(word) == 2 and word[0] == "delay":
            delay[0] = float(word[1]) / 1000.0
threading.Thread(target=control, daemon=True).start()
async def pipe(reader, writer):
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()
    async def feed():
        try:
            while True:
                data = await reader.read(65536)
                queue.put_nowait((loop.time() + delay[0], data))
                if not data:
                    return
        except Exception:
            queue.put_nowait((0.0, b""))
    async def drain():
        try:
            while True:
                due, data = await queue.get()
                if due > loop.time():
                    await asyncio.sleep(due - loop.time())
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        except Exception:
            pass
        writer.close()
    await asyncio.gather(feed(), drain())
async def serve(client_r, client_w):
    try:
        server_r, server_w = await asyncio.open_connection(sys.argv[3], int(sys.argv[4]))
    except Exception:
        client_w.close()
        return
    await asyncio.gather(pipe(client_r, server_w), pipe(server_r, client_w))
async def main():
    server = await asyncio.start_server(serve, sys.argv[1], int(sys.argv[2]))
    print("listening", flush=True)
    await server.serve_forever()
asyncio.run(main())
"#;

/// The private Postgres: its URL (through the delay line) and the line's control.
pub(super) struct Postgres {
    pub(super) url: String,
    delay: ChildStdin,
}

impl Postgres {
    /// Every chunk between the nodes and Postgres held `ms` each way from now on.
    pub(super) fn delay(&mut self, ms: u64) {
        writeln!(self.delay, "delay {ms}").unwrap();
        self.delay.flush().unwrap();
    }
}

fn postgres_bin() -> std::path::PathBuf {
    let mut versions: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("Postgres' server programs under /usr/lib/postgresql (.ci/run installs them)")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .collect();
    versions.sort();
    let version = versions.last().expect("a Postgres version");
    std::path::PathBuf::from(format!("/usr/lib/postgresql/{version}/bin"))
}

impl Lab {
    /// A Postgres of the lab's own in namespace `db` (durability off: it is never
    /// killed, and every write is still checked from it), with database `a2a`.
    pub(super) async fn postgres(&mut self) -> Postgres {
        self.host("db", DB).unwrap();
        let bin = postgres_bin();
        let data = self.dir.path().join("pg");
        std::fs::create_dir(&data).unwrap();
        run("chown", &["postgres:", data.to_str().unwrap()]).unwrap();
        run(
            "runuser",
            &[
                "-u",
                "postgres",
                "--",
                bin.join("initdb").to_str().unwrap(),
                "-D",
                data.to_str().unwrap(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        )
        .unwrap();
        let mut server = self.command("db", "runuser");
        server
            .args(["-u", "postgres", "--"])
            .arg(bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "port=5432"])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", data.display()))
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "max_connections=300"]);
        let server = server.spawn().expect("postgres");
        self.keep(server);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut check = self.command("db", bin.join("pg_isready").to_str().unwrap());
            check.args(["-q", "-h", "127.0.0.1", "-p", "5432"]);
            if check.status().is_ok_and(|s| s.success()) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the lab's Postgres did not start"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let db = self.addr(DB);
        let mut relay = self.command("db", "python3");
        relay
            .args(["-c", DELAY_LINE, &db, "5432", "127.0.0.1", "5432"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let relay = self.keep(relay.spawn().expect("python3"));
        let delay = relay.stdin.take().unwrap();
        let (_, listening) = collect_lines(relay.stdout.take().unwrap(), "listening");
        listening
            .recv_timeout(Duration::from_secs(20))
            .expect("the delay line listens");
        let admin = format!("postgres://postgres@{db}:5432/postgres");
        let (client, connection) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
            .await
            .expect("the lab's Postgres");
        actix_web::rt::spawn(connection);
        client.batch_execute("CREATE DATABASE a2a").await.unwrap();
        Postgres {
            url: format!("postgres://postgres@{db}:5432/a2a"),
            delay,
        }
    }
}
