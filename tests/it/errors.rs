//! Protocol errors: parse, envelope, method, content type, version, body size.

use serde_json::{Value, json};

use crate::support::{Backend, spawn_app, spawn_app_with, user_message};

async fn post_raw(app: &crate::support::TestApp, content_type: &str, body: String) -> (u16, Value) {
    let r = app
        .client
        .post(format!("{}/", app.url))
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

#[actix_web::test]
async fn jsonrpc_envelope_errors() {
    let app = spawn_app().await;
    let (status, body) = post_raw(&app, "application/json", "{oops".into()).await;
    assert_eq!(
        (status, body["error"]["code"].as_i64()),
        (200, Some(-32700))
    );
    assert_eq!(body["id"], Value::Null);

    let (_, body) = post_raw(&app, "application/json", "[{\"jsonrpc\":\"2.0\"}]".into()).await;
    assert_eq!(body["error"]["code"], -32600, "batches are refused");

    let (_, body) = post_raw(
        &app,
        "application/json",
        json!({"jsonrpc":"1.0","id":1,"method":"GetTask"}).to_string(),
    )
    .await;
    assert_eq!(body["error"]["code"], -32600);

    let body = app.rpc("NoSuchMethod", json!({})).await;
    assert_eq!(body["error"]["code"], -32601);

    let body = app.rpc("GetTask", json!({})).await;
    assert_eq!(body["error"]["code"], -32602);
    assert!(
        body["error"]["message"].as_str().unwrap().contains("id"),
        "{body}"
    );
    let info = &body["error"]["data"][0];
    assert_eq!(info["@type"], "type.googleapis.com/google.rpc.ErrorInfo");
}

#[actix_web::test]
async fn wrong_content_type_is_content_type_not_supported() {
    let app = spawn_app().await;
    let envelope =
        json!({"jsonrpc":"2.0","id":5,"method":"GetTask","params":{"id":"x"}}).to_string();
    let (status, body) = post_raw(&app, "text/plain", envelope).await;
    assert_eq!(status, 200);
    assert_eq!(body["error"]["code"], -32005);
    assert_eq!(body["id"], 5);
}

#[actix_web::test]
async fn unsupported_versions_are_refused_on_both_bindings() {
    let app = spawn_app().await;
    let r = app
        .client
        .post(format!("{}/", app.url))
        .header("A2A-Version", "99.0")
        .json(&json!({"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message": user_message("complete")}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32009);

    let r = app
        .client
        .get(format!("{}/tasks?A2A-Version=2.0", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["error"]["details"][0]["reason"],
        "VERSION_NOT_SUPPORTED"
    );

    for ok in ["1.0", "0.3", "1.0.1", ""] {
        let r = app
            .client
            .get(format!("{}/tasks", app.url))
            .header("A2A-Version", ok)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "version {ok:?}");
    }
}

#[actix_web::test]
async fn bodies_over_the_limit_are_refused() {
    let app = spawn_app_with(Backend::Sqlite, |s| s.server.max_body_bytes = 512).await;
    let big = "x".repeat(600);
    let r = app
        .client
        .post(format!("{}/", app.url))
        .json(&json!({"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message": user_message(&big)}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32600);
    let r = app
        .post_json("/message:send", json!({"message": user_message(&big)}))
        .await;
    assert_eq!(r.status(), 413);
}

#[actix_web::test]
async fn unaccepted_part_media_types_are_refused() {
    let app = spawn_app().await;
    let message = json!({"messageId":"m","role":"ROLE_USER","parts":[{"raw":"aGVsbG8=","mediaType":"image/png"}]});
    let body = app.rpc("SendMessage", json!({"message": message})).await;
    assert_eq!(body["error"]["code"], -32005, "{body}");
}

#[actix_web::test]
async fn extended_card_is_not_supported() {
    let app = spawn_app().await;
    let body = app.rpc("GetExtendedAgentCard", json!({})).await;
    assert_eq!(body["error"]["code"], -32004);
    let r = app.get("/extendedAgentCard").await;
    assert_eq!(r.status(), 400);
}
