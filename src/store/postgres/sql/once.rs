//! Writes as one statement (PostgreSQL only; docs/postgres.md, "One round
//! trip per write"): a mutation of a session with its event and key
//! ([`OneWrite`]: with the runs an end cancels, a status change's event and
//! a gate, lease, budget or references row, as the verb writes), a run verb
//! ([`OneRunWrite`]), and a new session with its `created` event (and its
//! first checkpoint).
//!
//! Each is a single statement of data-modifying CTEs, sent on its own (the
//! server runs it as one implicit transaction), so the write is one round
//! trip where the pipeline takes BEGIN, the locked read, the UPDATE, the
//! INSERT, the read back and COMMIT. The statement decides nothing the
//! pipeline would decide differently: its UPDATE carries the pipeline's
//! guard (the verb's statuses, `--if-rev`) and applies only where the
//! pipeline's other rules hold trivially (no live lease, the key not yet
//! recorded, no pending gate, the side's rule, as the write asks); anything
//! else matches no row and applies nothing, and the caller runs the
//! pipeline, which diagnoses. The triggers check every row as they check
//! the pipeline's.
//!
//! The event's seq and previous hash are read in the UPDATE's RETURNING,
//! and its hash computed by the server (`logbook_event_hash`, schema V9 and V10,
//! the encoding of docs/schema.md, "Hash chain"). Every argument of its call
//! has the function's exact type (`0::bigint`, `NULL::text`, typed
//! parameters), so an overload in a schema later in the search_path cannot
//! match better and take the call. If another writer
//! committed an event of the session after this statement's snapshot, the
//! seq is stale and the insert trigger refuses it: the statement fails,
//! applies nothing, and the pipeline runs.
//!
//! `lock_timeout` is set for the statement's own transaction
//! (`set_config(…, true)`, evaluated once before any row is read), as the
//! pipeline sets it with `SET LOCAL`.

mod create;
mod returning;
mod sides;

pub use create::{CreateParams, CREATE, CREATE_FIRST};

use returning::{
    SELECT_AFTER_BUDGET, SELECT_AFTER_LINKING, SELECT_AFTER_TAKING, SELECT_AFTER_UPDATE,
};
use sides::{ends_runs_sql, side_sql, SideSql};

use super::Params;
use crate::store::codec::key_sha256;
use crate::store::{OneRunChange, OneRunWrite, OneSide, OneWrite, RunChange};
use postgres::types::Type;

/// The previous hash of a session's first event: 32 zero bytes
/// (`decode`, not a `'\x…'` literal, whose reading depends on
/// `standard_conforming_strings`).
const GENESIS: &str = "decode(repeat('00', 32), 'hex')";

