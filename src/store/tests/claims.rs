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
        known_unclaimed: false,
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

/// SQLite's claims are a log with their keys indexed in sorted runs (`sqlite/claims.rs`):
/// past `store.sqlite_claim_buffer` waiting claims each commit indexes a run, so at most
/// the buffer and one commit's claims wait; a waiting claim and an indexed one are found
/// and refused alike; a restart indexes what was waiting, and nothing is lost.
#[tokio::test]
async fn sqlite_claims_wait_for_their_index_entries_within_the_buffer_and_survive_a_restart() {
    use crate::store::testing::{query_text, test_config};
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = test_config(None, dir.path().to_path_buf());
    cfg.sqlite_claim_buffer = 1024;
    let count = |sql: &'static str| {
        let cfg = cfg.clone();
        async move {
            query_text(&cfg, sql).await[0][0]
                .as_deref()
                .unwrap()
                .parse::<usize>()
                .unwrap()
        }
    };
    let acme = tenant("acme");
    let key = |i: usize| {
        format!(
            "{:016x}-{i}",
            (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        )
    };
    let group = 150;
    let store = crate::store::open(&cfg).await.unwrap();
    for g in 0..20 {
        let claims: Vec<WriteOp> = (g * group..(g + 1) * group)
            .map(|i| WriteOp::ClaimKey(claim(&acme, &key(i), "task", "d", 1000 + i as i64, 500)))
            .collect();
        store.commit(&claims).await.unwrap();
        let logged = count("SELECT count(*) FROM idempotency_keys").await;
        let indexed = count("SELECT count(*) FROM idempotency_key_index").await;
        assert_eq!(logged, (g + 1) * group);
        assert!(
            logged - indexed < 1024 + group,
            "{logged} logged, {indexed} indexed"
        );
    }
    let indexed = count("SELECT count(*) FROM idempotency_key_index").await;
    assert!(indexed > 1000, "{indexed}");
    // Found and refused whether indexed or waiting (the newest claims wait).
    let all = 20 * group;
    for i in [0, 7, all / 2, all - 2, all - 1] {
        let found = store.claim(&acme, &key(i)).await.unwrap().unwrap();
        assert_eq!(found.created_at, Timestamp(1000 + i as i64));
        let again = claim(&acme, &key(i), "task-again", "d", 1000 + all as i64, 10_000);
        assert_eq!(
            store.commit(&[WriteOp::ClaimKey(again)]).await,
            Err(StoreError::Duplicate(key(i)))
        );
    }
    assert!(store.claim(&acme, "never").await.unwrap().is_none());
    assert!(
        store
            .claim(&tenant("other"), &key(0))
            .await
            .unwrap()
            .is_none()
    );
    // A key past its window is taken over: the newest claim is the one read.
    let taken = claim(&acme, &key(3), "task-new", "d", 100_000, 500);
    store.commit(&[WriteOp::ClaimKey(taken)]).await.unwrap();
    let found = store.claim(&acme, &key(3)).await.unwrap().unwrap();
    assert_eq!(found.task_id.as_str(), "task-new");

    // A restart indexes what was waiting: every claim found, none waiting.
    drop(store);
    let store = crate::store::open(&cfg).await.unwrap();
    assert_eq!(
        count("SELECT count(*) FROM idempotency_key_index").await,
        all + 1
    );
    for i in [0, all / 2, all - 1] {
        assert!(store.claim(&acme, &key(i)).await.unwrap().is_some(), "{i}");
    }
    let found = store.claim(&acme, &key(3)).await.unwrap().unwrap();
    assert_eq!(found.task_id.as_str(), "task-new");
    // New claims get new ids after the restart; forgetting drops rows and entries.
    store
        .commit(&[WriteOp::ClaimKey(claim(
            &acme, "late", "t", "d", 200_000, 500,
        ))])
        .await
        .unwrap();
    store
        .commit(&[WriteOp::ForgetClaims {
            before: Timestamp(150_000),
        }])
        .await
        .unwrap();
    assert_eq!(count("SELECT count(*) FROM idempotency_keys").await, 1);
    assert_eq!(
        count("SELECT count(*) FROM idempotency_key_index").await,
        0,
        "the late claim still waits"
    );
    assert!(store.claim(&acme, "late").await.unwrap().is_some());
    assert!(store.claim(&acme, &key(3)).await.unwrap().is_none());
}

