//! Reading the runs, budget, snapshots and gates of a JSON Lines session,
//! and checking that they agree with its events.

use super::super::json::{object_text, object_text_max, Obj};
use super::super::{opt_stage, Bad};
use super::parse::{checked_text, count, count_opt, known_keys};
use crate::ledger::{RUN_ERROR_CODE_MAX, RUN_JSON_MAX_BYTES};
use crate::model::{GateKind, GateStatus, OnExceed, RunId, RunStatus, COUNT_MAX};
use crate::store::rows::{BudgetFull, GateFull, RunRow, SessionRows, SnapshotFull, SnapshotRecord};
use crate::validate::{self as v, Lines};
use serde_json::value::RawValue;

const RUN_KEYS: &[&str] = &[
    "run_id",
    "status",
    "input",
    "output",
    "error_code",
    "error_message",
    "metadata",
    "usage",
    "turn_count",
    "created_at_ms",
    "updated_at_ms",
    "started_at_ms",
    "ended_at_ms",
];

const RUN_USAGE_KEYS: &[&str] = &["input_tokens", "output_tokens", "api_calls"];

/// One run: the caps and rules of the run verbs (id `run_` + 16 hex; input
/// and output objects ≤ 4 MiB, metadata ≤ 256 KiB, all redacted; error
/// code 1–128 one line and message 1–4096, redacted; counts in
/// 0..=2^53−1) and the state machine's shape (an error exactly on a failed
/// run, an output only on a completed one, `started_at_ms` on a running
/// one and never on a pending one, `ended_at_ms` exactly on a terminal one).
pub(super) fn parse_run(i: usize, raw: &RawValue) -> Result<RunRow, Bad> {
    let path = format!("runs[{i}]");
    let r = Obj::parse(raw.get(), &path)?;
    known_keys(&r, &path, RUN_KEYS)?;
    let run_id = r.str_req("run_id")?;
    run_id
        .parse::<RunId>()
        .map_err(|e| Bad::new(r.name("run_id"), e.to_string()))?;
    let st = r
        .str_req("status")?
        .parse::<RunStatus>()
        .map_err(|e| Bad::new(r.name("status"), e))?;
    let big = |key: &str| -> Result<Option<String>, Bad> {
        match r.raw(key) {
            None => Ok(None),
            Some(v) => object_text_max(&r.name(key), v, RUN_JSON_MAX_BYTES).map(Some),
        }
    };
    let input = big("input")?;
    let output = big("output")?;
    let metadata = match r.raw("metadata") {
        None => "{}".to_owned(),
        Some(m) => object_text(&r.name("metadata"), m)?,
    };
    let error_code = checked_text(&r, "error_code", 1, RUN_ERROR_CODE_MAX, Lines::Single)?;
    let error_message = checked_text(&r, "error_message", 1, v::REASON_MAX, Lines::Multi)?;
    let (input_tokens, output_tokens, api_calls) = match r.obj("usage")? {
        None => (0, 0, 0),
        Some(u) => {
            known_keys(&u, &r.name("usage"), RUN_USAGE_KEYS)?;
            (
                count(&u, "input_tokens")?,
                count(&u, "output_tokens")?,
                count(&u, "api_calls")?,
            )
        }
    };
    let row = RunRow {
        run_id,
        status: st.as_str().to_owned(),
        input,
        output,
        error_code,
        error_message,
        metadata,
        input_tokens,
        output_tokens,
        api_calls,
        turn_count: count(&r, "turn_count")?,
        created_at_ms: r.i64_req("created_at_ms")?,
        updated_at_ms: r.i64_req("updated_at_ms")?,
        started_at_ms: r.i64_opt("started_at_ms")?,
        ended_at_ms: r.i64_opt("ended_at_ms")?,
    };
    // A failed run always carries its error; a run cancelled because its
    // session ended carries one too (`SESSION_ENDED`, see ledger::run_end);
    // no other status has one. Code and message come as a pair.
    let failed = st == RunStatus::Failed;
    let may_err = failed || st == RunStatus::Cancelled;
    for (key, val) in [
        ("error_code", &row.error_code),
        ("error_message", &row.error_message),
    ] {
        if (failed && val.is_none()) || (!may_err && val.is_some()) {
            return Err(Bad::new(
                r.name(key),
                "must be set on a failed run, may be set on a cancelled one, and nothing else",
            ));
        }
    }
    if row.error_code.is_some() != row.error_message.is_some() {
        return Err(Bad::new(
            r.name("error_message"),
            "must be set exactly when error_code is",
        ));
    }
    if row.output.is_some() && st != RunStatus::Completed {
        return Err(Bad::new(
            r.name("output"),
            "may only be set on a completed run",
        ));
    }
    let started_ok = match st {
        RunStatus::Pending => row.started_at_ms.is_none(),
        RunStatus::Running => row.started_at_ms.is_some(),
        _ => true,
    };
    if !started_ok {
        return Err(Bad::new(
            r.name("started_at_ms"),
            "must be set on a running run and null on a pending one",
        ));
    }
    if st.is_terminal() != row.ended_at_ms.is_some() {
        return Err(Bad::new(
            r.name("ended_at_ms"),
            "must be set exactly when the run's status is terminal",
        ));
    }
    if row.updated_at_ms < row.created_at_ms {
        return Err(Bad::new(
            r.name("updated_at_ms"),
            "is earlier than created_at_ms",
        ));
    }
    Ok(row)
}

