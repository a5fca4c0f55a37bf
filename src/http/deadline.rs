//! The caller's deadline of an HTTP request ([`crate::cluster::deadline::HEADER`], in
//! milliseconds), as one middleware: the request runs within it, so a forward to the
//! thread's owner gives up when the caller does. A value that is not a positive whole
//! number of milliseconds is refused with 400 before anything runs.

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{HttpResponse, http::header::HeaderName};

use crate::cluster::deadline;

const HEADER: HeaderName = HeaderName::from_static(deadline::HEADER);

/// The middleware.
pub async fn scope(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let timeout = match req.headers().get(&HEADER) {
        None => None,
        Some(value) => match value
            .to_str()
            .map_err(|e| e.to_string())
            .and_then(deadline::parse_millis)
        {
            Ok(timeout) => Some(timeout),
            Err(reason) => {
                let refused = HttpResponse::BadRequest()
                    .content_type("text/plain; charset=utf-8")
                    .body(reason);
                return Ok(req.into_response(refused).map_into_right_body());
            }
        },
    };
    let response = deadline::within(timeout, next.call(req)).await?;
    Ok(response.map_into_left_body())
}

#[cfg(test)]
mod tests {
    use actix_web::middleware::from_fn;
    use actix_web::{App, HttpResponse, test, web};

    use super::*;

    async fn left() -> HttpResponse {
        HttpResponse::Ok().body(format!("{:?}", deadline::remaining().map(|d| d.as_secs())))
    }

    #[actix_web::test]
    async fn a_request_runs_within_the_deadline_its_header_names() {
        let app = test::init_service(
            App::new()
                .wrap(from_fn(scope))
                .route("/", web::get().to(left)),
        )
        .await;
        let named = test::TestRequest::get()
            .uri("/")
            .insert_header((deadline::HEADER, "90000"))
            .to_request();
        let body = test::call_and_read_body(&app, named).await;
        assert_eq!(body, "Some(89)");
        let none = test::TestRequest::get().uri("/").to_request();
        assert_eq!(test::call_and_read_body(&app, none).await, "None");
        let bad = test::TestRequest::get()
            .uri("/")
            .insert_header((deadline::HEADER, "soon"))
            .to_request();
        let refused = test::call_service(&app, bad).await;
        assert_eq!(refused.status(), 400);
        let body = test::read_body(refused).await;
        assert!(
            String::from_utf8_lossy(&body).contains(deadline::HEADER),
            "{body:?}"
        );
    }
}
