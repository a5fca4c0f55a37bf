//! The cluster's tables on Postgres (`migrations/postgres/…_cluster`): the nodes with
//! their leases and fencing tokens, and the owner of each thread (`threads.owner_node`,
//! which the store writes with every upsert of a thread, see `postgres/writer.rs`). Plain SQL over
//! `tokio-postgres` connections of the cluster's own (`crate::cluster`), one statement
//! per call, every one of them answering at once: nothing here waits on a lock (a
//! takeover that meets a lock gives up with [`Taken::Busy`]), so a lease renewal is never
//! stuck behind anything.
//!
//! Time is the database's clock (`NOW_MS`), never a node's: the nodes' clocks may
//! disagree, the database's is one.
//!
//! The fencing itself is part of every commit of the node (`postgres/writer.rs`: the node's
//! row read under a KEY SHARE lock, the transaction refused if the token moved): a takeover locks the dead
//! node's row exclusively before it raises its token, so it waits for the commits the
//! dead node has in flight, and every commit after it finds the token moved.

use tokio_postgres::Client;

use super::StoreError;
use super::packed::{PgPacked, PgUnpacked};

/// The database's clock in epoch milliseconds.
const NOW_MS: &str = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)";

/// The channel commits notify with the task events they logged (cluster mode).
pub const EVENTS_CHANNEL: &str = "a2a_events";

/// The channel commits notify with the idempotency keys they claimed (cluster mode), so
/// that every node's claim filter knows the keys claimed anywhere (`runtime/claim_filter.rs`).
pub const CLAIMS_CHANNEL: &str = "a2a_claims";

/// Longest payload of one notification (Postgres allows just under 8 000 bytes).
pub const MAX_PAYLOAD: usize = 7_000;

/// Who serves a thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub node_id: String,
    /// The node's advertised base URL.
    pub url: String,
    /// How long the node's lease still runs, in ms (negative: expired).
    pub remaining_ms: i64,
}

impl Owner {
    pub fn alive(&self) -> bool {
        self.remaining_ms > 0
    }
}

/// What [`join`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Joined {
    /// The node holds its lease with this token.
    Token(i64),
    /// A live node already uses the id; its lease runs for this many more ms.
    InUse { remaining_ms: i64 },
}

/// What [`take_over`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// The thread is this node's now, and the dead node is fenced.
    Yes,
    /// Its owner is alive again, or another node took it first: look again.
    Moved,
    /// The dead node's row is locked (a commit of it still in flight, or another
    /// takeover): try again shortly.
    Busy,
}

fn failed(e: tokio_postgres::Error) -> StoreError {
    if e.is_closed() || e.code().is_none() {
        StoreError::Unavailable(format!("cluster: {e}"))
    } else {
        StoreError::Query(format!("cluster: {e}"))
    }
}

/// Joins (or rejoins) as `node_id` reachable at `url`, with a lease of `ttl_ms`: a new
/// token, higher than any this id had. Refused while a live node holds the id.
pub async fn join(
    client: &Client,
    node_id: &str,
    url: &str,
    ttl_ms: i64,
) -> Result<Joined, StoreError> {
    let sql = format!(
        "INSERT INTO cluster_nodes AS n (node_id, token, url, started_at, expires_at) \
         VALUES ($1, 1, $2, {NOW_MS}, {NOW_MS} + $3) \
         ON CONFLICT (node_id) DO UPDATE SET token = n.token + 1, url = EXCLUDED.url, \
         started_at = EXCLUDED.started_at, expires_at = EXCLUDED.expires_at \
         WHERE n.expires_at < {NOW_MS} \
         RETURNING token"
    );
    let rows = client
        .query(&sql, &[&node_id, &url, &ttl_ms])
        .await
        .map_err(failed)?;
    if let Some(row) = rows.first() {
        return Ok(Joined::Token(row.get(0)));
    }
    let sql = format!("SELECT expires_at - {NOW_MS} FROM cluster_nodes WHERE node_id = $1");
    let row = client.query_one(&sql, &[&node_id]).await.map_err(failed)?;
    Ok(Joined::InUse {
        remaining_ms: row.get(0),
    })
}

