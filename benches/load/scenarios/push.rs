//! `push`: each operation is a `SendMessage` registering a push-notification config
//! whose receiver is a webhook this generator runs on loopback; what is measured is the
//! events the server's outbox delivers there.
//!
//! The sends run as in `send` (closed or open loop, `--connections`). The receiver notes
//! when each event (`X-A2A-Event-Id: <taskId>:<seq>`) arrives. After the last send the
//! run waits (at most `--timeout`) until the outbox has delivered every event the
//! measured sends caused, so the count is of events delivered, not of events still owed.
//! Throughput is those events over the time from the end of the warm-up to the last of
//! them; the latency is from a send's intended start to each of its events' arrival.
//! The server must accept loopback receivers (`push.allow_loopback`; the in-process
//! server does).
//!
//! `--push-receivers N` spreads the configs over N receivers (ports of their own), in
//! turn; `--push-dead N` adds N receivers that take connections and never answer: what
//! is measured then is how the live receivers fare beside them (their events only; the
//! dead ones' tasks are counted apart).

use std::collections::HashMap;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use serde_json::json;
use tokio::sync::watch;

use crate::client::Client;
use crate::driver::{self, Measured, Operation, Plan};
use crate::progress::Live;
use crate::protocol::{ErrorKind, Reply};
use crate::stats::Stats;

/// The latency of one delivered event.
pub const DELIVERY: &str = "delivery (send → event received)";

/// When each task's events arrived, by task id.
type Arrivals = Arc<Mutex<HashMap<String, Vec<Instant>>>>;

pub struct Push {
    pub client: Arc<Client>,
    pub text: Arc<str>,
    /// Live receivers, and receivers that never answer.
    pub receivers: usize,
    pub dead: usize,
}

impl Push {
    pub async fn run(
        &self,
        plan: &Plan,
        live: Arc<Live>,
        stop: watch::Receiver<bool>,
    ) -> anyhow::Result<Measured> {
        let arrivals: Arrivals = Arc::default();
        let mut receivers = Vec::new();
        for _ in 0..self.receivers.max(1) {
            receivers.push(Receiver::start(arrivals.clone())?);
        }
        // Listening, never accepting: connections wait in the kernel's backlog, requests
        // are never answered.
        let dead: Vec<TcpListener> = (0..self.dead)
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<Result<_, _>>()?;
        let mut urls: Vec<(String, bool)> =
            receivers.iter().map(|r| (r.url.clone(), true)).collect();
        for listener in &dead {
            urls.push((format!("http://{}/hook", listener.local_addr()?), false));
        }
        let urls: Arc<[(String, bool)]> = urls.into();
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let to_dead = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let measure_from = Instant::now() + plan.warmup;
        let workers = (0..plan.connections)
            .map(|_| PushOp {
                client: self.client.clone(),
                text: self.text.clone(),
                urls: urls.clone(),
                next: next.clone(),
                sent: sent.clone(),
                to_dead: to_dead.clone(),
                measure_from,
            })
            .collect();
        let sends = driver::run(plan, workers, live, stop).await;
        let sends_ended = Instant::now();
        // Every measured task's events, delivered or not within the timeout.
        let deadline = Instant::now() + plan.timeout;
        let mut quiet_since = Instant::now();
        let mut last_count = 0;
        loop {
            let count: usize = arrivals.lock().unwrap().values().map(Vec::len).sum();
            if count != last_count {
                last_count = count;
                quiet_since = Instant::now();
            }
            // Settled: nothing new for a second (the outbox polls at least that often).
            if quiet_since.elapsed() >= Duration::from_secs(1) || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for receiver in receivers {
            receiver.stop().await;
        }
        drop(dead);

        let mut stats = Stats::new();
        let sent = std::mem::take(&mut *sent.lock().unwrap());
        let arrivals = std::mem::take(&mut *arrivals.lock().unwrap());
        let mut last = measure_from;
        let mut tasks_without_events = 0;
        // Whether the deliveries kept pace: those that arrived while the sends ran, and
        // how long the rest took once they stopped.
        let mut during = 0u64;
        let mut after = 0u64;
        for (task, started) in &sent {
            match arrivals.get(task) {
                Some(times) => {
                    for at in times {
                        stats.success("event delivered");
                        stats.latency(DELIVERY, at.saturating_duration_since(*started));
                        last = last.max(*at);
                        if *at <= sends_ended {
                            during += 1;
                        } else {
                            after += 1;
                        }
                    }
                }
                None => tasks_without_events += 1,
            }
        }
        stats.count("tasks sent (measured)", sent.len() as u64);
        let sending = sends_ended
            .saturating_duration_since(measure_from)
            .as_secs_f64();
        if sending > 0.0 {
            stats.count(
                "events delivered per second while the sends ran",
                (during as f64 / sending).round() as u64,
            );
        }
        stats.count("events that arrived after the sends stopped", after);
        stats.count(
            "ms from the last send to the last event",
            last.saturating_duration_since(sends_ended).as_millis() as u64,
        );
        let to_dead = to_dead.load(std::sync::atomic::Ordering::Relaxed);
        if to_dead > 0 {
            stats.count("tasks sent to receivers that never answer", to_dead);
        }
        if tasks_without_events > 0 {
            stats.count("tasks none of whose events arrived", tasks_without_events);
        }
        stats.count("sends that failed", sends.stats.failed());
        for (name, histogram) in sends.stats.latencies() {
            if name == PushOp::LATENCY {
                stats.latency_histogram(name, histogram.clone());
            }
        }
        Ok(Measured {
            stats,
            window: last.saturating_duration_since(measure_from),
        })
    }
}

struct PushOp {
    client: Arc<Client>,
    text: Arc<str>,
    /// The receivers' URLs, and whether each answers; configs name them in turn.
    urls: Arc<[(String, bool)]>,
    next: Arc<std::sync::atomic::AtomicUsize>,
    sent: Arc<Mutex<HashMap<String, Instant>>>,
    to_dead: Arc<std::sync::atomic::AtomicU64>,
    measure_from: Instant,
}

impl Operation for PushOp {
    const LATENCY: &'static str = "send (request)";

