//! The public agent card, with `Cache-Control`, `ETag`, `Last-Modified` and `304 Not
//! Modified` for a matching `If-None-Match`; and the card signing key's JWK Set.

use actix_web::http::header::{self, HttpDate};
use actix_web::{HttpRequest, HttpResponse, web};

use crate::http::AppState;
use crate::http::observe::{Binding, tag};

pub async fn public_card(req: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let card = state.service.public_card();
    let matches = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',').any(|tag| {
                let tag = tag.trim().trim_start_matches("W/");
                tag == "*" || tag == card.etag
            })
        });
    let mut response = if matches {
        HttpResponse::NotModified()
    } else {
        HttpResponse::Ok()
    };
    response
        .insert_header((
            header::CACHE_CONTROL,
            format!("public, max-age={}", state.card_max_age_secs),
        ))
        .insert_header((header::ETAG, card.etag.clone()))
        .insert_header((header::LAST_MODIFIED, HttpDate::from(card.last_modified)));
    let mut response = if matches {
        response.finish()
    } else {
        response
            .content_type("application/json")
            .body(card.body.clone())
    };
    tag(&mut response, Binding::Other, "AgentCard");
    response
}

/// The public half of the card signing key as a JWK Set (`/.well-known/jwks.json`), with
/// the card's `Cache-Control`; the 404 of any unknown path when cards are not signed.
pub async fn signing_keys(req: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let Some(keys) = state.service.card_keys() else {
        return super::rest::not_found(req, state).await;
    };
    let mut response = HttpResponse::Ok()
        .insert_header((
            header::CACHE_CONTROL,
            format!("public, max-age={}", state.card_max_age_secs),
        ))
        .content_type("application/jwk-set+json")
        .body(keys.to_string());
    tag(&mut response, Binding::Other, "AgentCardKeys");
    response
}
