//! SQL for `sessions`, `session_data`, `session_tags` and `session_refs`.
//!
//! Every statement is a `const` here, with explicit columns and `?N`
//! parameters; `list` picks fixed fragments and pushes values as parameters.

use super::codec::{empty_object, opt_json, opt_text, string_list, text};
use crate::model::{Actor, ActorType, Checkpoint, Session, SessionId, SessionStatus, Usage};
use rusqlite::{params, Connection, OptionalExtension, Row};

/// Columns of a session read, in the order [`map_session`] expects.
macro_rules! session_columns {
    () => {
        "s.session_id, s.status, s.title, d.goal, s.app, s.agent_id, \
         s.route, s.stage, s.parent_session_id, s.tags, d.context, d.metadata, s.actor_type, \
         s.actor_id, s.actor_authenticated, s.rev, s.checkpoint_step, s.checkpoint_note, \
         s.checkpoint_at_ms, s.checkpoint_seq, s.final_result, s.end_reason, s.input_tokens, \
         s.output_tokens, s.api_calls, s.duration_ms, s.created_at_ms, s.updated_at_ms, \
         s.ended_at_ms, s.insert_seq"
    };
}
pub(crate) use session_columns;

/// Reads one session by id.
pub const SELECT_SESSION: &str = concat!(
    "SELECT ",
    session_columns!(),
    " FROM sessions s LEFT JOIN session_data d ON d.session_id = s.session_id WHERE s.session_id = ?1"
);

/// Inserts a session row; created_at_ms is clamped so it never goes below the
/// newest session's (the list order then equals insertion order).
pub const INSERT_SESSION: &str = "INSERT INTO sessions (session_id, status, title, app, agent_id, \
     route, stage, parent_session_id, tags, actor_type, actor_id, actor_authenticated, rev, \
     last_seq, created_at_ms, updated_at_ms) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 1, 0, \
             max(?13, coalesce((SELECT max(created_at_ms) FROM sessions), ?13)), \
             max(?13, coalesce((SELECT max(created_at_ms) FROM sessions), ?13))) \
     RETURNING insert_seq, created_at_ms";

/// Inserts the wide values of a new session.
pub const INSERT_SESSION_DATA: &str =
    "INSERT INTO session_data (session_id, goal, context, metadata) VALUES (?1, ?2, ?3, ?4)";

/// Inserts one tag of a new session.
pub const INSERT_TAG: &str =
    "INSERT OR IGNORE INTO session_tags (tag, created_at_ms, insert_seq, session_id) VALUES (?1, ?2, ?3, ?4)";

/// Whether a session exists.
pub const SESSION_EXISTS: &str = "SELECT 1 FROM sessions WHERE session_id = ?1";

/// Status, rev of one session (to diagnose a refused conditional UPDATE).
pub const SELECT_STATUS_REV: &str = "SELECT status, rev FROM sessions WHERE session_id = ?1";

/// The conditional UPDATE of a status transition (start, pause, resume,
/// complete, fail, cancel). ?1 id, ?2 new status, ?3 now ms, ?4 terminal (0/1),
/// ?5 final_result, ?6 end_reason, ?7..?9 allowed statuses, ?10 if_rev or NULL.
pub const UPDATE_TRANSITION: &str = "UPDATE sessions SET \
       rev = rev + 1, last_seq = last_seq + 1, status = ?2, \
       updated_at_ms = max(updated_at_ms, ?3), \
       ended_at_ms = CASE WHEN ?4 THEN max(updated_at_ms, ?3) ELSE ended_at_ms END, \
       final_result = coalesce(?5, final_result), \
       end_reason = coalesce(?6, end_reason) \
     WHERE session_id = ?1 AND status IN (?7, ?8, ?9) AND (?10 IS NULL OR rev = ?10) \
     RETURNING rev, last_seq, updated_at_ms";

/// The conditional UPDATE of a checkpoint. It leaves `status` out of the SET
/// list so the status index is not touched. ?1 id, ?2 now ms, ?3 step,
/// ?4 note, ?5 if_rev or NULL.
pub const UPDATE_CHECKPOINT: &str = "UPDATE sessions SET \
       rev = rev + 1, last_seq = last_seq + 1, \
       updated_at_ms = max(updated_at_ms, ?2), \
       checkpoint_step = ?3, checkpoint_note = ?4, \
       checkpoint_at_ms = max(updated_at_ms, ?2), checkpoint_seq = last_seq + 1 \
     WHERE session_id = ?1 AND status = 'active' AND (?5 IS NULL OR rev = ?5) \
     RETURNING rev, last_seq, updated_at_ms";

