//! `grpc.health.v1.Health`: the readiness of `/health/ready`, for gRPC health checkers.
//!
//! The overall service (`""`) and `lf.a2a.v1.A2AService` are `SERVING` when the runtime
//! is ready (start-up recovery done), not draining, and the store answers; otherwise
//! `NOT_SERVING`. Any other name is `NOT_FOUND` (`Check`) or `SERVICE_UNKNOWN` (`Watch`).
//! `Watch` re-checks every `WATCH_EVERY` and sends a status only when it changed.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::Health;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use crate::runtime::Runtime;

/// The service name of the A2A binding, as health checkers name it.
pub const A2A_SERVICE: &str = "lf.a2a.v1.A2AService";
const WATCH_EVERY: Duration = Duration::from_secs(1);

pub struct HealthService {
    runtime: Arc<Runtime>,
}

impl HealthService {
    pub fn new(runtime: Arc<Runtime>) -> Self {
        Self { runtime }
    }
}

/// Whether the runtime serves, as `/health/ready` decides it.
async fn serving(runtime: &Runtime) -> ServingStatus {
    if runtime.lifecycle().store_silent() {
        // At once, as `/health/ready`; the probe ends the silence when answered.
        runtime.lifecycle().probe_store();
        return ServingStatus::NotServing;
    }
    if runtime.lifecycle().is_leaving()
        || !runtime.lifecycle().is_ready()
        || !runtime.lifecycle().check_store().await.up
    {
        ServingStatus::NotServing
    } else {
        ServingStatus::Serving
    }
}

fn known(service: &str) -> bool {
    service.is_empty() || service == A2A_SERVICE
}

fn response(status: ServingStatus) -> HealthCheckResponse {
    HealthCheckResponse {
        status: status as i32,
    }
}

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let service = &request.get_ref().service;
        if !known(service) {
            return Err(Status::not_found(format!("unknown service {service:?}")));
        }
        Ok(Response::new(response(serving(&self.runtime).await)))
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let known = known(&request.get_ref().service);
        let runtime = Arc::downgrade(&self.runtime);
        let updates = futures_util::stream::unfold(None, move |last| {
            let runtime = runtime.clone();
            async move {
                loop {
                    if last.is_some() {
                        tokio::time::sleep(WATCH_EVERY).await;
                    }
                    let now = match (known, runtime.upgrade()) {
                        (false, _) => ServingStatus::ServiceUnknown,
                        (true, Some(runtime)) => serving(&runtime).await,
                        // The runtime is gone: the server is stopping.
                        (true, None) => ServingStatus::NotServing,
                    };
                    if last != Some(now) {
                        return Some((Ok(response(now)), Some(now)));
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(updates)))
    }
}
