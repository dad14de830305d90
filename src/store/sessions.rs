//! SQL for `sessions`, `session_data`, `session_tags` and `session_refs`.
//!
//! Every statement is a `const` here, with explicit columns and `?N`
//! parameters; `list` picks fixed fragments and pushes values as parameters.

use super::codec::{empty_object, opt_json, opt_text, string_list, text};
use crate::model::{Actor, ActorType, Checkpoint, Session, SessionId, SessionStatus, Usage};
use rusqlite::{params, Connection, OptionalExtension, Row};

/// Columns of a `sessions` row, in the order [`map_session`] expects.
///
/// Reads are single-table statements on purpose: SQLite re-prepares a cached
/// join that binds a parameter each time its binding changes (measured: a
/// full re-prepare, ~0.5M instructions, per call), while single-table
/// statements stay prepared.
macro_rules! session_columns {
    () => {
        "s.session_id, s.status, s.title, s.app, s.agent_id, s.route, s.stage, \
         s.parent_session_id, s.tags, s.actor_type, s.actor_id, s.actor_authenticated, s.rev, \
         s.checkpoint_seq, s.final_result, s.end_reason, s.input_tokens, s.output_tokens, \
         s.api_calls, s.duration_ms, s.created_at_ms, s.updated_at_ms, s.ended_at_ms, \
         s.insert_seq"
    };
}
pub(crate) use session_columns;

/// Reads one session row by id.
pub const SELECT_SESSION: &str = concat!(
    "SELECT ",
    session_columns!(),
    " FROM sessions s WHERE s.session_id = ?1"
);

/// Reads one session row by its insertion key.
pub const SELECT_SESSION_BY_SEQ: &str = concat!(
    "SELECT ",
    session_columns!(),
    " FROM sessions s WHERE s.insert_seq = ?1"
);

/// The wide values of a session.
pub const SELECT_SESSION_DATA: &str =
    "SELECT goal, context, metadata FROM session_data WHERE insert_seq = ?1";

/// The latest checkpoint's step, note and time, from its event.
pub const SELECT_CHECKPOINT: &str =
    "SELECT json_extract(data, '$.step'), detail, at_ms FROM events WHERE session_id = ?1 AND seq = ?2";

/// The newest session's creation time (the clamp for a new one).
pub const SELECT_MAX_CREATED: &str = "SELECT max(created_at_ms) FROM sessions";

/// Inserts a session row at rev 1. ?13 is both created_at_ms and
/// updated_at_ms: the caller clamps it so it never goes below the newest
/// session's (the list order then equals insertion order).
pub const INSERT_SESSION: &str = "INSERT INTO sessions (session_id, status, title, app, agent_id, \
     route, stage, parent_session_id, tags, actor_type, actor_id, actor_authenticated, rev, \
     created_at_ms, updated_at_ms) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 1, ?13, ?13)";

/// Inserts the wide values of a new session.
pub const INSERT_SESSION_DATA: &str =
    "INSERT INTO session_data (insert_seq, session_id, goal, context, metadata) \
     VALUES (?1, ?2, ?3, ?4, ?5)";

/// Inserts one tag of a new session.
pub const INSERT_TAG: &str =
    "INSERT INTO session_tags (tag, created_at_ms, insert_seq, session_id) VALUES (?1, ?2, ?3, ?4)";

/// Whether a session exists.
pub const SESSION_EXISTS: &str = "SELECT 1 FROM sessions WHERE session_id = ?1";

/// Status, rev of one session (to diagnose a refused conditional UPDATE).
pub const SELECT_STATUS_REV: &str = "SELECT status, rev FROM sessions WHERE session_id = ?1";

