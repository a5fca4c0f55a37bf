//! A gRPC client's bad input: request bytes that are not the method's protobuf message,
//! and metadata that is not visible ASCII, sent raw (tonic's client with a codec that
//! writes the bytes as they are) to every RPC of `lf.a2a.v1.A2AService`. Each is the
//! client's fault: `INVALID_ARGUMENT` with an `ErrorInfo`, counted as such in the metrics,
//! after the gate as on every other binding, and the server keeps serving.

use a2a_pb::proto::{self, a2a_service_client::A2aServiceClient};
use prost::bytes::{Buf, BufMut, Bytes};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};
use tonic_types::StatusExt;

use crate::grpc::{ACME, keys};
use crate::support::{Backend, TestApp, spawn_app, spawn_app_with};

/// Every RPC of the service, as the generated server routes them.
const METHODS: [&str; 11] = [
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "GetExtendedAgentCard",
    "DeleteTaskPushNotificationConfig",
];

/// Request bodies that no message of `a2a.proto` decodes from.
const MALFORMED: [(&str, &[u8]); 4] = [
    // Field number 0 does not exist.
    ("an empty tag", &[0x00]),
    // A key whose varint runs past ten bytes.
    ("a bad varint", &[0xff; 10]),
    // A length-delimited field (number 15) announcing 100 bytes and carrying 3.
    ("a truncated field", &[0x7a, 0x64, 1, 2, 3]),
    // Arbitrary bytes (fixed, so the test is the same every run); the first key has
    // wire type 7, which does not exist.
    (
        "random bytes",
        &[0x0f, 0x9c, 0x31, 0xe8, 0x5a, 0x77, 0x02, 0xd4, 0xc6, 0x4b],
    ),
];

/// Writes the request as the bytes given and reads the answer as bytes.
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

async fn channel(app: &TestApp) -> Channel {
    let addr = app.grpc_addr.expect("gRPC is on in tests");
    Channel::from_shared(format!("http://{addr}"))
        .expect("an address")
        .connect()
        .await
        .expect("gRPC connects")
}

/// Calls `method` with `body` as its request message (unary framing serves the
/// server-streaming methods too: an error answers before any event) and returns the
/// status of the answer.
async fn raw_call(channel: &Channel, method: &str, request: Request<Bytes>) -> Status {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.expect("the channel is ready");
    let path = PathAndQuery::try_from(format!("/lf.a2a.v1.A2AService/{method}")).expect("a path");
    match grpc.unary(request, path, RawCodec).await {
        Ok(_) => Status::ok("answered"),
        Err(status) => status,
    }
}

/// The status's code and `ErrorInfo` reason (asserting the A2A domain); the code alone
/// when it carries no `ErrorInfo`.
fn reason(status: &Status) -> (Code, Option<String>) {
    let info = status.get_details_error_info();
    if let Some(info) = &info {
        assert_eq!(info.domain, "a2a-protocol.org");
    }
    (status.code(), info.map(|i| i.reason))
}

fn invalid_params() -> (Code, Option<String>) {
    (Code::InvalidArgument, Some("INVALID_PARAMS".into()))
}