/// The statement of [`OneWrite`] and its parameters. `lock_timeout_ms` is
/// what the statement may wait for the session's row.
pub fn write_statement(w: &OneWrite<'_>, lock_timeout_ms: i64) -> (String, Params) {
    let (update, mut p) = super::sessions::session_update_adding(
        w.session_id,
        w.guard,
        &w.change,
        w.add_usage.as_ref(),
    );
    let next = |p: &mut Params, v: Box<dyn postgres::types::ToSql + Sync>, t: Type| {
        p.push((v, t));
        format!("${}", p.len())
    };
    let EventParams {
        timeout,
        key,
        digest,
        ty,
        actor,
        detail,
    } = event_params(
        &mut p,
        lock_timeout_ms,
        w.idempotency,
        w.event_type,
        w.actor_type,
        w.detail,
    );
    let data = next(&mut p, Box::new(w.data.map(str::to_owned)), Type::TEXT);
    let side = w.side.map(|s| side_sql(&mut p, &s, &data));
    let lease = match (&side, w.side) {
        (Some(s), Some(OneSide::LeaseRelease { .. })) => s.rule.clone(),
        _ => lease_rule(&mut p, w.lease_sha256, "$1"),
    };
    let ty = match &side {
        Some(SideSql { ty: Some(t), .. }) => t.clone(),
        _ => ty,
    };
    let mut sql = format!(
        "WITH u AS ({update} \
         AND (SELECT set_config('lock_timeout', {timeout}, true)) IS NOT NULL \
         AND {lease}"
    );
    if w.idempotency.is_some() {
        sql.push_str(&format!(
            " AND NOT EXISTS (SELECT 1 FROM idempotency_keys k \
             WHERE k.key_sha256 = {key} AND k.session_id = $1)"
        ));
    }
    if let Some(u) = &w.add_usage {
        let mut added = Vec::new();
        for (col, v) in [
            ("input_tokens", u.input_tokens),
            ("output_tokens", u.output_tokens),
            ("api_calls", u.api_calls),
            ("duration_ms", u.duration_ms),
        ] {
            let v = next(&mut p, Box::new(v), Type::INT8);
            sql.push_str(&format!(" AND {col} + {v} <= {COUNT_MAX}"));
            added.push(v);
        }
        sql.push_str(&format!(
            " AND {}",
            within_budget("$1", [&added[0], &added[1], &added[2], &added[3]])
        ));
    }
    if w.no_pending_gate {
        sql.push_str(
            " AND NOT EXISTS (SELECT 1 FROM session_gates g WHERE g.session_id = $1 \
             AND g.status = 'pending')",
        );
    }
    if let (Some(s), false) = (&side, matches!(w.side, Some(OneSide::LeaseRelease { .. }))) {
        sql.push_str(&format!(" AND {}", s.rule));
    }
    // The event joins the side's rows read before it (`sd`); where the
    // side needs one (a pending gate, the lease released) and a writer
    // that committed first took it, the event's seq is NULL, which
    // `events.seq` refuses: the statement applies nothing.
    let (mut join, mut seq, data) = match &side {
        Some(SideSql {
            pre: Some(_),
            data: d,
            needs,
            ..
        }) => (
            " LEFT JOIN sd ON true".to_owned(),
            match needs {
                Some(col) => format!("(CASE WHEN sd.{col} IS NOT NULL THEN p.next_seq END)"),
                None => "p.next_seq".to_owned(),
            },
            d.clone().unwrap_or(data),
        ),
        _ => (String::new(), "p.next_seq".to_owned(), data),
    };
    sql.push_str(&format!(
        " RETURNING *, (SELECT coalesce(max(e.seq) + 1, 0) FROM events e \
           WHERE e.session_id = sessions.session_id) AS next_seq, \
         (SELECT e.hash FROM events e WHERE e.session_id = sessions.session_id \
           ORDER BY e.seq DESC LIMIT 1) AS last_hash), \
         p AS (SELECT u.*, coalesce(u.last_hash, {GENESIS}) AS link FROM u), "
    ));
    if let Some(SideSql { pre: Some(pre), .. }) = &side {
        sql.push_str(&format!("sd AS ({pre}), "));
    }
    let mut link = "p.link";
    if let Some(end) = &w.end_runs {
        // The session's open runs cancelled, in creation order, each with
        // its `run_cancelled` event chained before the write's own (`tl`:
        // the seq and link after them, read only once they are inserted).
        sql.insert_str(4, " RECURSIVE");
        sql.push_str(&ends_runs_sql(&mut p, end, &actor));
        seq = seq.replace("p.next_seq", "tl.seq");
        join.push_str(" CROSS JOIN tl");
        link = "tl.link";
    }
    sql.push_str(&format!(
        "ev AS (INSERT INTO events (session_id, seq, type, at_ms, actor_type, detail, data, \
           run_id, prev_hash, hash) \
           SELECT p.session_id, {seq}, {ty}, p.updated_at_ms, {actor}, {detail}, {data}, \
           NULL, {link}, logbook_event_hash({link}, p.session_id, {seq}, {ty}, \
           p.updated_at_ms, {actor}, {detail}, {data}, NULL::text) FROM p{join} \
           RETURNING event_id, seq, at_ms, detail, data, hash) "
    ));
    if w.idempotency.is_some() {
        sql.push_str(&format!(
            ", k AS (INSERT INTO idempotency_keys (key_sha256, session_id, event_id, \
             request_digest, rev) SELECT {key}, p.session_id, ev.event_id, {digest}, p.rev \
             FROM p, ev) "
        ));
    }
    if let Some((follow_ty, follow_detail)) = w.follow {
        // The status change's event, chained on the write's own.
        let fty = next(&mut p, Box::new(follow_ty.to_owned()), Type::TEXT);
        let fdetail = next(
            &mut p,
            Box::new(follow_detail.map(str::to_owned)),
            Type::TEXT,
        );
        sql.push_str(&format!(
            ", ev2 AS (INSERT INTO events (session_id, seq, type, at_ms, actor_type, detail, \
             data, run_id, prev_hash, hash) \
             SELECT p.session_id, ev.seq + 1, {fty}, ev.at_ms, {actor}, {fdetail}, NULL, NULL, \
             ev.hash, logbook_event_hash(ev.hash, p.session_id, ev.seq + 1, {fty}, ev.at_ms, \
             {actor}, {fdetail}, NULL::text, NULL::text) FROM p, ev) "
        ));
    }
    if let Some(SideSql {
        post: Some(post), ..
    }) = &side
    {
        sql.push_str(&format!(", sw AS ({post}) "));
    }
    if let Some(sn) = &w.snapshot {
        // The snapshot of the event just inserted: its trigger sees that
        // row (a volatile trigger function sees the rows its statement has
        // written so far), as the pipeline's insert sees it after the
        // event's.
        let step = next(&mut p, Box::new(sn.step.map(str::to_owned)), Type::TEXT);
        let state = next(&mut p, Box::new(sn.state.to_owned()), Type::TEXT);
        let size = next(
            &mut p,
            Box::new(i64::try_from(sn.state.len()).unwrap_or(i64::MAX)),
            Type::INT8,
        );
        let payload = next(
            &mut p,
            Box::new(sn.payload.map(<[u8]>::to_vec)),
            Type::BYTEA,
        );
        sql.push_str(&format!(
            ", sn AS (INSERT INTO session_snapshots \
             (session_id, seq, step, stage, state, size_bytes, at_ms, payload) \
             SELECT p.session_id, ev.seq, {step}, p.stage, {state}, {size}, ev.at_ms, {payload} \
             FROM p, ev) "
        ));
    }
    sql.push_str(match w.side {
        Some(OneSide::Refs { .. }) => SELECT_AFTER_LINKING,
        Some(OneSide::LeaseTake { .. }) => SELECT_AFTER_TAKING,
        Some(OneSide::BudgetSet { .. } | OneSide::BudgetReset) => SELECT_AFTER_BUDGET,
        _ => SELECT_AFTER_UPDATE,
    });
    (sql, p)
}

