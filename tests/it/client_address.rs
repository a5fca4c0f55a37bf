//! The client's address behind trusted proxies (`server.trusted_proxies`): through a real
//! HAProxy sending the PROXY protocol v2 header (`send-proxy-v2`) on both bindings, and
//! through `Forwarded` / `X-Forwarded-For`, one client's bad keys throttle that client
//! and nobody else; a client that is not a trusted proxy cannot name another one.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use a2a_pb::proto::{self, a2a_service_client::A2aServiceClient};
use agent_a2a::config::{ApiKeySettings, Settings};
use reqwest::StatusCode;
use serde_json::json;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

use crate::support::{self, Backend, TestApp, spawn_app_with};

const KEY: &str = "key-acme";

fn behind_proxy(s: &mut Settings) {
    s.auth.enabled = true;
    s.auth.api_keys = vec![ApiKeySettings {
        key: KEY.into(),
        key_sha256: String::new(),
        tenant: "acme".into(),
        tier: "default".into(),
        mcp_servers: None,
    }];
    s.rate_limit.default_per_minute = 10_000;
    s.auth.failures_per_minute = 3;
    s.server.trusted_proxies = vec!["127.0.0.1".into()];
}

/// A client whose connections come from `ip` (any 127/8 address is loopback).
fn client_from(ip: &str) -> reqwest::Client {
    // reqwest needs a rustls provider even for plain HTTP (see `http_client`).
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

/// A JSON-RPC `GetTask` of an unknown task with `key` and `headers`: 401 for a wrong key,
/// 429 once the client's failures are past the budget, 200 (an error body: no such task)
/// otherwise.
async fn get_task(
    client: &reqwest::Client,
    url: &str,
    key: &str,
    headers: &[(&str, &str)],
) -> StatusCode {
    let mut request = client
        .post(format!("{url}/"))
        .header("Authorization", format!("Bearer {key}"))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t"}}));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap().status()
}

/// Sends wrong keys until the client is throttled (429); fails past ten tries.
async fn throttle(client: &reqwest::Client, url: &str, headers: &[(&str, &str)]) {
    for _ in 0..10 {
        match get_task(client, url, "wrong", headers).await {
            StatusCode::UNAUTHORIZED => {}
            StatusCode::TOO_MANY_REQUESTS => return,
            other => panic!("a wrong key answered {other}"),
        }
    }
    panic!("ten wrong keys and still not throttled");
}

async fn grpc_get_task(channel: Channel, key: &str, metadata: &[(&'static str, &str)]) -> Code {
    let mut client = A2aServiceClient::new(channel);
    let mut request = tonic::Request::new(proto::GetTaskRequest {
        id: "t".into(),
        ..Default::default()
    });
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    for (name, value) in metadata {
        request.metadata_mut().insert(*name, value.parse().unwrap());
    }
    match client.get_task(request).await {
        Ok(_) => Code::Ok,
        Err(status) => status.code(),
    }
}

async fn channel_from(ip: &str, port: u16) -> Channel {
    Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .local_address(Some(ip.parse().unwrap()))
        .connect()
        .await
        .expect("gRPC connects")
}

/// HAProxy in TCP mode in front of both listeners, sending the PROXY protocol v2 header.
struct Haproxy {
    http: u16,
    grpc: u16,
    _process: support::Haproxy,
}

impl Haproxy {
    async fn start(app: &TestApp) -> Haproxy {
        let free = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        };
        let (http, grpc) = (free(), free());
        let app_port = app.url.rsplit(':').next().unwrap();
        let grpc_port = app.grpc_addr.unwrap().port();
        let config = format!(
            "global\n    maxconn 200\n\
             defaults\n    mode tcp\n    timeout connect 1s\n    timeout client 30s\n\
             \x20   timeout server 30s\n\
             frontend http\n    bind 127.0.0.1:{http}\n    default_backend http\n\
             backend http\n    server app 127.0.0.1:{app_port} send-proxy-v2\n\
             frontend grpc\n    bind 127.0.0.1:{grpc}\n    default_backend grpc\n\
             backend grpc\n    server app 127.0.0.1:{grpc_port} send-proxy-v2\n"
        );
        let proxy = Haproxy {
            http,
            grpc,
            _process: support::Haproxy::spawn(&config),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        let client = reqwest::Client::new();
        loop {
            let live = client
                .get(format!("http://127.0.0.1:{http}/health/live"))
                .send()
                .await;
            if live.is_ok_and(|r| r.status() == 200) {
                break;
            }
            assert!(Instant::now() < deadline, "HAProxy did not come up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        proxy
    }
}

#[actix_web::test]
async fn behind_haproxy_one_clients_bad_keys_throttle_that_client_only() {
    let app = spawn_app_with(Backend::Sqlite, behind_proxy).await;
    let proxy = Haproxy::start(&app).await;
    let url = format!("http://127.0.0.1:{}", proxy.http);

    let attacker = client_from("127.0.0.2");
    throttle(&attacker, &url, &[]).await;
    assert_eq!(
        get_task(&attacker, &url, KEY, &[]).await,
        StatusCode::TOO_MANY_REQUESTS,
        "the attacker stays throttled, right key or not"
    );
    // Another client of the same proxy is not.
    let other = client_from("127.0.0.3");
    assert_eq!(get_task(&other, &url, KEY, &[]).await, StatusCode::OK);
    // Nor is the proxy's own address (a request straight to the server, no header).
    assert_eq!(
        get_task(&reqwest::Client::new(), &app.url, KEY, &[]).await,
        StatusCode::OK
    );

    // gRPC through the proxy: the attacker is the same client there.
    assert_eq!(
        grpc_get_task(channel_from("127.0.0.2", proxy.grpc).await, KEY, &[]).await,
        Code::ResourceExhausted
    );
    assert_eq!(
        grpc_get_task(channel_from("127.0.0.3", proxy.grpc).await, KEY, &[]).await,
        Code::NotFound
    );
}

#[actix_web::test]
async fn forwarded_headers_name_the_client_only_from_a_trusted_proxy() {
    let app = spawn_app_with(Backend::Sqlite, behind_proxy).await;
    // This test's own requests come from 127.0.0.1, the trusted proxy.
    let proxy = reqwest::Client::new();
    let attacker = [("X-Forwarded-For", "198.51.100.9, 203.0.113.5")];
    throttle(&proxy, &app.url, &attacker).await;
    let other = [("X-Forwarded-For", "203.0.113.6")];
    assert_eq!(
        get_task(&proxy, &app.url, KEY, &other).await,
        StatusCode::OK
    );
    // RFC 7239 names the same client.
    let forwarded = [("Forwarded", "for=\"203.0.113.5:4711\";proto=http")];
    assert_eq!(
        get_task(&proxy, &app.url, KEY, &forwarded).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // gRPC metadata too.
    let channel = channel_from("127.0.0.1", app.grpc_addr.unwrap().port()).await;
    assert_eq!(
        grpc_get_task(channel.clone(), KEY, &[("x-forwarded-for", "203.0.113.5")]).await,
        Code::ResourceExhausted
    );
    assert_eq!(
        grpc_get_task(channel, KEY, &[("x-forwarded-for", "203.0.113.6")]).await,
        Code::NotFound
    );

    // A client that is not a trusted proxy names nobody: its failures are its own, and
    // the client it names in its header is left alone.
    let stranger = client_from("127.0.0.2");
    throttle(&stranger, &app.url, &other).await;
    assert_eq!(
        get_task(&proxy, &app.url, KEY, &other).await,
        StatusCode::OK
    );
    let as_other = [("X-Forwarded-For", "203.0.113.6")];
    assert_eq!(
        get_task(&stranger, &app.url, KEY, &as_other).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}
