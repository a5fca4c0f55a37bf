//! Idempotency claims: one per key and tenant within the window, refused atomically,
//! taken over past it, settled with a reply, forgotten by age.

use std::sync::Arc;

use super::*;
use crate::store::{Claim, Store, StoreError, WriteOp};

on_both_backends!(
    a_second_claim_within_the_window_refuses_its_whole_batch,
    a_claim_past_the_window_is_taken_over_and_old_claims_are_forgotten,
    claim_keys_are_listed_oldest_first_from_a_time_on,
);

fn claim(tenant: &TenantId, key: &str, task: &str, digest: &str, at: i64, window: i64) -> Claim {
    Claim {
        tenant: tenant.clone(),
        key: key.into(),
        context_id: context("thread-1"),
        task_id: task_id(task),
        digest: digest.into(),
        reply: None,
        created_at: Timestamp(at),
        taken_over_before: Timestamp(at - window),
    }
}

async fn a_second_claim_within_the_window_refuses_its_whole_batch(store: Arc<dyn Store>) {
    let (acme, other) = (tenant("acme"), tenant("other"));
    let ctx = context("thread-1");
    store
        .commit(&[
            WriteOp::ClaimKey(claim(&acme, "m-1", "task-1", "d1", 1000, 500)),
            WriteOp::UpsertThread(thread(&acme, &ctx, 1000)),
        ])
        .await
        .unwrap();
    // The same key again, with a thread of its own: nothing of it is written.
    let ctx2 = context("thread-2");
    let refused = store
        .commit(&[
            WriteOp::UpsertThread(thread(&acme, &ctx2, 1100)),
            WriteOp::ClaimKey(claim(&acme, "m-1", "task-2", "d2", 1100, 500)),
        ])
        .await;
    assert_eq!(refused, Err(StoreError::Duplicate("m-1".into())));
    assert!(store.load_thread(&acme, &ctx2, 10).await.unwrap().is_none());
    // Among other claims (a group commit's): named, and none of them is written.
    let refused = store
        .commit(&[
            WriteOp::ClaimKey(claim(&acme, "m-5", "task-5", "d5", 1100, 500)),
            WriteOp::ClaimKey(claim(&acme, "m-1", "task-2", "d2", 1100, 500)),
            WriteOp::ClaimKey(claim(&acme, "m-6", "task-6", "d6", 1100, 500)),
        ])
        .await;
    assert_eq!(refused, Err(StoreError::Duplicate("m-1".into())));
    assert_eq!(store.claim(&acme, "m-5").await.unwrap(), None);
    // Claims of other windows in one commit are each checked against their own.
    store
        .commit(&[
            WriteOp::ClaimKey(claim(&acme, "m-7", "task-7", "d7", 1100, 500)),
            WriteOp::ClaimKey(claim(&acme, "m-8", "task-8", "d8", 1100, 50)),
        ])
        .await
        .unwrap();
    assert!(store.claim(&acme, "m-8").await.unwrap().is_some());
    let kept = store
        .claim(&acme, "m-1")
        .await
        .unwrap()
        .expect("the first claim");
    // The read on the calling thread (SQLite's) finds the same claim.
    if let Some(inline) = store.claim_inline(&acme, "m-1") {
        assert_eq!(inline.unwrap().as_ref(), Some(&kept));
        assert_eq!(store.claim_inline(&acme, "m-2").unwrap().unwrap(), None);
    }
    assert_eq!(
        (kept.task_id.as_str(), kept.digest.as_str()),
        ("task-1", "d1")
    );
    // Keys are per tenant.
    store
        .commit(&[WriteOp::ClaimKey(claim(
            &other, "m-1", "task-9", "d9", 1100, 500,
        ))])
        .await
        .unwrap();
    assert_eq!(
        store
            .claim(&other, "m-1")
            .await
            .unwrap()
            .unwrap()
            .task_id
            .as_str(),
        "task-9"
    );
    // A reply settles the claim.
    let reply = message(&ctx, None, Role::Agent, "hello back");
    store
        .commit(&[WriteOp::SettleClaim {
            tenant: acme.clone(),
            key: "m-1".into(),
            reply: reply.clone(),
        }])
        .await
        .unwrap();
    assert_eq!(
        store.claim(&acme, "m-1").await.unwrap().unwrap().reply,
        Some(reply)
    );
}

async fn a_claim_past_the_window_is_taken_over_and_old_claims_are_forgotten(store: Arc<dyn Store>) {
    let acme = tenant("acme");
    store
        .commit(&[
            WriteOp::ClaimKey(claim(&acme, "old", "task-1", "d1", 1000, 500)),
            WriteOp::ClaimKey(claim(&acme, "new", "task-2", "d2", 1800, 500)),
        ])
        .await
        .unwrap();
    // At 2000 with a window of 500, "old" (1000) has expired: a new claim takes it.
    store
        .commit(&[WriteOp::ClaimKey(claim(
            &acme, "old", "task-3", "d3", 2000, 500,
        ))])
        .await
        .unwrap();
    assert_eq!(
        store
            .claim(&acme, "old")
            .await
            .unwrap()
            .unwrap()
            .task_id
            .as_str(),
        "task-3"
    );
    store
        .commit(&[WriteOp::ForgetClaims {
            before: Timestamp(1900),
        }])
        .await
        .unwrap();
    assert!(store.claim(&acme, "new").await.unwrap().is_none());
    assert!(store.claim(&acme, "old").await.unwrap().is_some());
}

async fn claim_keys_are_listed_oldest_first_from_a_time_on(store: Arc<dyn Store>) {
    let (acme, other) = (tenant("acme"), tenant("other"));
    for (tenant, key, at) in [
        (&acme, "k-1", 1000),
        (&other, "k-1", 1000),
        (&acme, "k-2", 2000),
        (&acme, "k-3", 3000),
        (&acme, "k-0", 500),
    ] {
        store
            .commit(&[WriteOp::ClaimKey(claim(tenant, key, "task", "d", at, 100))])
            .await
            .unwrap();
    }
    let keys = |rows: Vec<(TenantId, String, Timestamp)>| {
        rows.into_iter()
            .map(|(t, k, at)| format!("{}/{k}@{}", t.as_str(), at.millis()))
            .collect::<Vec<_>>()
    };
    let all = keys(store.claim_keys(Timestamp(1000), None, None).await.unwrap());
    assert_eq!(all.len(), 4, "{all:?}");
    assert!(all[..2].contains(&"acme/k-1@1000".to_owned()), "{all:?}");
    assert!(all[..2].contains(&"other/k-1@1000".to_owned()), "{all:?}");
    assert_eq!(all[2..], ["acme/k-2@2000", "acme/k-3@3000"]);
    assert_eq!(
        keys(
            store
                .claim_keys(Timestamp(1500), None, Some(1))
                .await
                .unwrap()
        ),
        ["acme/k-2@2000"]
    );
    assert_eq!(
        keys(
            store
                .claim_keys(Timestamp(1000), Some(Timestamp(1001)), None)
                .await
                .unwrap()
        )
        .len(),
        2
    );
    assert!(
        store
            .claim_keys(Timestamp(3001), None, None)
            .await
            .unwrap()
            .is_empty()
    );
}
