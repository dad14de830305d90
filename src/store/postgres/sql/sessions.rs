//! SQL for `sessions`, `session_data`, `session_tags` and `session_refs`
//! (PostgreSQL; SQLite's is `sqlite/sql/sessions.rs`).
//!
//! A whole session is one statement here: its row, its data, its latest
//! checkpoint's event and its references joined in (SQLite reads them one
//! by one because it re-prepares a cached join on every binding; a server
//! round trip costs more than a join).

use super::super::tx::PgTx;
use super::workflow::lease_at;
use super::{borrow, col, extracted_text, Param, Params};
use crate::error::Result;
use crate::model::{Actor, ActorType, Checkpoint, Session, SessionId, SessionStatus, Usage};
use crate::store::codec::{empty_object, json_of_text, list_of_text};
use crate::store::rows::{ChildRow, SessionState};
use crate::store::{SessionChange, SessionGuard, SessionRow};
use postgres::types::Type;
use postgres::Row;

/// The columns and joins of a whole session, in the order [`map_session`]
/// reads them; a statement appends its `WHERE` (and the list its order
/// column, index [`ORDER_COLUMN`]).
macro_rules! session_select {
    ($extra:literal) => {
        session_select!($extra, "sessions s")
    };
    ($extra:literal, $from:literal) => {
        concat!(
            "SELECT s.session_id, s.status, s.title, s.app, s.agent_id, s.route, s.stage, \
             s.parent_session_id, s.tags, s.actor_type, s.actor_id, s.actor_authenticated, \
             s.rev, s.checkpoint_seq, s.final_result, s.end_reason, s.input_tokens, \
             s.output_tokens, s.api_calls, s.duration_ms, s.created_at_ms, s.updated_at_ms, \
             s.ended_at_ms, s.insert_seq, d.insert_seq IS NOT NULL, d.goal, d.context, \
             d.metadata, c.at_ms, (c.data::json -> 'step')::text, c.detail, r.kinds, r.ids",
            $extra,
            " FROM ",
            $from,
            " LEFT JOIN session_data d ON d.insert_seq = s.insert_seq \
             LEFT JOIN events c ON c.session_id = s.session_id AND c.seq = s.checkpoint_seq \
             LEFT JOIN LATERAL (SELECT \
               array_agg(x.kind ORDER BY x.kind, x.ordinal, x.ref_id) AS kinds, \
               array_agg(x.ref_id ORDER BY x.kind, x.ordinal, x.ref_id) AS ids \
               FROM session_refs x WHERE x.session_id = s.session_id) r ON true"
        )
    };
}
pub(crate) use session_select;

/// The index of the list's order timestamp after the session columns.
pub const ORDER_COLUMN: usize = 33;

/// One whole session by id.
pub const SELECT_SESSION: &str = concat!(session_select!(""), " WHERE s.session_id = $1");

/// Whether a session exists.
pub const SESSION_EXISTS: &str = "SELECT 1 FROM sessions WHERE session_id = $1";

/// Whether a session exists, holding its row FOR KEY SHARE until the
/// transaction ends: a purge of it (FOR UPDATE) waits, so no child is
/// created under a session being purged.
pub const SESSION_KEY_SHARE: &str = "SELECT 1 FROM sessions WHERE session_id = $1 FOR KEY SHARE";

/// Status and rev of one session (to diagnose a refused UPDATE).
pub const SELECT_STATUS_REV: &str = "SELECT status, rev FROM sessions WHERE session_id = $1";

/// The newest session's creation time.
pub const SELECT_MAX_CREATED: &str = "SELECT max(created_at_ms) FROM sessions";

/// A new session: its row, data and tags in one statement. A taken id
/// inserts nothing and returns no row (checked before the insert, so no
/// key error aborts the transaction; `ON CONFLICT` covers a concurrent
/// insert of the same id). `actor_authenticated` is always 0.
/// $1 id, $2 status, $3 title, $4 app, $5 agent, $6 route, $7 stage,
/// $8 parent, $9 tags JSON, $10 actor type, $11 actor id, $12 rev,
/// $13 checkpoint seq, $14 result, $15 reason, $16–$19 usage, $20 created,
/// $21 updated, $22 ended, $23 goal, $24 context, $25 metadata, $26 tags.
pub const INSERT_SESSION: &str = "WITH s AS (INSERT INTO sessions (session_id, status, title, \
     app, agent_id, route, stage, parent_session_id, tags, actor_type, actor_id, \
     actor_authenticated, rev, checkpoint_seq, final_result, end_reason, input_tokens, \
     output_tokens, api_calls, duration_ms, created_at_ms, updated_at_ms, ended_at_ms) \
     SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 0, $12, $13, $14, $15, $16, $17, $18, \
     $19, $20, $21, $22 WHERE NOT EXISTS (SELECT 1 FROM sessions WHERE session_id = $1) \
     ON CONFLICT (session_id) DO NOTHING RETURNING insert_seq), \
     d AS (INSERT INTO session_data (insert_seq, session_id, goal, context, metadata) \
     SELECT insert_seq, $1, $23, $24, $25 FROM s), \
     t AS (INSERT INTO session_tags (tag, created_at_ms, insert_seq, session_id) \
     SELECT u.tag, $20, s.insert_seq, $1 FROM s, unnest($26::text[]) WITH ORDINALITY AS u(tag, n) \
     ORDER BY u.n) \
     SELECT insert_seq FROM s";

