//! SQL for export and import (PostgreSQL; SQLite's is
//! `sqlite/sql/transfer.rs`).
//!
//! Export reads a session's events a page at a time. Import inserts each
//! table's rows of a session with one statement (`INSERT … SELECT FROM
//! unnest($N::type[], …) WITH ORDINALITY … ORDER BY` the ordinal, so rows
//! go in — and the row triggers check them — in the order given; events in
//! chunks), in the order the triggers allow, as on SQLite.

use super::super::tx::PgTx;
use super::{col, Param};
use crate::chain;
use crate::error::{Error, Result};
use crate::store::codec::json_of_text;
use crate::store::rows::{
    BudgetFull, RunRow, SessionRows, SnapshotFull, StoredEvent, StoredRef, WorkflowRows,
};
use postgres::types::Type;

/// The insertion key of one session.
pub const SELECT_INSERT_SEQ: &str = "SELECT insert_seq FROM sessions WHERE session_id = $1";

/// The largest insertion key (0 for an empty database).
pub const SELECT_MAX_INSERT_SEQ: &str = "SELECT coalesce(max(insert_seq), 0) FROM sessions";

/// Taken by an import batch before it reads the largest insertion key:
/// no other transaction may insert or change a session until the batch
/// commits (the mode conflicts with every writer's ROW EXCLUSIVE and with
/// itself; readers go on). The import counts on this, as on SQLite's
/// `BEGIN IMMEDIATE`: its sessions take the keys right after that largest
/// one, and a session another import wrote meanwhile is seen as existing
/// (skipped), never inserted twice. Waits at most `lock_timeout`.
pub const LOCK_SESSIONS_FOR_IMPORT: &str = "LOCK TABLE sessions IN SHARE ROW EXCLUSIVE MODE";

/// Whether a run id is taken.
pub const SELECT_RUN_EXISTS: &str = "SELECT 1 FROM runs WHERE run_id = $1";

/// A session's references, by kind (plan, operation, deployment) then
/// ordinal.
pub const SELECT_REFS_FULL: &str = "SELECT kind, ref_id, ordinal, linked_seq FROM session_refs \
     WHERE session_id = $1 ORDER BY CASE kind WHEN 'plan' THEN 0 WHEN 'operation' THEN 1 \
     ELSE 2 END, ordinal";

/// A page of a session's events with their hash, after seq $2. $3 rows.
pub const SELECT_EVENTS_FULL: &str = "SELECT seq, type, at_ms, actor_type, detail, data, run_id, \
     hash FROM events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3";

/// Every run of a session with every column, in creation order.
pub const SELECT_RUNS_FULL: &str = "SELECT run_id, status, input, output, error_code, \
     error_message, metadata, input_tokens, output_tokens, api_calls, turn_count, created_at_ms, \
     updated_at_ms, started_at_ms, ended_at_ms FROM runs WHERE session_id = $1 \
     ORDER BY insert_seq";

/// A session's budget with every column.
pub const SELECT_BUDGET_FULL: &str = "SELECT max_tokens, max_api_calls, max_duration_ms, \
     on_exceed, base_tokens, base_api_calls, base_duration_ms, exceeded_at_ms, updated_at_ms \
     FROM session_budgets WHERE session_id = $1";

/// A session's snapshots with their state, by seq.
pub const SELECT_SNAPSHOTS_FULL: &str = "SELECT seq, step, stage, state, at_ms, payload \
     FROM session_snapshots WHERE session_id = $1 ORDER BY seq";

/// An imported session's references. $1 session, then arrays: kinds, ids,
/// ordinals, linked seqs.
pub const INSERT_REFS: &str = "INSERT INTO session_refs (session_id, kind, ref_id, ordinal, \
     linked_seq) SELECT $1, u.kind, u.ref_id, u.ordinal, u.linked_seq \
     FROM unnest($2::text[], $3::text[], $4::int8[], $5::int8[]) WITH ORDINALITY \
     AS u(kind, ref_id, ordinal, linked_seq, n) ORDER BY u.n";

/// A chunk of an imported session's events. $1 session, then arrays:
/// seqs, types, times, actors, details, data, runs, prev hashes, hashes.
pub const INSERT_EVENTS: &str = "INSERT INTO events (session_id, seq, type, at_ms, actor_type, \
     detail, data, run_id, prev_hash, hash) SELECT $1, u.seq, u.type, u.at_ms, u.actor, \
     u.detail, u.data, u.run_id, u.prev_hash, u.hash \
     FROM unnest($2::int8[], $3::text[], $4::int8[], $5::text[], $6::text[], $7::text[], \
     $8::text[], $9::bytea[], $10::bytea[]) WITH ORDINALITY \
     AS u(seq, type, at_ms, actor, detail, data, run_id, prev_hash, hash, n) ORDER BY u.n";