/// Builds a conditional UPDATE: bump rev, move updated_at_ms (never
/// backwards), apply `$set`, only where the status allows the verb (and, in
/// the guarded form, only at the given rev). No RETURNING: SQLite buffers
/// RETURNING rows in an ephemeral table, a temp B-tree opened and closed on
/// every call; the event insert reads what it needs from the row instead.
///
/// Each verb has its own statement with its statuses as literals: a bound
/// `?N IS NULL OR rev = ?N` or `status IN (?, ?)` would let SQLite fold the
/// bound value into the plan and re-prepare the statement on every call, and
/// the statuses are an `OR` chain, because an `IN` list of three or more
/// constants builds a temporary B-tree on every run;
/// for the same reason the event seq subquery is correlated
/// (`sessions.session_id`), not bound (`?1`).
macro_rules! update_sessions {
    ($set:literal, $statuses:literal, $guard:literal) => {
        concat!(
            "UPDATE sessions SET rev = rev + 1, updated_at_ms = max(updated_at_ms, ?2)",
            $set,
            " WHERE session_id = ?1 AND (",
            $statuses,
            ")",
            $guard
        )
    };
}

pub(crate) use update_sessions;

/// pending → active. ?1 id, ?2 now ms; guarded: ?3 rev.
pub const UPDATE_START: [&str; 2] = [
    update_sessions!(", status = 'active'", "status = 'pending'", ""),
    update_sessions!(", status = 'active'", "status = 'pending'", " AND rev = ?3"),
];
/// active → paused. ?1 id, ?2 now ms; guarded: ?3 rev.
pub const UPDATE_PAUSE: [&str; 2] = [
    update_sessions!(", status = 'paused'", "status = 'active'", ""),
    update_sessions!(", status = 'paused'", "status = 'active'", " AND rev = ?3"),
];
/// paused → active. ?1 id, ?2 now ms; guarded: ?3 rev.
pub const UPDATE_RESUME: [&str; 2] = [
    update_sessions!(", status = 'active'", "status = 'paused'", ""),
    update_sessions!(", status = 'active'", "status = 'paused'", " AND rev = ?3"),
];
/// active → completed. ?1 id, ?2 now ms, ?3 result; guarded: ?4 rev.
pub const UPDATE_COMPLETE: [&str; 2] = [
    update_sessions!(
        ", status = 'completed', ended_at_ms = max(updated_at_ms, ?2), final_result = ?3",
        "status = 'active'",
        ""
    ),
    update_sessions!(
        ", status = 'completed', ended_at_ms = max(updated_at_ms, ?2), final_result = ?3",
        "status = 'active'",
        " AND rev = ?4"
    ),
];
/// pending | active | paused → failed. ?1 id, ?2 now ms, ?3 reason; guarded: ?4 rev.
pub const UPDATE_FAIL: [&str; 2] = [
    update_sessions!(
        ", status = 'failed', ended_at_ms = max(updated_at_ms, ?2), end_reason = ?3",
        "status = 'pending' OR status = 'active' OR status = 'paused'",
        ""
    ),
    update_sessions!(
        ", status = 'failed', ended_at_ms = max(updated_at_ms, ?2), end_reason = ?3",
        "status = 'pending' OR status = 'active' OR status = 'paused'",
        " AND rev = ?4"
    ),
];
/// pending | active | paused → cancelled. ?1 id, ?2 now ms, ?3 reason; guarded: ?4 rev.
pub const UPDATE_CANCEL: [&str; 2] = [
    update_sessions!(
        ", status = 'cancelled', ended_at_ms = max(updated_at_ms, ?2), end_reason = ?3",
        "status = 'pending' OR status = 'active' OR status = 'paused'",
        ""
    ),
    update_sessions!(
        ", status = 'cancelled', ended_at_ms = max(updated_at_ms, ?2), end_reason = ?3",
        "status = 'pending' OR status = 'active' OR status = 'paused'",
        " AND rev = ?4"
    ),
];
/// A checkpoint on an active session; `status` stays out of the SET list so
/// the status index is not touched, and the step and note go in the event.
/// ?1 id, ?2 now ms; guarded: ?3 rev.
pub const UPDATE_CHECKPOINT: [&str; 2] = [
    update_sessions!(", checkpoint_seq = (SELECT coalesce(max(seq) + 1, 0) FROM events WHERE session_id = sessions.session_id)", "status = 'active'", ""),
    update_sessions!(", checkpoint_seq = (SELECT coalesce(max(seq) + 1, 0) FROM events WHERE session_id = sessions.session_id)", "status = 'active'", " AND rev = ?3"),
];
/// An agent's own event on a live session. ?1 id, ?2 now ms; guarded: ?3 rev.
pub const UPDATE_TOUCH: [&str; 2] = [
    update_sessions!(
        "",
        "status = 'pending' OR status = 'active' OR status = 'paused'",
        ""
    ),
    update_sessions!(
        "",
        "status = 'pending' OR status = 'active' OR status = 'paused'",
        " AND rev = ?3"
    ),
];