/// Number of references of one kind.
pub const COUNT_REFS: &str =
    "SELECT count(*) FROM session_refs WHERE session_id = $1 AND kind = $2";

/// Whether a reference is linked.
pub const REF_EXISTS: &str =
    "SELECT 1 FROM session_refs WHERE session_id = $1 AND kind = $2 AND ref_id = $3";

/// Links one reference.
pub const INSERT_REF: &str = "INSERT INTO session_refs (session_id, kind, ref_id, ordinal, \
     linked_seq) VALUES ($1, $2, $3, $4, $5)";

/// Direct children, in creation order.
pub const SELECT_CHILDREN: &str = "SELECT session_id, status, title, created_at_ms, insert_seq \
     FROM sessions WHERE parent_session_id = $1 ORDER BY insert_seq";

/// A write's guard state: the session's row locked until COMMIT (`FOR NO
/// KEY UPDATE`: what its UPDATE takes anyway; a child's or an event's
/// foreign-key check, `FOR KEY SHARE`, does not wait for it). The first
/// statement of a write that gives the transaction its id (module docs of
/// `tx`).
///
/// The lease is joined in as the statement's snapshot shows it; a lock
/// waited for shows the session's newest row but that older snapshot, so
/// the last column, the rev in the snapshot, tells whether the row changed
/// meanwhile (every change of a lease is a mutation: rev + 1), and then the
/// lease is read again, in a statement of its own: a snapshot taken after
/// the lock ([`super::workflow::SELECT_LEASE`]).
pub const SELECT_STATE_FOR_WRITE: &str = "SELECT s.status, s.rev, s.updated_at_ms, \
     s.input_tokens, s.output_tokens, s.api_calls, s.duration_ms, l.token_sha256, l.pid, \
     l.hostname, l.acquired_at_ms, l.expires_at_ms, l.acquired_seq, \
     (SELECT o.rev FROM sessions o WHERE o.session_id = s.session_id) \
     FROM sessions s LEFT JOIN session_leases l ON l.session_id = s.session_id \
     WHERE s.session_id = $1 FOR NO KEY UPDATE OF s";

/// A read's guard state (no lock: a read-only transaction refuses one).
pub const SELECT_STATE_FOR_READ: &str = "SELECT s.status, s.rev, s.updated_at_ms, \
     s.input_tokens, s.output_tokens, s.api_calls, s.duration_ms, l.token_sha256, l.pid, \
     l.hostname, l.acquired_at_ms, l.expires_at_ms, l.acquired_seq, s.rev \
     FROM sessions s LEFT JOIN session_leases l ON l.session_id = s.session_id \
     WHERE s.session_id = $1";

fn status_of(s: &str) -> SessionStatus {
    // The schema's CHECK admits only known statuses.
    s.parse().unwrap_or(SessionStatus::Failed)
}

