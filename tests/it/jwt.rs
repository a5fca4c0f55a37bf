//! OIDC / JWT bearer tokens against the real server: an identity provider's JWKS
//! endpoint started by the test (it counts its fetches and can rotate its keys), tokens
//! signed by the test with the test-only keys of `tests/fixtures/`, and every refusal
//! answered 401 with its RFC 6750 challenge.

use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use actix_web::{App, HttpResponse, HttpServer, web};
use agent_a2a::cli::Agent;
use agent_a2a::config::{ApiKeySettings, JwtIssuerSettings, Settings};
use agent_a2a::error::Error;
use agent_a2a::runtime::{AgentExecutor, Turn, TurnSink};
use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{TestApp, spawn_agent_in, user_message};

const ISSUER: &str = "https://login.test.example/";
const AUDIENCE: &str = "agent-a2a-tests";
const API_KEY: &str = "key-initech";

/// Answers with the tenant and the `userId` the server gave it, so a test sees who the
/// token named.
struct WhoAmI;

#[async_trait]
impl AgentExecutor for WhoAmI {
    async fn execute(&self, turn: Turn, sink: TurnSink) -> Result<(), Error> {
        let user = turn
            .metadata
            .as_ref()
            .and_then(|m| m.get("userId"))
            .and_then(Value::as_str)
            .unwrap_or("-")
            .to_owned();
        let answer = sink.text(format!("{} {user}", turn.tenant));
        sink.complete(Some(answer)).await
    }
}

/// The test-only signing keys (`tests/fixtures/test-only-*.pem`).
struct Keys {
    es_a: EncodingKey,
    es_b: EncodingKey,
    rs: EncodingKey,
}

impl Keys {
    fn load() -> Keys {
        let der = |name: &str| {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures")
                .join(name);
            let pem = std::fs::read_to_string(path).expect("test key");
            let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
            STANDARD.decode(body).expect("PEM body")
        };
        Keys {
            es_a: EncodingKey::from_ec_der(&der("test-only-es256-a.pem")),
            es_b: EncodingKey::from_ec_der(&der("test-only-es256-b.pem")),
            rs: EncodingKey::from_rsa_der(&der("test-only-rs256.pem")),
        }
    }
}

/// The public JWK of `key`, named `kid`.
fn jwk(key: &EncodingKey, alg: Algorithm, kid: &str) -> Value {
    let mut jwk = Jwk::from_encoding_key(key, alg).expect("public key");
    jwk.common.key_id = Some(kid.into());
    serde_json::to_value(jwk).unwrap()
}

fn now() -> u64 {
    jsonwebtoken::get_current_timestamp()
}

/// Claims of a valid token for `tenant` and `user`.
fn claims(tenant: &str, user: &str) -> Value {
    json!({"iss": ISSUER, "aud": AUDIENCE, "exp": now() + 600, "iat": now(),
           "tenant": tenant, "sub": user})
}

fn sign(claims: &Value, key: &EncodingKey, alg: Algorithm, kid: &str) -> String {
    let header = Header {
        kid: Some(kid.into()),
        ..Header::new(alg)
    };
    jsonwebtoken::encode(&header, claims, key).expect("signed")
}

/// An identity provider's JWKS endpoint: serves `keys`, counts its fetches.
struct Idp {
    jwks_url: String,
    state: web::Data<IdpState>,
}

#[derive(Default)]
struct IdpState {
    keys: Mutex<Vec<Value>>,
    fetches: AtomicUsize,
}

impl Idp {
    fn start(keys: Vec<Value>) -> Idp {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let jwks_url = format!("http://{}/jwks", listener.local_addr().unwrap());
        let state = web::Data::new(IdpState::default());
        *state.keys.lock().unwrap() = keys;
        let shared = state.clone();
        let server = HttpServer::new(move || {
            App::new()
                .app_data(shared.clone())
                .route("/jwks", web::get().to(serve_jwks))
        })
        .workers(1)
        .listen(listener)
        .unwrap()
        .run();
        actix_web::rt::spawn(server);
        Idp { jwks_url, state }
    }

