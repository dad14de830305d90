//! Import of a session's runs, budget, snapshots and gates (PostgreSQL;
//! the statements are in [`super::transfer`]): one statement per table.

use super::super::tx::PgTx;
use super::transfer::{
    Stop, INSERT_BUDGET_IMPORT, INSERT_GATES_IMPORT, INSERT_RUNS, INSERT_SNAPSHOTS_IMPORT,
    UPDATE_RUNS_IMPORT_STATUS,
};
use crate::store::rows::WorkflowRows;
use postgres::types::Type;

/// Inserts a session's runs (pending, then their recorded statuses),
/// budget, snapshots and gates; its session row, live for the runs, and
/// its events exist already.
pub fn insert_workflow(
    tx: &mut PgTx<'_>,
    id: &str,
    w: &WorkflowRows,
) -> std::result::Result<(), Stop> {
    if !w.runs.is_empty() {
        insert_runs(tx, id, w)?;
    }
    if let Some(b) = &w.budget {
        tx.try_exec(
            INSERT_BUDGET_IMPORT,
            &[
                (&id, Type::TEXT),
                (&b.max_tokens, Type::INT8),
                (&b.max_api_calls, Type::INT8),
                (&b.max_duration_ms, Type::INT8),
                (&b.on_exceed, Type::TEXT),
                (&b.base_tokens, Type::INT8),
                (&b.base_api_calls, Type::INT8),
                (&b.base_duration_ms, Type::INT8),
                (&b.exceeded_at_ms, Type::INT8),
                (&b.updated_at_ms, Type::INT8),
            ],
        )?;
    }
    if !w.snapshots.is_empty() {
        let seq: Vec<i64> = w.snapshots.iter().map(|s| s.seq).collect();
        let step: Vec<Option<&str>> = w.snapshots.iter().map(|s| s.step.as_deref()).collect();
        let stage: Vec<Option<&str>> = w.snapshots.iter().map(|s| s.stage.as_deref()).collect();
        let state: Vec<&str> = w.snapshots.iter().map(|s| s.state.as_str()).collect();
        let at: Vec<i64> = w.snapshots.iter().map(|s| s.at_ms).collect();
        let payload: Vec<Option<&[u8]>> =
            w.snapshots.iter().map(|s| s.payload.as_deref()).collect();
        tx.try_exec(
            INSERT_SNAPSHOTS_IMPORT,
            &[
                (&id, Type::TEXT),
                (&seq, Type::INT8_ARRAY),
                (&step, Type::TEXT_ARRAY),
                (&stage, Type::TEXT_ARRAY),
                (&state, Type::TEXT_ARRAY),
                (&at, Type::INT8_ARRAY),
                (&payload, Type::BYTEA_ARRAY),
            ],
        )?;
    }
    if !w.gates.is_empty() {
        let g = &w.gates;
        let name: Vec<&str> = g.iter().map(|g| g.name.as_str()).collect();
        let round: Vec<i64> = g.iter().map(|g| g.round).collect();
        let kind: Vec<&str> = g.iter().map(|g| g.kind.as_str()).collect();
        let status: Vec<&str> = g.iter().map(|g| g.status.as_str()).collect();
        let oseq: Vec<i64> = g.iter().map(|g| g.opened_seq).collect();
        let oat: Vec<i64> = g.iter().map(|g| g.opened_at_ms).collect();
        let dseq: Vec<Option<i64>> = g.iter().map(|g| g.decided_seq).collect();
        let dat: Vec<Option<i64>> = g.iter().map(|g| g.decided_at_ms).collect();
        let reason: Vec<Option<&str>> = g.iter().map(|g| g.reason.as_deref()).collect();
        let outcome: Vec<Option<&str>> = g.iter().map(|g| g.outcome.as_deref()).collect();
        tx.try_exec(
            INSERT_GATES_IMPORT,
            &[
                (&id, Type::TEXT),
                (&name, Type::TEXT_ARRAY),
                (&round, Type::INT8_ARRAY),
                (&kind, Type::TEXT_ARRAY),
                (&status, Type::TEXT_ARRAY),
                (&oseq, Type::INT8_ARRAY),
                (&oat, Type::INT8_ARRAY),
                (&dseq, Type::INT8_ARRAY),
                (&dat, Type::INT8_ARRAY),
                (&reason, Type::TEXT_ARRAY),
                (&outcome, Type::TEXT_ARRAY),
            ],
        )?;
    }
    Ok(())
}

fn insert_runs(tx: &mut PgTx<'_>, id: &str, w: &WorkflowRows) -> std::result::Result<(), Stop> {
    let r = &w.runs;
    let run_id: Vec<&str> = r.iter().map(|r| r.run_id.as_str()).collect();
    let input: Vec<Option<&str>> = r.iter().map(|r| r.input.as_deref()).collect();
    let output: Vec<Option<&str>> = r.iter().map(|r| r.output.as_deref()).collect();
    let code: Vec<Option<&str>> = r.iter().map(|r| r.error_code.as_deref()).collect();
    let message: Vec<Option<&str>> = r.iter().map(|r| r.error_message.as_deref()).collect();
    let metadata: Vec<&str> = r.iter().map(|r| r.metadata.as_str()).collect();
    let inp: Vec<i64> = r.iter().map(|r| r.input_tokens).collect();
    let out: Vec<i64> = r.iter().map(|r| r.output_tokens).collect();
    let calls: Vec<i64> = r.iter().map(|r| r.api_calls).collect();
    let turns: Vec<i64> = r.iter().map(|r| r.turn_count).collect();
    let created: Vec<i64> = r.iter().map(|r| r.created_at_ms).collect();
    let updated: Vec<i64> = r.iter().map(|r| r.updated_at_ms).collect();
    let started: Vec<Option<i64>> = r.iter().map(|r| r.started_at_ms).collect();
    let ended: Vec<Option<i64>> = r.iter().map(|r| r.ended_at_ms).collect();
    tx.try_exec(
        INSERT_RUNS,
        &[
            (&id, Type::TEXT),
            (&run_id, Type::TEXT_ARRAY),
            (&input, Type::TEXT_ARRAY),
            (&output, Type::TEXT_ARRAY),
            (&code, Type::TEXT_ARRAY),
            (&message, Type::TEXT_ARRAY),
            (&metadata, Type::TEXT_ARRAY),
            (&inp, Type::INT8_ARRAY),
            (&out, Type::INT8_ARRAY),
            (&calls, Type::INT8_ARRAY),
            (&turns, Type::INT8_ARRAY),
            (&created, Type::INT8_ARRAY),
            (&updated, Type::INT8_ARRAY),
            (&started, Type::INT8_ARRAY),
            (&ended, Type::INT8_ARRAY),
        ],
    )?;
    let (ids, statuses): (Vec<&str>, Vec<&str>) = r
        .iter()
        .filter(|r| r.status != "pending")
        .map(|r| (r.run_id.as_str(), r.status.as_str()))
        .unzip();
    if !ids.is_empty() {
        tx.try_exec(
            UPDATE_RUNS_IMPORT_STATUS,
            &[(&ids, Type::TEXT_ARRAY), (&statuses, Type::TEXT_ARRAY)],
        )?;
    }
    Ok(())
}