/// An imported session's runs, inserted pending (trigger
/// `runs_insert_live_session`), every other column as recorded. $1
/// session, then arrays: ids, inputs, outputs, error codes, error messages,
/// metadata, input tokens, output tokens, api calls, turns, created,
/// updated, started, ended.
pub const INSERT_RUNS: &str = "INSERT INTO runs (run_id, session_id, status, input, output, \
     error_code, error_message, metadata, input_tokens, output_tokens, api_calls, turn_count, \
     created_at_ms, updated_at_ms, started_at_ms, ended_at_ms) SELECT u.run_id, $1, 'pending', \
     u.input, u.output, u.error_code, u.error_message, u.metadata, u.input_tokens, \
     u.output_tokens, u.api_calls, u.turn_count, u.created_at_ms, u.updated_at_ms, \
     u.started_at_ms, u.ended_at_ms FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], \
     $6::text[], $7::text[], $8::int8[], $9::int8[], $10::int8[], $11::int8[], $12::int8[], \
     $13::int8[], $14::int8[], $15::int8[]) WITH ORDINALITY AS u(run_id, input, output, \
     error_code, error_message, metadata, input_tokens, output_tokens, api_calls, turn_count, \
     created_at_ms, updated_at_ms, started_at_ms, ended_at_ms, n) ORDER BY u.n";

/// pending → each imported run's recorded status (the one UPDATE the
/// triggers allow). Arrays: ids, statuses.
pub const UPDATE_RUNS_IMPORT_STATUS: &str = "UPDATE runs r SET status = u.status \
     FROM unnest($1::text[], $2::text[]) AS u(run_id, status) \
     WHERE r.run_id = u.run_id AND r.status = 'pending'";

/// An imported budget, every column as recorded. $1 session, $2–$4
/// limits, $5 policy, $6–$8 bases, $9 exceeded, $10 updated.
pub const INSERT_BUDGET_IMPORT: &str = "INSERT INTO session_budgets (session_id, max_tokens, \
     max_api_calls, max_duration_ms, on_exceed, base_tokens, base_api_calls, base_duration_ms, \
     exceeded_at_ms, updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";

/// An imported session's snapshots (after their checkpoint events). $1
/// session, then arrays: seqs, steps, stages, states, times, payloads.
pub const INSERT_SNAPSHOTS_IMPORT: &str = "INSERT INTO session_snapshots (session_id, seq, step, \
     stage, state, size_bytes, at_ms, payload) SELECT $1, u.seq, u.step, u.stage, u.state, \
     octet_length(u.state), u.at_ms, u.payload FROM unnest($2::int8[], $3::text[], $4::text[], \
     $5::text[], $6::int8[], $7::bytea[]) WITH ORDINALITY AS u(seq, step, stage, state, at_ms, \
     payload, n) ORDER BY u.n";

/// An imported session's gates with their recorded decisions. $1 session,
/// then arrays: names, rounds, kinds, statuses, opened seqs, opened at,
/// decided seqs, decided at, reasons, outcomes.
pub const INSERT_GATES_IMPORT: &str = "INSERT INTO session_gates (session_id, name, round, kind, \
     status, opened_seq, opened_at_ms, decided_seq, decided_at_ms, reason, outcome) \
     SELECT $1, u.name, u.round, u.kind, u.status, u.opened_seq, u.opened_at_ms, u.decided_seq, \
     u.decided_at_ms, u.reason, u.outcome FROM unnest($2::text[], $3::int8[], $4::text[], \
     $5::text[], $6::int8[], $7::int8[], $8::int8[], $9::int8[], $10::text[], $11::text[]) \
     WITH ORDINALITY AS u(name, round, kind, status, opened_seq, opened_at_ms, decided_seq, \
     decided_at_ms, reason, outcome, n) ORDER BY u.n";

/// A staged terminal session given its recorded status and rev (see
/// SQLite's `UPDATE_SESSION_IMPORT_FINISH`). $1 id, $2 status, $3 rev.
pub const UPDATE_SESSION_IMPORT_FINISH: &str = "UPDATE sessions SET status = $2, rev = $3 \
     WHERE session_id = $1 AND rev = $3 - 1 AND status = 'active'";

/// The import's per-session savepoint and its ends.
pub const SAVEPOINT: &str = "SAVEPOINT logbook_import_session";
/// Keeps the session's rows.
pub const RELEASE: &str = "RELEASE logbook_import_session";
/// Undoes the session's rows (and clears an error that aborted them).
pub const ROLLBACK_TO: &str = "ROLLBACK TO logbook_import_session";

/// Rows of an export page.
const PAGE: i64 = 1000;
/// Events per import statement, and the payload bytes that close a chunk
/// early.
const EVENT_CHUNK: usize = 500;
const EVENT_CHUNK_BYTES: usize = 8 << 20;

