//! The janitor's and the start-up recovery's queries: threads due for expiry (across
//! tenants, paged by a keyset cursor), the conditional expiry write, and the most recently
//! updated threads that can still be continued.

use std::sync::Arc;

use super::*;
use crate::store::{DueThread, Store, ThreadStatus, WriteOp};

on_both_backends!(
    due_threads_are_the_active_ones_past_their_expiry_in_pages,
    expiry_marks_only_threads_still_due_and_only_the_tenants_own,
    recent_threads_are_the_continuable_ones_newest_first,
);

/// A thread of `tenant` updated at `updated` and expiring at `expires`.
fn at(tenant_name: &str, id: &str, updated: i64, expires: i64) -> WriteOp {
    let mut t = thread(&tenant(tenant_name), &context(id), updated);
    t.expires_at = Timestamp(expires);
    WriteOp::UpsertThread(t)
}

async fn status(store: &Arc<dyn Store>, tenant_name: &str, id: &str) -> ThreadStatus {
    store
        .load_thread(&tenant(tenant_name), &context(id), 0)
        .await
        .unwrap()
        .unwrap()
        .thread
        .status
}

async fn due_threads_are_the_active_ones_past_their_expiry_in_pages(store: Arc<dyn Store>) {
    let mut already = thread(&tenant("acme"), &context("gone"), 10);
    already.expires_at = Timestamp(50);
    already.status = ThreadStatus::Expired;
    store
        .commit(&[
            at("acme", "b", 10, 300),
            at("globex", "a", 10, 300),
            at("acme", "a", 10, 300),
            at("acme", "early", 10, 100),
            at("globex", "later", 10, 900),
            at("acme", "live", 10, 5_000),
            WriteOp::UpsertThread(already),
        ])
        .await
        .unwrap();
    let now = Timestamp(1_000);
    let mut seen = Vec::new();
    let mut after: Option<DueThread> = None;
    loop {
        let page = store
            .due_threads(ThreadStatus::Active, now, after.as_ref(), 2)
            .await
            .unwrap();
        assert!(page.len() <= 2);
        let last_page = page.len() < 2;
        after = page.last().cloned();
        seen.extend(page.into_iter().map(|d| {
            (
                d.expires_at.0,
                d.tenant.to_string(),
                d.thread_id.to_string(),
            )
        }));
        if last_page {
            break;
        }
    }
    let expected = [
        (100, "acme", "early"),
        (300, "acme", "a"),
        (300, "acme", "b"),
        (300, "globex", "a"),
        (900, "globex", "later"),
    ]
    .map(|(e, t, id)| (e, t.to_owned(), id.to_owned()));
    assert_eq!(seen, expected, "every due thread once, in expiry order");
    assert!(
        store
            .due_threads(ThreadStatus::Active, now, None, 0)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn expiry_marks_only_threads_still_due_and_only_the_tenants_own(store: Arc<dyn Store>) {
    store
        .commit(&[
            at("acme", "due", 10, 100),
            at("acme", "continued", 10, 5_000),
            at("globex", "due", 10, 100),
        ])
        .await
        .unwrap();
    store
        .commit(&[WriteOp::ExpireThreads {
            tenant: tenant("acme"),
            thread_ids: vec![context("due"), context("continued")],
            at: Timestamp(1_000),
        }])
        .await
        .unwrap();
    assert_eq!(status(&store, "acme", "due").await, ThreadStatus::Expired);
    assert_eq!(
        status(&store, "acme", "continued").await,
        ThreadStatus::Active,
        "its expiry moved past the janitor's clock: left alone"
    );
    assert_eq!(
        status(&store, "globex", "due").await,
        ThreadStatus::Active,
        "another tenant's thread of the same id is not touched"
    );
    // In one batch with an upsert that continues the thread, the upsert wins.
    store
        .commit(&[
            WriteOp::ExpireThreads {
                tenant: tenant("globex"),
                thread_ids: vec![context("due")],
                at: Timestamp(1_000),
            },
            at("globex", "due", 900, 5_000),
        ])
        .await
        .unwrap();
    assert_eq!(status(&store, "globex", "due").await, ThreadStatus::Active);
}

/// Newest: continued last, so expiring last (expiry moves with every message).
async fn recent_threads_are_the_continuable_ones_newest_first(store: Arc<dyn Store>) {
    let mut expired = thread(&tenant("acme"), &context("expired"), 800);
    expired.status = ThreadStatus::Expired;
    store
        .commit(&[
            at("acme", "old", 100, 5_100),
            at("globex", "newest", 700, 5_700),
            at("acme", "middle", 400, 5_400),
            at("acme", "overdue", 900, 999),
            WriteOp::UpsertThread(expired),
        ])
        .await
        .unwrap();
    let now = Timestamp(1_000);
    let keys = |v: Vec<(crate::domain::TenantId, crate::domain::ContextId)>| {
        v.into_iter()
            .map(|(t, c)| format!("{t}/{c}"))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        keys(store.recent_threads(now, 10).await.unwrap()),
        ["globex/newest", "acme/middle", "acme/old"]
    );
    assert_eq!(
        keys(store.recent_threads(now, 2).await.unwrap()),
        ["globex/newest", "acme/middle"]
    );
    assert!(store.recent_threads(now, 0).await.unwrap().is_empty());
}
