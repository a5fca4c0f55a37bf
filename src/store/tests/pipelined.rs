//! Postgres reads whose queries do not depend on each other go out together: a thread's
//! reload (the thread, its recent messages, its open tasks) is one round trip, not three,
//! and its open tasks' last events and push configs one more.
//! Counted on the wire, by a relay between the store and the server that notes each time
//! the client speaks again after the server has answered.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{
    context, event_op, history_ops, message, record, status_event, task, task_id, tenant, thread,
};
use crate::domain::{Role, TaskState};
use crate::store::postgres::PgStore;
use crate::store::testing::PgTestDb;
use crate::store::{Store, WriteOp};

/// Client turns on every connection through the relay: a turn starts when the client
/// sends after the server last spoke (or first).
#[derive(Default)]
struct Turns(AtomicU64);

/// A relay on a loopback port to `upstream` (`host:port`) that counts the client's turns.
async fn relay(upstream: String, turns: Arc<Turns>) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = TcpStream::connect(&upstream).await.unwrap();
            let turns = Arc::clone(&turns);
            tokio::spawn(async move {
                // Whether the server spoke last on this connection (the client starts).
                let server_last = Arc::new(std::sync::atomic::AtomicBool::new(true));
                let (mut client_r, mut client_w) = client.into_split();
                let (mut server_r, mut server_w) = server.into_split();
                let up = {
                    let server_last = Arc::clone(&server_last);
                    async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        loop {
                            let n = client_r.read(&mut buf).await.unwrap_or(0);
                            if n == 0 || server_w.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                            if server_last.swap(false, Ordering::SeqCst) {
                                turns.0.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                };
                let down = async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = server_r.read(&mut buf).await.unwrap_or(0);
                        // Noted before it is passed on: the client cannot answer it sooner.
                        server_last.store(true, Ordering::SeqCst);
                        if n == 0 || client_w.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                };
                tokio::join!(up, down);
            });
        }
    });
    addr
}

/// `url`'s `host:port` (after the user, before the database).
fn host_port(url: &str) -> &str {
    let rest = &url[url.find("://").map_or(0, |i| i + 3)..];
    let rest = &rest[rest.find('@').map_or(0, |i| i + 1)..];
    &rest[..rest.find('/').unwrap_or(rest.len())]
}

#[tokio::test]
async fn a_threads_reload_is_one_round_trip() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let url = db.migrated_url().await;
    let upstream = host_port(&url).to_owned();
    let turns = Arc::new(Turns::default());
    let relayed = url.replacen(
        &upstream,
        &relay(upstream.clone(), Arc::clone(&turns))
            .await
            .to_string(),
        1,
    );
    // One connection for reads, so every reload below runs on one session.
    let store = PgStore::new(&relayed, 1, 1, Duration::from_secs(5), None, None).unwrap();
    let acme = tenant("acme");
    let ctx = context("chat");
    let open = task(&acme, &ctx, "open", TaskState::Working, 1);
    let done = task(&acme, &ctx, "done", TaskState::Completed, 1);
    let mut ops = vec![WriteOp::UpsertThread(thread(&acme, &ctx, 1))];
    // The open task's history is the thread's oldest message, and it has a push config.
    let m = message(&ctx, Some(&open.id), Role::User, "hi");
    ops.extend(history_ops(&acme, &open, 1, &[m]));
    for (seq, text) in [(2, "hello"), (3, "more")] {
        let m = message(&ctx, Some(&task_id("done")), Role::User, text);
        ops.push(WriteOp::AppendMessage(record(&acme, seq, &m)));
    }
    ops.push(WriteOp::PutPushConfig(super::push::config(
        &acme, &open.id, "hook", 1,
    )));
    ops.push(WriteOp::UpsertTask(done.clone().into()));
    ops.push(event_op(
        &done,
        1,
        status_event(&done, TaskState::Completed, 1),
    ));
    ops.push(WriteOp::UpsertTask(open.clone().into()));
    store.commit(&ops).await.unwrap();

    let pg: &dyn Store = &store;
    let none = context("nobody");
    // The first reloads prepare the statements (round trips of their own).
    for _ in 0..3 {
        pg.load_thread(&acme, &ctx, 2).await.unwrap().unwrap();
        pg.load_thread(&acme, &ctx, 3).await.unwrap().unwrap();
        assert!(pg.load_thread(&acme, &none, 2).await.unwrap().is_none());
    }

    let before = turns.0.load(Ordering::SeqCst);
    const RELOADS: u64 = 20;
    for _ in 0..RELOADS {
        // An unknown thread: the three queries, nothing after them.
        assert!(pg.load_thread(&acme, &none, 2).await.unwrap().is_none());
    }
    let unknown = turns.0.load(Ordering::SeqCst) - before;
    // Asked one after the other they would take three turns each; sent together, one
    // (a write split by the socket could make an odd one two).
    assert!(
        (RELOADS..RELOADS * 3 / 2).contains(&unknown),
        "{unknown} client turns for {RELOADS} reloads of an unknown thread"
    );

    let before = turns.0.load(Ordering::SeqCst);
    for _ in 0..RELOADS {
        let snapshot = pg.load_thread(&acme, &ctx, 3).await.unwrap().unwrap();
        assert_eq!(snapshot.recent.len(), 3);
        assert_eq!(snapshot.next_seq, 4);
        assert_eq!(snapshot.open_tasks.len(), 1);
        assert_eq!(snapshot.open_tasks[0].task.history.len(), 1);
        assert_eq!(snapshot.push_configs.len(), 1);
    }
    // Then the open task's last event and its push config, together; its history is
    // the window's (of three): two turns (four when each went on its own and the
    // history was read again).
    let known = turns.0.load(Ordering::SeqCst) - before;
    assert!(
        (RELOADS * 2..RELOADS * 3).contains(&known),
        "{known} client turns for {RELOADS} reloads of a thread with an open task"
    );

    // A history older than the window (of two) is read after them: three turns.
    let before = turns.0.load(Ordering::SeqCst);
    for _ in 0..RELOADS {
        let snapshot = pg.load_thread(&acme, &ctx, 2).await.unwrap().unwrap();
        assert_eq!(snapshot.open_tasks[0].task.history.len(), 1);
    }
    let beyond = turns.0.load(Ordering::SeqCst) - before;
    assert!(
        (RELOADS * 3..RELOADS * 4).contains(&beyond),
        "{beyond} client turns for {RELOADS} reloads reading a history beyond the window"
    );
}
