//! Raw SQL as the table owner cannot break the ledger's invariants on
//! PostgreSQL (docs/design.md, "Storage" and "Backends"): one statement per trigger that
//! must be refused — with the SQLite trigger's own message, read from a
//! fresh SQLite database, SQLSTATE LB001 and the trigger's name — or, for
//! SQLite's `*_no_replace` triggers, by the key that stands for it there;
//! and beside them the legal writes, which must pass, so the refusals are
//! the triggers' doing and not a broken fixture.
//!
//! The fixture's hashes are arbitrary 32-byte values: the trigger checks the
//! chain's links, not the digests (SQL has no logbook encoding; `verify`
//! recomputes them).

use crate::pg::pg_test_db;
use logbook::store::postgres::migrate::{migrate, INVARIANT_SQLSTATE};
use std::collections::BTreeMap;

const A: &str = "'ses_00000000000000a1'";
const B: &str = "'ses_00000000000000b1'";
const C: &str = "'ses_00000000000000c1'";
const TRUNCATED: &str = "logbook: ledger tables are never truncated";
const TX_ID: &str = "logbook: an event's tx_id must be the id of the transaction that inserts it";

/// 32 bytes of `tag` (two hex digits) repeated.
fn h(tag: &str) -> String {
    format!("decode(repeat('{tag}', 32), 'hex')")
}

fn event(session: &str, seq: i64, kind: &str, prev: &str, hash: &str) -> String {
    format!(
        "INSERT INTO events (session_id, seq, type, at_ms, actor_type, prev_hash, hash) \
         VALUES ({session}, {seq}, '{kind}', 1000, 'cli', {}, {});",
        h(prev),
        h(hash)
    )
}

/// A: active, rev 3, events 0–2 (checkpoints at 1 and 2, a snapshot of 1),
/// a tag, a reference, a key, a budget, a pending and an approved gate, a
/// running and a pending run (5 input tokens), a lease. B: completed, with
/// data, a budget and a completed run. C: active, one event, no budget.
fn fixture() -> String {
    let mut sql = format!(
        "INSERT INTO sessions (session_id, status, title, actor_type, rev, created_at_ms, updated_at_ms) VALUES
           ({A}, 'active', 'a', 'cli', 3, 1000, 1000), ({B}, 'active', 'b', 'cli', 1, 1000, 1000),
           ({C}, 'active', 'c', 'cli', 1, 1000, 1000);
         INSERT INTO session_data (insert_seq, session_id, goal) SELECT insert_seq, session_id, 'g' FROM sessions;
         INSERT INTO session_tags (tag, created_at_ms, insert_seq, session_id)
           SELECT 'red', 1000, insert_seq, session_id FROM sessions WHERE session_id = {A};
         INSERT INTO session_refs VALUES ({A}, 'plan', 'p-1', 0, 1);"
    );
    for e in [
        event(A, 0, "created", "00", "a0"),
        event(A, 1, "checkpoint", "a0", "a1"),
        event(A, 2, "checkpoint", "a1", "a2"),
        event(B, 0, "created", "00", "b0"),
        event(B, 1, "completed", "b0", "b1"),
        event(C, 0, "created", "00", "c0"),
    ] {
        sql.push_str(&e);
    }
    sql.push_str(&format!(
        "INSERT INTO idempotency_keys (key_sha256, session_id, event_id, request_digest, rev)
           SELECT 'k', {A}, event_id, 'd', 3 FROM events WHERE session_id = {A} AND seq = 2;
         INSERT INTO session_snapshots (session_id, seq, step, state, size_bytes, at_ms) VALUES ({A}, 1, 's', '{{}}', 2, 1000);
         INSERT INTO session_budgets (session_id, on_exceed, updated_at_ms) VALUES ({A}, 'warn', 1000), ({B}, 'warn', 1000);
         INSERT INTO session_gates (session_id, name, round, kind, status, opened_seq, opened_at_ms) VALUES
           ({A}, 'deploy', 1, 'user-approval', 'pending', 1, 1000);
         INSERT INTO session_gates (session_id, name, round, kind, status, opened_seq, opened_at_ms, decided_seq, decided_at_ms)
           VALUES ({A}, 'review', 1, 'auto', 'approved', 1, 1000, 1, 1000);
         INSERT INTO runs (run_id, session_id, status, input_tokens, created_at_ms, updated_at_ms) VALUES
           ('run_00000000000000a1', {A}, 'pending', 5, 1000, 1000),
           ('run_00000000000000a2', {A}, 'pending', 0, 1000, 1000),
           ('run_00000000000000b1', {B}, 'pending', 0, 1000, 1000);
         UPDATE runs SET status = 'running', started_at_ms = 1000 WHERE run_id = 'run_00000000000000a1';
         UPDATE runs SET status = 'completed', ended_at_ms = 2000 WHERE run_id = 'run_00000000000000b1';
         UPDATE sessions SET status = 'completed', rev = rev + 1, ended_at_ms = 2000, final_result = 'done'
           WHERE session_id = {B};
         INSERT INTO session_leases VALUES ({A}, repeat('f', 64), 1, 'host', 1000, 9000, 2);"
    ));
    sql
}

