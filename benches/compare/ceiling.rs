//! The ceiling of the comparison in `benches/compare/`: a bare actix-web handler that
//! parses the same JSON-RPC `SendMessage` request agent-a2a serves and answers with a
//! completed task echoing the text — no actors, no storage, no validation beyond
//! deserializing. Whatever agent-a2a costs on top of this is the price of its runtime
//! and its durable store.
//!
//! ```text
//! cargo run --release --example compare_ceiling -- 127.0.0.1:9104
//! ```
//!
//! Built as an example of the main crate so that it shares the release build of
//! actix-web; `benches/compare/run.sh` starts it.

use actix_web::http::header::ContentType;
use actix_web::{App, HttpResponse, HttpServer, web};
use serde::Deserialize;
use serde_json::{Value, json};

/// A JSON-RPC request, as far as `SendMessage` needs it.
#[derive(Deserialize)]
struct Request {
    #[allow(dead_code)] // parsed to cost what a real server pays, never read
    jsonrpc: String,
    id: Value,
    method: String,
    params: SendParams,
}

#[derive(Deserialize)]
struct SendParams {
    message: UserMessage,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UserMessage {
    message_id: String,
    role: String,
    parts: Vec<TextPart>,
}

#[derive(Deserialize)]
struct TextPart {
    #[serde(default)]
    text: String,
}

async fn send_message(body: web::Bytes) -> HttpResponse {
    let request: Request = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(_) => return rpc_error(Value::Null, -32700, "Parse error"),
    };
    if request.method != "SendMessage" {
        return rpc_error(request.id, -32601, "Method not found");
    }
    let message = request.params.message;
    let text = message
        .parts
        .iter()
        .map(|p| p.text.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let task_id = uuid::Uuid::new_v4().to_string();
    let context_id = uuid::Uuid::new_v4().to_string();
    let task = json!({
        "id": task_id,
        "contextId": context_id,
        "status": {
            "state": "TASK_STATE_COMPLETED",
            "message": {
                "messageId": uuid::Uuid::new_v4().to_string(),
                "contextId": context_id,
                "taskId": task_id,
                "role": "ROLE_AGENT",
                "parts": [{"text": text}],
            },
            "timestamp": chrono::Utc::now().to_rfc3339(),
        },
        "history": [{
            "messageId": message.message_id,
            "contextId": context_id,
            "taskId": task_id,
            "role": message.role,
            "parts": [{"text": text}],
        }],
    });
    let body = json!({"jsonrpc": "2.0", "id": request.id, "result": {"task": task}});
    HttpResponse::Ok()
        .content_type(ContentType::json())
        .body(body.to_string())
}

fn rpc_error(id: Value, code: i64, message: &str) -> HttpResponse {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    HttpResponse::Ok()
        .content_type(ContentType::json())
        .body(body.to_string())
}

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let bind = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9104".into());
    // One worker per core, as agent-a2a's `server.workers = 0`.
    HttpServer::new(|| App::new().route("/", web::post().to(send_message)))
        .bind(bind)?
        .run()
        .await?;
    Ok(())
}