/// The placeholders of what every one-statement write binds besides its
/// rows: its `lock_timeout`, its key's SHA-256 and request digest, and its
/// event's type, actor and detail.
struct EventParams {
    timeout: String,
    key: String,
    digest: String,
    ty: String,
    actor: String,
    detail: String,
}

/// Binds [`EventParams`] (in that order) after `p`'s parameters.
fn event_params(
    p: &mut Params,
    lock_timeout_ms: i64,
    idempotency: Option<(&str, &str)>,
    event_type: &str,
    actor: crate::model::ActorType,
    detail: Option<&str>,
) -> EventParams {
    let mut next = |v: Box<dyn postgres::types::ToSql + Sync>| {
        p.push((v, Type::TEXT));
        format!("${}", p.len())
    };
    EventParams {
        timeout: next(Box::new(lock_timeout_ms.to_string())),
        key: next(Box::new(idempotency.map(|(k, _)| key_sha256(k)))),
        digest: next(Box::new(idempotency.map(|(_, d)| d.to_owned()))),
        ty: next(Box::new(event_type.to_owned())),
        actor: next(Box::new(actor.as_str().to_owned())),
        detail: next(Box::new(detail.map(str::to_owned))),
    }
}

/// The lease rule of a one-statement write on session `session` (SQL):
/// with a presented token's SHA-256, that lease, not expired at the write's
/// time (`$2`); without one, no lease that has not expired at that time
/// (an expired lease is dead, whoever owns it: docs/design.md, "Leases";
/// one not expired whose owner's process is gone is the pipeline's to
/// judge).
fn lease_rule(p: &mut Params, token_sha256: Option<&str>, session: &str) -> String {
    match token_sha256 {
        Some(h) => {
            p.push((Box::new(h.to_owned()), Type::TEXT));
            format!(
                "EXISTS (SELECT 1 FROM session_leases l WHERE l.session_id = {session} \
                 AND l.token_sha256 = ${} AND l.expires_at_ms > $2)",
                p.len()
            )
        }
        None => format!(
            "NOT EXISTS (SELECT 1 FROM session_leases l WHERE l.session_id = {session} \
             AND l.expires_at_ms > $2)"
        ),
    }
}

