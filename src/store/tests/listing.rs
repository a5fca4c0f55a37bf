//! `list_tasks`: order, keyset paging, filters, history trimming and artifacts.

use std::collections::HashSet;
use std::sync::Arc;

use super::*;
use crate::domain::{Artifact, ListTasksQuery};
use crate::store::{Store, WriteOp};

on_both_backends!(
    tasks_list_newest_status_first_with_ties_broken_by_id,
    ties_follow_the_byte_order_of_ids_whatever_the_locale,
    cursor_paging_covers_every_task_exactly_once,
    filters_narrow_the_list_and_its_total,
    history_is_trimmed_and_artifacts_omitted_on_request,
    page_tokens_that_do_not_decode_are_refused,
);

/// `(id, context, state, status timestamp)` of the seeded tasks; four share timestamp 300.
const SEED: [(&str, &str, TaskState, i64); 8] = [
    ("t-01", "ctx-a", TaskState::Completed, 100),
    ("t-02", "ctx-b", TaskState::Working, 300),
    ("t-03", "ctx-a", TaskState::Completed, 300),
    ("t-04", "ctx-a", TaskState::Working, 300),
    ("t-05", "ctx-b", TaskState::Failed, 200),
    ("t-06", "ctx-a", TaskState::InputRequired, 500),
    ("t-07", "ctx-b", TaskState::Completed, 300),
    ("t-08", "ctx-a", TaskState::Working, 50),
];

/// Every id, in the order `list_tasks` must return them.
const ORDER: [&str; 8] = [
    "t-06", "t-07", "t-04", "t-03", "t-02", "t-05", "t-01", "t-08",
];

/// Stores the seed tasks, each with three history messages and one artifact.
async fn seed(store: &dyn Store) -> TenantId {
    let t = tenant("acme");
    let mut ops = vec![
        WriteOp::UpsertThread(thread(&t, &context("ctx-a"), 10)),
        WriteOp::UpsertThread(thread(&t, &context("ctx-b"), 10)),
    ];
    let mut next_seq = std::collections::HashMap::new();
    for (id, ctx, state, ts) in SEED {
        let ctx = context(ctx);
        let mut task = task(&t, &ctx, id, state, ts);
        task.apply_artifact(
            &Artifact::new(vec![Part::text(format!("{id} result"))]),
            false,
            Timestamp(ts),
        );
        let history: Vec<_> = (1..=3)
            .map(|n| {
                message(
                    &ctx,
                    Some(&task.id),
                    Role::User,
                    &format!("{id} message {n}"),
                )
            })
            .collect();
        let seq = next_seq.entry(ctx.clone()).or_insert(1);
        ops.push(WriteOp::UpsertTask(task.clone().into()));
        ops.extend(history_ops(&t, &task, *seq, &history));
        *seq += 3;
    }
    store.commit(&ops).await.unwrap();
    t
}

fn ids(tasks: &[Task]) -> Vec<&str> {
    tasks.iter().map(|t| t.id.as_str()).collect()
}

fn query(page_size: u32) -> ListTasksQuery {
    ListTasksQuery {
        page_size,
        ..Default::default()
    }
}

async fn tasks_list_newest_status_first_with_ties_broken_by_id(store: Arc<dyn Store>) {
    let t = seed(&*store).await;
    let page = store.list_tasks(&t, &query(100)).await.unwrap().unwrap();
    assert_eq!(ids(&page.tasks), ORDER);
    assert_eq!(page.total_size, 8);
    assert_eq!(page.page_size, 100);
    assert_eq!(page.next_page_token, "", "a single page is the last page");
}

async fn ties_follow_the_byte_order_of_ids_whatever_the_locale(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("ctx-a");
    // A linguistic collation would sort these case- and punctuation-insensitively.
    let ops: Vec<_> = ["B-2", "a-1", "_x", "b-0"]
        .into_iter()
        .map(|id| WriteOp::UpsertTask(task(&t, &ctx, id, TaskState::Working, 100).into()))
        .collect();
    store.commit(&ops).await.unwrap();
    let mut q = query(2);
    let first = store.list_tasks(&t, &q).await.unwrap().unwrap();
    q.page_token = Some(first.next_page_token);
    let second = store.list_tasks(&t, &q).await.unwrap().unwrap();
    assert_eq!(ids(&first.tasks), ["b-0", "a-1"]);
    assert_eq!(ids(&second.tasks), ["_x", "B-2"]);
}

async fn cursor_paging_covers_every_task_exactly_once(store: Arc<dyn Store>) {
    let t = seed(&*store).await;
    let mut seen = Vec::new();
    let mut pages = Vec::new();
    let mut q = query(3);
    loop {
        let page = store.list_tasks(&t, &q).await.unwrap().unwrap();
        assert_eq!(page.total_size, 8, "the total ignores paging");
        pages.push(page.tasks.len());
        seen.extend(page.tasks.iter().map(|t| t.id.as_str().to_owned()));
        if page.next_page_token.is_empty() {
            break;
        }
        assert!(pages.len() < 10, "paging does not terminate");
        q.page_token = Some(page.next_page_token);
    }
    assert_eq!(pages, [3, 3, 2]);
    assert_eq!(
        seen, ORDER,
        "no duplicates, no gaps, ties split across pages"
    );
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 8);

    // Exactly page_size tasks left: the page before the end must not promise another.
    let mut q = query(4);
    let first = store.list_tasks(&t, &q).await.unwrap().unwrap();
    q.page_token = Some(first.next_page_token);
    let second = store.list_tasks(&t, &q).await.unwrap().unwrap();
    assert_eq!(ids(&second.tasks), ORDER[4..]);
    assert_eq!(second.next_page_token, "");
}

