//! Start-up recovery (contract B.2, B.5): after a restart the most recently continued
//! active threads (those that expire last) are loaded into memory in the background — up to
//! `threads.recover_eagerly`, never beyond `threads.max_resident_actors` — and the rest
//! load on their first request.

use agent_a2a::config::Settings;
use agent_a2a::domain::{ContextId, TenantId, Timestamp};
use agent_a2a::runtime::Recovery;
use agent_a2a::store::{ThreadRecord, ThreadStatus, WriteOp};
use serde_json::json;

use crate::support::{Backend, TestApp, spawn_app, spawn_app_in, user_message};

const HOUR_MS: i64 = 3_600_000;

/// A server whose store holds threads `t0` (oldest) … `t3` (newest), an expired thread
/// newer than all of them, and one past its expiry; restarted with `tweak`.
async fn restarted_with_threads(tweak: impl FnOnce(&mut Settings)) -> TestApp {
    let app = spawn_app().await;
    let now = Timestamp::now().0;
    let thread = |id: &str, updated: i64, expires: i64, status| ThreadRecord {
        tenant: TenantId::default_tenant(),
        thread_id: ContextId::parse(id).unwrap(),
        created_at: Timestamp(updated),
        updated_at: Timestamp(updated),
        expires_at: Timestamp(expires),
        status,
        conversation_context: json!({}),
    };
    let mut ops: Vec<WriteOp> = (0..4)
        .map(|i| {
            let updated = now - (10 - i) * 1_000;
            // A thread's expiry moves with its last message.
            WriteOp::UpsertThread(thread(
                &format!("t{i}"),
                updated,
                updated + HOUR_MS,
                ThreadStatus::Active,
            ))
        })
        .collect();
    ops.push(WriteOp::UpsertThread(thread(
        "expired",
        now,
        now + HOUR_MS,
        ThreadStatus::Expired,
    )));
    ops.push(WriteOp::UpsertThread(thread(
        "overdue",
        now,
        now - 1,
        ThreadStatus::Active,
    )));
    app.runtime.store().commit(&ops).await.unwrap();
    let dir = app.stop().await;
    spawn_app_in(dir, Backend::Sqlite, tweak).await
}

fn resident(app: &TestApp) -> Vec<String> {
    ["t0", "t1", "t2", "t3", "expired", "overdue"]
        .into_iter()
        .filter(|id| {
            app.runtime
                .is_resident(&TenantId::default_tenant(), &ContextId::parse(*id).unwrap())
        })
        .map(str::to_owned)
        .collect()
}

#[actix_web::test]
async fn the_most_recently_continued_active_threads_are_loaded_eagerly() {
    let app = restarted_with_threads(|s| s.threads.recover_eagerly = 2).await;
    assert_eq!(
        app.runtime.lifecycle().recovered().await,
        Recovery::Done {
            recovered: 2,
            failed: 0
        }
    );
    assert_eq!(resident(&app), ["t2", "t3"]);
    assert_eq!(app.get("/health/ready").await.status(), 200);
    // The others load on their first request, as always.
    let mut m = user_message("complete");
    m["contextId"] = json!("t0");
    let r = app.rpc("SendMessage", json!({"message": m})).await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
    assert_eq!(resident(&app), ["t0", "t2", "t3"]);
}

#[actix_web::test]
async fn recovery_stops_at_the_resident_actor_limit() {
    let app = restarted_with_threads(|s| {
        s.threads.recover_eagerly = 10;
        s.threads.max_resident_actors = 3;
    })
    .await;
    assert_eq!(
        app.runtime.lifecycle().recovered().await,
        Recovery::Done {
            recovered: 3,
            failed: 0
        }
    );
    assert_eq!(resident(&app), ["t1", "t2", "t3"]);
    assert_eq!(app.runtime.resident_threads(), 3);
}

#[actix_web::test]
async fn no_eager_recovery_when_it_is_turned_off() {
    let app = restarted_with_threads(|s| s.threads.recover_eagerly = 0).await;
    assert_eq!(
        app.runtime.lifecycle().recovered().await,
        Recovery::Done {
            recovered: 0,
            failed: 0
        }
    );
    assert!(resident(&app).is_empty());
    assert_eq!(app.get("/health/ready").await.status(), 200);
}

/// A task whose turn was cut off (here: the runtime stopped under a running turn, as in a
/// crash or a shutdown past its deadline) is failed with `INTERRUPTED` when its thread
/// loads again — by recovery, or by the first request — instead of staying `working`.
#[actix_web::test]
async fn a_task_cut_off_by_a_stop_fails_as_interrupted_when_its_thread_loads() {
    for recover_eagerly in [1000, 0] {
        let app = spawn_app().await;
        let task = app.start_waiting_task().await;
        let dir = app.stop().await;
        let app = spawn_app_in(dir, Backend::Sqlite, |s| {
            s.threads.recover_eagerly = recover_eagerly;
        })
        .await;
        if recover_eagerly == 0 {
            // Not loaded yet: the store still has the task as last committed (submitted,
            // or working if the turn got that far before the stop). A subscription loads it.
            let r = app.rpc("GetTask", json!({"id": task})).await;
            let state = r["result"]["status"]["state"].as_str().unwrap_or_default();
            assert!(
                ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"].contains(&state),
                "{r}"
            );
            let _ = app.subscribe(&task, None).await;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let failed = loop {
            let r = app.rpc("GetTask", json!({"id": task})).await;
            if r["result"]["status"]["state"] == "TASK_STATE_FAILED" {
                break r;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "still not failed: {r}"
            );
            tokio::task::yield_now().await;
        };
        let status = &failed["result"]["status"]["message"];
        assert_eq!(status["metadata"]["errorCode"], "INTERRUPTED", "{failed}");
        // A message to the thread is served as usual afterwards.
        let context = failed["result"]["contextId"].as_str().unwrap().to_owned();
        let mut next = user_message("complete");
        next["contextId"] = json!(context);
        let r = app.rpc("SendMessage", json!({"message": next})).await;
        assert_eq!(
            r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{r}"
        );
        app.stop().await;
    }
}