/// The conditional UPDATE of an appended custom event (any live status).
/// ?1 id, ?2 now ms, ?3 if_rev or NULL.
pub const UPDATE_TOUCH: &str = "UPDATE sessions SET \
       rev = rev + 1, last_seq = last_seq + 1, updated_at_ms = max(updated_at_ms, ?2) \
     WHERE session_id = ?1 AND status IN ('pending', 'active', 'paused') AND (?3 IS NULL OR rev = ?3) \
     RETURNING rev, last_seq, updated_at_ms";

/// Linked references of one session, in kind then first-linked order.
pub const SELECT_REFS: &str =
    "SELECT kind, ref_id FROM session_refs WHERE session_id = ?1 ORDER BY kind, ordinal";

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

/// What a conditional UPDATE returned: the new rev, the new event's seq, and
/// its at_ms.
#[derive(Debug, Clone, Copy)]
pub struct Updated {
    /// rev after the update.
    pub rev: i64,
    /// seq for the event this mutation appends.
    pub seq: i64,
    /// at_ms for that event (never below the previous event's).
    pub at_ms: i64,
}

/// Maps the RETURNING row of the conditional UPDATEs.
pub fn map_updated(row: &Row<'_>) -> rusqlite::Result<Updated> {
    Ok(Updated {
        rev: row.get(0)?,
        seq: row.get(1)?,
        at_ms: row.get(2)?,
    })
}

fn status_of(s: &str) -> SessionStatus {
    // The schema's CHECK admits only known statuses; a hand-edited row that
    // breaks it would already fail STRICT/CHECK on write.
    s.parse().unwrap_or(SessionStatus::Failed)
}

/// Maps a row of [`SESSION_COLUMNS`] (refs are filled in by [`fill_refs`]).
pub fn map_session(row: &Row<'_>) -> rusqlite::Result<(Session, i64)> {
    let id_text = text(row, 0)?;
    let session_id = id_text
        .parse::<SessionId>()
        .unwrap_or_else(|_| SessionId::from_bytes([0; 8]));
    let checkpoint = match row.get::<_, Option<i64>>(19)? {
        Some(seq) => Some(Checkpoint {
            step: opt_text(row, 16)?,
            note: opt_text(row, 17)?,
            at_ms: row.get::<_, Option<i64>>(18)?.unwrap_or_default(),
            seq,
        }),
        None => None,
    };
    let session = Session {
        schema_version: "1",
        session_id,
        status: status_of(&text(row, 1)?),
        title: text(row, 2)?,
        goal: opt_text(row, 3)?,
        app: opt_text(row, 4)?,
        agent_id: opt_text(row, 5)?,
        route: opt_text(row, 6)?,
        stage: opt_text(row, 7)?,
        parent_session_id: opt_text(row, 8)?,
        tags: string_list(row, 9)?,
        context: opt_json(row, 10)?.unwrap_or_else(empty_object),
        metadata: opt_json(row, 11)?.unwrap_or_else(empty_object),
        actor: Actor {
            actor_type: text(row, 12)?.parse().unwrap_or(ActorType::Lib),
            id: opt_text(row, 13)?,
            authenticated: row.get::<_, i64>(14)? != 0,
        },
        rev: row.get(15)?,
        plan_ids: Vec::new(),
        operation_ids: Vec::new(),
        deployment_ids: Vec::new(),
        checkpoint,
        final_result: opt_text(row, 20)?,
        end_reason: opt_text(row, 21)?,
        usage: Usage {
            input_tokens: row.get(22)?,
            output_tokens: row.get(23)?,
            api_calls: row.get(24)?,
            duration_ms: row.get(25)?,
        },
        created_at_ms: row.get(26)?,
        updated_at_ms: row.get(27)?,
        ended_at_ms: row.get(28)?,
    };
    Ok((session, row.get(29)?))
}

/// Fills `plan_ids`, `operation_ids` and `deployment_ids`.
pub fn fill_refs(conn: &Connection, session: &mut Session) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare_cached(SELECT_REFS)?;
    let mut rows = stmt.query(params![session.session_id.as_str()])?;
    while let Some(row) = rows.next()? {
        let kind = text(row, 0)?;
        let id = text(row, 1)?;
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
    let mut stmt = conn.prepare_cached(SELECT_SESSION)?;
    let found = stmt.query_row(params![id], map_session).optional()?;
    match found {
        Some((mut s, _)) => {
            fill_refs(conn, &mut s)?;
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
