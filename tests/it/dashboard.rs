//! The operators' dashboard: its stats endpoint counts real traffic, the page and its
//! assets are same-origin only with strict security headers, it can be turned off, and
//! in a real headless Chromium it loads, draws non-empty charts and reports no errors.
//!
//! The browser test needs `chromium` (or `$CHROMIUM`). In CI (`CI=true`) a missing
//! browser fails the test; elsewhere the test is skipped with a printed reason. It leaves
//! `test-artifacts/dashboard.png` (and the DOM and browser log beside it) for people to
//! look at.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Backend, TestApp, spawn_app, spawn_app_with, user_message};

/// Sends `n` blocking messages (each a new thread and task) and one that fails.
async fn traffic(app: &TestApp, n: usize) {
    for i in 0..n {
        let r = app
            .rpc(
                "SendMessage",
                json!({"message": user_message(&format!("complete {i}"))}),
            )
            .await;
        assert_eq!(
            r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{r}"
        );
    }
    let missing = app
        .rpc(
            "GetTask",
            json!({"id": "00000000-0000-4000-8000-000000000000"}),
        )
        .await;
    assert_eq!(missing["error"]["code"], -32001);
}

async fn stats(app: &TestApp) -> Value {
    let response = app.get("/dashboard/stats.json").await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["cache-control"], "no-store");
    response.json().await.unwrap()
}

#[actix_web::test]
async fn stats_count_the_traffic_served() {
    let app = spawn_app().await;
    let before = stats(&app).await;
    traffic(&app, 5).await;
    let after = stats(&app).await;

    let window = after["windowSecs"].as_u64().unwrap();
    let series = &after["series"];
    for name in [
        "time",
        "requests",
        "serverErrors",
        "errors",
        "rateLimited",
        "pushDelivered",
        "pushLost",
        "pushOutbox",
        "remoteAnswered",
        "remoteFailed",
        "mcpAnswered",
        "mcpFailed",
        "latencyP50Ms",
        "latencyP99Ms",
        "commits",
        "commitP50Ms",
        "commitP99Ms",
        "meanBatch",
        "persistQueue",
        "threadActors",
        "threadsActive",
        "sseSubscribers",
    ] {
        assert_eq!(
            series[name].as_array().map(Vec::len),
            Some(window as usize),
            "{name}"
        );
    }
    // The collector is process-wide (other tests run beside this one), so the counts
    // grew by at least this test's own traffic.
    let total = |s: &Value, key: &str| s["window"][key].as_u64().unwrap();
    assert!(total(&after, "requests") >= total(&before, "requests") + 6);
    assert!(total(&after, "errors") > total(&before, "errors"));
    assert!(total(&after, "commits") >= 5);
    assert!(after["window"]["latencyP99Ms"].as_f64().unwrap() > 0.0);
    assert!(after["current"]["threadActors"].as_f64().unwrap() >= 5.0);
    let latest = series["latencyP50Ms"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .take(10)
        .filter(|v| v.is_number())
        .count();
    assert!(latest > 0, "no latency in the last ten seconds: {after}");
    assert_eq!(after["version"], env!("CARGO_PKG_VERSION"));
}

#[actix_web::test]
async fn the_page_is_same_origin_only_with_security_headers() {
    let app = spawn_app().await;
    for (path, media) in [
        ("/dashboard", "text/html"),
        ("/dashboard/dashboard.js", "text/javascript"),
        ("/dashboard/dashboard.css", "text/css"),
        ("/dashboard/stats.json", "application/json"),
    ] {
        let response = app.get(path).await;
        assert_eq!(response.status(), 200, "{path}");
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        assert!(header("content-type").starts_with(media), "{path}");
        let csp = header("content-security-policy");
        for directive in [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "connect-src 'self'",
            "frame-ancestors 'none'",
        ] {
            assert!(csp.contains(directive), "{path}: {csp}");
        }
        assert!(!csp.contains("unsafe") && !csp.contains("http"), "{csp}");
        assert_eq!(header("x-content-type-options"), "nosniff");
        assert_eq!(header("x-frame-options"), "DENY");
        assert_eq!(header("referrer-policy"), "no-referrer");
        let body = response.text().await.unwrap();
        // Nothing is fetched from another origin.
        assert!(
            !body.contains("http://") && !body.contains("https://") && !body.contains("//cdn"),
            "{path} refers to another origin"
        );
    }
}

#[actix_web::test]
async fn the_dashboard_can_be_turned_off() {
    let app = spawn_app_with(Backend::Sqlite, |s| s.metrics.dashboard = false).await;
    assert_eq!(app.get("/dashboard").await.status(), 404);
    assert_eq!(app.get("/dashboard/stats.json").await.status(), 404);
    assert_eq!(app.get("/metrics").await.status(), 200);
}

/// The browser to drive: `$CHROMIUM`, else the first of the usual names on `PATH`.
fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CHROMIUM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let names = [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ];
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// Runs headless Chromium on `url` with `extra` arguments; returns stdout and stderr.
/// Virtual time lets the page's two-second refreshes run several times in a moment.
fn run_chromium(browser: &Path, profile: &Path, url: &str, extra: &[String]) -> (String, String) {
    let mut child = Command::new(browser)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--hide-scrollbars",
            "--window-size=1280,1000",
            "--virtual-time-budget=9000",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", browser.display()));
    // Read both pipes while waiting, so a chatty browser cannot block on a full pipe.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).map(|_| s)
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut s).map(|_| s)
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for chromium") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = out.join().unwrap().unwrap_or_default();
    let err = err.join().unwrap().unwrap_or_default();
    assert!(status.success(), "chromium failed ({status}):\n{err}");
    (out, err)
}