fn json_text(t: Option<String>) -> Option<String> {
    t.map(|t| json_of_text(t).get().to_owned())
}

/// A session's references, by kind then ordinal.
pub fn select_refs(tx: &mut PgTx<'_>, id: &str) -> Result<Vec<StoredRef>> {
    tx.rows(SELECT_REFS_FULL, &[(&id, Type::TEXT)])?
        .iter()
        .map(|r| {
            Ok(StoredRef {
                kind: col(r, 0)?,
                id: col(r, 1)?,
                ordinal: col(r, 2)?,
                linked_seq: col(r, 3)?,
            })
        })
        .collect()
}

/// A session's events with their hashes, by seq, read a page at a time.
pub fn select_events_full(tx: &mut PgTx<'_>, id: &str) -> Result<Vec<StoredEvent>> {
    let mut out = Vec::new();
    let mut after = -1i64;
    loop {
        let rows = tx.rows(
            SELECT_EVENTS_FULL,
            &[(&id, Type::TEXT), (&after, Type::INT8), (&PAGE, Type::INT8)],
        )?;
        for r in &rows {
            let e = StoredEvent {
                seq: col(r, 0)?,
                event_type: col(r, 1)?,
                at_ms: col(r, 2)?,
                actor_type: col(r, 3)?,
                detail: col(r, 4)?,
                data: col::<Option<String>>(r, 5)?.map(json_of_text),
                run_id: col(r, 6)?,
                hash: col::<Option<Vec<u8>>>(r, 7)?.unwrap_or_default(),
            };
            after = e.seq;
            out.push(e);
        }
        if i64::try_from(rows.len()).unwrap_or(i64::MAX) < PAGE {
            return Ok(out);
        }
    }
}

