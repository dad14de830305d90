//! What a one-statement write adds for the rows a verb writes besides its
//! session and event (docs/postgres.md, "One round trip per write"): the
//! open runs an end cancels first, and a gate, lease, budget or references
//! row ([`crate::store::OneSide`]), each with the rule the statement adds.

use super::super::Params;
use crate::store::{OneRunsEnd, OneSide};
use postgres::types::Type;

/// The budget row a budget verb's statement returns (`sw`), in the order of
/// `sql::workflow::SELECT_BUDGET`.
const BUDGET_RETURNING: &str = "session_budgets.max_tokens, session_budgets.max_api_calls, \
     session_budgets.max_duration_ms, session_budgets.on_exceed, session_budgets.base_tokens, \
     session_budgets.base_api_calls, session_budgets.base_duration_ms, \
     session_budgets.exceeded_at_ms";

/// The most references of one kind a session links (`validate::REFS_MAX`).
const REFS_MAX: usize = crate::validate::REFS_MAX;

/// The CTEs (each followed by a comma) that cancel a session's open runs
/// before its ending event ([`OneWrite::end_runs`]), as the pipeline's
/// `cancel_open_runs` does: `ro` the runs in creation order, `ch` their
/// events' seqs and hashes (each chained on the one before, from the
/// session's link), `rc` the runs' UPDATE, `re` the events, `tl` the seq
/// and link after them. `actor` is the write's actor placeholder.
pub(super) fn ends_runs_sql(p: &mut Params, end: &OneRunsEnd<'_>, actor: &str) -> String {
    let mut next = |v: String| {
        p.push((Box::new(v), Type::TEXT));
        format!("${}", p.len())
    };
    let ty = next(crate::model::EventType::RunCancelled.as_str().to_owned());
    let code = next(end.code.to_owned());
    let msg = next(end.message.to_owned());
    let data = next(end.data.to_owned());
    let hash = |prev: &str, seq: &str| {
        format!(
            "logbook_event_hash({prev}, p.session_id, {seq}, {ty}, p.updated_at_ms, {actor}, \
             {msg}, {data}, ro.run_id)"
        )
    };
    let first = hash("p.link", "p.next_seq");
    let then = hash("ch.hash", "ch.seq + 1");
    format!(
        "ro AS (SELECT r.run_id, row_number() OVER (ORDER BY r.insert_seq) AS n \
           FROM runs r, p WHERE r.session_id = p.session_id \
           AND (r.status = 'pending' OR r.status = 'running')), \
         ch AS (SELECT ro.n, p.next_seq AS seq, ro.run_id, p.link AS prev, {first} AS hash \
           FROM p JOIN ro ON ro.n = 1 \
           UNION ALL SELECT ro.n, ch.seq + 1, ro.run_id, ch.hash, {then} \
           FROM ch JOIN ro ON ro.n = ch.n + 1 CROSS JOIN p), \
         rc AS (UPDATE runs SET status = 'cancelled', error_code = {code}, \
           error_message = {msg}, ended_at_ms = GREATEST(runs.updated_at_ms, $2), \
           updated_at_ms = GREATEST(runs.updated_at_ms, $2) \
           WHERE runs.session_id = $1 AND (runs.status = 'pending' OR runs.status = 'running') \
           AND runs.run_id IN (SELECT ro.run_id FROM ro)), \
         re AS (INSERT INTO events (session_id, seq, type, at_ms, actor_type, detail, data, \
           run_id, prev_hash, hash) \
           SELECT p.session_id, ch.seq, {ty}, p.updated_at_ms, {actor}, {msg}, {data}, \
           ch.run_id, ch.prev, ch.hash FROM p, ch ORDER BY ch.n RETURNING seq, hash), \
         tl AS (SELECT coalesce((SELECT max(re.seq) + 1 FROM re), p.next_seq) AS seq, \
           coalesce((SELECT re.hash FROM re ORDER BY re.seq DESC LIMIT 1), p.link) AS link \
           FROM p), "
    )
}

/// What a [`OneSide`] adds to [`super::write_statement`]: a rule in the session's
/// UPDATE, rows read (or deleted) before the event (`sd`), the event's type
/// and data when the server chooses them, the column of `sd` the event
/// needs, and the side's row written after the event (`sw`).
pub(super) struct SideSql {
    pub(super) rule: String,
    pub(super) pre: Option<String>,
    pub(super) ty: Option<String>,
    pub(super) data: Option<String>,
    pub(super) needs: Option<&'static str>,
    pub(super) post: Option<String>,
}

