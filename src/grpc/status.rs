//! A service [`Error`] as a gRPC status: the code of the A2A 1.0.1 table (`a2a::errors`),
//! the client-facing message, and a `google.rpc.ErrorInfo` detail with the same reason
//! and metadata the other bindings send; a `google.rpc.RetryInfo` with the delay when
//! the client should come back later (rate limited, unavailable).

use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::a2a::errors::{ERROR_DOMAIN, map_error};
use crate::error::Error;

/// The status of `err` (already shaped for the client by `Service::report`).
pub fn status(err: &Error) -> Status {
    let mapped = map_error(err);
    let mut details = ErrorDetails::with_error_info(
        mapped.reason,
        ERROR_DOMAIN,
        mapped
            .metadata
            .into_iter()
            .collect::<std::collections::HashMap<_, _>>(),
    );
    if let Error::RateLimited {
        retry_after_secs, ..
    }
    | Error::Unavailable {
        retry_after_secs, ..
    } = err
    {
        details.set_retry_info(Some(Duration::from_secs(*retry_after_secs)));
    }
    Status::with_error_details(code(mapped.grpc_status), mapped.message, details)
}

/// The code named in the error table. Every name the table uses is listed; a name it
/// does not use cannot come out of `map_error` (a test walks every variant).
pub fn code(name: &str) -> Code {
    match name {
        "INVALID_ARGUMENT" => Code::InvalidArgument,
        "NOT_FOUND" => Code::NotFound,
        "FAILED_PRECONDITION" => Code::FailedPrecondition,
        "UNAUTHENTICATED" => Code::Unauthenticated,
        "PERMISSION_DENIED" => Code::PermissionDenied,
        "RESOURCE_EXHAUSTED" => Code::ResourceExhausted,
        "UNAVAILABLE" => Code::Unavailable,
        "ABORTED" => Code::Aborted,
        "UNIMPLEMENTED" => Code::Unimplemented,
        "ALREADY_EXISTS" => Code::AlreadyExists,
        "OUT_OF_RANGE" => Code::OutOfRange,
        "DEADLINE_EXCEEDED" => Code::DeadlineExceeded,
        "CANCELLED" => Code::Cancelled,
        "DATA_LOSS" => Code::DataLoss,
        "OK" => Code::Ok,
        _ => Code::Internal,
    }
}

/// The canonical name of a code, as the metrics' `status` label of the gRPC binding.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::a2a::errors::tests::all_variants;

    #[test]
    fn every_error_has_a_known_code_and_its_error_info() {
        for err in all_variants() {
            let mapped = map_error(&err);
            let status = status(&err);
            assert_eq!(code_name(status.code()), mapped.grpc_status, "{err:?}");
            assert!(!status.message().contains("hunter2"), "{err:?}");
            let info = status.get_details_error_info().expect("ErrorInfo");
            assert_eq!(info.reason, mapped.reason);
            assert_eq!(info.domain, ERROR_DOMAIN);
        }
    }

    #[test]
    fn a_rate_limit_carries_its_delay() {
        let status = status(&Error::RateLimited {
            retry_after_secs: 7,
            scope: "tenant acme".into(),
        });
        assert_eq!(status.code(), Code::ResourceExhausted);
        let retry = status.get_details_retry_info().expect("RetryInfo");
        assert_eq!(retry.retry_delay, Some(Duration::from_secs(7)));
        let info = status.get_details_error_info().unwrap();
        assert_eq!(info.metadata["retryAfterSeconds"], "7");
    }
}
