//! A run transition's change: the run UPDATE a verb makes, and the body
//! the write pipeline runs under the session's lock (the `runs` module docs).

use super::{read_run, to_json, Args, TurnData};
use crate::error::{Error, Result};
use crate::ledger::budgets::{add_total, add_usage, append_crossing, apply_usage};
use crate::ledger::write::Write;
use crate::model::{Run, RunVerb, Usage};
use crate::store::{RunChange, SessionChange};

/// The run UPDATE of a verb with its arguments.
pub(super) fn change_of(verb: RunVerb, args: &Args) -> Result<RunChange<'_>> {
    Ok(match args {
        Args::Usage(u) => RunChange::Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            api_calls: u.api_calls,
        },
        Args::Output(o) => RunChange::Complete(o.as_deref()),
        Args::Error { code, message } => RunChange::Fail { code, message },
        Args::None => match verb {
            RunVerb::Start => RunChange::Start,
            RunVerb::Turn => RunChange::Turn,
            RunVerb::Cancel => RunChange::Cancel,
            RunVerb::Timeout => RunChange::Timeout,
            _ => return Err(Error::internal("a run verb lost its arguments")),
        },
    })
}

/// The body of a run transition (module docs): the run's rules, its guarded
/// UPDATE, the session's (with the usage, and a budget's policy), and its
/// `run_*` event.
pub(super) fn change_run(
    w: &mut Write<'_, '_>,
    run: &Run,
    verb: RunVerb,
    args: &Args,
    detail: Option<&str>,
    data: Option<&str>,
    if_rev: Option<i64>,
) -> Result<Run> {
    let (sid, run_id) = (w.id(), run.run_id.as_str());
    if verb.apply(run.status).is_none() {
        return Err(Error::RunInvalidTransition {
            id: run_id.to_owned(),
            from: run.status.as_str().to_owned(),
            verb: verb.as_str().to_owned(),
        });
    }
    if verb == RunVerb::Start {
        if let Some(other) = w.tx().find_running_run(sid)? {
            return Err(Error::RunAlreadyRunning {
                id: run_id.to_owned(),
                session_id: sid.to_owned(),
                running_run_id: other.run_id.to_string(),
            });
        }
    }
    if let Some(expected) = if_rev.filter(|r| *r != w.state().rev) {
        return Err(Error::Conflict {
            id: sid.to_owned(),
            expected_rev: expected,
            actual_rev: w.state().rev,
            latest_event: w.tx().latest_event(sid)?,
        });
    }
    let at = w.at();
    if let Args::Usage(u) = args {
        add_total("input_tokens", run.usage.input_tokens, u.input_tokens)?;
        add_total("output_tokens", run.usage.output_tokens, u.output_tokens)?;
        add_total("api_calls", run.usage.api_calls, u.api_calls)?;
    }
    let change = change_of(verb, args)?;
    let turn_data = match change {
        RunChange::Turn => Some(to_json(&TurnData {
            turn_count: run.turn_count + 1,
        })?),
        _ => None,
    };
    if w.tx().update_run(run_id, change, at)? != 1 {
        return Err(Error::internal("a run read under the write lock changed"));
    }
    let crossing = match args {
        Args::Usage(u) => {
            let add = Usage {
                input_tokens: u.input_tokens,
                output_tokens: u.output_tokens,
                api_calls: u.api_calls,
                duration_ms: 0,
            };
            let usage = add_usage(&w.state().usage, &add)?;
            apply_usage(w, &usage)?
        }
        _ => {
            w.update(SessionChange::default())?;
            None
        }
    };
    let data = turn_data.as_deref().or(data);
    w.event(verb.event_type(), detail, data, Some(run_id))?;
    if let Some(c) = &crossing {
        append_crossing(w, c)?;
    }
    read_run(w.tx(), run_id)
}