/// A stage event on an active session: sets `stage`. ?1 id, ?2 now ms,
/// ?3 stage name; guarded: ?4 rev.
pub const UPDATE_STAGE: [&str; 2] = [
    update_sessions!(", stage = ?3", "status = 'active'", ""),
    update_sessions!(", stage = ?3", "status = 'active'", " AND rev = ?4"),
];

/// Linked references of one session (sorted by kind and ordinal in Rust: an
/// `ORDER BY` here makes SQLite re-prepare the statement on every binding).
pub const SELECT_REFS: &str =
    "SELECT kind, ref_id, ordinal FROM session_refs WHERE session_id = ?1";

/// Number of references of one kind.
pub const COUNT_REFS: &str =
    "SELECT count(*) FROM session_refs WHERE session_id = ?1 AND kind = ?2";

/// Whether a reference is already linked.
pub const REF_EXISTS: &str =
    "SELECT 1 FROM session_refs WHERE session_id = ?1 AND kind = ?2 AND ref_id = ?3";

/// Links one reference.
pub const INSERT_REF: &str =
    "INSERT INTO session_refs (session_id, kind, ref_id, ordinal, linked_seq) \
     VALUES (?1, ?2, ?3, ?4, ?5)";

fn status_of(s: &str) -> SessionStatus {
    // The schema's CHECK admits only known statuses; a hand-edited row that
    // breaks it would already fail STRICT/CHECK on write.
    s.parse().unwrap_or(SessionStatus::Failed)
}

/// Maps a row of [`session_columns`]; the wide values, checkpoint and refs
/// are filled in by [`complete_session`]. Returns the session, its
/// insert_seq and its checkpoint seq.
pub fn map_session(row: &Row<'_>) -> rusqlite::Result<(Session, i64, Option<i64>)> {
    let id_text = text(row, 0)?;
    let session_id = id_text
        .parse::<SessionId>()
        .unwrap_or_else(|_| SessionId::from_bytes([0; 8]));
    let session = Session {
        schema_version: "1",
        session_id,
        status: status_of(&text(row, 1)?),
        title: text(row, 2)?,
        goal: None,
        app: opt_text(row, 3)?,
        agent_id: opt_text(row, 4)?,
        route: opt_text(row, 5)?,
        stage: opt_text(row, 6)?,
        parent_session_id: opt_text(row, 7)?,
        tags: string_list(row, 8)?,
        context: empty_object(),
        metadata: empty_object(),
        actor: Actor {
            actor_type: text(row, 9)?.parse().unwrap_or(ActorType::Lib),
            id: opt_text(row, 10)?,
            authenticated: row.get::<_, i64>(11)? != 0,
        },
        rev: row.get(12)?,
        plan_ids: Vec::new(),
        operation_ids: Vec::new(),
        deployment_ids: Vec::new(),
        checkpoint: None,
        final_result: opt_text(row, 14)?,
        end_reason: opt_text(row, 15)?,
        usage: Usage {
            input_tokens: row.get(16)?,
            output_tokens: row.get(17)?,
            api_calls: row.get(18)?,
            duration_ms: row.get(19)?,
        },
        created_at_ms: row.get(20)?,
        updated_at_ms: row.get(21)?,
        ended_at_ms: row.get(22)?,
    };
    Ok((session, row.get(23)?, row.get(13)?))
}