/// Maps a row of [`session_select`]: the session, its insert_seq and its
/// checkpoint seq.
pub fn map_session(row: &Row) -> Result<(Session, i64, Option<i64>)> {
    let id: String = col(row, 0)?;
    let session_id = id
        .parse::<SessionId>()
        .unwrap_or_else(|_| SessionId::from_bytes([0; 8]));
    let checkpoint_seq: Option<i64> = col(row, 13)?;
    let mut session = Session {
        schema_version: "1",
        session_id,
        status: status_of(&col::<String>(row, 1)?),
        title: col(row, 2)?,
        goal: None,
        app: col(row, 3)?,
        agent_id: col(row, 4)?,
        route: col(row, 5)?,
        stage: col(row, 6)?,
        parent_session_id: col(row, 7)?,
        tags: list_of_text(col(row, 8)?),
        context: empty_object(),
        metadata: empty_object(),
        actor: Actor {
            actor_type: col::<String>(row, 9)?.parse().unwrap_or(ActorType::Lib),
            id: col(row, 10)?,
            authenticated: col::<i64>(row, 11)? != 0,
        },
        rev: col(row, 12)?,
        plan_ids: Vec::new(),
        operation_ids: Vec::new(),
        deployment_ids: Vec::new(),
        checkpoint: None,
        final_result: col(row, 14)?,
        end_reason: col(row, 15)?,
        usage: Usage {
            input_tokens: col(row, 16)?,
            output_tokens: col(row, 17)?,
            api_calls: col(row, 18)?,
            duration_ms: col(row, 19)?,
        },
        created_at_ms: col(row, 20)?,
        updated_at_ms: col(row, 21)?,
        ended_at_ms: col(row, 22)?,
    };
    if col::<bool>(row, 24)? {
        session.goal = col(row, 25)?;
        session.context = json_of_text(col(row, 26)?);
        session.metadata = json_of_text(col(row, 27)?);
    }
    if let (Some(seq), Some(at_ms)) = (checkpoint_seq, col::<Option<i64>>(row, 28)?) {
        session.checkpoint = Some(Checkpoint {
            step: extracted_text(col(row, 29)?),
            note: col(row, 30)?,
            at_ms,
            seq,
        });
        session.apply_kept_checkpoint();
    }
    let kinds: Vec<String> = col::<Option<Vec<String>>>(row, 31)?.unwrap_or_default();
    let ids: Vec<String> = col::<Option<Vec<String>>>(row, 32)?.unwrap_or_default();
    for (kind, id) in kinds.into_iter().zip(ids) {
        match kind.as_str() {
            "plan" => session.plan_ids.push(id),
            "operation" => session.operation_ids.push(id),
            _ => session.deployment_ids.push(id),
        }
    }
    Ok((session, col(row, 23)?, checkpoint_seq))
}

/// One whole session and its checkpoint seq, or `None`.
pub fn find_session(tx: &mut PgTx<'_>, id: &str) -> Result<Option<(Session, Option<i64>)>> {
    match tx.row(SELECT_SESSION, &[(&id, Type::TEXT)])? {
        Some(row) => map_session(&row).map(|(s, _, cp)| Some((s, cp))),
        None => Ok(None),
    }
}

/// Inserts a session with its data and tags: its insertion key, or `None`
/// when the id is taken.
pub fn insert_session(tx: &mut PgTx<'_>, r: &SessionRow<'_>) -> Result<Option<i64>> {
    match try_insert_session(tx, r) {
        Ok(seq) => {
            tx.note_locked(r.session_id);
            Ok(seq)
        }
        Err(e) => Err(tx.fail(&e)),
    }
}

/// As [`insert_session`], returning the driver's error (import tells a
/// refusal from a failure).
pub fn try_insert_session(
    tx: &mut PgTx<'_>,
    r: &SessionRow<'_>,
) -> std::result::Result<Option<i64>, postgres::Error> {
    // Strings serialize infallibly.
    let tags = serde_json::to_string(r.tags).unwrap_or_else(|_| "[]".to_owned());
    let tag_list: Vec<&str> = r.tags.iter().map(String::as_str).collect();
    let (status, actor) = (r.status.as_str(), r.actor_type.as_str());
    let p: [Param<'_>; 26] = [
        (&r.session_id, Type::TEXT),
        (&status, Type::TEXT),
        (&r.title, Type::TEXT),
        (&r.app, Type::TEXT),
        (&r.agent_id, Type::TEXT),
        (&r.route, Type::TEXT),
        (&r.stage, Type::TEXT),
        (&r.parent_session_id, Type::TEXT),
        (&tags, Type::TEXT),
        (&actor, Type::TEXT),
        (&r.actor_id, Type::TEXT),
        (&r.rev, Type::INT8),
        (&r.checkpoint_seq, Type::INT8),
        (&r.final_result, Type::TEXT),
        (&r.end_reason, Type::TEXT),
        (&r.usage.input_tokens, Type::INT8),
        (&r.usage.output_tokens, Type::INT8),
        (&r.usage.api_calls, Type::INT8),
        (&r.usage.duration_ms, Type::INT8),
        (&r.created_at_ms, Type::INT8),
        (&r.updated_at_ms, Type::INT8),
        (&r.ended_at_ms, Type::INT8),
        (&r.goal, Type::TEXT),
        (&r.context, Type::TEXT),
        (&r.metadata, Type::TEXT),
        (&tag_list, Type::TEXT_ARRAY),
    ];
    let rows = tx.try_rows(INSERT_SESSION, &p)?;
    match rows.first() {
        Some(row) => row.try_get(0).map(Some),
        None => Ok(None),
    }
}