/// The budget rule of a write that adds usage to session `session` (SQL):
/// the amounts `added` (input tokens, output tokens, API calls, duration)
/// cross no limit of its budget, if it has one. A budget already marked
/// exceeded is crossed once only (docs/design.md, "Budgets"); otherwise the
/// new sums less the budget's base must stay within every limit it sets
/// (`ledger::budgets`' rule: a limit is crossed when usage is strictly
/// over it). A crossing marks the budget and applies its policy: the
/// pipeline's.
fn within_budget(session: &str, added: [&str; 4]) -> String {
    let [i, o, a, d] = added;
    format!(
        "NOT EXISTS (SELECT 1 FROM session_budgets b WHERE b.session_id = {session} \
         AND b.exceeded_at_ms IS NULL \
         AND ((b.max_tokens IS NOT NULL AND sessions.input_tokens + sessions.output_tokens \
               + {i} + {o} - b.base_tokens > b.max_tokens) \
           OR (b.max_api_calls IS NOT NULL \
               AND sessions.api_calls + {a} - b.base_api_calls > b.max_api_calls) \
           OR (b.max_duration_ms IS NOT NULL \
               AND sessions.duration_ms + {d} - b.base_duration_ms > b.max_duration_ms)))"
    )
}

/// The largest run or session total: 2^53 − 1 (the library's `add_total`).
const COUNT_MAX: &str = "9007199254740991";

/// The columns of `runs::map_run`, as a RETURNING of `runs` gives them.
const RUN_RETURNING: &str = "RETURNING runs.run_id, runs.session_id, runs.status, runs.input, \
     runs.output, runs.error_code, runs.error_message, runs.metadata, runs.input_tokens, \
     runs.output_tokens, runs.api_calls, runs.turn_count, runs.created_at_ms, \
     runs.updated_at_ms, runs.started_at_ms, runs.ended_at_ms";