const BUDGET_KEYS: &[&str] = &[
    "max_tokens",
    "max_api_calls",
    "max_duration_ms",
    "on_exceed",
    "base_tokens",
    "base_api_calls",
    "base_duration_ms",
    "exceeded_at_ms",
    "updated_at_ms",
];

/// The budget: limits and bases in 0..=2^53−1, a known policy; the token
/// base in 0..=2 × (2^53−1), as a reset records the session's input and
/// output tokens together (each up to 2^53−1; README.md, "Runs and
/// budgets").
pub(super) fn parse_budget(b: &Obj<'_>) -> Result<BudgetFull, Bad> {
    known_keys(b, "budget", BUDGET_KEYS)?;
    let on_exceed = b
        .str_req("on_exceed")?
        .parse::<OnExceed>()
        .map_err(|e| Bad::new(b.name("on_exceed"), e))?;
    Ok(BudgetFull {
        max_tokens: count_opt(b, "max_tokens")?,
        max_api_calls: count_opt(b, "max_api_calls")?,
        max_duration_ms: count_opt(b, "max_duration_ms")?,
        on_exceed: on_exceed.as_str().to_owned(),
        base_tokens: token_sum(b, "base_tokens")?,
        base_api_calls: count(b, "base_api_calls")?,
        base_duration_ms: count(b, "base_duration_ms")?,
        exceeded_at_ms: b.i64_opt("exceeded_at_ms")?,
        updated_at_ms: b.i64_req("updated_at_ms")?,
    })
}

const SNAPSHOT_KEYS: &[&str] = &["seq", "step", "stage", "state", "at_ms", "payload_hex"];

/// One snapshot: the checkpoint verb's caps (step 1–200 one line, stage a
/// name, state an object ≤ 256 KiB, a payload of hex digits ≤ 16 MiB),
/// the state redacted, the payload as given.
pub(super) fn parse_snapshot(i: usize, raw: &RawValue) -> Result<SnapshotFull, Bad> {
    let path = format!("snapshots[{i}]");
    let o = Obj::parse(raw.get(), &path)?;
    known_keys(&o, &path, SNAPSHOT_KEYS)?;
    let state = match o.raw("state") {
        None => return Err(Bad::new(o.name("state"), "is missing")),
        Some(s) => object_text(&o.name("state"), s)?,
    };
    Ok(SnapshotFull {
        seq: o.i64_req("seq")?,
        step: checked_text(&o, "step", 1, v::STEP_MAX, Lines::Single)?,
        stage: opt_stage(&o.name("stage"), o.str_opt("stage")?)?,
        state,
        at_ms: o.i64_req("at_ms")?,
        payload: match o.str_opt("payload_hex")? {
            None => None,
            Some(h) => match hex::decode(&h) {
                Ok(b) if b.len() <= crate::ledger::PAYLOAD_MAX_BYTES => Some(b),
                Ok(b) => {
                    return Err(Bad::new(
                        o.name("payload_hex"),
                        format!(
                            "holds {} bytes; the limit is {}",
                            b.len(),
                            crate::ledger::PAYLOAD_MAX_BYTES
                        ),
                    ))
                }
                Err(_) => {
                    return Err(Bad::new(
                        o.name("payload_hex"),
                        "must be an even number of hex digits",
                    ))
                }
            },
        },
    })
}