async fn filters_narrow_the_list_and_its_total(store: Arc<dyn Store>) {
    let t = seed(&*store).await;
    let check = async |q: ListTasksQuery, expected: &[&str]| {
        let page = store.list_tasks(&t, &q).await.unwrap().unwrap();
        assert_eq!(ids(&page.tasks), expected, "{q:?}");
        assert_eq!(page.total_size, expected.len() as u64, "{q:?}");
    };
    let by_context = ListTasksQuery {
        context_id: Some(context("ctx-b")),
        ..query(100)
    };
    check(by_context, &["t-07", "t-02", "t-05"]).await;
    let by_state = ListTasksQuery {
        status: Some(TaskState::Completed),
        ..query(100)
    };
    check(by_state, &["t-07", "t-03", "t-01"]).await;
    // `>=`: the four tasks at exactly 300 are in.
    let since = ListTasksQuery {
        status_timestamp_after: Some(Timestamp(300)),
        ..query(100)
    };
    check(since, &["t-06", "t-07", "t-04", "t-03", "t-02"]).await;
    let combined = ListTasksQuery {
        context_id: Some(context("ctx-a")),
        status: Some(TaskState::Working),
        status_timestamp_after: Some(Timestamp(60)),
        ..query(100)
    };
    check(combined, &["t-04"]).await;
    let nothing = ListTasksQuery {
        status: Some(TaskState::Rejected),
        ..query(100)
    };
    check(nothing, &[]).await;

    // Filters and the cursor together: the total still counts every match.
    let q = ListTasksQuery {
        context_id: Some(context("ctx-a")),
        ..query(2)
    };
    let first = store.list_tasks(&t, &q).await.unwrap().unwrap();
    assert_eq!(
        (ids(&first.tasks), first.total_size),
        (vec!["t-06", "t-04"], 5)
    );
    let q = ListTasksQuery {
        page_token: Some(first.next_page_token),
        ..q
    };
    let second = store.list_tasks(&t, &q).await.unwrap().unwrap();
    assert_eq!(
        (ids(&second.tasks), second.total_size),
        (vec!["t-03", "t-01"], 5)
    );
}

async fn history_is_trimmed_and_artifacts_omitted_on_request(store: Arc<dyn Store>) {
    let t = seed(&*store).await;
    let texts = |task: &Task| task.history.iter().map(Message::text).collect::<Vec<_>>();

    let full = store.list_tasks(&t, &query(100)).await.unwrap().unwrap();
    for task in &full.tasks {
        assert_eq!(task.history.len(), 3, "no history_length: everything");
        assert!(task.artifacts.is_empty(), "artifacts only when asked for");
    }
    assert_eq!(
        texts(&full.tasks[0]),
        ["t-06 message 1", "t-06 message 2", "t-06 message 3"]
    );

    let none = ListTasksQuery {
        history_length: Some(0),
        ..query(100)
    };
    let page = store.list_tasks(&t, &none).await.unwrap().unwrap();
    assert!(page.tasks.iter().all(|task| task.history.is_empty()));

    let two = ListTasksQuery {
        history_length: Some(2),
        include_artifacts: true,
        ..query(100)
    };
    let page = store.list_tasks(&t, &two).await.unwrap().unwrap();
    assert_eq!(
        texts(&page.tasks[0]),
        ["t-06 message 2", "t-06 message 3"],
        "the newest two"
    );
    for task in &page.tasks {
        assert_eq!(task.history.len(), 2);
        assert_eq!(task.artifacts.len(), 1);
        assert_eq!(
            task.artifacts[0].parts[0].as_text(),
            Some(format!("{} result", task.id).as_str())
        );
    }

    let many = ListTasksQuery {
        history_length: Some(50),
        ..query(100)
    };
    let page = store.list_tasks(&t, &many).await.unwrap().unwrap();
    assert!(page.tasks.iter().all(|task| task.history.len() == 3));
}

async fn page_tokens_that_do_not_decode_are_refused(store: Arc<dyn Store>) {
    let t = seed(&*store).await;
    for token in ["garbage!", "AAAA", "bm90LWEtY3Vyc29y"] {
        let q = ListTasksQuery {
            page_token: Some(token.into()),
            ..query(10)
        };
        assert_eq!(store.list_tasks(&t, &q).await, Ok(None), "{token}");
    }
    let empty = ListTasksQuery {
        page_token: Some(String::new()),
        ..query(100)
    };
    let page = store.list_tasks(&t, &empty).await.unwrap().unwrap();
    assert_eq!(ids(&page.tasks), ORDER, "an empty token is the first page");
}
