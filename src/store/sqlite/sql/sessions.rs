//! SQL for `sessions`, `session_data`, `session_tags` and `session_refs`.
//!
//! Every statement is a `const` here, with explicit columns and `?N`
//! parameters; `list` picks fixed fragments and pushes values as parameters.

use crate::model::{Actor, ActorType, Checkpoint, Session, SessionId, SessionStatus, Usage};
use crate::store::codec::empty_object;
use crate::store::sqlite::codec::{opt_json, opt_text, string_list, text};
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

/// Inserts a session row with every column given: the one insert of
/// create, fork and import (`insert_session`). `actor_authenticated` is
/// always 0: nothing logbook receives can vouch for an identity.
///
/// The insert_seq is given, above every one handed out (the newest
/// session's and every purged session's), so a session imported again
/// after a purge is a new incarnation that the old tombstone does not
/// cover (docs/design.md, "Retention").
pub const INSERT_SESSION: &str = "INSERT INTO sessions (insert_seq, session_id, status, title, \
     app, agent_id, route, stage, parent_session_id, tags, actor_type, actor_id, \
     actor_authenticated, rev, checkpoint_seq, final_result, end_reason, input_tokens, \
     output_tokens, api_calls, duration_ms, created_at_ms, updated_at_ms, ended_at_ms) VALUES \
     (max((SELECT coalesce(max(insert_seq), 0) FROM sessions), \
          (SELECT coalesce(max(insert_seq), 0) FROM tombstones)) + 1, \
     ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 0, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, \
     ?20, ?21, ?22)";

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

/// Inserts a session: its row ([`INSERT_SESSION`]), its `session_data`
/// and its tags. Returns its insertion key.
pub fn insert_session(
    conn: &Connection,
    r: &crate::store::SessionRow<'_>,
) -> rusqlite::Result<i64> {
    let tags = serde_json::to_string(r.tags)
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    conn.prepare_cached(INSERT_SESSION)?.execute(params![
        r.session_id,
        r.status.as_str(),
        r.title,
        r.app,
        r.agent_id,
        r.route,
        r.stage,
        r.parent_session_id,
        tags,
        r.actor_type.as_str(),
        r.actor_id,
        r.rev,
        r.checkpoint_seq,
        r.final_result,
        r.end_reason,
        r.usage.input_tokens,
        r.usage.output_tokens,
        r.usage.api_calls,
        r.usage.duration_ms,
        r.created_at_ms,
        r.updated_at_ms,
        r.ended_at_ms,
    ])?;
    let insert_seq = conn.last_insert_rowid();
    conn.prepare_cached(INSERT_SESSION_DATA)?.execute(params![
        insert_seq,
        r.session_id,
        r.goal,
        r.context,
        r.metadata
    ])?;
    for t in r.tags {
        conn.prepare_cached(INSERT_TAG)?.execute(params![
            t,
            r.created_at_ms,
            insert_seq,
            r.session_id
        ])?;
    }
    Ok(insert_seq)
}

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
        session.apply_kept_checkpoint();
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
    use crate::model::{SessionStatus, Verb};
    use crate::store::sqlite::tx::session_update;
    use crate::store::{SessionChange, SessionGuard};

    /// Each verb's UPDATE admits exactly the statuses of the transition
    /// table, and the rev term only when guarded.
    #[test]
    fn update_statements_match_the_transition_table() {
        for verb in Verb::VARIANTS {
            let list: Vec<String> = verb
                .allowed_from()
                .iter()
                .map(|s| format!("status = '{}'", s.as_str()))
                .collect();
            let want = format!("session_id = ?1 AND ({})", list.join(" OR "));
            for rev in [None, Some(7)] {
                let guard = SessionGuard {
                    from: verb.allowed_from(),
                    rev,
                };
                let change = SessionChange {
                    status: Some(SessionStatus::Paused),
                    ..SessionChange::default()
                };
                let (sql, params) = session_update("ses_0000000000000000", guard, &change);
                assert!(sql.contains(&want), "{verb:?}: {sql}");
                assert_eq!(sql.contains("AND rev = ?3"), rev.is_some(), "{sql}");
                assert_eq!(params.len(), 2 + usize::from(rev.is_some()));
            }
        }
    }
}