const GATE_KEYS: &[&str] = &[
    "name",
    "round",
    "kind",
    "status",
    "opened_seq",
    "opened_at_ms",
    "decided_seq",
    "decided_at_ms",
    "reason",
    "outcome",
];

/// One gate: the gate verbs' rules (a name of 1–128 characters that holds
/// no secret, round ≥ 1, known kind and status, a decision exactly when
/// not pending, a reason only with a decision, an outcome exactly on a
/// rejection, an `auto` gate approved when opened).
pub(super) fn parse_gate(i: usize, raw: &RawValue) -> Result<GateFull, Bad> {
    let path = format!("gates[{i}]");
    let o = Obj::parse(raw.get(), &path)?;
    known_keys(&o, &path, GATE_KEYS)?;
    let name = o.str_req("name")?;
    v::keyed_name(&o.name("name"), &name, "gate names")?;
    let round = o.i64_req("round")?;
    if round < 1 {
        return Err(Bad::new(o.name("round"), "must be 1 or more"));
    }
    let kind = o
        .str_req("kind")?
        .parse::<GateKind>()
        .map_err(|e| Bad::new(o.name("kind"), e))?;
    let st = o
        .str_req("status")?
        .parse::<GateStatus>()
        .map_err(|e| Bad::new(o.name("status"), e))?;
    let outcome = match o.str_opt("outcome")?.as_deref() {
        None => None,
        Some("failed") => Some("failed"),
        Some("cancelled") => Some("cancelled"),
        Some(_) => {
            return Err(Bad::new(
                o.name("outcome"),
                "must be failed, cancelled or null",
            ))
        }
    };
    let g = GateFull {
        name,
        round,
        kind: kind.as_str().to_owned(),
        status: st.as_str().to_owned(),
        opened_seq: o.i64_req("opened_seq")?,
        opened_at_ms: o.i64_req("opened_at_ms")?,
        decided_seq: o.i64_opt("decided_seq")?,
        decided_at_ms: o.i64_opt("decided_at_ms")?,
        reason: checked_text(&o, "reason", 1, v::REASON_MAX, Lines::Multi)?,
        outcome: outcome.map(str::to_owned),
    };
    let pending = st == GateStatus::Pending;
    for (key, set) in [
        ("decided_seq", g.decided_seq.is_some()),
        ("decided_at_ms", g.decided_at_ms.is_some()),
    ] {
        if pending == set {
            return Err(Bad::new(
                o.name(key),
                "must be set exactly when the gate is decided",
            ));
        }
    }
    if pending && g.reason.is_some() {
        return Err(Bad::new(o.name("reason"), "must be null on a pending gate"));
    }
    if (st == GateStatus::Rejected) != g.outcome.is_some() {
        return Err(Bad::new(
            o.name("outcome"),
            "must be set exactly when the gate is rejected",
        ));
    }
    if kind == GateKind::Auto && (st != GateStatus::Approved || g.decided_seq != Some(g.opened_seq))
    {
        return Err(Bad::new(
            o.name("status"),
            "an auto gate is approved by the event that opens it",
        ));
    }
    Ok(g)
}

