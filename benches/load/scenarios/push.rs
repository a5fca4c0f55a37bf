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
}

impl Push {
    pub async fn run(
        &self,
        plan: &Plan,
        live: Arc<Live>,
        stop: watch::Receiver<bool>,
    ) -> anyhow::Result<Measured> {
        let arrivals: Arrivals = Arc::default();
        let receiver = Receiver::start(arrivals.clone())?;
        let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let measure_from = Instant::now() + plan.warmup;
        let workers = (0..plan.connections)
            .map(|_| PushOp {
                client: self.client.clone(),
                text: self.text.clone(),
                url: receiver.url.clone(),
                sent: sent.clone(),
                measure_from,
            })
            .collect();
        let sends = driver::run(plan, workers, live, stop).await;
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
        receiver.stop().await;

        let mut stats = Stats::new();
        let sent = std::mem::take(&mut *sent.lock().unwrap());
        let arrivals = std::mem::take(&mut *arrivals.lock().unwrap());
        let mut last = measure_from;
        let mut tasks_without_events = 0;
        for (task, started) in &sent {
            match arrivals.get(task) {
                Some(times) => {
                    for at in times {
                        stats.success("event delivered");
                        stats.latency(DELIVERY, at.saturating_duration_since(*started));
                        last = last.max(*at);
                    }
                }
                None => tasks_without_events += 1,
            }
        }
        stats.count("tasks sent (measured)", sent.len() as u64);
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
    url: String,
    sent: Arc<Mutex<HashMap<String, Instant>>>,
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
        let params = json!({
            "message": message,
            "configuration": {"taskPushNotificationConfig": {"url": self.url}},
        });
        let result = self.client.call(dialect.send_method(), params).await?;
        let reply = Reply::parse(dialect, &result)?;
        if let Reply::Task { id, .. } = &reply
            && intended >= self.measure_from
        {
            self.sent.lock().unwrap().insert(id.clone(), intended);
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
