//! A real OpenAI-compatible embeddings server for tests: actix-web on 127.0.0.1 in a
//! thread of its own, answering deterministic vectors.
//!
//! Words map to dimensions (coffee/espresso/latte → 0, tea/matcha → 1, cat/kitten → 2,
//! dog/puppy → 3, rust/cargo → 4); a text without any of them is `[0,0,0,0,0,1]`. The
//! model name selects failures: `broken` answers 500, `empty` an empty vector, `slow`
//! answers after two seconds. With an API key, requests without `Bearer <key>` get 401.

use std::thread::JoinHandle;
use std::time::Duration;

use actix_web::dev::ServerHandle;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use serde_json::{Value, json};

pub(super) const DIMENSIONS: usize = 6;

/// The vector the server answers for `text`.
pub(super) fn vector_for(text: &str) -> Vec<f32> {
    let mut vector = vec![0.0_f32; DIMENSIONS];
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        let dimension = match word.to_lowercase().as_str() {
            "coffee" | "espresso" | "latte" => 0,
            "tea" | "matcha" => 1,
            "cat" | "kitten" => 2,
            "dog" | "puppy" => 3,
            "rust" | "cargo" => 4,
            _ => continue,
        };
        vector[dimension] += 1.0;
    }
    if vector.iter().all(|x| *x == 0.0) {
        vector[DIMENSIONS - 1] = 1.0;
    }
    vector
}

async fn embeddings(
    request: HttpRequest,
    key: web::Data<Option<String>>,
    body: web::Json<Value>,
) -> HttpResponse {
    if let Some(key) = key.get_ref() {
        let expected = format!("Bearer {key}");
        let given = request
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if given != Some(expected.as_str()) {
            return HttpResponse::Unauthorized().finish();
        }
    }
    let model = body["model"].as_str().unwrap_or_default();
    let input = body["input"].as_str().unwrap_or_default();
    let embedding = match model {
        "broken" => return HttpResponse::InternalServerError().finish(),
        "empty" => Vec::new(),
        "slow" => {
            actix_web::rt::time::sleep(Duration::from_secs(2)).await;
            vector_for(input)
        }
        _ => vector_for(input),
    };
    HttpResponse::Ok().json(json!({
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": embedding}],
        "model": model,
    }))
}

/// A running server; stopped when dropped.
pub(super) struct EmbeddingsServer {
    /// The base URL to configure (`…/v1`).
    pub(super) url: String,
    handle: ServerHandle,
    thread: Option<JoinHandle<()>>,
}

impl EmbeddingsServer {
    pub(super) fn start(api_key: Option<&str>) -> EmbeddingsServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let key = api_key.map(str::to_owned);
        let (handles, handle_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let server = HttpServer::new(move || {
                    App::new()
                        .app_data(web::Data::new(key.clone()))
                        .route("/v1/embeddings", web::post().to(embeddings))
                })
                .workers(1)
                .listen(listener)
                .unwrap()
                .run();
                handles.send(server.handle()).unwrap();
                server.await.unwrap();
            });
        });
        EmbeddingsServer {
            url: format!("http://127.0.0.1:{port}/v1"),
            handle: handle_rx.recv().unwrap(),
            thread: Some(thread),
        }
    }
}

impl Drop for EmbeddingsServer {
    fn drop(&mut self) {
        // The stop command is sent when `stop` is called; its future only awaits the end.
        drop(self.handle.stop(false));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A base URL where nothing listens (a port just released).
pub(super) fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/v1")
}