/// The guarded session UPDATE's SQL and parameters ($1 id, $2 now), as
/// SQLite's `sqlite::tx::session_update` builds it: `rev + 1`,
/// `updated_at_ms` moved (never backwards), the change's columns, only
/// where the status is one of the guard's (literals from the enum) — and
/// the rev is the guard's, when it has one.
pub fn session_update(id: &str, g: SessionGuard<'_>, c: &SessionChange<'_>) -> (String, Params) {
    session_update_adding(id, g, c, None)
}

/// [`session_update`] that also adds `add` to the usage sums (`col = col +
/// $n`), for a write sent as one statement, which reads no sums first
/// (`super::once`).
pub fn session_update_adding(
    id: &str,
    g: SessionGuard<'_>,
    c: &SessionChange<'_>,
    add: Option<&crate::model::Usage>,
) -> (String, Params) {
    let mut sql = String::from(
        "UPDATE sessions SET rev = rev + 1, updated_at_ms = GREATEST(updated_at_ms, $2)",
    );
    let mut p: Params = vec![
        (Box::new(id.to_owned()), Type::TEXT),
        (Box::new(c.now_ms), Type::INT8),
    ];
    let mut bind = |sql: &mut String, col: &str, v: Box<dyn postgres::types::ToSql + Sync>, t| {
        p.push((v, t));
        sql.push_str(&format!(", {col} = ${}", p.len()));
    };
    if let Some(s) = c.status {
        // A status from the enum: a literal, not user input.
        sql.push_str(&format!(", status = '{}'", s.as_str()));
        if s.is_terminal() {
            sql.push_str(", ended_at_ms = GREATEST(updated_at_ms, $2)");
        }
    }
    if let Some(r) = c.final_result {
        bind(&mut sql, "final_result", Box::new(r.to_owned()), Type::TEXT);
    }
    if let Some(r) = c.end_reason {
        bind(&mut sql, "end_reason", Box::new(r.to_owned()), Type::TEXT);
    }
    if let Some(stage) = c.stage {
        let v: Option<String> = stage.map(str::to_owned);
        bind(&mut sql, "stage", Box::new(v), Type::TEXT);
    }
    if c.checkpoint_at_next_seq {
        sql.push_str(
            ", checkpoint_seq = (SELECT coalesce(max(e.seq) + 1, 0) FROM events e \
             WHERE e.session_id = sessions.session_id)",
        );
    }
    if let Some(u) = c.usage {
        bind(
            &mut sql,
            "input_tokens",
            Box::new(u.input_tokens),
            Type::INT8,
        );
        bind(
            &mut sql,
            "output_tokens",
            Box::new(u.output_tokens),
            Type::INT8,
        );
        bind(&mut sql, "api_calls", Box::new(u.api_calls), Type::INT8);
        bind(&mut sql, "duration_ms", Box::new(u.duration_ms), Type::INT8);
    }
    if let Some(u) = add {
        for (col, v) in [
            ("input_tokens", u.input_tokens),
            ("output_tokens", u.output_tokens),
            ("api_calls", u.api_calls),
            ("duration_ms", u.duration_ms),
        ] {
            p.push((Box::new(v), Type::INT8));
            sql.push_str(&format!(", {col} = {col} + ${}", p.len()));
        }
    }
    let statuses: Vec<String> = g
        .from
        .iter()
        .map(|s| format!("status = '{}'", s.as_str()))
        .collect();
    sql.push_str(&format!(
        " WHERE session_id = $1 AND ({})",
        statuses.join(" OR ")
    ));
    if let Some(rev) = g.rev {
        p.push((Box::new(rev), Type::INT8));
        sql.push_str(&format!(" AND rev = ${}", p.len()));
    }
    (sql, p)
}