    /// The issuer rotates its keys.
    fn publish(&self, keys: Vec<Value>) {
        *self.state.keys.lock().unwrap() = keys;
    }

    fn fetches(&self) -> usize {
        self.state.fetches.load(Ordering::SeqCst)
    }
}

async fn serve_jwks(state: web::Data<IdpState>) -> HttpResponse {
    state.fetches.fetch_add(1, Ordering::SeqCst);
    let keys = state.keys.lock().unwrap().clone();
    HttpResponse::Ok().json(json!({ "keys": keys }))
}

/// A server that accepts the test issuer's tokens (and one API key, tenant `initech`).
async fn spawn(jwks_url: &str, tweak: impl FnOnce(&mut Settings)) -> TestApp {
    let jwks_url = jwks_url.to_owned();
    spawn_agent_in(None, Agent::new(Arc::new(WhoAmI)), move |s| {
        s.auth.enabled = true;
        s.auth.api_keys = vec![ApiKeySettings {
            key: API_KEY.into(),
            key_sha256: String::new(),
            tenant: "initech".into(),
            tier: "default".into(),
            mcp_servers: None,
        }];
        let mut issuer = JwtIssuerSettings::new(ISSUER, AUDIENCE, &jwks_url);
        // Long enough that no refetch in a test is due to the clock.
        issuer.jwks_cache_secs = 3600;
        issuer.jwks_min_refresh_secs = 3600;
        s.auth.jwt = vec![issuer];
        s.auth.failures_per_minute = 10_000;
        s.rate_limit.default_per_minute = 10_000;
        tweak(s);
    })
    .await
}

/// What one JSON-RPC call with `Authorization: Bearer <token>` got back.
struct Answer {
    status: StatusCode,
    challenge: Option<String>,
    retry_after: Option<String>,
    body: Value,
}

async fn call(app: &TestApp, token: Option<&str>, method: &str, params: Value) -> Answer {
    let mut request = app
        .client
        .post(format!("{}/", app.url))
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
    if let Some(token) = token {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    let response = request.send().await.expect("request");
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    Answer {
        status: response.status(),
        challenge: header("www-authenticate"),
        retry_after: header("retry-after"),
        body: response.json().await.unwrap_or(Value::Null),
    }
}

async fn send(app: &TestApp, token: &str) -> Answer {
    call(
        app,
        Some(token),
        "SendMessage",
        json!({"message": user_message("who am I?")}),
    )
    .await
}

/// The answer is a 401 refusing the token with `description`, in the header and the body.
fn assert_refused(answer: &Answer, description: &str) {
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{}", answer.body);
    assert_eq!(
        answer.challenge.as_deref(),
        Some(
            format!(
                r#"Bearer realm="agent-a2a", error="invalid_token", error_description="{description}""#
            )
            .as_str()
        ),
    );
    assert_eq!(
        answer.body["error"]["message"], description,
        "{}",
        answer.body
    );
    assert_eq!(answer.body["error"]["data"][0]["reason"], "UNAUTHENTICATED");
}

/// The text of the completed task's status message: `<tenant> <userId>`.
fn who(answer: &Answer) -> &str {
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    answer.body["result"]["task"]["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no answer in {}", answer.body))
}