/// Extends the lease by `ttl_ms` from now; false when the token moved (the node was
/// fenced while it could not renew).
pub async fn renew(
    client: &Client,
    node_id: &str,
    token: i64,
    ttl_ms: i64,
) -> Result<bool, StoreError> {
    let sql = format!(
        "UPDATE cluster_nodes SET expires_at = {NOW_MS} + $3 WHERE node_id = $1 AND token = $2"
    );
    let n = client
        .execute(&sql, &[&node_id, &token, &ttl_ms])
        .await
        .map_err(failed)?;
    Ok(n == 1)
}

/// Gives the lease up at once (a graceful shutdown, after the last commit): the other
/// nodes take the threads over on their next request without waiting for the expiry.
pub async fn leave(client: &Client, node_id: &str, token: i64) -> Result<(), StoreError> {
    client
        .execute(
            "UPDATE cluster_nodes SET expires_at = 0, token = token + 1 \
             WHERE node_id = $1 AND token = $2",
            &[&node_id, &token],
        )
        .await
        .map_err(failed)?;
    Ok(())
}

/// Who serves a thread, as the store has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// The thread is not in the store: whoever writes it first owns it.
    NoThread,
    /// No node claimed it (a thread from before cluster mode).
    Unowned,
    Owned(Owner),
}

/// The owner of a thread, as `threads.owner_node` names it.
pub async fn ownership(
    client: &Client,
    tenant: &str,
    thread: &str,
) -> Result<Ownership, StoreError> {
    let sql = format!(
        "SELECT t.owner_node, COALESCE(n.url, ''), COALESCE(n.expires_at - {NOW_MS}, -1) \
         FROM threads t LEFT JOIN cluster_nodes n ON n.node_id = t.owner_node \
         WHERE t.tenant_id = $1 AND t.thread_id = $2"
    );
    let rows = client
        .query(&sql, &[&tenant, &PgPacked(thread)])
        .await
        .map_err(failed)?;
    let Some(row) = rows.first() else {
        return Ok(Ownership::NoThread);
    };
    let node_id: Option<String> = row.get(0);
    Ok(match node_id {
        None => Ownership::Unowned,
        Some(node_id) => Ownership::Owned(Owner {
            node_id,
            url: row.get(1),
            remaining_ms: row.get(2),
        }),
    })
}

/// Claims a thread no node owns; false when another node claimed it first.
pub async fn claim_free(
    client: &Client,
    tenant: &str,
    thread: &str,
    node_id: &str,
) -> Result<bool, StoreError> {
    let n = client
        .execute(
            "UPDATE threads SET owner_node = $3 \
             WHERE tenant_id = $1 AND thread_id = $2 AND owner_node IS NULL",
            &[&tenant, &PgPacked(thread), &node_id],
        )
        .await
        .map_err(failed)?;
    Ok(n == 1)
}

/// Gives a thread of this node up (a draining node, for a thread it has nothing running
/// on): no node owns it then, and the next node asked for it claims it ([`claim_free`]).
/// Only while `node_id` still holds `token`: a fenced node gives nothing up.
pub async fn release(
    client: &Client,
    tenant: &str,
    thread: &str,
    node_id: &str,
    token: i64,
) -> Result<bool, StoreError> {
    let n = client
        .execute(
            "UPDATE threads SET owner_node = NULL \
             WHERE tenant_id = $1 AND thread_id = $2 AND owner_node = $3 \
             AND EXISTS (SELECT 1 FROM cluster_nodes WHERE node_id = $3 AND token = $4)",
            &[&tenant, &PgPacked(thread), &node_id, &token],
        )
        .await
        .map_err(failed)?;
    Ok(n == 1)
}

