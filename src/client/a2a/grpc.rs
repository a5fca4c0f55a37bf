//! The gRPC binding of the A2A client: `lf.a2a.v1.A2AService` spoken with the tonic
//! client a2a-pb generates, over connections this module makes itself so that every
//! address passes the URL policy (a name resolves only to the addresses the policy
//! allows, as the HTTP bindings' resolver does) and TLS is rustls with the platform's
//! roots (and the remote's `ca_file`), ALPN `h2`.
//!
//! The requests and answers cross as the same ProtoJSON the JSON bindings carry: a
//! request's ProtoJSON is read into its pbjson twin (`a2a_pb::protojson`) and re-encoded
//! as the protobuf the service takes; an answer is decoded into its twin and written as
//! ProtoJSON — so the answers are read by the one reader of 1.0 tasks the client has.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use a2a_pb::proto::a2a_service_client::A2aServiceClient;
use a2a_pb::{proto, protojson};
use hyper_util::rt::TokioIo;
use prost::Message;
use reqwest::Url;
use reqwest::dns::Resolve;
use reqwest::header::HeaderMap;
use rustls::pki_types::CertificateDer;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::Code;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::transport::{Channel, Endpoint, Uri};

use super::endpoint::CallError;
use crate::outbound::CheckedResolver;
use crate::outbound::UrlPolicy;

/// A connection's byte stream: TCP, or TLS over it.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The channel to the interface at `url` (`http://` clear text, `https://` TLS trusting
/// the platform's roots and `extra_roots`), made lazily: it connects at the first call,
/// and again after a connection is lost.
pub(super) fn channel(
    url: &Url,
    policy: Arc<UrlPolicy>,
    timeout: Duration,
    extra_roots: &[CertificateDer<'static>],
) -> Result<Channel, CallError> {
    let refuse = |why: String| CallError::Refused(format!("its gRPC interface {why}"));
    let uri = Uri::from_str(url.as_str()).map_err(|e| refuse(e.to_string()))?;
    let tls = match url.scheme() {
        "https" => Some(tls_config(extra_roots).map_err(|e| refuse(format!("TLS: {e}")))?),
        _ => None,
    };
    let host = url
        .host_str()
        .ok_or_else(|| refuse("has no host".into()))?
        .to_owned();
    let port = url
        .port_or_known_default()
        .unwrap_or(if tls.is_some() { 443 } else { 80 });
    let connector = tower::service_fn(move |_: Uri| {
        let (policy, host, tls) = (policy.clone(), host.clone(), tls.clone());
        async move { connect(&policy, &host, port, tls).await }
    });
    Ok(Endpoint::from(uri)
        .connect_timeout(timeout)
        .tcp_nodelay(true)
        .connect_with_connector_lazy(connector))
}

/// A connection to `host:port` at an address the policy allows; TLS when `tls` is given.
async fn connect(
    policy: &Arc<UrlPolicy>,
    host: &str,
    port: u16,
    tls: Option<Arc<rustls::ClientConfig>>,
) -> Result<TokioIo<Box<dyn Io>>, BoxError> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addresses: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => {
            policy.check_ip(ip)?;
            vec![SocketAddr::new(ip, port)]
        }
        Err(_) => {
            let resolver = CheckedResolver {
                policy: policy.clone(),
            };
            let name = reqwest::dns::Name::from_str(bare)?;
            resolver
                .resolve(name)
                .await?
                .map(|a| SocketAddr::new(a.ip(), port))
                .collect()
        }
    };
    let tcp = tokio::net::TcpStream::connect(addresses.as_slice()).await?;
    tcp.set_nodelay(true)?;
    let Some(tls) = tls else {
        return Ok(TokioIo::new(Box::new(tcp)));
    };
    let name = rustls::pki_types::ServerName::try_from(bare.to_owned())?;
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(name, tcp)
        .await?;
    Ok(TokioIo::new(Box::new(stream)))
}