/// Fills the wide values, the latest checkpoint and the linked references.
pub fn complete_session(
    conn: &Connection,
    session: &mut Session,
    insert_seq: i64,
    checkpoint_seq: Option<i64>,
) -> rusqlite::Result<()> {
    let data = conn
        .prepare_cached(SELECT_SESSION_DATA)?
        .query_row(params![insert_seq], |r| {
            Ok((opt_text(r, 0)?, opt_json(r, 1)?, opt_json(r, 2)?))
        })
        .optional()?;
    if let Some((goal, context, metadata)) = data {
        session.goal = goal;
        session.context = context.unwrap_or_else(empty_object);
        session.metadata = metadata.unwrap_or_else(empty_object);
    }
    if let Some(seq) = checkpoint_seq {
        session.checkpoint = conn
            .prepare_cached(SELECT_CHECKPOINT)?
            .query_row(params![session.session_id.as_str(), seq], |r| {
                Ok(Checkpoint {
                    step: opt_text(r, 0)?,
                    note: opt_text(r, 1)?,
                    at_ms: r.get(2)?,
                    seq,
                })
            })
            .optional()?;
    }
    fill_refs(conn, session)
}

/// Fills `plan_ids`, `operation_ids` and `deployment_ids`.
pub fn fill_refs(conn: &Connection, session: &mut Session) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare_cached(SELECT_REFS)?;
    let mut rows = stmt.query(params![session.session_id.as_str()])?;
    let mut refs: Vec<(String, i64, String)> = Vec::new();
    while let Some(row) = rows.next()? {
        refs.push((text(row, 0)?, row.get(2)?, text(row, 1)?));
    }
    refs.sort();
    for (kind, _, id) in refs {
        match kind.as_str() {
            "plan" => session.plan_ids.push(id),
            "operation" => session.operation_ids.push(id),
            _ => session.deployment_ids.push(id),
        }
    }
    Ok(())
}

/// Reads one whole session, or `None`.
pub fn find_session(conn: &Connection, id: &str) -> rusqlite::Result<Option<Session>> {
    let found = conn
        .prepare_cached(SELECT_SESSION)?
        .query_row(params![id], map_session)
        .optional()?;
    match found {
        Some((mut s, insert_seq, checkpoint_seq)) => {
            complete_session(conn, &mut s, insert_seq, checkpoint_seq)?;
            Ok(Some(s))
        }
        None => Ok(None),
    }
}

/// Whether a session exists.
pub fn session_exists(conn: &Connection, id: &str) -> rusqlite::Result<bool> {
    conn.prepare_cached(SESSION_EXISTS)?.exists(params![id])
}

/// Status and rev of a session, or `None`.
pub fn select_status_rev(conn: &Connection, id: &str) -> rusqlite::Result<Option<(String, i64)>> {
    conn.prepare_cached(SELECT_STATUS_REV)?
        .query_row(params![id], |r| Ok((text(r, 0)?, r.get(1)?)))
        .optional()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Verb;

    /// Each verb's UPDATE admits exactly the statuses of the transition table.
    #[test]
    fn update_statements_match_the_transition_table() {
        let table = [
            (Verb::Start, UPDATE_START),
            (Verb::Pause, UPDATE_PAUSE),
            (Verb::Resume, UPDATE_RESUME),
            (Verb::Complete, UPDATE_COMPLETE),
            (Verb::Fail, UPDATE_FAIL),
            (Verb::Cancel, UPDATE_CANCEL),
            (Verb::Checkpoint, UPDATE_CHECKPOINT),
            (Verb::AppendEvent, UPDATE_TOUCH),
            (Verb::Stage, UPDATE_STAGE),
        ];
        for (verb, sql) in table {
            let list: Vec<String> = verb
                .allowed_from()
                .iter()
                .map(|s| format!("status = '{}'", s.as_str()))
                .collect();
            let want = format!("session_id = ?1 AND ({})", list.join(" OR "));
            for s in sql {
                assert!(s.contains(&want), "{verb:?}: {s}");
            }
            assert!(!sql[0].contains("rev = ?") && sql[1].contains("AND rev = ?"));
        }
    }
}