/// Takes a thread over from `dead`, whose lease has expired: in one statement, locks the
/// dead node's row (waiting for nothing), raises its token — fencing every commit it
/// might still make — and moves the thread to `node_id`.
pub async fn take_over(
    client: &Client,
    tenant: &str,
    thread: &str,
    node_id: &str,
    dead: &str,
) -> Result<Taken, StoreError> {
    let sql = format!(
        "WITH dead AS ( \
             SELECT node_id FROM cluster_nodes \
             WHERE node_id = $4 AND expires_at < {NOW_MS} FOR UPDATE NOWAIT \
         ), fenced AS ( \
             UPDATE cluster_nodes c SET token = c.token + 1 FROM dead \
             WHERE c.node_id = dead.node_id RETURNING c.node_id \
         ) \
         UPDATE threads t SET owner_node = $3 FROM fenced \
         WHERE t.tenant_id = $1 AND t.thread_id = $2 AND t.owner_node = fenced.node_id"
    );
    match client
        .execute(&sql, &[&tenant, &PgPacked(thread), &node_id, &dead])
        .await
    {
        Ok(1) => Ok(Taken::Yes),
        Ok(_) => Ok(Taken::Moved),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) => {
            Ok(Taken::Busy)
        }
        Err(e) => Err(failed(e)),
    }
}

/// Owed push deliveries taken over per statement of [`adopt_owed`] (of dead nodes, and
/// as many of no node).
pub const ADOPT_BATCH: i64 = 10_000;

/// Takes over, for `node_id`, at most [`ADOPT_BATCH`] owed push deliveries of nodes whose
/// lease has expired, and with `free` as many of no node (`''`: rows written outside
/// cluster mode, or by a node of an earlier release); returns how many. Finding the rows
/// of no node reads the whole outbox (no index holds them: a server without cluster mode
/// would pay for it with every row), so the caller asks for them seldom; a dead node's
/// are found by `push_outbox_owned`. In one statement: each dead node with rows owed is locked (one locked by a
/// commit in flight, or by another node taking it over, is passed over for now) and its
/// token raised, as a thread's takeover does, so a node that was only frozen learns at
/// its next renewal that it lost its lease; then the rows move, each locked first and
/// passed over if another node holds it (two nodes taking over at once split the rows,
/// never deliver one twice or wait on each other). A config's rows may end on several
/// nodes; the outbox's poll keeps them in order (`tables::push_outbox::due`), and
/// outcomes are written only by the row's node (`postgres::writer` `DONE`, `RETRY`).
pub async fn adopt_owed(client: &Client, node_id: &str, free: bool) -> Result<u64, StoreError> {
    let sql = format!(
        "WITH dead AS ( \
             SELECT n.node_id FROM cluster_nodes n \
             WHERE n.expires_at < {NOW_MS} AND n.node_id <> $1 \
             AND EXISTS (SELECT 1 FROM push_outbox o WHERE o.node_id > '' \
                 AND o.node_id = n.node_id) \
             FOR UPDATE SKIP LOCKED \
         ), fenced AS ( \
             UPDATE cluster_nodes c SET token = c.token + 1 FROM dead \
             WHERE c.node_id = dead.node_id RETURNING c.node_id \
         ), of_dead AS ( \
             SELECT o.ctid AS row_id FROM push_outbox o \
             WHERE o.node_id > '' AND o.node_id = ANY(ARRAY(SELECT node_id FROM fenced)) \
             LIMIT $2 FOR UPDATE SKIP LOCKED \
         ), of_none AS ( \
             SELECT o.ctid AS row_id FROM push_outbox o WHERE $3 AND o.node_id = '' \
             LIMIT $2 FOR UPDATE SKIP LOCKED \
         ) \
         UPDATE push_outbox SET node_id = $1 \
         WHERE ctid = ANY(ARRAY(SELECT row_id FROM of_dead) || ARRAY(SELECT row_id FROM of_none))"
    );
    client
        .execute(&sql, &[&node_id, &ADOPT_BATCH, &free])
        .await
        .map_err(failed)
}