/// The value of `attribute` in the first tag of `dom` that contains `marker`.
fn attribute(dom: &str, marker: &str, attribute: &str) -> String {
    let at = dom
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker} in the page:\n{dom}"));
    let start = dom[..at].rfind('<').unwrap();
    let end = at + dom[at..].find('>').unwrap();
    let tag = &dom[start..end];
    let key = format!("{attribute}=\"");
    let value = tag
        .find(&key)
        .map(|i| &tag[i + key.len()..])
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no {attribute} in {tag}"));
    value.to_owned()
}

fn number(dom: &str, marker: &str, name: &str) -> u64 {
    attribute(dom, marker, name)
        .parse()
        .unwrap_or_else(|e| panic!("{marker} {name}: {e}"))
}

#[actix_web::test]
async fn the_dashboard_draws_live_charts_in_a_headless_browser() {
    let Some(browser) = chromium() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("chromium is required in CI (.ci/run installs it) but was not found");
        }
        eprintln!("skipping: no chromium on PATH (set CHROMIUM=/path/to/chrome to run this test)");
        return;
    };
    let app = spawn_app_with(Backend::Sqlite, |s| s.metrics.census_interval_secs = 1).await;
    traffic(&app, 8).await;
    // A stream open while the page loads.
    let streaming = app.start_waiting_task().await;
    let subscription = app.subscribe(&streaming, None).await;
    assert_eq!(subscription.status(), 200);
    tokio::time::sleep(Duration::from_millis(1200)).await;

    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let profile = tempfile::tempdir().unwrap();
    let url = format!("{}/dashboard", app.url);
    let (dom, log) = {
        let (browser, profile, url) = (browser.clone(), profile.path().to_owned(), url.clone());
        tokio::task::spawn_blocking(move || {
            run_chromium(&browser, &profile, &url, &["--dump-dom".into()])
        })
        .await
        .unwrap()
    };
    std::fs::write(artifacts.join("dashboard-dom.html"), &dom).unwrap();
    std::fs::write(artifacts.join("dashboard-chromium.log"), &log).unwrap();

    // The page ran: it refreshed several times, and nothing went wrong in it.
    let body = "data-state=";
    assert_eq!(attribute(&dom, body, "data-state"), "live", "{dom}");
    assert!(number(&dom, body, "data-polls") >= 2, "{dom}");
    assert_eq!(number(&dom, body, "data-errors"), 0, "page errors:\n{dom}");
    assert_eq!(number(&dom, body, "data-fetch-failures"), 0);
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "console output: {console:#?}");

    // Every chart drew, and those fed by the traffic above are not flat.
    for chart in [
        "requests",
        "latency",
        "errors",
        "threads",
        "sse",
        "rate-limited",
        "persist-queue",
        "push",
        "remote",
        "commit-latency",
        "tasks",
    ] {
        let marker = format!("data-chart=\"{chart}\"");
        assert!(number(&dom, &marker, "data-points") > 0, "{chart} is empty");
    }
    for chart in [
        "requests",
        "latency",
        "errors",
        "threads",
        "sse",
        "commit-latency",
    ] {
        let marker = format!("data-chart=\"{chart}\"");
        assert!(
            number(&dom, &marker, "data-nonzero") > 0,
            "{chart} shows only zeros"
        );
    }
    assert!(
        dom.contains(r#"<b id="version">0"#),
        "the version tile is filled"
    );

    // A picture for people.
    let shot = artifacts.join("dashboard.png");
    let _ = std::fs::remove_file(&shot);
    {
        let arg = format!("--screenshot={}", shot.display());
        let profile = profile.path().to_owned();
        tokio::task::spawn_blocking(move || run_chromium(&browser, &profile, &url, &[arg]))
            .await
            .unwrap();
    }
    let png = std::fs::read(&shot).expect("the screenshot was written");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "not a screenshot"
    );

    app.release.notify_waiters();
    drop(subscription);
}