/// The value of a counter series in `/metrics` (0 when absent).
async fn counter(app: &TestApp, series: &str) -> f64 {
    let text = app.get("/metrics").await.text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

#[actix_web::test]
async fn a_token_names_the_tenant_and_the_user_the_agent_sees() {
    let keys = Keys::load();
    let idp = Idp::start(vec![
        jwk(&keys.es_a, Algorithm::ES256, "es-a"),
        jwk(&keys.rs, Algorithm::RS256, "rs"),
    ]);
    let app = spawn(&idp.jwks_url, |_| {}).await;

    let alice = sign(
        &claims("acme", "alice"),
        &keys.es_a,
        Algorithm::ES256,
        "es-a",
    );
    let sent = send(&app, &alice).await;
    assert_eq!(who(&sent), "acme alice");
    let task = sent.body["result"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(idp.fetches(), 1, "the keys are fetched once, on first use");

    // RS256 from the same key set, for another tenant: its own task, not acme's.
    let bob = sign(&claims("globex", "bob"), &keys.rs, Algorithm::RS256, "rs");
    assert_eq!(who(&send(&app, &bob).await), "globex bob");
    let foreign = call(&app, Some(&bob), "GetTask", json!({"id": task})).await;
    assert_eq!(foreign.body["error"]["code"], -32001, "{}", foreign.body);
    let own = call(&app, Some(&alice), "GetTask", json!({"id": task})).await;
    assert_eq!(own.body["result"]["id"], task.as_str(), "{}", own.body);
    assert_eq!(idp.fetches(), 1, "cached keys verify later tokens");

    // API keys keep working beside tokens; they name a tenant but no user.
    assert_eq!(who(&send(&app, API_KEY).await), "initech -");
    // No credentials: the challenge without an error.
    let none = call(&app, None, "ListTasks", json!({})).await;
    assert_eq!(none.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        none.challenge.as_deref(),
        Some(r#"Bearer realm="agent-a2a""#)
    );

    // The card offers the issuer's OpenID Connect scheme beside the API-key ones.
    let card: Value = app
        .get("/.well-known/agent-card.json")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        card["securitySchemes"]["oidc-1"]["openIdConnectSecurityScheme"]["openIdConnectUrl"],
        "https://login.test.example/.well-known/openid-configuration"
    );
    assert_eq!(
        card["securityRequirements"][2]["schemes"]["oidc-1"]["list"],
        json!([])
    );
    let issuer = r#"issuer="https://login.test.example/",outcome="ok"}"#;
    assert!(counter(&app, &format!("agent_a2a_jwks_fetches_total{{{issuer}")).await >= 1.0);
    app.stop().await;
}

#[actix_web::test]
async fn refused_tokens_say_why() {
    let keys = Keys::load();
    let rs = jwk(&keys.rs, Algorithm::RS256, "rs");
    let idp = Idp::start(vec![jwk(&keys.es_a, Algorithm::ES256, "es-a"), rs.clone()]);
    let app = spawn(&idp.jwks_url, |_| {}).await;
    let es256 = |claims: &Value| sign(claims, &keys.es_a, Algorithm::ES256, "es-a");
    let valid = claims("acme", "alice");
    let with = |key: &str, value: Value| {
        let mut claims = valid.clone();
        claims[key] = value;
        claims
    };

    let expired = with("exp", json!(now() - 3600));
    assert_refused(&send(&app, &es256(&expired)).await, "token expired");
    let early = with("nbf", json!(now() + 3600));
    assert_refused(&send(&app, &es256(&early)).await, "token not yet valid");
    let elsewhere = with("aud", json!(["another-service", "and-another"]));
    assert_refused(
        &send(&app, &es256(&elsewhere)).await,
        "audience not accepted",
    );
    let listed = with("aud", json!(["another-service", AUDIENCE]));
    assert_eq!(who(&send(&app, &es256(&listed)).await), "acme alice");
    let stranger = with("iss", json!("https://evil.test.example/"));
    assert_refused(&send(&app, &es256(&stranger)).await, "issuer not accepted");
    // A tenant claim must be a tenant id: none, or one that is not one, is refused.
    let too_long = "t".repeat(65);
    for tenant in [
        Value::Null,
        json!("../x"),
        json!("a b"),
        json!(too_long),
        json!("-x"),
    ] {
        let claims = with("tenant", tenant.clone());
        assert_refused(
            &send(&app, &es256(&claims)).await,
            "tenant claim missing or not a valid tenant id",
        );
    }
    let longest = with("tenant", json!("t".repeat(64)));
    assert_eq!(
        who(&send(&app, &es256(&longest)).await),
        format!("{} alice", "t".repeat(64))
    );

    // `alg: none`: an unsigned token.
    let unsigned = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT","kid":"es-a"}"#),
        URL_SAFE_NO_PAD.encode(valid.to_string())
    );
    assert_refused(&send(&app, &unsigned).await, "algorithm not allowed");
    // HS256 with the issuer's public key material as the shared secret.
    let public = rs["n"].as_str().unwrap().as_bytes();
    let hmac = sign(
        &valid,
        &EncodingKey::from_secret(public),
        Algorithm::HS256,
        "rs",
    );
    assert_refused(&send(&app, &hmac).await, "algorithm not allowed");
    // A signature that is not the one of these claims.
    let token = es256(&valid);
    let (signed, signature) = token.rsplit_once('.').unwrap();
    let mut bytes = URL_SAFE_NO_PAD.decode(signature).unwrap();
    bytes[7] ^= 0x55;
    let tampered = format!("{signed}.{}", URL_SAFE_NO_PAD.encode(bytes));
    assert_refused(&send(&app, &tampered).await, "signature invalid");
    // Claims of another tenant under the signature of acme's.
    let (header, _) = signed.split_once('.').unwrap();
    let forged = URL_SAFE_NO_PAD.encode(claims("globex", "mallory").to_string());
    let swapped = format!("{header}.{forged}.{signature}");
    assert_refused(&send(&app, &swapped).await, "signature invalid");
    // An ES256 header naming the RSA key.
    let mismatch = sign(&valid, &keys.es_a, Algorithm::ES256, "rs");
    assert_refused(&send(&app, &mismatch).await, "algorithm not allowed");
    // RFC 7515 §4.1.11: a header extension marked critical that the server does not
    // understand (it understands none) makes the token invalid, signature or not.
    let critical = |crit: Value| {
        let mut header = Header {
            kid: Some("es-a".into()),
            ..Header::new(Algorithm::ES256)
        };
        header.extras.insert("crit", crit);
        header.extras.insert("exp-ext", true);
        jsonwebtoken::encode(&header, &valid, &keys.es_a).expect("signed")
    };
    for crit in [json!(["exp-ext"]), json!([]), json!(null)] {
        assert_refused(
            &send(&app, &critical(crit)).await,
            "unsupported critical header",
        );
    }
    let huge = with("padding", json!("x".repeat(9000)));
    assert_refused(&send(&app, &es256(&huge)).await, "token too large");

    // Every refusal counts as a failed authentication, by reason too.
    let refused = r#"agent_a2a_auth_failures_total{outcome="refused"}"#;
    assert!(counter(&app, refused).await >= 18.0);
    let expired = r#"agent_a2a_jwt_refusals_total{reason="expired"}"#;
    assert!(counter(&app, expired).await >= 1.0);
    let critical = r#"agent_a2a_jwt_refusals_total{reason="critical"}"#;
    assert!(counter(&app, critical).await >= 3.0);
    assert_eq!(idp.fetches(), 1);
    app.stop().await;
}

/// Failed tokens spend the address's budget of failures like wrong API keys do.
#[actix_web::test]
async fn failed_tokens_throttle_their_address() {
    let keys = Keys::load();
    let idp = Idp::start(vec![jwk(&keys.es_a, Algorithm::ES256, "es-a")]);
    let app = spawn(&idp.jwks_url, |s| s.auth.failures_per_minute = 2).await;
    let mut expired = claims("acme", "alice");
    expired["exp"] = json!(now() - 3600);
    let expired = sign(&expired, &keys.es_a, Algorithm::ES256, "es-a");
    for _ in 0..3 {
        assert_refused(&send(&app, &expired).await, "token expired");
    }
    let valid = sign(
        &claims("acme", "alice"),
        &keys.es_a,
        Algorithm::ES256,
        "es-a",
    );
    let throttled = send(&app, &valid).await;
    assert_eq!(throttled.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(throttled.retry_after.is_some());
    app.stop().await;
}

#[actix_web::test]
async fn rotated_keys_are_refetched_and_unknown_ones_only_once_per_interval() {
    let keys = Keys::load();
    let idp = Idp::start(vec![jwk(&keys.es_a, Algorithm::ES256, "es-a")]);
    let app = spawn(&idp.jwks_url, |_| {}).await;
    let token =
        |key: &EncodingKey, kid: &str| sign(&claims("acme", "alice"), key, Algorithm::ES256, kid);

    assert_eq!(
        who(&send(&app, &token(&keys.es_a, "es-a")).await),
        "acme alice"
    );
    assert_eq!(idp.fetches(), 1);

    // The issuer rotates to a key the server's cached set lacks: one refetch finds it.
    idp.publish(vec![jwk(&keys.es_b, Algorithm::ES256, "es-b")]);
    assert_eq!(
        who(&send(&app, &token(&keys.es_b, "es-b")).await),
        "acme alice"
    );
    assert_eq!(idp.fetches(), 2);

    // Within jwks_min_refresh_secs another unknown key, or the withdrawn one, does not
    // make the server fetch again.
    let made_up = send(&app, &token(&keys.es_a, "es-made-up")).await;
    assert_refused(&made_up, "unknown signing key");
    let withdrawn = send(&app, &token(&keys.es_a, "es-a")).await;
    assert_refused(&withdrawn, "unknown signing key");
    assert_eq!(idp.fetches(), 2);
    assert_eq!(
        who(&send(&app, &token(&keys.es_b, "es-b")).await),
        "acme alice"
    );
    app.stop().await;
}

/// Keys that cannot be fetched are the server's problem: 503 with `Retry-After`, not a
/// refusal of the token.
#[actix_web::test]
async fn unreachable_keys_answer_503_with_retry_after() {
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/jwks", listener.local_addr().unwrap())
    };
    let app = spawn(&closed, |_| {}).await;
    let keys = Keys::load();
    let token = sign(
        &claims("acme", "alice"),
        &keys.es_a,
        Algorithm::ES256,
        "es-a",
    );
    for _ in 0..2 {
        let answer = send(&app, &token).await;
        assert_eq!(
            answer.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{}",
            answer.body
        );
        assert_eq!(answer.retry_after.as_deref(), Some("1"));
        assert!(answer.challenge.is_none());
    }
    // API keys do not depend on the issuer.
    assert_eq!(who(&send(&app, API_KEY).await), "initech -");
    app.stop().await;
}

#[actix_web::test]
async fn grpc_callers_present_tokens_in_metadata() {
    use a2a_pb::proto::{self, a2a_service_client::A2aServiceClient};
    use tonic::Code;

    let keys = Keys::load();
    let idp = Idp::start(vec![jwk(&keys.es_a, Algorithm::ES256, "es-a")]);
    let app = spawn(&idp.jwks_url, |_| {}).await;
    let addr = app.grpc_addr.expect("gRPC is on in tests");
    let mut client = A2aServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("gRPC connects");
    let request = |token: &str| {
        let mut request = tonic::Request::new(proto::SendMessageRequest {
            message: Some(proto::Message {
                message_id: uuid::Uuid::new_v4().to_string(),
                role: proto::Role::User as i32,
                parts: vec![proto::Part {
                    content: Some(proto::part::Content::Text("who am I?".into())),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        });
        let bearer = format!("Bearer {token}").parse().unwrap();
        request.metadata_mut().insert("authorization", bearer);
        request
    };
    let valid = sign(
        &claims("acme", "alice"),
        &keys.es_a,
        Algorithm::ES256,
        "es-a",
    );
    let response = client
        .send_message(request(&valid))
        .await
        .expect("accepted");
    let Some(proto::send_message_response::Payload::Task(task)) = response.into_inner().payload
    else {
        panic!("a task");
    };
    let answer = task
        .status
        .and_then(|s| s.message)
        .expect("a status message");
    let Some(proto::part::Content::Text(text)) = &answer.parts[0].content else {
        panic!("a text part");
    };
    assert_eq!(text, "acme alice");

    let mut expired = claims("acme", "alice");
    expired["exp"] = json!(now() - 3600);
    let expired = sign(&expired, &keys.es_a, Algorithm::ES256, "es-a");
    let e = client.send_message(request(&expired)).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    assert_eq!(e.message(), "token expired");
    app.stop().await;
}