/// A dead node whose threads nobody has looked through since it died: its id and the
/// `started_at` of the incarnation that died.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unswept {
    pub node_id: String,
    pub started_at: i64,
}

/// The dead nodes whose threads the leader has not looked through since they died.
pub async fn unswept(client: &Client) -> Result<Vec<Unswept>, StoreError> {
    let sql = format!(
        "SELECT node_id, started_at FROM cluster_nodes \
         WHERE expires_at < {NOW_MS} AND swept_started_at <> started_at ORDER BY node_id"
    );
    let rows = client.query(&sql, &[]).await.map_err(failed)?;
    Ok(rows
        .iter()
        .map(|row| Unswept {
            node_id: row.get(0),
            started_at: row.get(1),
        })
        .collect())
}

/// Records that the threads of `node`'s incarnation were looked through.
pub async fn swept(client: &Client, node: &Unswept) -> Result<(), StoreError> {
    client
        .execute(
            "UPDATE cluster_nodes SET swept_started_at = $2 \
             WHERE node_id = $1 AND started_at = $2",
            &[&node.node_id, &node.started_at],
        )
        .await
        .map_err(failed)?;
    Ok(())
}

/// Threads `node_id` owns that still have a task `submitted` or `working`, at most
/// `limit`: what a node left working when it died (a scan of the threads, done once per
/// death).
pub async fn left_working(
    client: &Client,
    node_id: &str,
    limit: i64,
) -> Result<Vec<(String, String)>, StoreError> {
    let rows = client
        .query(
            "SELECT t.tenant_id, t.thread_id FROM threads t \
             WHERE t.owner_node = $1 AND EXISTS ( \
                 SELECT 1 FROM tasks k WHERE k.tenant_id = t.tenant_id \
                 AND k.context_id = t.thread_id AND k.state IN ('submitted', 'working')) \
             LIMIT $2",
            &[&node_id, &limit],
        )
        .await
        .map_err(failed)?;
    Ok(rows
        .iter()
        .map(|row| (row.get(0), row.get::<_, PgUnpacked>(1).0))
        .collect())
}

/// The live nodes (id, URL), ordered by id: for `/health` and the operators' page.
pub async fn live_nodes(client: &Client) -> Result<Vec<(String, String)>, StoreError> {
    let sql = format!(
        "SELECT node_id, url FROM cluster_nodes WHERE expires_at > {NOW_MS} ORDER BY node_id"
    );
    let rows = client.query(&sql, &[]).await.map_err(failed)?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
}

/// The notification payloads for a commit's logged events: one line per event
/// (`tenant`, tab, `task`, tab, `seq`), split into payloads of at most [`MAX_PAYLOAD`]
/// bytes.
pub fn event_payloads<'a>(events: impl Iterator<Item = (&'a str, &'a str, i64)>) -> Vec<String> {
    let mut payloads = Vec::new();
    let mut current = String::new();
    for (tenant, task, seq) in events {
        let line = format!("{tenant}\t{task}\t{seq}");
        if !current.is_empty() && current.len() + 1 + line.len() > MAX_PAYLOAD {
            payloads.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push('\n');
        }
        current.push_str(&line);
    }
    if !current.is_empty() {
        payloads.push(current);
    }
    payloads
}

/// The events a payload of [`event_payloads`] names; lines that do not parse are skipped.
pub fn parse_payload(payload: &str) -> impl Iterator<Item = (&str, &str, i64)> {
    payload.lines().filter_map(|line| {
        let mut fields = line.split('\t');
        let tenant = fields.next()?;
        let task = fields.next()?;
        let seq = fields.next()?.parse().ok()?;
        fields.next().is_none().then_some((tenant, task, seq))
    })
}