    async fn run(&mut self, intended: Instant, _stats: &mut Stats) -> Result<String, ErrorKind> {
        let dialect = self.client.dialect();
        let message = dialect.user_message(
            self.client.message_id(),
            vec![dialect.text_part(&self.text)],
            None,
            None,
        );
        let turn = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (url, answers) = &self.urls[turn % self.urls.len()];
        let params = json!({
            "message": message,
            "configuration": {"taskPushNotificationConfig": {"url": url}},
        });
        let result = self.client.call(dialect.send_method(), params).await?;
        let reply = Reply::parse(dialect, &result)?;
        if let Reply::Task { id, .. } = &reply
            && intended >= self.measure_from
        {
            if *answers {
                self.sent.lock().unwrap().insert(id.clone(), intended);
            } else {
                self.to_dead
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        reply.outcome()
    }
}

/// The webhook: an actix-web server on its own thread, answering 200 to every POST.
struct Receiver {
    url: String,
    handle: actix_web::dev::ServerHandle,
    thread: std::thread::JoinHandle<()>,
}

impl Receiver {
    fn start(arrivals: Arrivals) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let url = format!("http://{}/hook", listener.local_addr()?);
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("push-receiver".into())
            .spawn(move || {
                actix_web::rt::System::new().block_on(async move {
                    let state = web::Data::new(arrivals);
                    let server = match HttpServer::new(move || {
                        App::new()
                            .app_data(state.clone())
                            .route("/hook", web::post().to(receive))
                    })
                    .workers(1)
                    .listen(listener)
                    {
                        Ok(server) => server.run(),
                        Err(e) => {
                            eprintln!("load: the push receiver cannot listen: {e}");
                            return;
                        }
                    };
                    let _ = tx.send(server.handle());
                    let _ = server.await;
                });
            })?;
        let handle = rx.recv()?;
        Ok(Self {
            url,
            handle,
            thread,
        })
    }

    async fn stop(self) {
        self.handle.stop(false).await;
        let _ = tokio::task::spawn_blocking(move || self.thread.join()).await;
    }
}

/// Reads the event's body, as a webhook does: a request whose body is left unread makes
/// actix-web close the connection after its answer, and the server would have to
/// connect again for the next delivery.
async fn receive(
    req: HttpRequest,
    _body: web::Bytes,
    arrivals: web::Data<Arrivals>,
) -> HttpResponse {
    let at = Instant::now();
    let task = req
        .headers()
        .get("x-a2a-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|id| id.rsplit_once(':'))
        .map(|(task, _)| task.to_owned());
    if let Some(task) = task {
        arrivals.lock().unwrap().entry(task).or_default().push(at);
    }
    HttpResponse::Ok().finish()
}
