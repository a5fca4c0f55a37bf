//! `lf.a2a.v1.A2AService` routed to [`A2a`]'s methods: what the generated
//! `A2aServiceServer` does, but with our codec, the one thing it cannot be told.
//!
//! The generated server builds tonic's `ProstCodec` for every call, which answers a
//! request that is not protobuf `INTERNAL` before the service sees it. This router runs
//! each call through tonic's own `Grpc` (framing, size limit, trailers, no compression:
//! the generated server's defaults) over [`A2aCodec`], whose decoder hands such a request
//! on as an error; a method gets the message when it decoded, and
//! [`A2a::refuse`] answers the error when it did not. The RPCs themselves stay the
//! generated trait's, so the compiler still checks every method's types against
//! `a2a.proto`.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use a2a_pb::proto::{self, a2a_service_server::A2aService, a2a_service_server::SERVICE_NAME};
use prost::Message;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::{Grpc, NamedService};
use tonic::{Request, Response, Status};

use super::codec::{A2aCodec, Decoded};
use super::service::A2a;
use crate::a2a::Operation;

/// The answer to one call.
type Answer = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

/// `lf.a2a.v1.A2AService`, ready for tonic's `Routes`.
#[derive(Clone)]
pub struct A2aRouter {
    a2a: Arc<A2a>,
    /// `server.max_body_bytes`: a larger message is refused by the framing, before it is
    /// read (`OUT_OF_RANGE`, tonic's status for it).
    max_message_bytes: usize,
}

impl A2aRouter {
    pub fn new(a2a: A2a, max_message_bytes: usize) -> Self {
        Self {
            a2a: Arc::new(a2a),
            max_message_bytes,
        }
    }

    fn grpc<R, M>(&self) -> Grpc<A2aCodec<R, M>>
    where
        R: Message + Send + 'static,
        M: Message + Default + Send + 'static,
    {
        Grpc::new(A2aCodec::default())
            .apply_max_message_size_config(Some(self.max_message_bytes), None)
    }

    /// A unary call of `op`, answered by `method` when its message decoded.
    fn unary<M, R, F, Fut>(&self, op: Operation, request: http::Request<Body>, method: F) -> Answer
    where
        M: Message + Default + Send + 'static,
        R: Message + Send + 'static,
        F: Fn(Arc<A2a>, Request<M>) -> Fut + Copy + Send + 'static,
        Fut: Future<Output = Result<Response<R>, Status>> + Send + 'static,
    {
        let mut grpc = self.grpc::<R, M>();
        let a2a = self.a2a.clone();
        Box::pin(async move {
            let service = tower::service_fn(move |call: Request<Decoded<M>>| {
                dispatch(a2a.clone(), op, call, method)
            });
            Ok(grpc.unary(service, request).await)
        })
    }

    /// A server-streaming call of `op`, answered by `method` when its message decoded.
    fn streaming<M, F, Fut>(&self, op: Operation, request: http::Request<Body>, method: F) -> Answer
    where
        M: Message + Default + Send + 'static,
        F: Fn(Arc<A2a>, Request<M>) -> Fut + Copy + Send + 'static,
        Fut:
            Future<Output = Result<Response<super::service::EventStream>, Status>> + Send + 'static,
    {
        let mut grpc = self.grpc::<proto::StreamResponse, M>();
        let a2a = self.a2a.clone();
        Box::pin(async move {
            let service = tower::service_fn(move |call: Request<Decoded<M>>| {
                dispatch(a2a.clone(), op, call, method)
            });
            Ok(grpc.server_streaming(service, request).await)
        })
    }
}

/// Hands a decoded message to `method`, or the decoding error to [`A2a::refuse`].
async fn dispatch<M, T, F, Fut>(
    a2a: Arc<A2a>,
    op: Operation,
    call: Request<Decoded<M>>,
    method: F,
) -> Result<Response<T>, Status>
where
    F: Fn(Arc<A2a>, Request<M>) -> Fut,
    Fut: Future<Output = Result<Response<T>, Status>>,
{
    let (metadata, extensions, message) = call.into_parts();
    match message {
        Ok(message) => method(a2a, Request::from_parts(metadata, extensions, message)).await,
        // Boxed: inline, the refusal's future would make every call's future as large as
        // it, and a call's future is copied whole where it is moved.
        Err(error) => {
            Err(
                Box::pin(a2a.refuse(op, Request::from_parts(metadata, extensions, ()), error))
                    .await,
            )
        }
    }
}

impl NamedService for A2aRouter {
    const NAME: &'static str = SERVICE_NAME;
}

impl tower::Service<http::Request<Body>> for A2aRouter {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Answer;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Answer {
        let method = request
            .uri()
            .path()
            .strip_prefix('/')
            .and_then(|path| path.strip_prefix(SERVICE_NAME))
            .and_then(|rest| rest.strip_prefix('/'))
            .unwrap_or_default();
        match method {
            "SendMessage" => self.unary(Operation::SendMessage, request, |a2a, r| async move {
                a2a.send_message(r).await
            }),
            "SendStreamingMessage" => self.streaming(
                Operation::SendStreamingMessage,
                request,
                |a2a, r| async move { a2a.send_streaming_message(r).await },
            ),
            "GetTask" => self.unary(Operation::GetTask, request, |a2a, r| async move {
                a2a.get_task(r).await
            }),
            "ListTasks" => self.unary(Operation::ListTasks, request, |a2a, r| async move {
                a2a.list_tasks(r).await
            }),
            "CancelTask" => self.unary(Operation::CancelTask, request, |a2a, r| async move {
                a2a.cancel_task(r).await
            }),
            "SubscribeToTask" => {
                self.streaming(Operation::SubscribeToTask, request, |a2a, r| async move {
                    a2a.subscribe_to_task(r).await
                })
            }
            "CreateTaskPushNotificationConfig" => {
                self.unary(Operation::CreatePushConfig, request, |a2a, r| async move {
                    a2a.create_task_push_notification_config(r).await
                })
            }
            "GetTaskPushNotificationConfig" => {
                self.unary(Operation::GetPushConfig, request, |a2a, r| async move {
                    a2a.get_task_push_notification_config(r).await
                })
            }
            "ListTaskPushNotificationConfigs" => {
                self.unary(Operation::ListPushConfigs, request, |a2a, r| async move {
                    a2a.list_task_push_notification_configs(r).await
                })
            }
            "GetExtendedAgentCard" => self.unary(
                Operation::GetExtendedAgentCard,
                request,
                |a2a, r| async move { a2a.get_extended_agent_card(r).await },
            ),
            "DeleteTaskPushNotificationConfig" => {
                self.unary(Operation::DeletePushConfig, request, |a2a, r| async move {
                    a2a.delete_task_push_notification_config(r).await
                })
            }
            _ => Box::pin(async { Ok(Status::unimplemented("").into_http()) }),
        }
    }
}
