//! No stranded runs: when a session ends, its unfinished runs end with it.
//!
//! A terminal session is frozen, so a run left `pending` or `running` in it
//! could never change again. In the same transaction that ends the session
//! (`complete`, `fail`, `cancel`, a gate rejection, a budget whose policy is
//! `fail`), every pending or running run of that session becomes
//! `cancelled`: `ended_at_ms` set, error `{code: "SESSION_ENDED", message:
//! "the session was completed"}` (or `failed`, `cancelled`), and one
//! `run_cancelled` event per run carrying its `run_id` (detail: the
//! message; data: `{"code": "SESSION_ENDED"}`), in the runs' creation
//! order, appended BEFORE the session's own terminal event, so that event
//! stays the last of the timeline. The session's rev goes up by 1 for the
//! whole change (one mutation), however many runs it cancels.

use super::write::Write;
use crate::error::{Error, Result};
use crate::model::{EventType, SessionStatus};
use crate::store::RunChange;

/// The error code of a run cancelled because its session ended.
pub const SESSION_ENDED: &str = "SESSION_ENDED";

/// A cancelled run's event data: `{"code":"SESSION_ENDED"}`.
pub(super) const ENDED_DATA: &str = r#"{"code":"SESSION_ENDED"}"#;

/// A cancelled run's error message and event detail: `the session was
/// completed` (or `failed`, `cancelled`).
pub(super) fn ended_message(ended: SessionStatus) -> String {
    format!("the session was {}", ended.as_str())
}

/// Cancels every pending or running run of the session `w` is ending as
/// `ended` (completed, failed or cancelled): one guarded run UPDATE and one
/// `run_cancelled` side event per run (module docs). Call it in the
/// session's ending mutation, after its UPDATE and before its terminal
/// event. Returns how many runs it cancelled.
///
/// # Errors
/// INTERNAL if a run read under the write lock changed; the store's errors.
pub(super) fn cancel_open_runs(w: &mut Write<'_, '_>, ended: SessionStatus) -> Result<usize> {
    let id = w.id();
    let ids = w.tx().select_open_run_ids(id)?;
    if ids.is_empty() {
        return Ok(0);
    }
    let message = ended_message(ended);
    let data = ENDED_DATA;
    let at = w.now();
    for run in &ids {
        let change = RunChange::SessionEnded {
            code: SESSION_ENDED,
            message: &message,
        };
        if w.tx().update_run(run, change, at)? != 1 {
            return Err(Error::internal("a run read under the write lock changed"));
        }
        w.side_event(
            EventType::RunCancelled.as_str(),
            Some(&message),
            Some(data),
            Some(run),
        )?;
    }
    Ok(ids.len())
}