/// `agent_a2a_http_requests_total{binding="grpc",method,status}` now.
async fn grpc_requests(app: &TestApp, method: &str, status: &str) -> u64 {
    let metrics = app.get("/metrics").await.text().await.expect("metrics");
    let labels = [
        r#"binding="grpc""#.to_owned(),
        format!(r#"method="{method}""#),
        format!(r#"status="{status}""#),
    ];
    metrics
        .lines()
        .filter(|l| l.starts_with("agent_a2a_http_requests_total{"))
        .filter(|l| labels.iter().all(|label| l.contains(label.as_str())))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[actix_web::test]
async fn a_message_that_is_not_protobuf_is_invalid_argument_on_every_rpc() {
    let app = spawn_app().await;
    let channel = channel(&app).await;
    let mut before = Vec::new();
    for method in METHODS {
        before.push((
            grpc_requests(&app, method, "INVALID_ARGUMENT").await,
            grpc_requests(&app, method, "INTERNAL").await,
        ));
    }

    for method in METHODS {
        for (what, body) in MALFORMED {
            let status = raw_call(&channel, method, Request::new(Bytes::from_static(body))).await;
            assert_eq!(
                reason(&status),
                invalid_params(),
                "{method}, {what}: {status:?}"
            );
            assert!(status.message().starts_with("invalid params"), "{status:?}");
        }
    }

    // Counted as the client's error, under its method, never as the server's.
    for (method, (invalid, internal)) in METHODS.into_iter().zip(before) {
        let n = MALFORMED.len() as u64;
        let now = grpc_requests(&app, method, "INVALID_ARGUMENT").await;
        assert!(now >= invalid + n, "{method}: {invalid} → {now}");
        // Other tests run beside this one (one may answer INTERNAL on purpose), but
        // none makes this many.
        let now = grpc_requests(&app, method, "INTERNAL").await;
        assert!(now < internal + n, "{method}: INTERNAL {internal} → {now}");
    }

    // The server keeps serving, on the same connection.
    let mut client = A2aServiceClient::new(channel);
    client
        .list_tasks(proto::ListTasksRequest::default())
        .await
        .expect("a well-formed call after the malformed ones");
}

#[actix_web::test]
async fn a_malformed_message_from_a_stranger_is_unauthenticated() {
    let app = spawn_app_with(Backend::Sqlite, |s| keys(s, 10_000)).await;
    let channel = channel(&app).await;
    let (_, body) = MALFORMED[0];
    for method in METHODS {
        // Credentials first, as on the HTTP bindings: a stranger learns nothing of its
        // request, not even that it is malformed.
        let status = raw_call(&channel, method, Request::new(Bytes::from_static(body))).await;
        assert_eq!(
            reason(&status),
            (Code::Unauthenticated, Some("UNAUTHENTICATED".into())),
            "{method}: {status:?}"
        );
        let mut request = Request::new(Bytes::from_static(body));
        request
            .metadata_mut()
            .insert("x-api-key", ACME.parse().expect("a key"));
        let status = raw_call(&channel, method, request).await;
        assert_eq!(reason(&status), invalid_params(), "{method}: {status:?}");
    }
}

#[actix_web::test]
async fn metadata_that_is_not_printable_ascii_is_invalid_argument() {
    let app = spawn_app_with(Backend::Sqlite, |s| keys(s, 10_000)).await;
    let channel = channel(&app).await;
    let list = Bytes::from(prost::Message::encode_to_vec(
        &proto::ListTasksRequest::default(),
    ));
    let subscribe = Bytes::from(prost::Message::encode_to_vec(
        &proto::SubscribeToTaskRequest {
            id: "00000000-0000-4000-8000-000000000000".into(),
            ..Default::default()
        },
    ));
    let before = grpc_requests(&app, "ListTasks", "INVALID_ARGUMENT").await;
    let unreadable: [(&'static str, &[u8]); 5] = [
        ("x-api-key", "key-acmé".as_bytes()),
        ("authorization", b"Bearer key-acme\xff"),
        ("a2a-version", "1.0\u{a0}".as_bytes()),
        ("last-event-id", "７".as_bytes()),
        ("x-request-note", b"tab\tinside"),
    ];
    for (key, value) in unreadable {
        for (method, body) in [("ListTasks", &list), ("SubscribeToTask", &subscribe)] {
            for with_key in [true, false] {
                let mut request = Request::new(body.clone());
                if with_key && key != "x-api-key" {
                    request
                        .metadata_mut()
                        .insert("x-api-key", ACME.parse().expect("a key"));
                }
                request.metadata_mut().insert(
                    key,
                    MetadataValue::try_from(value).expect("HTTP/2 carries the bytes"),
                );
                // Refused before the gate reads it (credentials that are not text are
                // not absent credentials), so a stranger gets the same answer.
                let status = raw_call(&channel, method, request).await;
                assert_eq!(
                    reason(&status),
                    invalid_params(),
                    "{key} on {method}: {status:?}"
                );
                assert!(
                    status.message().contains(&format!("metadata {key}:")),
                    "{status:?}"
                );
            }
        }
    }
    let now = grpc_requests(&app, "ListTasks", "INVALID_ARGUMENT").await;
    assert!(
        now >= before + 2 * unreadable.len() as u64,
        "{before} → {now}"
    );

    // Binary metadata (`-bin`) carries any bytes, and printable metadata is read as ever.
    let mut request = Request::new(list.clone());
    request
        .metadata_mut()
        .insert("x-api-key", ACME.parse().expect("a key"));
    request
        .metadata_mut()
        .insert_bin("trace-bin", MetadataValue::from_bytes(b"\xff\x00\x01"));
    let status = raw_call(&channel, "ListTasks", request).await;
    assert_eq!(status.code(), Code::Ok, "{status:?}");
}

/// One HPACK header field, literal and not indexed, with a new name (RFC 7541 §6.2.2).
fn literal(block: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    for text in [name, value] {
        block.push(u8::try_from(text.len()).expect("shorter than 127 bytes"));
        block.extend_from_slice(text);
    }
}

/// An HTTP/2 frame (RFC 9113 §4.1).
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len())
        .expect("a short frame")
        .to_be_bytes();
    let mut out = vec![len[1], len[2], len[3], kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Control characters cannot even be written as metadata with tonic's client: HTTP
/// forbids them in a header value. Sent raw, they never reach the service: hyper's
/// HTTP/2 refuses the header block and ends the connection with a GOAWAY, so the
/// client gets a transport error rather than a status. The server serves on.
#[actix_web::test]
async fn control_characters_in_metadata_end_the_connection_before_the_service() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const HEADERS: u8 = 0x1;
    const RST_STREAM: u8 = 0x3;
    const GOAWAY: u8 = 0x7;
    let app = spawn_app().await;
    let addr = app.grpc_addr.expect("gRPC is on in tests");
    let mut socket = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connects");
    // `:method: POST` and `:scheme: http` from the static table, `:path` by its index.
    let mut block = vec![0x83, 0x86, 0x04];
    let path = b"/lf.a2a.v1.A2AService/ListTasks";
    block.push(u8::try_from(path.len()).expect("a short path"));
    block.extend_from_slice(path);
    for (name, value) in [
        (b"content-type".as_slice(), b"application/grpc".as_slice()),
        (b"te", b"trailers"),
        (b"x-api-key", b"key\x01acme"),
    ] {
        block.push(0x00);
        literal(&mut block, name, value);
    }
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(0x4, 0, 0, &[])); // SETTINGS
    out.extend(frame(HEADERS, 0x4, 1, &block)); // END_HEADERS
    out.extend(frame(0x0, 0x1, 1, &[0; 5])); // an empty message, END_STREAM
    socket.write_all(&out).await.expect("written");

    // Frames until the server refuses the stream or the connection (or closes it).
    let ended = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            let mut head = [0u8; 9];
            if socket.read_exact(&mut head).await.is_err() {
                return None;
            }
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let mut payload = vec![0u8; len];
            socket
                .read_exact(&mut payload)
                .await
                .expect("a whole frame");
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            match head[3] {
                GOAWAY | RST_STREAM => return Some((head[3], payload)),
                HEADERS => assert_ne!(stream, 1, "the call was answered"),
                _ => {}
            }
        }
    })
    .await
    .expect("the server ends the exchange");
    if let Some((kind, payload)) = ended {
        // The error code: the last four bytes of either frame; never NO_ERROR.
        let code = &payload[payload.len() - 4..];
        assert_ne!(code, [0, 0, 0, 0], "frame type {kind}");
    }

    let mut client = A2aServiceClient::new(channel(&app).await);
    client
        .list_tasks(proto::ListTasksRequest::default())
        .await
        .expect("a new connection is served");
}