/// What a statement must meet.
enum Expect {
    /// Succeeds (a legal write).
    Passes,
    /// Refused by this trigger, with the message of SQLite's trigger of the
    /// same name.
    Trigger(&'static str),
    /// Refused by this PostgreSQL-only trigger (or check) with this message.
    PgTrigger(String, &'static str),
    /// Refused with this SQLSTATE by the column's CHECK or type (not a
    /// trigger: the JSON checks).
    Sqlstate(&'static str),
    /// Refused by this key (SQLSTATE 23505), which stands for SQLite's
    /// `stands_for` trigger.
    Key {
        stands_for: &'static str,
        constraint: &'static str,
    },
}

use Expect::{Key, Passes, PgTrigger, Sqlstate, Trigger};

fn cases() -> Vec<(String, Expect)> {
    let ev = |seq: i64, prev: &str, extra_cols: &str, extra_vals: &str| {
        format!(
            "INSERT INTO events (session_id, seq, type, at_ms, actor_type, prev_hash, hash{extra_cols}) \
             VALUES ({A}, {seq}, 'x.a', 2000, 'cli', {}, {}{extra_vals})",
            h(prev),
            h("a3")
        )
    };
    // CASCADE: the tables that reference `t` go too, and `t`'s own
    // trigger fires first.
    let truncate = |t: &str| {
        (
            format!("TRUNCATE {t} CASCADE"),
            PgTrigger(format!("{t}_no_truncate"), TRUNCATED),
        )
    };
    // A tombstone that tells the truth about B (completed), for the
    // retention cases (V7).
    let tomb = |id: &str| {
        format!(
            "INSERT INTO tombstones (session_id, insert_seq, purge_id, title, status, app, \
             parent_session_id, created_at_ms, ended_at_ms, events, last_event_id, last_hash, \
             bytes, purged_at_ms) SELECT s.session_id, s.insert_seq, 5, s.title, s.status, s.app, \
             s.parent_session_id, s.created_at_ms, s.ended_at_ms, \
             (SELECT count(*) FROM events e WHERE e.session_id = s.session_id), \
             (SELECT e.event_id FROM events e WHERE e.session_id = s.session_id ORDER BY e.seq DESC LIMIT 1), \
             (SELECT e.hash FROM events e WHERE e.session_id = s.session_id ORDER BY e.seq DESC LIMIT 1), \
             0, 0 FROM sessions s WHERE s.session_id = {id}"
        )
    };
    let purge_row =
        "INSERT INTO purges (purge_id, at_ms, actor_type, filter, sessions, events, bytes) \
                     VALUES (9, 1, 'sql', '{}', 0, 0, 0)";
    let end_row = "INSERT INTO purge_ends VALUES (9, 2, 'done', 0)";
    // A tombstone of a session that is not here: a purge recorded
    // elsewhere (V8), which a live session may not name as its parent.
    let carried = "INSERT INTO tombstones (session_id, insert_seq, purge_id, title, status, \
                   created_at_ms, ended_at_ms, events, bytes, purged_at_ms) \
                   VALUES ('ses_00000000000000f7', 1, 7, 't', 'completed', 1, 2, 0, 0, 3)";
    vec![
        // retention (V7)
        (tomb(A), Trigger("tombstones_truthful")), // A is active
        (format!("{}; DELETE FROM events WHERE session_id = {B}", tomb(B)), Passes),
        (format!("{}; UPDATE tombstones SET title = 'x'", tomb(B)), Trigger("tombstones_no_update")),
        (format!("{}; DELETE FROM tombstones", tomb(B)), Trigger("tombstones_no_delete")),
        (format!("{purge_row}; UPDATE purges SET bytes = 1"), Trigger("purges_no_update")),
        (format!("{purge_row}; DELETE FROM purges"), Trigger("purges_no_delete")),
        (
            format!("{purge_row}; {purge_row}"),
            Key {
                stands_for: "purges_no_replace",
                constraint: "purges_pkey",
            },
        ),
        truncate("purges"),
        truncate("tombstones"),
        // retention hardened (V8)
        (
            "INSERT INTO purges (purge_id, at_ms, actor_type, filter, sessions, events, bytes) \
             VALUES (9, 1, 'cli', '{}', 0, 0, 0)".into(),
            Trigger("purges_actor_checked"),
        ),
        (
            "SET LOCAL logbook.writer = 'cli'; INSERT INTO purges (purge_id, at_ms, actor_type, \
             filter, sessions, events, bytes) VALUES (9, 1, 'cli', '{}', 0, 0, 0)"
                .into(),
            Passes,
        ),
        (
            format!(
                "SET LOCAL logbook.writer = 'cli'; INSERT INTO purges (purge_id, at_ms, actor_type, \
                 filter, sessions, events, bytes) VALUES (5, 1, 'cli', '{{}}', 0, 0, 0); \
                 SET LOCAL logbook.writer = ''; {}",
                tomb(B)
            ),
            Trigger("tombstones_raw_sql_own_purge"),
        ),
        (format!("{purge_row}; {end_row}"), Passes),
        (format!("{purge_row}; {end_row}; UPDATE purge_ends SET skipped = 1"), Trigger("purge_ends_no_update")),
        (format!("{purge_row}; {end_row}; DELETE FROM purge_ends"), Trigger("purge_ends_no_delete")),
        (
            format!("{purge_row}; {end_row}; {end_row}"),
            Key {
                stands_for: "purge_ends_no_replace",
                constraint: "purge_ends_pkey",
            },
        ),
        truncate("purge_ends"),
        (carried.into(), Passes),
        (
            format!(
                "{carried}; INSERT INTO sessions (session_id, status, title, actor_type, rev, \
                 created_at_ms, updated_at_ms, parent_session_id) \
                 VALUES ('ses_00000000000000e2', 'active', 'e', 'cli', 1, 1, 1, 'ses_00000000000000f7')"
            ),
            Trigger("sessions_live_parent"),
        ),
        (
            format!(
                "INSERT INTO session_snapshots (session_id, seq, state, size_bytes, at_ms) \
                 SELECT session_id, seq, '{{}}', 2, 1 FROM session_snapshots WHERE session_id = {A}"
            ),
            Key {
                stands_for: "session_snapshots_no_replace",
                constraint: "session_snapshots_by_session_seq",
            },
        ),
        (
            "UPDATE runs SET status = 'running', started_at_ms = 1 WHERE run_id = 'run_00000000000000a2'".into(),
            Key { stands_for: "runs_one_running_no_replace", constraint: "runs_one_running_per_session" },
        ),
        (
            "INSERT INTO sessions (session_id, status, title, actor_type, rev, created_at_ms, updated_at_ms, parent_session_id) \
             VALUES ('ses_00000000000000e1', 'active', 'e', 'cli', 1, 1, 1, 'ses_00000000000000ff')".into(),
            PgTrigger(
                "sessions_parent_exists".into(),
                "logbook: a session's parent must be a session or a purged session's tombstone",
            ),
        ),
        // events
        (ev(3, "a2", "", ""), Passes),
        (format!("UPDATE events SET detail = 'x' WHERE session_id = {A} AND seq = 0"), Trigger("events_no_update")),
        (format!("UPDATE events SET hash = {} WHERE session_id = {A} AND seq = 2", h("ee")), Trigger("events_no_update")),
        (format!("DELETE FROM events WHERE session_id = {A} AND seq = 2"), Trigger("events_no_delete")),
        (ev(4, "a2", "", ""), Trigger("events_seq_contiguous")), // a gap
        (ev(2, "a1", "", ""), Trigger("events_seq_contiguous")), // a repeated seq
        (ev(3, "a1", "", ""), Trigger("events_seq_contiguous")), // a broken link
        (
            format!("INSERT INTO events (session_id, seq, type, at_ms, actor_type, prev_hash) VALUES ({A}, 3, 'x.a', 2000, 'cli', {})", h("a2")),
            Trigger("events_seq_contiguous"), // no hash
        ),
        (
            format!("INSERT INTO events (session_id, seq, type, at_ms, actor_type, prev_hash, hash) VALUES ('ses_00000000000000ff', 0, 'x.a', 1, 'cli', {}, {})", h("00"), h("f0")),
            Trigger("events_seq_contiguous"), // no such session
        ),
        (ev(3, "a2", ", tx_id", ", '3'::xid8"), PgTrigger("events_seq_contiguous".into(), TX_ID)),
        (
            ev(3, "a2", ", event_id", &format!(", (SELECT event_id FROM events WHERE session_id = {A} AND seq = 0)")),
            Key { stands_for: "events_seq_contiguous", constraint: "events_pkey" },
        ),
        // A session's temporary table cannot stand in for `events` in the
        // check (the function's search_path is pinned).
        (
            format!("CREATE TEMP TABLE events (session_id text, seq bigint, hash bytea);
                     INSERT INTO pg_temp.events VALUES ({A}, 9, {});
                     INSERT INTO public.events (session_id, seq, type, at_ms, actor_type, prev_hash, hash)
                     VALUES ({A}, 10, 'x.a', 2000, 'cli', {}, {})", h("a9"), h("a9"), h("aa")),
            Trigger("events_seq_contiguous"),
        ),
        truncate("events"),
        // sessions
        (format!("UPDATE sessions SET rev = rev + 1, title = 'y' WHERE session_id = {A}"), Passes),
        (format!("UPDATE sessions SET rev = rev + 2 WHERE session_id = {A}"), Trigger("sessions_rev_step")),
        (format!("UPDATE sessions SET title = 'y' WHERE session_id = {A}"), Trigger("sessions_rev_step")),
        (format!("UPDATE sessions SET rev = rev + 1, created_at_ms = 1 WHERE session_id = {A}"), Trigger("sessions_rev_step")),
        (format!("UPDATE sessions SET rev = rev + 1, insert_seq = 99 WHERE session_id = {C}"), Trigger("sessions_rev_step")),
        (format!("UPDATE sessions SET rev = rev + 1, title = 'y' WHERE session_id = {B}"), Trigger("sessions_terminal_frozen")),
        (format!("UPDATE sessions SET rev = rev + 1, status = 'active' WHERE session_id = {B}"), Trigger("sessions_terminal_frozen")),
        (format!("DELETE FROM sessions WHERE session_id = {C}"), Trigger("sessions_no_delete")),
        (
            format!("INSERT INTO sessions (session_id, status, title, actor_type, rev, created_at_ms, updated_at_ms) VALUES ({C}, 'active', 'd', 'cli', 1, 1, 1)"),
            Key { stands_for: "sessions_no_replace", constraint: "sessions_session_id_key" },
        ),
        (
            format!("INSERT INTO sessions (session_id, status, title, actor_type, rev, created_at_ms, updated_at_ms) VALUES ({C}, 'active', 'd', 'cli', 1, 1, 1)
                     ON CONFLICT (session_id) DO UPDATE SET title = 'replaced'"),
            Trigger("sessions_rev_step"),
        ),
        truncate("sessions"),
        // session_data
        (format!("UPDATE session_data SET context = '{{\"a\":1}}' WHERE session_id = {A}"), Passes),
        // JSON is text checked by `::json`, which takes `\u0000` as SQLite's
        // json_valid does (`::jsonb` would refuse it).
        (format!("UPDATE session_data SET context = '{{\"a\":\"\\u0000\"}}' WHERE session_id = {A}"), Passes),
        (format!("UPDATE session_data SET context = '[1]' WHERE session_id = {A}"), Sqlstate("23514")),
        (format!("UPDATE session_data SET context = 'nope' WHERE session_id = {A}"), Sqlstate("22P02")),
        (format!("UPDATE session_data SET goal = 'x' WHERE session_id = {B}"), Trigger("session_data_terminal_frozen")),
        (format!("UPDATE session_data SET session_id = {C} WHERE session_id = {A}"), Trigger("session_data_terminal_frozen")),
        (format!("DELETE FROM session_data WHERE session_id = {C}"), Trigger("session_data_no_delete")),
        (
            format!("INSERT INTO session_data (insert_seq, session_id) SELECT insert_seq, session_id FROM sessions WHERE session_id = {C}"),
            Key { stands_for: "session_data_no_replace", constraint: "session_data_pkey" },
        ),
        truncate("session_data"),
        // session_tags
        (format!("INSERT INTO session_tags SELECT 'blue', 1000, insert_seq, session_id FROM sessions WHERE session_id = {A}"), Passes),
        (format!("UPDATE session_tags SET tag = 'blue' WHERE session_id = {A}"), Trigger("session_tags_no_update")),
        (format!("DELETE FROM session_tags WHERE session_id = {A}"), Trigger("session_tags_no_delete")),
        (
            format!("INSERT INTO session_tags SELECT 'red', 1000, insert_seq, session_id FROM sessions WHERE session_id = {A}"),
            Key { stands_for: "session_tags_no_replace", constraint: "session_tags_pkey" },
        ),
        truncate("session_tags"),
        // session_refs
        (format!("INSERT INTO session_refs VALUES ({A}, 'plan', 'p-2', 1, 2)"), Passes),
        (format!("UPDATE session_refs SET ref_id = 'p-9' WHERE session_id = {A}"), Trigger("session_refs_no_update")),
        (format!("DELETE FROM session_refs WHERE session_id = {A}"), Trigger("session_refs_no_delete")),
        (
            format!("INSERT INTO session_refs VALUES ({A}, 'plan', 'p-1', 1, 2)"),
            Key { stands_for: "session_refs_no_replace", constraint: "session_refs_pkey" },
        ),
        (
            format!("INSERT INTO session_refs VALUES ({A}, 'plan', 'p-3', 0, 2)"),
            Key { stands_for: "session_refs_no_replace", constraint: "session_refs_session_id_kind_ordinal_key" },
        ),
        truncate("session_refs"),
        // idempotency_keys
        (
            format!("INSERT INTO idempotency_keys SELECT 'k2', {A}, event_id, 'd', 3 FROM events WHERE session_id = {A} AND seq = 1"),
            Passes,
        ),
        (format!("UPDATE idempotency_keys SET request_digest = 'e' WHERE session_id = {A}"), Trigger("idempotency_keys_no_update")),
        (format!("DELETE FROM idempotency_keys WHERE session_id = {A}"), Trigger("idempotency_keys_no_delete")),
        (
            format!("INSERT INTO idempotency_keys SELECT 'k', {A}, event_id, 'e', 3 FROM events WHERE session_id = {A} AND seq = 1"),
            Key { stands_for: "idempotency_keys_no_replace", constraint: "idempotency_keys_pkey" },
        ),
        (
            format!("INSERT INTO idempotency_keys SELECT 'k', {A}, event_id, 'e', 3 FROM events WHERE session_id = {A} AND seq = 1
                     ON CONFLICT (key_sha256, session_id) DO UPDATE SET request_digest = 'e'"),
            Trigger("idempotency_keys_no_update"),
        ),
        truncate("idempotency_keys"),
        // runs
        (format!("INSERT INTO runs (run_id, session_id, status, created_at_ms, updated_at_ms) VALUES ('run_00000000000000a3', {A}, 'pending', 1, 1)"), Passes),
        ("UPDATE runs SET turn_count = turn_count + 1, input_tokens = input_tokens + 1 WHERE run_id = 'run_00000000000000a1'".into(), Passes),
        (
            format!("INSERT INTO runs (run_id, session_id, status, created_at_ms, updated_at_ms) VALUES ('run_00000000000000b2', {B}, 'pending', 1, 1)"),
            Trigger("runs_insert_live_session"),
        ),
        (
            format!("INSERT INTO runs (run_id, session_id, status, created_at_ms, updated_at_ms) VALUES ('run_00000000000000a3', {A}, 'running', 1, 1)"),
            Trigger("runs_insert_live_session"),
        ),
        ("UPDATE runs SET error_message = 'x' WHERE run_id = 'run_00000000000000b1'".into(), Trigger("runs_terminal_frozen")),
        ("UPDATE runs SET input_tokens = input_tokens - 1 WHERE run_id = 'run_00000000000000a1'".into(), Trigger("runs_identity_kept")),
        (format!("UPDATE runs SET session_id = {C} WHERE run_id = 'run_00000000000000a2'"), Trigger("runs_identity_kept")),
        ("DELETE FROM runs WHERE run_id = 'run_00000000000000a2'".into(), Trigger("runs_no_delete")),
        (
            format!("INSERT INTO runs (run_id, session_id, status, created_at_ms, updated_at_ms) VALUES ('run_00000000000000a2', {A}, 'pending', 1, 1)"),
            Key { stands_for: "runs_no_replace", constraint: "runs_run_id_key" },
        ),
        (
            "UPDATE runs SET status = 'running', started_at_ms = 1 WHERE run_id = 'run_00000000000000a2'".into(),
            Key { stands_for: "runs_one_running_per_session", constraint: "runs_one_running_per_session" },
        ),
        truncate("runs"),
        // session_budgets
        (format!("UPDATE session_budgets SET max_tokens = 10 WHERE session_id = {A}"), Passes),
        (format!("UPDATE session_budgets SET max_tokens = 10 WHERE session_id = {B}"), Trigger("session_budgets_terminal_frozen")),
        (format!("UPDATE session_budgets SET session_id = {C} WHERE session_id = {A}"), Trigger("session_budgets_terminal_frozen")),
        (format!("DELETE FROM session_budgets WHERE session_id = {A}"), Trigger("session_budgets_no_delete")),
        (
            format!("INSERT INTO session_budgets (session_id, on_exceed, updated_at_ms) VALUES ({A}, 'fail', 1)"),
            Key { stands_for: "session_budgets_no_replace", constraint: "session_budgets_pkey" },
        ),
        truncate("session_budgets"),
        // session_snapshots
        (format!("INSERT INTO session_snapshots (session_id, seq, state, size_bytes, at_ms) VALUES ({A}, 2, '{{\"é\":1}}', 8, 1)"), Passes),
        (
            format!("INSERT INTO session_snapshots (session_id, seq, state, size_bytes, at_ms) VALUES ({A}, 0, '{{}}', 2, 1)"),
            Trigger("session_snapshots_append_only"), // seq 0 is `created`, not a checkpoint
        ),
        (
            format!("INSERT INTO session_snapshots (session_id, seq, state, size_bytes, at_ms) VALUES ({A}, 7, '{{}}', 2, 1)"),
            Trigger("session_snapshots_append_only"), // no such event
        ),
        (
            format!("INSERT INTO session_snapshots (snapshot_id, session_id, seq, state, size_bytes, at_ms)
                     SELECT snapshot_id, {A}, 2, '{{}}', 2, 1 FROM session_snapshots WHERE session_id = {A}"),
            Key { stands_for: "session_snapshots_append_only", constraint: "session_snapshots_pkey" },
        ),
        (format!("UPDATE session_snapshots SET step = 'x' WHERE session_id = {A}"), Trigger("session_snapshots_no_update")),
        (format!("DELETE FROM session_snapshots WHERE session_id = {A}"), Trigger("session_snapshots_no_delete")),
        truncate("session_snapshots"),
        // session_gates
        (
            format!("UPDATE session_gates SET status = 'approved', decided_seq = 2, decided_at_ms = 2000 WHERE session_id = {A} AND name = 'deploy'"),
            Passes,
        ),
        (
            format!("UPDATE session_gates SET status = 'rejected', outcome = 'failed' WHERE session_id = {A} AND name = 'review'"),
            Trigger("session_gates_decide_once"), // decided already
        ),
        (
            format!("UPDATE session_gates SET reason = 'r' WHERE session_id = {A} AND name = 'deploy'"),
            Trigger("session_gates_decide_once"), // pending → pending
        ),
        (
            format!("UPDATE session_gates SET status = 'approved', decided_seq = 2, decided_at_ms = 2000, name = 'other' WHERE session_id = {A} AND name = 'deploy'"),
            Trigger("session_gates_decide_once"), // identity
        ),
        (format!("DELETE FROM session_gates WHERE session_id = {A}"), Trigger("session_gates_no_delete")),
        (
            format!("INSERT INTO session_gates (session_id, name, round, kind, status, opened_seq, opened_at_ms) VALUES ({A}, 'deploy', 1, 'auto', 'pending', 2, 1)"),
            Key { stands_for: "session_gates_no_replace", constraint: "session_gates_by_session_name" },
        ),
        truncate("session_gates"),
        // session_leases: current state, DELETE and TRUNCATE allowed.
        (format!("DELETE FROM session_leases WHERE session_id = {A}"), Passes),
        ("TRUNCATE session_leases".into(), Passes),
    ]
}

/// Runs `sql` in a transaction of its own, rolled back, so the fixture
/// stays, on a connection of its own, so no plan cached by an earlier case
/// (PL/pgSQL caches its statements' plans per session) decides this one.
fn attempt(db: &crate::pg::PgDb, sql: &str) -> Result<(), postgres::Error> {
    let mut c = db.connect();
    let mut tx = c.transaction().unwrap();
    let r = tx.batch_execute(sql);
    drop(tx);
    r
}

/// Each SQLite trigger's `RAISE(ABORT, '…')` message, by trigger name.
fn sqlite_messages() -> BTreeMap<String, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    drop(logbook::Ledger::open(logbook::LedgerOptions::at(&path)).unwrap());
    let c = rusqlite::Connection::open(&path).unwrap();
    let mut st = c
        .prepare("SELECT name, sql FROM sqlite_schema WHERE type = 'trigger'")
        .unwrap();
    let rows: Vec<(String, String)> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let re = regex::Regex::new(r"RAISE\(ABORT, '((?:[^']|'')*)'\)").unwrap();
    // tombstones_recorded refuses nothing: it records a raw-SQL purge;
    // tombstones_purge_rows deletes a tombstoned session's rows.
    rows.into_iter()
        .filter(|(name, _)| name != "tombstones_recorded" && name != "tombstones_purge_rows")
        .map(|(name, sql)| {
            let m = re
                .captures(&sql)
                .unwrap_or_else(|| panic!("{name}: no RAISE"));
            (name, m[1].replace("''", "'"))
        })
        .collect()
}

#[test]
fn pg_raw_sql_cannot_break_any_invariant() {
    let Some(db) = pg_test_db() else { return };
    let mut c = db.connect();
    migrate(&mut c).unwrap();
    c.batch_execute(&fixture()).unwrap();
    let messages = sqlite_messages();
    let mut failures = Vec::new();
    let mut covered: Vec<String> = Vec::new();
    for (sql, expect) in cases() {
        let got = attempt(&db, &sql);
        let err = got.as_ref().err().and_then(|e| e.as_db_error());
        let seen = err.map(|d| {
            (
                d.code().code().to_owned(),
                d.message().to_owned(),
                d.constraint().map(str::to_owned),
            )
        });
        let want = match &expect {
            Passes => None,
            Trigger(t) => {
                covered.push((*t).to_owned());
                Some((
                    INVARIANT_SQLSTATE.to_owned(),
                    messages[*t].clone(),
                    Some((*t).to_owned()),
                ))
            }
            PgTrigger(t, m) => {
                covered.push(t.clone());
                Some((
                    INVARIANT_SQLSTATE.to_owned(),
                    (*m).to_owned(),
                    Some(t.clone()),
                ))
            }
            Sqlstate(code) => {
                let msg = err.map(|d| d.message().to_owned()).unwrap_or_default();
                let constraint = err.and_then(|d| d.constraint().map(str::to_owned));
                Some(((*code).to_owned(), msg, constraint))
            }
            Key {
                stands_for,
                constraint,
            } => {
                covered.push((*stands_for).to_owned());
                let msg = err.map(|d| d.message().to_owned()).unwrap_or_default();
                Some(("23505".to_owned(), msg, Some((*constraint).to_owned())))
            }
        };
        let ok = match (&got, &want) {
            (Ok(()), None) => true,
            (Err(_), Some(w)) => seen.as_ref() == Some(w),
            _ => false,
        };
        if !ok {
            failures.push(format!(
                "{sql}\n  want {want:?}\n  got  {:?}",
                got.map_err(|e| e.to_string())
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // tombstones_purge_rows refuses nothing: a tombstone removes its
    // session's rows in the statement that writes it.
    {
        let mut c2 = db.connect();
        let mut tx = c2.transaction().unwrap();
        let cases = cases();
        let tomb_b = &cases[1].0;
        let first = tomb_b.split("; DELETE").next().unwrap();
        tx.batch_execute(first).unwrap();
        let left: i64 = tx
            .query_one(
                &format!("SELECT count(*) FROM sessions WHERE session_id = {B}"),
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(left, 0, "tombstones_purge_rows left the session");
        covered.push("tombstones_purge_rows".into());
    }
    // Every SQLite trigger and every PostgreSQL trigger has a case.
    let mut pg_triggers: Vec<String> = c
        .query(
            "SELECT tgname::text FROM pg_trigger WHERE NOT tgisinternal",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    pg_triggers.extend(messages.keys().cloned());
    for t in pg_triggers {
        assert!(covered.contains(&t), "no case for trigger {t}");
    }
}

/// The control beside the refusals: logbook's own write sequence for a
/// session, in raw SQL, passes every trigger — create, checkpoints with the
/// row lock held, complete.
#[test]
fn pg_a_legal_session_lifecycle_in_raw_sql_passes_every_trigger() {
    let Some(db) = pg_test_db() else { return };
    let mut c = db.connect();
    migrate(&mut c).unwrap();
    let s = "'ses_0000000000000d01'";
    let mut tx = c.transaction().unwrap();
    tx.batch_execute(&format!(
        "INSERT INTO sessions (session_id, status, title, actor_type, rev, created_at_ms, updated_at_ms)
           VALUES ({s}, 'active', 't', 'lib', 1, 1, 1);
         INSERT INTO session_data (insert_seq, session_id) SELECT insert_seq, session_id FROM sessions WHERE session_id = {s};
         {}",
        event(s, 0, "created", "00", "d0")
    ))
    .unwrap();
    tx.commit().unwrap();
    let mut prev = "d0".to_owned();
    for seq in 1..=3i64 {
        let next = format!("d{seq}");
        let mut tx = c.transaction().unwrap();
        tx.batch_execute(&format!(
            "SELECT 1 FROM sessions WHERE session_id = {s} FOR UPDATE;
             UPDATE sessions SET rev = rev + 1, updated_at_ms = {seq}, checkpoint_seq = {seq} WHERE session_id = {s} AND rev = {seq};
             {}",
            event(s, seq, "checkpoint", &prev, &next)
        ))
        .unwrap();
        tx.commit().unwrap();
        prev = next;
    }
    c.batch_execute(&format!(
        "BEGIN;
         UPDATE sessions SET rev = rev + 1, status = 'completed', final_result = 'ok', ended_at_ms = 9 WHERE session_id = {s};
         {}
         COMMIT;",
        event(s, 4, "completed", &prev, "d4")
    ))
    .unwrap();
    let row = c
        .query_one(
            &format!("SELECT rev, status, (SELECT count(*) FROM events WHERE session_id = {s}),
                      (SELECT count(DISTINCT tx_id) FROM events WHERE session_id = {s}) FROM sessions WHERE session_id = {s}"),
            &[],
        )
        .unwrap();
    let got: (i64, String, i64, i64) = (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(got, (5, "completed".to_owned(), 5, 5));
}
