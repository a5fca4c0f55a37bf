//! What is loaded: a server at `--url` (loopback only unless `--allow-remote`), or the
//! real server started in this process on 127.0.0.1 with the binary's default agent and
//! an embedded SQLite store in a temporary directory.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agent_a2a::cli::{Agent, SkillSource};
use agent_a2a::config::Settings;
use agent_a2a::runtime::ToolRoutingExecutor;
use anyhow::{Context, bail};

/// How long the check that the target listens may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Checks that `url` may be loaded and that something listens there.
pub async fn check_url(url: &reqwest::Url, allow_remote: bool) -> anyhow::Result<()> {
    if !matches!(url.scheme(), "http" | "https") {
        bail!("--url {url}: only http:// and https:// are supported");
    }
    let host = url
        .host_str()
        .with_context(|| format!("--url {url} has no host"))?;
    let port = url
        .port_or_known_default()
        .with_context(|| format!("--url {url} has no port"))?;
    // IPv6 literals come bracketed in URLs; lookup_host wants them bare.
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((bare, port))
        .await
        .with_context(|| format!("cannot resolve {host}"))?
        .collect();
    if addrs.is_empty() {
        bail!("{host} resolves to no address");
    }
    if !allow_remote && !addrs.iter().all(|a| a.ip().is_loopback()) {
        bail!(
            "refusing to load {host}: it is not a loopback address. A load test can hurt a \
             server; pass --allow-remote if that server is yours to load"
        );
    }
    match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(&addrs[..])).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => bail!("nothing answers at {host}:{port}: {e}"),
        Err(_) => bail!("{host}:{port} did not accept a connection within {CONNECT_TIMEOUT:?}"),
    }
}

/// The server started in this process; stopped by [`InProcessServer::stop`].
pub struct InProcessServer {
    pub url: reqwest::Url,
    handle: agent_a2a::startup::Handles,
    thread: std::thread::JoinHandle<()>,
    /// Holds the data directory until the server is gone.
    data_dir: tempfile::TempDir,
}

impl InProcessServer {
    /// Starts the server on its own thread (an actix `System`), so it shares the
    /// process but not the load generator's tokio runtime; with `grpc`, its gRPC binding
    /// too (on a free port the card names).
    pub fn start(grpc: bool) -> anyhow::Result<Self> {
        let data_dir = tempfile::Builder::new()
            .prefix("a2a-load-")
            .tempdir()
            .context("cannot create the data directory of the in-process server")?;
        // Settings from the defaults alone, not ./config.toml or the environment: the
        // run must not depend on where it is started (DATABASE_URL would pick Postgres).
        let mut settings = Settings::default();
        // One anonymous tenant without rate limits: the load is the point.
        settings.auth.enabled = false;
        settings.server.bind = "127.0.0.1:0".into();
        settings.server.grpc_bind = if grpc {
            "127.0.0.1:0".into()
        } else {
            String::new()
        };
        settings.store.data_dir = data_dir.path().to_path_buf();
        settings.store.database_url = String::new();
        // The push scenario's receiver listens on loopback.
        settings.push.allow_loopback = true;
        // Quiet unless RUST_LOG says otherwise: the report goes to the same terminal.
        settings.log.level = "error".into();
        agent_a2a::telemetry::init_logging(&settings.log);
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("a2a-server".into())
            .spawn(move || {
                actix_web::rt::System::new().block_on(async move {
                    let agent = Agent {
                        skills: SkillSource::Configured,
                        ..Agent::new(Arc::new(ToolRoutingExecutor))
                    };
                    let running = match agent_a2a::startup::start(settings, agent).await {
                        Ok(running) => running,
                        Err(e) => {
                            // Ignored error: main gave up waiting.
                            let _ = started_tx.send(Err(e.to_string()));
                            return;
                        }
                    };
                    let _ = started_tx.send(Ok((running.addr, running.handles.clone())));
                    let runtime = running.runtime.clone();
                    if let Err(e) = running.run().await {
                        eprintln!("load: the in-process server failed: {e}");
                    }
                    runtime.lifecycle().shutdown();
                });
            })
            .context("cannot start the server thread")?;
        let (addr, handle) = started_rx
            .recv()
            .context("the server thread ended before the server started")?
            .map_err(|e| anyhow::anyhow!("the in-process server did not start: {e}"))?;
        let url = reqwest::Url::parse(&format!("http://{addr}/"))
            .context("the server's own address is not a URL")?;
        Ok(Self {
            url,
            handle,
            thread,
            data_dir,
        })
    }

    /// Stops the server gracefully and removes its data.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.handle.stop(true).await;
        tokio::task::spawn_blocking(move || self.thread.join())
            .await
            .context("waiting for the server thread")?
            .map_err(|_| anyhow::anyhow!("the server thread panicked"))?;
        self.data_dir
            .close()
            .context("cannot remove the in-process server's data directory")
    }
}