/// A database written before claims were a log: each claim carried over, found, and
/// refused again within its window; the first start indexes them all.
#[tokio::test]
async fn sqlite_claims_of_the_release_before_are_carried_into_the_log() {
    use crate::store::testing::{query_text, test_config};
    let dir = tempfile::tempdir().unwrap();
    let cfg = test_config(None, dir.path().to_path_buf());
    // Migrations only: no writer or checkpoint thread still holding the file.
    tokio::task::spawn_blocking({
        let cfg = cfg.clone();
        move || crate::store::migrate(&cfg)
    })
    .await
    .unwrap()
    .unwrap();
    let old_rows = "INSERT INTO idempotency_keys (tenant_id, idem_key, context_id, task_id, \
         digest, reply, created_at) VALUES ('acme', 'k1', 'ctx', 't1', 'd1', NULL, 9), \
         ('acme', 'k2', 'ctx', 't2', 'd2', NULL, 5), ('other', 'k1', 'ctx', 't3', 'd3', NULL, 7);"
        .to_owned();
    tokio::task::spawn_blocking({
        let cfg = cfg.clone();
        move || crate::store::revert_through_then(&cfg, "20261126000000", &old_rows)
    })
    .await
    .unwrap()
    .unwrap();
    let store = crate::store::open(&cfg).await.unwrap();
    assert_eq!(
        query_text(
            &cfg,
            "SELECT id, tenant_id, idem_key FROM idempotency_keys ORDER BY id"
        )
        .await,
        [
            ["1", "acme", "k2"],
            ["2", "other", "k1"],
            ["3", "acme", "k1"]
        ]
        .map(|row| row.map(|v| Some(v.to_owned())).to_vec())
    );
    assert_eq!(
        query_text(&cfg, "SELECT count(*) FROM idempotency_key_index").await,
        [[Some("3".to_owned())]]
    );
    let acme = tenant("acme");
    let found = store.claim(&acme, "k1").await.unwrap().unwrap();
    assert_eq!(
        (found.task_id.as_str(), found.digest.as_str()),
        ("t1", "d1")
    );
    let found = store.claim(&tenant("other"), "k1").await.unwrap().unwrap();
    assert_eq!(found.task_id.as_str(), "t3");
    assert_eq!(
        store
            .commit(&[WriteOp::ClaimKey(claim(&acme, "k2", "t9", "d9", 10, 100))])
            .await,
        Err(StoreError::Duplicate("k2".into()))
    );
    // New claims follow the carried ones.
    store
        .commit(&[WriteOp::ClaimKey(claim(&acme, "k4", "t4", "d4", 10, 100))])
        .await
        .unwrap();
    assert_eq!(
        query_text(&cfg, "SELECT max(id) FROM idempotency_keys").await,
        [[Some("4".to_owned())]]
    );
}

/// `Claim::known_unclaimed` spares SQLite's writer its lookup — it is the file's only
/// writer, and the runtime vouches only for keys it holds and its filter rules out — and
/// changes nothing on Postgres, where other nodes claim too.
#[tokio::test]
async fn a_claim_vouched_for_is_not_looked_up_on_sqlite_and_is_on_postgres() {
    let vouched = |key: &str, task: &str| {
        let mut c = claim(&tenant("acme"), key, task, "d", 1000, 500);
        c.known_unclaimed = true;
        WriteOp::ClaimKey(c)
    };
    let sqlite = crate::store::testing::SqliteTestStore::open().await;
    let store = &sqlite.store;
    store.commit(&[vouched("v-1", "task-1")]).await.unwrap();
    store.commit(&[vouched("v-1", "task-2")]).await.unwrap();
    let newest = store.claim(&tenant("acme"), "v-1").await.unwrap().unwrap();
    assert_eq!(newest.task_id.as_str(), "task-2");
    let checked = WriteOp::ClaimKey(claim(&tenant("acme"), "v-1", "task-3", "d", 1000, 500));
    assert_eq!(
        store.commit(&[checked]).await,
        Err(StoreError::Duplicate("v-1".into()))
    );

    let Some(db) = crate::store::testing::PgTestDb::create().await else {
        return;
    };
    let store = db.open().await;
    store.commit(&[vouched("v-1", "task-1")]).await.unwrap();
    assert_eq!(
        store.commit(&[vouched("v-1", "task-2")]).await,
        Err(StoreError::Duplicate("v-1".into()))
    );
}
