//! Tests of the model actors: pass-through, the circuit breaker and its reported state.

use super::*;
use crate::providers::{ScriptedProvider, Usage};

fn settings(failures: u32) -> ModelSettings {
    ModelSettings {
        breaker_failures: failures,
        breaker_cooldown_secs: 3600,
    }
}

async fn drain(stream: EventStream) -> Vec<ProviderEvent> {
    stream.collect().await
}

#[actix_web::test]
async fn streams_pass_through_unchanged() {
    let events = vec![
        ProviderEvent::TextDelta("Hello ".into()),
        ProviderEvent::TextDelta("world".into()),
        ProviderEvent::Usage(Usage {
            input_tokens: 3,
            output_tokens: 2,
        }),
        ProviderEvent::Done,
    ];
    let provider = Arc::new(ScriptedProvider::new("p", "m", [Ok(events.clone())]));
    let arbiter = Arbiter::new();
    let mut models = Models::default();
    models.add("p", provider.clone(), &settings(5), &arbiter.handle());
    let got = drain(
        models
            .generate("p", GenerateParams::default())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(got, events);
    assert_eq!(provider.requests().len(), 1);
    assert!(matches!(
        models.generate("nope", GenerateParams::default()).await,
        Err(ProviderError::Config(_))
    ));
    // The adapter goes through the same actor and names the provider's model.
    let adapter = models.adapter("p").unwrap();
    assert_eq!(adapter.name(), "m");
    assert!(models.adapter("nope").is_none());
    arbiter.stop();
}

#[actix_web::test]
async fn repeated_failures_open_the_circuit_and_calls_fail_fast() {
    let failure = || {
        Err(ProviderError::Http {
            status: 503,
            body: "overloaded".into(),
        })
    };
    let mid_stream = Ok(vec![
        ProviderEvent::TextDelta("partial".into()),
        ProviderEvent::Error(ProviderError::StreamEnded),
    ]);
    let provider = Arc::new(ScriptedProvider::new(
        "p",
        "m",
        [failure(), mid_stream, Ok(vec![ProviderEvent::Done])],
    ));
    let arbiter = Arbiter::new();
    let addr = Models::spawn(provider.clone(), &settings(2), &arbiter.handle());
    // Two failures: one before the stream, one inside it.
    assert!(
        addr.send(Generate(GenerateParams::default(), tracing::Span::none()))
            .await
            .unwrap()
            .is_err()
    );
    let stream = addr
        .send(Generate(GenerateParams::default(), tracing::Span::none()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(drain(stream).await.len(), 2);
    // The failure report travels as a message; the next call queues behind it.
    let third = addr
        .send(Generate(GenerateParams::default(), tracing::Span::none()))
        .await
        .unwrap();
    let error = third.err();
    assert!(
        matches!(error, Some(ProviderError::CircuitOpen { .. })),
        "{error:?}"
    );
    assert_eq!(
        provider.requests().len(),
        2,
        "the open circuit did not call the provider"
    );
    let breaker = addr.send(GetBreaker).await.unwrap();
    assert!(
        matches!(breaker.circuit, Circuit::Open { .. }),
        "{breaker:?}"
    );
    assert_eq!(breaker.consecutive_failures, 2);
    assert_eq!(breaker.last_error, Some("stream_ended"));
    assert_eq!(
        provider.requests().len(),
        2,
        "asking for the breaker did not call the provider"
    );
    arbiter.stop();
}

#[actix_web::test]
async fn after_the_cooldown_the_circuit_is_half_open_and_a_success_closes_it() {
    let provider = Arc::new(ScriptedProvider::new(
        "p",
        "m",
        [Err(ProviderError::Timeout), Ok(vec![ProviderEvent::Done])],
    ));
    let arbiter = Arbiter::new();
    let mut models = Models::default();
    let no_cooldown = ModelSettings {
        breaker_failures: 1,
        breaker_cooldown_secs: 0,
    };
    models.add("p", provider.clone(), &no_cooldown, &arbiter.handle());
    let closed = models.breakers(Duration::from_secs(5)).await;
    assert_eq!(
        closed,
        vec![(
            "p".to_owned(),
            Some(Breaker {
                circuit: Circuit::Closed,
                consecutive_failures: 0,
                last_error: None,
            })
        )]
    );
    assert!(
        models
            .generate("p", GenerateParams::default())
            .await
            .is_err()
    );
    let open = models.breakers(Duration::from_secs(5)).await;
    let breaker = open[0].1.clone().unwrap();
    assert_eq!(breaker.circuit, Circuit::HalfOpen, "{breaker:?}");
    assert_eq!(breaker.last_error, Some("timeout"));
    let stream = models
        .generate("p", GenerateParams::default())
        .await
        .unwrap();
    drain(stream).await;
    let closed = models.breakers(Duration::from_secs(5)).await;
    let breaker = closed[0].1.clone().unwrap();
    assert_eq!(breaker.circuit, Circuit::Closed);
    assert_eq!(breaker.consecutive_failures, 0);
    assert_eq!(
        breaker.last_error,
        Some("timeout"),
        "the last error stays visible"
    );
    arbiter.stop();
}

#[actix_web::test]
async fn a_success_resets_the_failure_count() {
    let fail = || Err(ProviderError::Timeout);
    let ok = || Ok(vec![ProviderEvent::Done]);
    let provider = Arc::new(ScriptedProvider::new(
        "p",
        "m",
        [fail(), ok(), fail(), ok()],
    ));
    let arbiter = Arbiter::new();
    let addr = Models::spawn(provider.clone(), &settings(2), &arbiter.handle());
    for _ in 0..4 {
        if let Ok(stream) = addr
            .send(Generate(GenerateParams::default(), tracing::Span::none()))
            .await
            .unwrap()
        {
            drain(stream).await;
        }
    }
    assert_eq!(
        provider.requests().len(),
        4,
        "never two failures in a row: never open"
    );
    arbiter.stop();
}