/// Cross-checks the runs, snapshots and gates against the session and its
/// events (what the triggers would otherwise refuse without naming a
/// field, and what `restore`, `gate` and `run` rely on).
pub(super) fn check_workflow(s: &SessionRows) -> Result<(), Bad> {
    let w = &s.workflow;
    let event_type = |seq: i64| {
        usize::try_from(seq)
            .ok()
            .and_then(|i| s.events.get(i))
            .map(|e| e.event_type.as_str())
    };
    // Runs.
    for (i, r) in w.runs.iter().enumerate() {
        if w.runs[..i].iter().any(|o| o.run_id == r.run_id) {
            return Err(Bad::new(
                format!("runs[{i}].run_id"),
                "holds the same run twice",
            ));
        }
    }
    if w.runs.iter().filter(|r| r.status == "running").count() > 1 {
        return Err(Bad::new(
            "runs",
            "holds more than one running run (a session runs at most one at a time)",
        ));
    }
    if !w.runs.is_empty() {
        if s.status.is_terminal() && s.rev < 2 {
            return Err(Bad::new(
                "rev",
                "must be 2 or more for a terminal session with runs",
            ));
        }
        for (i, e) in s.events.iter().enumerate() {
            if let Some(id) = &e.run_id {
                if !w.runs.iter().any(|r| &r.run_id == id) {
                    return Err(Bad::new(
                        format!("events[{i}].run_id"),
                        "names no run of this session's `runs`",
                    ));
                }
            }
        }
    }
    // Snapshots: by seq, each for a checkpoint event that records it.
    let mut last_seq = -1;
    for (i, sn) in w.snapshots.iter().enumerate() {
        let field = |k: &str| format!("snapshots[{i}].{k}");
        if sn.seq <= last_seq {
            return Err(Bad::new(
                field("seq"),
                "must be greater than the previous snapshot's (snapshots by seq, one per checkpoint)",
            ));
        }
        last_seq = sn.seq;
        let event = usize::try_from(sn.seq).ok().and_then(|i| s.events.get(i));
        let Some(event) = event.filter(|e| e.event_type == "checkpoint") else {
            return Err(Bad::new(
                field("seq"),
                "must be the seq of a `checkpoint` event",
            ));
        };
        let recorded = event
            .data
            .as_deref()
            .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
            .and_then(|d| d.get("snapshot").cloned())
            .unwrap_or_default();
        let text = |k: &str| recorded.get(k).and_then(|v| v.as_str()).map(str::to_owned);
        let int = |k: &str| recorded.get(k).and_then(serde_json::Value::as_i64);
        let record = SnapshotRecord {
            sha256: text("sha256"),
            size_bytes: int("size_bytes"),
            payload_sha256: text("payload_sha256"),
            payload_bytes: int("payload_bytes"),
        };
        if let Some((want, _)) = record.check(sn.state.as_bytes(), sn.payload.as_deref()) {
            let (key, what) = if want.starts_with("payload") || want == "no payload" {
                ("payload_hex", "payload_bytes, payload_sha256")
            } else {
                ("state", "size_bytes, sha256")
            };
            return Err(Bad::new(
                field(key),
                format!("does not match the snapshot ({what}) its checkpoint event records"),
            ));
        }
    }
    // Gates: rounds 1, 2, … per name in opening order, at most one pending,
    // each seq naming the event that opened or decided it.
    for (i, g) in w.gates.iter().enumerate() {
        let field = |k: &str| format!("gates[{i}].{k}");
        let before = w.gates[..i].iter().filter(|o| o.name == g.name).count();
        if usize::try_from(g.round).ok() != Some(before + 1) {
            return Err(Bad::new(
                field("round"),
                format!(
                    "must be {}: a name's rounds run 1, 2, … in opening order",
                    before + 1
                ),
            ));
        }
        if g.status == "pending" && w.gates[..i].iter().any(|o| o.status == "pending") {
            return Err(Bad::new(
                field("status"),
                "a session waits on at most one pending gate",
            ));
        }
        let opened = if g.kind == "auto" {
            "gate_approved"
        } else {
            "gate_opened"
        };
        if event_type(g.opened_seq) != Some(opened) {
            return Err(Bad::new(
                field("opened_seq"),
                format!("must be the seq of a `{opened}` event"),
            ));
        }
        if let Some(d) = g.decided_seq {
            let want = if g.status == "rejected" {
                "gate_rejected"
            } else {
                "gate_approved"
            };
            if event_type(d) != Some(want) || (g.kind != "auto" && d <= g.opened_seq) {
                return Err(Bad::new(
                    field("decided_seq"),
                    format!("must be the seq of a `{want}` event after the gate opened"),
                ));
            }
        }
    }
    Ok(())
}

/// Input and output tokens together (0 when missing or null): an integer
/// in 0..=2 × (2^53−1).
fn token_sum(o: &Obj<'_>, key: &str) -> Result<i64, Bad> {
    let n = o.i64_opt(key)?.unwrap_or(0);
    if (0..=2 * COUNT_MAX).contains(&n) {
        Ok(n)
    } else {
        Err(Bad::new(
            o.name(key),
            format!(
                "must be an integer from 0 to {} (input and output tokens, each up to 2^53 - 1)",
                2 * COUNT_MAX
            ),
        ))
    }
}