/// The SQL of `side` (module docs); its parameters pushed onto `p`; `data`
/// is the placeholder of the event's data as the caller built it. Every
/// row it writes is joined to `p` (the session's UPDATE), so nothing is
/// written when that matched no row.
pub(super) fn side_sql(p: &mut Params, side: &OneSide<'_>, data: &str) -> SideSql {
    let mut next = |v: Box<dyn postgres::types::ToSql + Sync>, t: Type| {
        p.push((v, t));
        format!("${}", p.len())
    };
    match *side {
        OneSide::GateOpen {
            name,
            kind,
            approved,
        } => {
            let name = next(Box::new(name.to_owned()), Type::TEXT);
            let kind = next(Box::new(kind.to_owned()), Type::TEXT);
            let (status, decided_seq, decided_at) = if approved {
                ("approved", "ev.seq", "ev.at_ms")
            } else {
                ("pending", "NULL::bigint", "NULL::bigint")
            };
            SideSql {
                rule: format!(
                    "NOT EXISTS (SELECT 1 FROM session_gates g WHERE g.session_id = $1 \
                     AND g.name = {name} AND g.status = 'pending')"
                ),
                pre: Some(format!(
                    "SELECT coalesce(max(g.round), 0) + 1 AS round FROM session_gates g \
                     WHERE g.session_id = $1 AND g.name = {name}"
                )),
                ty: None,
                data: Some(format!(
                    "format('{{\"gate\":%s,\"kind\":%s,\"round\":%s}}', \
                     to_json({name}::text), to_json({kind}::text), sd.round)"
                )),
                needs: None,
                post: Some(format!(
                    "INSERT INTO session_gates (session_id, name, round, kind, status, \
                     opened_seq, opened_at_ms, decided_seq, decided_at_ms) \
                     SELECT p.session_id, {name}, sd.round, {kind}, '{status}', ev.seq, \
                     ev.at_ms, {decided_seq}, {decided_at} FROM p, sd, ev"
                )),
            }
        }
        OneSide::GateDecide {
            name,
            status,
            text,
            outcome,
        } => {
            let name = next(Box::new(name.to_owned()), Type::TEXT);
            let status = next(Box::new(status.to_owned()), Type::TEXT);
            let text = next(Box::new(text.map(str::to_owned)), Type::TEXT);
            let outcome = next(Box::new(outcome.map(str::to_owned)), Type::TEXT);
            let pending = format!(
                "FROM session_gates g WHERE g.session_id = $1 AND g.name = {name} \
                 AND g.status = 'pending'"
            );
            SideSql {
                rule: format!("EXISTS (SELECT 1 {pending})"),
                pre: Some(format!(
                    "SELECT g.gate_id, g.kind, g.round {pending} ORDER BY g.round DESC LIMIT 1"
                )),
                ty: None,
                data: Some(format!(
                    "format('{{\"gate\":%s,\"kind\":%s,\"round\":%s%s}}', \
                     to_json({name}::text), to_json(sd.kind::text), sd.round, \
                     coalesce(',\"outcome\":' || to_json({outcome}::text)::text, ''))"
                )),
                needs: Some("gate_id"),
                post: Some(format!(
                    "UPDATE session_gates SET status = {status}, decided_seq = ev.seq, \
                     decided_at_ms = ev.at_ms, reason = {text}, outcome = {outcome} \
                     FROM sd, ev WHERE session_gates.gate_id = sd.gate_id"
                )),
            }
        }
        OneSide::LeaseTake {
            token_sha256,
            pid,
            hostname,
            expires_at_ms,
        } => {
            let token = next(Box::new(token_sha256.to_owned()), Type::TEXT);
            let pid = next(Box::new(pid), Type::INT8);
            let host = next(Box::new(hostname.to_owned()), Type::TEXT);
            let expires = next(Box::new(expires_at_ms), Type::INT8);
            SideSql {
                // The lease rule of the write (no live lease, or the
                // caller's own) is the whole rule.
                rule: "true".to_owned(),
                // A lease row there is the caller's own (renewed) or one
                // expired at the write's time (taken over).
                pre: Some(
                    "SELECT l.token_sha256, l.pid, l.hostname, l.expires_at_ms \
                     FROM session_leases l WHERE l.session_id = $1"
                        .to_owned(),
                ),
                ty: Some(format!(
                    "(CASE WHEN sd.pid IS NULL OR sd.token_sha256 = {token} \
                     THEN 'lease_acquired' ELSE 'lease_taken_over' END)"
                )),
                // The pipeline's `LeaseData` with `previous` (reason
                // `expired`) for a takeover, in serde_json's text.
                data: Some(format!(
                    "(CASE WHEN sd.pid IS NULL OR sd.token_sha256 = {token} THEN {data} \
                     ELSE format('{{\"pid\":%s,\"hostname\":%s,\"expires_at_ms\":%s,\
                     \"previous\":{{\"pid\":%s,\"hostname\":%s,\"expires_at_ms\":%s,\
                     \"reason\":\"expired\"}}}}', {pid}, to_json({host}::text), {expires}, \
                     sd.pid, to_json(sd.hostname::text), sd.expires_at_ms) END)"
                )),
                needs: None,
                post: Some(format!(
                    "INSERT INTO session_leases (session_id, token_sha256, pid, hostname, \
                     acquired_at_ms, expires_at_ms, acquired_seq) \
                     SELECT p.session_id, {token}, {pid}, {host}, $2, {expires}, ev.seq \
                     FROM p, ev ON CONFLICT (session_id) DO UPDATE SET \
                     token_sha256 = excluded.token_sha256, pid = excluded.pid, \
                     hostname = excluded.hostname, acquired_at_ms = excluded.acquired_at_ms, \
                     expires_at_ms = excluded.expires_at_ms, acquired_seq = excluded.acquired_seq"
                )),
            }
        }
        OneSide::LeaseRelease { token_sha256 } => {
            let token = next(Box::new(token_sha256.to_owned()), Type::TEXT);
            SideSql {
                rule: format!(
                    "EXISTS (SELECT 1 FROM session_leases l WHERE l.session_id = $1 \
                     AND l.token_sha256 = {token})"
                ),
                pre: Some(format!(
                    "DELETE FROM session_leases l USING p WHERE l.session_id = p.session_id \
                     AND l.token_sha256 = {token} RETURNING l.pid, l.hostname, l.expires_at_ms"
                )),
                ty: None,
                data: Some(
                    "format('{\"pid\":%s,\"hostname\":%s,\"expires_at_ms\":%s}', sd.pid, \
                     to_json(sd.hostname::text), sd.expires_at_ms)"
                        .to_owned(),
                ),
                needs: Some("pid"),
                post: None,
            }
        }
        OneSide::Refs { kinds, ids } => {
            let kinds = next(Box::new(kinds.to_vec()), Type::TEXT_ARRAY);
            let ids = next(Box::new(ids.to_vec()), Type::TEXT_ARRAY);
            // The references not linked yet, each kind's numbered on from
            // its count (the pipeline's `link_refs`).
            let new = format!(
                "FROM unnest({kinds}::text[], {ids}::text[]) WITH ORDINALITY AS u(kind, ref_id, n) \
                 WHERE NOT EXISTS (SELECT 1 FROM session_refs x WHERE x.session_id = $1 \
                 AND x.kind = u.kind AND x.ref_id = u.ref_id)"
            );
            let linked = "(SELECT count(*) FROM session_refs x WHERE x.session_id = $1 \
                 AND x.kind = u.kind)";
            SideSql {
                // No kind past its cap (the pipeline's INVALID_ARGUMENT).
                rule: format!(
                    "NOT EXISTS (SELECT 1 {new} GROUP BY u.kind \
                     HAVING count(*) + {linked} > {REFS_MAX})"
                ),
                pre: None,
                ty: None,
                data: None,
                needs: None,
                post: Some(format!(
                    "INSERT INTO session_refs (session_id, kind, ref_id, ordinal, linked_seq) \
                     SELECT p.session_id, n.kind, n.ref_id, n.ordinal, ev.seq FROM p, ev, \
                     (SELECT u.kind, u.ref_id, {linked} \
                       + row_number() OVER (PARTITION BY u.kind ORDER BY u.n) - 1 AS ordinal \
                       {new}) n \
                     RETURNING kind, ordinal, ref_id"
                )),
            }
        }
        OneSide::BudgetSet {
            max_tokens,
            max_api_calls,
            max_duration_ms,
            on_exceed,
        } => {
            let mt = next(Box::new(max_tokens), Type::INT8);
            let ma = next(Box::new(max_api_calls), Type::INT8);
            let md = next(Box::new(max_duration_ms), Type::INT8);
            let policy = next(
                Box::new(on_exceed.map(|o| o.as_str().to_owned())),
                Type::TEXT,
            );
            // The merged budget (the pipeline's merge: what is given, else
            // what is stored; a new one's base 0 and policy `pause`): one
            // row, with or without a stored budget.
            let merged = format!(
                "SELECT coalesce({mt}, b.max_tokens) AS mt, \
                 coalesce({ma}, b.max_api_calls) AS ma, \
                 coalesce({md}, b.max_duration_ms) AS md, \
                 coalesce({policy}, b.on_exceed, 'pause') AS policy, \
                 coalesce(b.base_tokens, 0) AS bt, coalesce(b.base_api_calls, 0) AS ba, \
                 coalesce(b.base_duration_ms, 0) AS bd \
                 FROM (SELECT 1) o LEFT JOIN session_budgets b ON b.session_id = $1"
            );
            SideSql {
                // Within every merged limit (the sessions' columns,
                // re-checked on the newest row): a crossing is the
                // pipeline's.
                rule: format!(
                    "NOT EXISTS (SELECT 1 FROM ({merged}) m WHERE \
                     (m.mt IS NOT NULL AND sessions.input_tokens + sessions.output_tokens \
                       - m.bt > m.mt) \
                     OR (m.ma IS NOT NULL AND sessions.api_calls - m.ba > m.ma) \
                     OR (m.md IS NOT NULL AND sessions.duration_ms - m.bd > m.md))"
                ),
                pre: Some(merged),
                ty: None,
                // The pipeline's `BudgetData`, in serde_json's text.
                data: Some(
                    "format('{\"max_tokens\":%s,\"max_api_calls\":%s,\"max_duration_ms\":%s,\
                     \"on_exceed\":%s}', coalesce(sd.mt::text, 'null'), \
                     coalesce(sd.ma::text, 'null'), coalesce(sd.md::text, 'null'), \
                     to_json(sd.policy::text))"
                        .to_owned(),
                ),
                needs: None,
                post: Some(format!(
                    "INSERT INTO session_budgets (session_id, max_tokens, max_api_calls, \
                     max_duration_ms, on_exceed, exceeded_at_ms, updated_at_ms) \
                     SELECT p.session_id, sd.mt, sd.ma, sd.md, sd.policy, NULL, p.updated_at_ms \
                     FROM p, sd ON CONFLICT (session_id) DO UPDATE SET \
                     max_tokens = excluded.max_tokens, max_api_calls = excluded.max_api_calls, \
                     max_duration_ms = excluded.max_duration_ms, on_exceed = excluded.on_exceed, \
                     exceeded_at_ms = NULL, updated_at_ms = excluded.updated_at_ms \
                     RETURNING {BUDGET_RETURNING}"
                )),
            }
        }
        OneSide::BudgetReset => SideSql {
            rule: "EXISTS (SELECT 1 FROM session_budgets b WHERE b.session_id = $1)".to_owned(),
            pre: Some(
                "SELECT b.base_tokens, b.base_api_calls, b.base_duration_ms \
                 FROM session_budgets b WHERE b.session_id = $1"
                    .to_owned(),
            ),
            ty: None,
            // The pipeline's `BudgetFigures` (usage counted from the base),
            // in serde_json's text.
            data: Some(
                "format('{\"tokens\":%s,\"api_calls\":%s,\"duration_ms\":%s}', \
                 greatest(p.input_tokens + p.output_tokens - sd.base_tokens, 0), \
                 greatest(p.api_calls - sd.base_api_calls, 0), \
                 greatest(p.duration_ms - sd.base_duration_ms, 0))"
                    .to_owned(),
            ),
            needs: Some("base_tokens"),
            post: Some(format!(
                "UPDATE session_budgets SET base_tokens = p.input_tokens + p.output_tokens, \
                 base_api_calls = p.api_calls, base_duration_ms = p.duration_ms, \
                 exceeded_at_ms = NULL, updated_at_ms = p.updated_at_ms FROM p, ev \
                 WHERE session_budgets.session_id = p.session_id \
                 RETURNING {BUDGET_RETURNING}"
            )),
        },
    }
}