/// The statement of [`OneRunWrite`] and its parameters: `$1` is the run.
/// The session's UPDATE carries every rule (the run's status and totals
/// among them, read in its `EXISTS`; for a new run, that its id is free),
/// so when it matches no row nothing is written; the run's INSERT or
/// UPDATE (`ru`) and the event follow it, and the statement returns the run
/// as it now stands. An existing run's session is looked up by the
/// statement.
///
/// A writer that committed after this statement's snapshot may have ended
/// or changed the run: the session's UPDATE then waits for that writer,
/// re-checks its row and still matches (the `EXISTS` reads the snapshot),
/// while `ru`, re-checking the run's newest row, matches none. The event is
/// inserted whenever the session's row was updated, so such a statement
/// always fails: its seq is stale (that writer appended an event of the
/// session) and, with no run row, its seq is NULL, which `events.seq`
/// refuses. Nothing is applied and the pipeline answers, as in
/// [`write_statement`].
pub fn run_statement(w: &OneRunWrite<'_>, lock_timeout_ms: i64) -> (String, Params) {
    let mut p: Params = vec![
        (Box::new(w.run_id.to_owned()), Type::TEXT),
        (Box::new(w.now_ms), Type::INT8),
    ];
    let next = |p: &mut Params, v: Box<dyn postgres::types::ToSql + Sync>, t: Type| {
        p.push((v, t));
        format!("${}", p.len())
    };
    // Which session, the run's rule in the session's WHERE, the run's
    // statement (`ru`, at the session's new time `p.updated_at_ms`, the
    // pipeline's `at`), the session's new sums and its other rules.
    let mut sums = String::new();
    let mut session_rules = String::new();
    let open = "(r.status = 'pending' OR r.status = 'running')";
    let change = match w.change {
        OneRunChange::Create {
            session_id,
            input,
            metadata,
        } => {
            let sid = next(&mut p, Box::new(session_id.to_owned()), Type::TEXT);
            let input = next(&mut p, Box::new(input.map(str::to_owned)), Type::TEXT);
            let metadata = next(&mut p, Box::new(metadata.to_owned()), Type::TEXT);
            let ru = format!(
                "INSERT INTO runs (run_id, session_id, status, input, metadata, created_at_ms, \
                 updated_at_ms) SELECT $1, p.session_id, 'pending', {input}, {metadata}, \
                 p.updated_at_ms, p.updated_at_ms FROM p {RUN_RETURNING}"
            );
            (
                sid,
                "NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = $1)".to_owned(),
                ru,
            )
        }
        OneRunChange::Change(c) => {
            let (set, from, run_rules) = match c {
                RunChange::Start => {
                    session_rules = " AND NOT EXISTS (SELECT 1 FROM runs o \
                         WHERE o.session_id = sessions.session_id AND o.status = 'running')"
                        .to_owned();
                    (
                        "status = 'running', started_at_ms = p.updated_at_ms".to_owned(),
                        "r.status = 'pending'",
                        String::new(),
                    )
                }
                RunChange::Usage {
                    input_tokens,
                    output_tokens,
                    api_calls,
                } => {
                    let i = next(&mut p, Box::new(input_tokens), Type::INT8);
                    let o = next(&mut p, Box::new(output_tokens), Type::INT8);
                    let a = next(&mut p, Box::new(api_calls), Type::INT8);
                    sums = format!(
                        ", input_tokens = input_tokens + {i}, \
                         output_tokens = output_tokens + {o}, api_calls = api_calls + {a}"
                    );
                    session_rules = format!(
                        " AND input_tokens + {i} <= {COUNT_MAX} \
                         AND output_tokens + {o} <= {COUNT_MAX} \
                         AND api_calls + {a} <= {COUNT_MAX} AND {}",
                        within_budget("sessions.session_id", [&i, &o, &a, "0"])
                    );
                    (
                        format!(
                            "input_tokens = runs.input_tokens + {i}, \
                             output_tokens = runs.output_tokens + {o}, \
                             api_calls = runs.api_calls + {a}"
                        ),
                        "r.status = 'running'",
                        format!(
                            " AND r.input_tokens + {i} <= {COUNT_MAX} \
                             AND r.output_tokens + {o} <= {COUNT_MAX} \
                             AND r.api_calls + {a} <= {COUNT_MAX}"
                        ),
                    )
                }
                RunChange::Turn => (
                    "turn_count = runs.turn_count + 1".to_owned(),
                    "r.status = 'running'",
                    String::new(),
                ),
                RunChange::Complete(output) => {
                    let out = next(&mut p, Box::new(output.map(str::to_owned)), Type::TEXT);
                    (
                        format!(
                            "status = 'completed', output = {out}, ended_at_ms = p.updated_at_ms"
                        ),
                        "r.status = 'running'",
                        String::new(),
                    )
                }
                RunChange::Fail { code, message } => {
                    let c = next(&mut p, Box::new(code.to_owned()), Type::TEXT);
                    let m = next(&mut p, Box::new(message.to_owned()), Type::TEXT);
                    (
                        format!(
                            "status = 'failed', error_code = {c}, error_message = {m}, \
                             ended_at_ms = p.updated_at_ms"
                        ),
                        open,
                        String::new(),
                    )
                }
                RunChange::Cancel => (
                    "status = 'cancelled', ended_at_ms = p.updated_at_ms".to_owned(),
                    open,
                    String::new(),
                ),
                RunChange::Timeout => (
                    "status = 'timeout', ended_at_ms = p.updated_at_ms".to_owned(),
                    open,
                    String::new(),
                ),
                // Only a session's end cancels a run this way, in its own
                // transaction: never as one statement.
                RunChange::SessionEnded { .. } => {
                    ("status = status".to_owned(), "false", String::new())
                }
            };
            let ru = format!(
                "UPDATE runs SET {set}, updated_at_ms = p.updated_at_ms FROM p \
                 WHERE runs.run_id = $1 AND runs.session_id = p.session_id AND {} \
                 {RUN_RETURNING}",
                from.replace("r.status", "runs.status")
            );
            (
                "(SELECT r0.session_id FROM runs r0 WHERE r0.run_id = $1)".to_owned(),
                format!("EXISTS (SELECT 1 FROM runs r WHERE r.run_id = $1 AND {from}{run_rules})"),
                ru,
            )
        }
    };
    let (session, run_rule, ru) = change;
    let rev = match w.if_rev {
        Some(r) => format!(" AND rev = {}", next(&mut p, Box::new(r), Type::INT8)),
        None => String::new(),
    };
    let lease = lease_rule(&mut p, w.lease_sha256, "sessions.session_id");
    let EventParams {
        timeout,
        key,
        digest,
        ty,
        actor,
        detail,
    } = event_params(
        &mut p,
        lock_timeout_ms,
        Some(w.idempotency),
        w.event_type,
        w.actor_type,
        w.detail,
    );
    let data = match w.change {
        // The run's new count, as serde writes `{"turn_count":N}`.
        OneRunChange::Change(RunChange::Turn) => {
            r#"('{"turn_count":' || ru.turn_count::text || '}')"#.to_owned()
        }
        _ => next(&mut p, Box::new(w.data.map(str::to_owned)), Type::TEXT),
    };
    let sql = format!(
        "WITH u AS (UPDATE sessions SET rev = rev + 1, \
           updated_at_ms = GREATEST(updated_at_ms, $2){sums} \
         WHERE session_id = {session} \
           AND (status = 'pending' OR status = 'active' OR status = 'paused'){rev} \
           AND (SELECT set_config('lock_timeout', {timeout}, true)) IS NOT NULL \
           AND {lease} \
           AND NOT EXISTS (SELECT 1 FROM idempotency_keys k \
             WHERE k.key_sha256 = {key} AND k.session_id = sessions.session_id) \
           AND {run_rule}{session_rules} \
         RETURNING session_id, rev, updated_at_ms, \
           (SELECT coalesce(max(e.seq) + 1, 0) FROM events e \
             WHERE e.session_id = sessions.session_id) AS next_seq, \
           (SELECT e.hash FROM events e WHERE e.session_id = sessions.session_id \
             ORDER BY e.seq DESC LIMIT 1) AS last_hash), \
         p AS (SELECT u.*, coalesce(u.last_hash, {GENESIS}) AS link FROM u), \
         ru AS ({ru}), \
         ev AS (INSERT INTO events (session_id, seq, type, at_ms, actor_type, detail, data, \
           run_id, prev_hash, hash) \
           SELECT p.session_id, CASE WHEN ru.run_id IS NOT NULL THEN p.next_seq END, {ty}, \
           p.updated_at_ms, {actor}, {detail}, {data}, \
           ru.run_id, p.link, logbook_event_hash(p.link, p.session_id, p.next_seq, {ty}, \
           p.updated_at_ms, {actor}, {detail}, {data}, ru.run_id) FROM p LEFT JOIN ru ON true \
           RETURNING event_id), \
         k AS (INSERT INTO idempotency_keys (key_sha256, session_id, event_id, request_digest, \
           rev) SELECT {key}, p.session_id, ev.event_id, {digest}, p.rev FROM p, ev) \
         SELECT * FROM ru"
    );
    (sql, p)
}