/// A session's runs, budget, snapshots (with state) and gates.
pub fn select_workflow(tx: &mut PgTx<'_>, id: &str) -> Result<WorkflowRows> {
    let p: [Param<'_>; 1] = [(&id, Type::TEXT)];
    let runs = tx
        .rows(SELECT_RUNS_FULL, &p)?
        .iter()
        .map(|r| {
            Ok(RunRow {
                run_id: col(r, 0)?,
                status: col(r, 1)?,
                input: json_text(col(r, 2)?),
                output: json_text(col(r, 3)?),
                error_code: col(r, 4)?,
                error_message: col(r, 5)?,
                metadata: json_text(col(r, 6)?).unwrap_or_else(|| "{}".to_owned()),
                input_tokens: col(r, 7)?,
                output_tokens: col(r, 8)?,
                api_calls: col(r, 9)?,
                turn_count: col(r, 10)?,
                created_at_ms: col(r, 11)?,
                updated_at_ms: col(r, 12)?,
                started_at_ms: col(r, 13)?,
                ended_at_ms: col(r, 14)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let budget = match tx.row(SELECT_BUDGET_FULL, &p)? {
        Some(r) => Some(BudgetFull {
            max_tokens: col(&r, 0)?,
            max_api_calls: col(&r, 1)?,
            max_duration_ms: col(&r, 2)?,
            on_exceed: col(&r, 3)?,
            base_tokens: col(&r, 4)?,
            base_api_calls: col(&r, 5)?,
            base_duration_ms: col(&r, 6)?,
            exceeded_at_ms: col(&r, 7)?,
            updated_at_ms: col(&r, 8)?,
        }),
        None => None,
    };
    let snapshots = tx
        .rows(SELECT_SNAPSHOTS_FULL, &p)?
        .iter()
        .map(|r| {
            Ok(SnapshotFull {
                seq: col(r, 0)?,
                step: col(r, 1)?,
                stage: col(r, 2)?,
                state: json_text(col(r, 3)?).unwrap_or_else(|| "{}".to_owned()),
                at_ms: col(r, 4)?,
                payload: col(r, 5)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let gates = super::workflow::select_gates(tx, id)?;
    Ok(WorkflowRows {
        runs,
        budget,
        snapshots,
        gates,
    })
}

/// Why an import stopped: a driver error (perhaps a refusal), or another.
pub enum Stop {
    /// The driver's error, unrecorded.
    Db(postgres::Error),
    /// Anything else.
    Other(Error),
}

impl From<postgres::Error> for Stop {
    fn from(e: postgres::Error) -> Self {
        Stop::Db(e)
    }
}

/// Inserts every row of one imported session, as SQLite's
/// `transfer::insert_session_rows` does (events chained afresh): `false`
/// when its id is taken.
pub fn insert_session_rows(tx: &mut PgTx<'_>, s: &SessionRows) -> std::result::Result<bool, Stop> {
    let staged = s.status.is_terminal() && !s.workflow.runs.is_empty();
    let row = s.first_row();
    if super::sessions::try_insert_session(tx, &row)?.is_none() {
        return Ok(false);
    }
    let id = s.session_id.as_str();
    insert_refs(tx, id, s)?;
    insert_events(tx, id, s)?;
    super::transfer_workflow::insert_workflow(tx, id, &s.workflow)?;
    if staged {
        let st = s.status.as_str();
        let n = tx.try_exec(
            UPDATE_SESSION_IMPORT_FINISH,
            &[(&id, Type::TEXT), (&st, Type::TEXT), (&s.rev, Type::INT8)],
        )?;
        if n != 1 {
            return Err(Stop::Other(Error::internal(format!(
                "database error: Wrong number of rows: {n}"
            ))));
        }
    }
    Ok(true)
}

fn insert_refs(tx: &mut PgTx<'_>, id: &str, s: &SessionRows) -> std::result::Result<(), Stop> {
    let mut ordinals: [(&str, i64); 3] = [("plan", 0), ("operation", 0), ("deployment", 0)];
    let (mut kinds, mut ids, mut ords, mut linked) = (vec![], vec![], vec![], vec![]);
    for r in &s.refs {
        let Some(slot) = ordinals.iter_mut().find(|(k, _)| *k == r.kind) else {
            continue;
        };
        kinds.push(r.kind);
        ids.push(r.id.as_str());
        ords.push(slot.1);
        linked.push(r.linked_seq);
        slot.1 += 1;
    }
    if !kinds.is_empty() {
        tx.try_exec(
            INSERT_REFS,
            &[
                (&id, Type::TEXT),
                (&kinds, Type::TEXT_ARRAY),
                (&ids, Type::TEXT_ARRAY),
                (&ords, Type::INT8_ARRAY),
                (&linked, Type::INT8_ARRAY),
            ],
        )?;
    }
    Ok(())
}

/// One chunk of events, column-wise.
#[derive(Default)]
struct EventChunk<'a> {
    seq: Vec<i64>,
    event_type: Vec<&'a str>,
    at_ms: Vec<i64>,
    actor: Vec<&'a str>,
    detail: Vec<Option<&'a str>>,
    data: Vec<Option<&'a str>>,
    run_id: Vec<Option<&'a str>>,
    prev: Vec<Vec<u8>>,
    hash: Vec<Vec<u8>>,
    bytes: usize,
}

impl EventChunk<'_> {
    fn flush(&mut self, tx: &mut PgTx<'_>, id: &str) -> std::result::Result<(), Stop> {
        if self.seq.is_empty() {
            return Ok(());
        }
        tx.try_exec(
            INSERT_EVENTS,
            &[
                (&id, Type::TEXT),
                (&self.seq, Type::INT8_ARRAY),
                (&self.event_type, Type::TEXT_ARRAY),
                (&self.at_ms, Type::INT8_ARRAY),
                (&self.actor, Type::TEXT_ARRAY),
                (&self.detail, Type::TEXT_ARRAY),
                (&self.data, Type::TEXT_ARRAY),
                (&self.run_id, Type::TEXT_ARRAY),
                (&self.prev, Type::BYTEA_ARRAY),
                (&self.hash, Type::BYTEA_ARRAY),
            ],
        )?;
        *self = EventChunk::default();
        Ok(())
    }
}

fn insert_events(tx: &mut PgTx<'_>, id: &str, s: &SessionRows) -> std::result::Result<(), Stop> {
    let mut chunk = EventChunk::default();
    let mut prev = chain::GENESIS;
    for (seq, e) in s.events.iter().enumerate() {
        let seq = i64::try_from(seq).unwrap_or(i64::MAX);
        let actor = e.actor_type.as_str();
        let hash = chain::event_hash(
            &prev,
            &chain::EventFields {
                session_id: s.session_id.as_bytes(),
                seq,
                event_type: e.event_type.as_bytes(),
                at_ms: e.at_ms,
                actor_type: actor.as_bytes(),
                detail: e.detail.as_deref().map(str::as_bytes),
                data: e.data.as_deref().map(str::as_bytes),
                run_id: e.run_id.as_deref().map(str::as_bytes),
            },
        );
        chunk.seq.push(seq);
        chunk.event_type.push(&e.event_type);
        chunk.at_ms.push(e.at_ms);
        chunk.actor.push(actor);
        chunk.detail.push(e.detail.as_deref());
        chunk.data.push(e.data.as_deref());
        chunk.run_id.push(e.run_id.as_deref());
        chunk.prev.push(prev.to_vec());
        chunk.hash.push(hash.to_vec());
        chunk.bytes += e.data.as_ref().map_or(0, String::len)
            + e.detail.as_ref().map_or(0, String::len)
            + e.event_type.len();
        prev = hash;
        if chunk.seq.len() >= EVENT_CHUNK || chunk.bytes >= EVENT_CHUNK_BYTES {
            chunk.flush(tx, id)?;
        }
    }
    chunk.flush(tx, id)
}