/// TLS for gRPC: the platform's roots (as the HTTP bindings' client) and `extra_roots`,
/// HTTP/2 by ALPN.
fn tls_config(
    extra_roots: &[CertificateDer<'static>],
) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = if extra_roots.is_empty() {
        rustls_platform_verifier::Verifier::new(provider.clone())
    } else {
        rustls_platform_verifier::Verifier::new_with_extra_roots(
            extra_roots.iter().cloned(),
            provider.clone(),
        )
    }
    .map_err(|e| format!("its roots: {e}"))?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// One unary call, `method` with the ProtoJSON `params`, its answer as ProtoJSON.
/// `headers` (credentials, `traceparent`) go as the call's metadata.
pub(super) async fn call(
    channel: Channel,
    method: &str,
    params: Value,
    headers: HeaderMap,
    left: Duration,
    max_answer_bytes: usize,
) -> Result<Value, CallError> {
    let mut client = A2aServiceClient::new(channel).max_decoding_message_size(max_answer_bytes);
    let mut metadata = MetadataMap::from_headers(headers);
    metadata.insert("a2a-version", MetadataValue::from_static("1.0"));
    fn request<M>(metadata: &MetadataMap, message: M, left: Duration) -> tonic::Request<M> {
        let mut request =
            tonic::Request::from_parts(metadata.clone(), tonic::Extensions::new(), message);
        request.set_timeout(left);
        request
    }
    let answer = async {
        match method {
            "SendMessage" => {
                let message =
                    to_proto::<protojson::SendMessageRequest, proto::SendMessageRequest>(params)?;
                let answer = client.send_message(request(&metadata, message, left)).await;
                to_json::<protojson::SendMessageResponse>(answer, method)
            }
            "GetTask" => {
                let message = to_proto::<protojson::GetTaskRequest, proto::GetTaskRequest>(params)?;
                let answer = client.get_task(request(&metadata, message, left)).await;
                to_json::<protojson::Task>(answer, method)
            }
            "CancelTask" => {
                let message =
                    to_proto::<protojson::CancelTaskRequest, proto::CancelTaskRequest>(params)?;
                let answer = client.cancel_task(request(&metadata, message, left)).await;
                to_json::<protojson::Task>(answer, method)
            }
            other => Err(CallError::Refused(format!(
                "{other} is not asked over gRPC"
            ))),
        }
    };
    // The deadline also bounds the connection's making.
    tokio::time::timeout(left, answer)
        .await
        .unwrap_or_else(|_| {
            Err(CallError::Unreachable(format!(
                "{method}: no answer within {} ms",
                left.as_millis()
            )))
        })
}

/// The request message `P` whose ProtoJSON is `value`, through its twin `J`.
fn to_proto<J, P>(value: Value) -> Result<P, CallError>
where
    J: Message + DeserializeOwned,
    P: Message + Default,
{
    let twin: J = serde_json::from_value(value)
        .map_err(|e| CallError::Refused(format!("a request that does not fit a2a.proto: {e}")))?;
    P::decode(twin.encode_to_vec().as_slice())
        .map_err(|e| CallError::Refused(format!("a request that does not fit a2a.proto: {e}")))
}

/// The ProtoJSON of an answer, through its twin `J`; a status is the call's error.
fn to_json<J>(
    answer: Result<tonic::Response<impl Message>, tonic::Status>,
    method: &str,
) -> Result<Value, CallError>
where
    J: Message + Default + Serialize,
{
    let answer = answer
        .map_err(|status| refusal(&status, method))?
        .into_inner();
    let twin = J::decode(answer.encode_to_vec().as_slice())
        .map_err(|e| CallError::Refused(format!("answered {method} unreadably ({e})")))?;
    serde_json::to_value(twin)
        .map_err(|e| CallError::Refused(format!("answered {method} unreadably ({e})")))
}

/// A status as the call's error: not reached, overloaded or broken there counts against
/// the breaker (as HTTP's 5xx and 429 do); any other code is a refusal.
fn refusal(status: &tonic::Status, method: &str) -> CallError {
    let mut why = status.message().to_owned();
    let mut source: Option<&dyn std::error::Error> = std::error::Error::source(status);
    while let Some(s) = source {
        why = format!("{why}: {s}");
        source = s.source();
    }
    let code = status.code();
    match code {
        Code::Unavailable
        | Code::DeadlineExceeded
        | Code::ResourceExhausted
        | Code::Internal
        | Code::Unknown
        | Code::Aborted => CallError::Unreachable(format!("{method}: {why} ({code:?})")),
        _ => CallError::Refused(format!("refused {method}: {why} ({code:?})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_crosses_to_protobuf_and_its_answer_back_as_protojson() {
        let params = serde_json::json!({"tenant": "t", "message": {"messageId": "m",
            "role": "ROLE_USER", "parts": [{"text": "hi"}, {"data": {"k": 1}}]}});
        let request: proto::SendMessageRequest =
            to_proto::<protojson::SendMessageRequest, _>(params).expect("fits");
        assert_eq!(request.tenant, "t");
        let message = request.message.expect("a message");
        assert_eq!((message.message_id.as_str(), message.parts.len()), ("m", 2));
        let task = proto::Task {
            id: "r-1".into(),
            context_id: "c".into(),
            status: Some(proto::TaskStatus {
                state: proto::TaskState::Completed as i32,
                ..Default::default()
            }),
            ..Default::default()
        };
        let json = to_json::<protojson::Task>(Ok(tonic::Response::new(task)), "GetTask")
            .expect("readable");
        assert_eq!(json["id"], "r-1");
        assert_eq!(json["status"]["state"], "TASK_STATE_COMPLETED");
        let refused = to_proto::<protojson::SendMessageRequest, proto::SendMessageRequest>(
            serde_json::json!({"message": {"role": 7}}),
        );
        assert!(matches!(refused, Err(CallError::Refused(_))), "{refused:?}");
    }

    #[test]
    fn statuses_of_a_server_in_trouble_count_against_the_breaker() {
        for code in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::ResourceExhausted,
        ] {
            let e = refusal(&tonic::Status::new(code, "busy"), "SendMessage");
            assert!(matches!(e, CallError::Unreachable(_)), "{code:?}: {e:?}");
        }
        let e = refusal(&tonic::Status::not_found("no task t"), "GetTask");
        assert_eq!(
            e,
            CallError::Refused("refused GetTask: no task t (NotFound)".into())
        );
    }
}