/// Runs the guarded UPDATE: whether a row matched. (Waiting for the row,
/// it takes no transaction id until the row is granted: the BEFORE UPDATE
/// triggers of `sessions` make PostgreSQL lock it first; module docs of
/// `tx`.)
///
/// Its RETURNING reads what the event that follows needs (the next seq,
/// the session's time, the chain's last hash), which [`PgTx`] keeps for
/// the next `insert_event` of this session: one statement less per
/// mutation.
pub fn update_session(
    tx: &mut PgTx<'_>,
    id: &str,
    g: SessionGuard<'_>,
    c: &SessionChange<'_>,
) -> Result<bool> {
    // What the RETURNING reads is current only if this transaction held
    // the row before the UPDATE: one that waited for the row reads the
    // events in its snapshot from before the wait.
    let held = tx.holds_lock(id);
    let (mut sql, p) = session_update(id, g, c);
    sql.push_str(RETURNING_NEXT_EVENT);
    let rows = tx.rows(&sql, &super::borrow(&p))?;
    let Some(r) = rows.first() else {
        return Ok(false);
    };
    tx.note_locked(id);
    if !held {
        return Ok(true);
    }
    if col::<Option<bool>>(r, 3)? == Some(true) {
        // This transaction took its id before a writer that appended after
        // the lock was granted to it (the server follows a row's update
        // chain while waiting and may take the id there): its events would
        // come before that writer's in the feed's (tx_id, event_id) order
        // though after them in seq. Run it again, with an id taken now.
        tx.note(crate::store::postgres::tx::Failure::Retry);
        return Err(crate::error::Error::Busy { timeout_ms: 0 });
    }
    let next = super::events::NextEvent {
        seq: col(r, 0)?,
        at_ms: col(r, 1)?,
        prev: crate::store::codec::chain_link(col::<Option<&[u8]>>(r, 2)?),
    };
    tx.keep_next_event(id, next);
    Ok(true)
}

/// What the guarded UPDATE returns: the next event's seq and time, the
/// chain's last hash (read in the UPDATE's snapshot, under its row lock),
/// and whether the last event's transaction id is above this
/// transaction's (the feed's order would then disagree with seq order).
const RETURNING_NEXT_EVENT: &str = " RETURNING (SELECT coalesce(max(e.seq) + 1, 0) FROM events e \
     WHERE e.session_id = sessions.session_id), updated_at_ms, (SELECT e.hash FROM events e \
     WHERE e.session_id = sessions.session_id ORDER BY e.seq DESC LIMIT 1), \
     (SELECT e.tx_id > pg_current_xact_id() FROM events e \
     WHERE e.session_id = sessions.session_id ORDER BY e.seq DESC LIMIT 1)";

/// The guard state (locked in a write transaction), or `None`.
pub fn select_session_state(tx: &mut PgTx<'_>, id: &str) -> Result<Option<SessionState>> {
    let write = tx.is_write();
    let sql = if write {
        SELECT_STATE_FOR_WRITE
    } else {
        SELECT_STATE_FOR_READ
    };
    let Some(row) = tx.row(sql, &[(&id, Type::TEXT)])? else {
        return Ok(None);
    };
    tx.note_locked(id); // FOR NO KEY UPDATE in a write
    let rev: i64 = col(&row, 1)?;
    let lease = if col::<Option<i64>>(&row, 13)? == Some(rev) {
        lease_at(&row, 7)?
    } else {
        super::workflow::find_lease(tx, id)?
    };
    Ok(Some(SessionState {
        status: col(&row, 0)?,
        rev,
        updated_at_ms: col(&row, 2)?,
        usage: Usage {
            input_tokens: col(&row, 3)?,
            output_tokens: col(&row, 4)?,
            api_calls: col(&row, 5)?,
            duration_ms: col(&row, 6)?,
        },
        lease,
    }))
}

/// Status and rev, or `None`.
pub fn select_status_rev(tx: &mut PgTx<'_>, id: &str) -> Result<Option<(String, i64)>> {
    match tx.row(SELECT_STATUS_REV, &[(&id, Type::TEXT)])? {
        Some(r) => Ok(Some((col(&r, 0)?, col(&r, 1)?))),
        None => Ok(None),
    }
}

/// Direct children, in creation order.
pub fn select_children(tx: &mut PgTx<'_>, id: &str) -> Result<Vec<ChildRow>> {
    tx.rows(SELECT_CHILDREN, &[(&id, Type::TEXT)])?
        .iter()
        .map(|r| {
            Ok(ChildRow {
                session_id: col(r, 0)?,
                status: col(r, 1)?,
                title: col(r, 2)?,
                created_at_ms: col(r, 3)?,
                insert_seq: col(r, 4)?,
            })
        })
        .collect()
}

/// Runs an assembled statement's rows (the list).
pub fn rows_dyn(tx: &mut PgTx<'_>, sql: &str, p: &Params) -> Result<Vec<Row>> {
    tx.rows(sql, &borrow(p))
}