/// The notification payloads for the keys a commit of `node` claims: JSON,
/// `{"node":…,"claims":[[tenant,key],…]}`, split into payloads of at most [`MAX_PAYLOAD`]
/// bytes (a key is at most 256 characters, so every claim fits one).
pub fn claim_payloads<'a>(
    node: &str,
    claims: impl Iterator<Item = (&'a str, &'a str)>,
) -> Vec<String> {
    let head = format!("{}\"claims\":[", claims_prefix(node));
    let mut payloads = Vec::new();
    let mut current = String::new();
    for claim in claims {
        let Ok(entry) = serde_json::to_string(&claim) else {
            continue;
        };
        if !current.is_empty() && current.len() + 1 + entry.len() + 2 > MAX_PAYLOAD {
            current.push_str("]}");
            payloads.push(std::mem::take(&mut current));
        }
        if current.is_empty() {
            current.push_str(&head);
        } else {
            current.push(',');
        }
        current.push_str(&entry);
    }
    if !current.is_empty() {
        current.push_str("]}");
        payloads.push(current);
    }
    payloads
}

/// How every payload of [`claim_payloads`] from `node` begins.
pub fn claims_prefix(node: &str) -> String {
    format!("{{\"node\":{},", serde_json::Value::from(node))
}

/// A payload of [`claim_payloads`]: the claiming node and its claims (tenant, key).
#[derive(Debug, serde::Deserialize)]
pub struct ClaimsPayload<'a> {
    #[serde(borrow)]
    pub node: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    pub claims: Vec<(std::borrow::Cow<'a, str>, std::borrow::Cow<'a, str>)>,
}

/// Reads a payload of [`claim_payloads`]; `None` if it is not one.
pub fn parse_claims(payload: &str) -> Option<ClaimsPayload<'_>> {
    serde_json::from_str(payload).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_split_under_the_limit_and_parse_back() {
        let tenant = "acme";
        let tasks: Vec<String> = (0..2000).map(|i| format!("task-{i:05}")).collect();
        let events: Vec<(&str, &str, i64)> = tasks
            .iter()
            .enumerate()
            .map(|(i, t)| (tenant, t.as_str(), i as i64 + 1))
            .collect();
        let payloads = event_payloads(events.iter().copied());
        assert!(payloads.len() > 1, "2000 events do not fit one payload");
        assert!(payloads.iter().all(|p| p.len() <= MAX_PAYLOAD));
        let back: Vec<(&str, &str, i64)> = payloads.iter().flat_map(|p| parse_payload(p)).collect();
        assert_eq!(back, events);
    }

    #[test]
    fn claim_payloads_split_under_the_limit_and_parse_back() {
        let keys: Vec<String> = (0..200)
            .map(|i| format!("{i}-{}\t\"\n\u{1}é", "k".repeat(i)))
            .collect();
        let claims: Vec<(&str, &str)> = keys.iter().map(|k| ("acme", k.as_str())).collect();
        let payloads = claim_payloads("node \"a\"", claims.iter().copied());
        assert!(payloads.len() > 1, "200 long keys do not fit one payload");
        assert!(payloads.iter().all(|p| p.len() <= MAX_PAYLOAD));
        let mut back = Vec::new();
        for payload in &payloads {
            let parsed = parse_claims(payload).expect(payload);
            assert_eq!(parsed.node, "node \"a\"");
            assert!(payload.starts_with(&claims_prefix("node \"a\"")));
            back.extend(
                parsed
                    .claims
                    .into_iter()
                    .map(|(t, k)| (t.into_owned(), k.into_owned())),
            );
        }
        let sent: Vec<(String, String)> = claims
            .iter()
            .map(|(t, k)| ((*t).to_owned(), (*k).to_owned()))
            .collect();
        assert_eq!(back, sent);
        assert!(claim_payloads("n", std::iter::empty()).is_empty());
        assert!(parse_claims("acme\tt-1\t3").is_none());
    }

    #[test]
    fn a_malformed_line_is_skipped() {
        let parsed: Vec<_> =
            parse_payload("a\tb\t3\nbroken\na\tb\tx\na\tc\t4\textra\nt\tu\t5").collect();
        assert_eq!(parsed, vec![("a", "b", 3), ("t", "u", 5)]);
    }
}
