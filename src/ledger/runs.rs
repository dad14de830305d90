//! Runs (issue 4 §1; SPEC §2 Run; the AgentSessionManager seed's `Run` and
//! `SessionManager` run functions).
//!
//! Seed → library: `Run.new` / `SessionManager.start_run` →
//! [`Ledger::create_run`]; `Run.update_status(run, :running)` →
//! [`Ledger::start_run`]; `Run.update_token_usage` →
//! [`Ledger::record_run_usage`]; `Run.increment_turn` →
//! [`Ledger::increment_turn`]; `Run.set_output` → [`Ledger::complete_run`];
//! `Run.set_error` → [`Ledger::fail_run`]; `SessionManager.cancel_run` →
//! [`Ledger::cancel_run`]; [`Ledger::timeout_run`]; `SessionStore.get_run`,
//! `list_runs(…, status:)`, `get_active_run` → [`Ledger::get_run`],
//! [`Ledger::list_runs`], [`Ledger::active_run`]; `Run.to_map` /
//! `from_map` → [`Run::to_json`] / [`Run::from_json`]. logbook records runs;
//! it never executes them (SPEC: it "never executes, decides or authorizes
//! anything"), so there is no `execute_run`: the agent starts, reports on
//! and ends its run.
//!
//! Every run transition is also a session mutation: in ONE `BEGIN
//! IMMEDIATE` transaction, the run's conditional UPDATE (literal statuses),
//! the session's UPDATE (rev + 1, `updated_at_ms`, and for usage the new
//! sums), and one `run_*` event carrying `run_id` on the session's
//! timeline (so the hash chain covers it). Runs exist only in live
//! sessions: any run verb on a completed, failed or cancelled session is
//! SESSION_INVALID_TRANSITION. A session that ends cancels its pending and
//! running runs in the same transaction (`ledger::run_end`), so no run is
//! left unfinished in a frozen session.

use super::budgets::{
    add_total, add_usage, apply_usage, check_count, live_state, push_event, writable_state,
};
use super::db;
use super::sessions::{
    key_digest, parse_session_id, replay_hit, replayed, validate_key, VerbDigest,
};
use super::written::Written;
use super::{Ledger, Mutation};
use crate::error::{Error, Result};
use crate::model::{EventType, Run, RunError, RunId, RunStatus, RunUsage, RunVerb, Usage};
use crate::redact::{redact, redact_json};
use crate::store::runs as sr;
use crate::store::sessions as ss;
use crate::validate::{self as v, Lines};
use rusqlite::{params, Connection};
use serde::Serialize;
use serde_json::Value;

/// Largest run input or output: 4 MiB of compact JSON (SPEC §2 Run).
pub const RUN_JSON_MAX_BYTES: usize = 4 * 1024 * 1024;

/// Longest run error code: 128 characters.
pub const RUN_ERROR_CODE_MAX: usize = 128;

/// A `run create` request.
#[derive(Debug, Clone, Default)]
pub struct CreateRun {
    /// Input data: a JSON object of at most 4 MiB compact; redacted.
    pub input: Option<Value>,
    /// Caller metadata: a JSON object of at most 256 KiB compact; redacted.
    pub metadata: Option<Value>,
}

/// Usage to add to a running run (each 0..=2^53−1; `None` adds nothing; at
/// least one given). It is added to the session's usage too.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunUsageDelta {
    /// Input tokens to add.
    pub input_tokens: Option<i64>,
    /// Output tokens to add.
    pub output_tokens: Option<i64>,
    /// API calls to add.
    pub api_calls: Option<i64>,
}

enum Args {
    None,
    Usage(RunUsage),
    Output(Option<String>),
    Error { code: String, message: String },
}

#[derive(Serialize)]
struct TurnData {
    turn_count: i64,
}

#[derive(Serialize)]
struct CodeData<'a> {
    code: &'a str,
}

fn parse_run_id(id: &str) -> Result<RunId> {
    id.parse::<RunId>()
        .map_err(|e| Error::invalid("run_id", e.to_string()))
}

fn new_run_id() -> Result<RunId> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| Error::internal(format!("no randomness: {e}")))?;
    Ok(RunId::from_bytes(bytes))
}

/// Validates a run's input or output: a JSON object ≤ 4 MiB with no
/// integer above `i64::MAX` ([`v::exact_value_numbers`]); returns its
/// redacted compact text.
fn run_json(field: &str, value: &Option<Value>) -> Result<Option<String>> {
    let Some(val) = value else { return Ok(None) };
    if !val.is_object() {
        return Err(Error::invalid(field, "must be a JSON object"));
    }
    v::exact_value_numbers(field, val)?;
    let size = v::compact_len(val)?;
    if size > RUN_JSON_MAX_BYTES {
        return Err(Error::invalid(
            field,
            format!(
                "is {size} bytes as compact JSON; the limit is {RUN_JSON_MAX_BYTES} bytes (4 MiB)"
            ),
        ));
    }
    let mut val = val.clone();
    redact_json(&mut val);
    serde_json::to_string(&val)
        .map(Some)
        .map_err(|e| Error::internal(e.to_string()))
}

fn to_json(v: &impl Serialize) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::internal(format!("cannot encode event data: {e}")))
}

fn key_reused() -> Error {
    Error::invalid(
        "idempotency_key",
        "was already used on this session with different arguments",
    )
}

/// A retry of an applied request: the run it produced (or changed), read
/// now.
fn replay_run(
    tx: &Connection,
    session_id: &str,
    m: &Mutation,
    dg: Option<&str>,
) -> Result<Option<Written<Run>>> {
    let Some(hit) = replay_hit(tx, session_id, m.idempotency_key.as_deref(), dg)? else {
        return Ok(None);
    };
    // A key used by a session verb on this session, retried by a run verb:
    // the same key with other arguments.
    let Some(run_id) = hit.run_id.as_deref() else {
        return Err(key_reused());
    };
    Ok(sr::find_run(tx, run_id)
        .map_err(db)?
        .map(|r| Written::replay(r, replayed(&hit))))
}

fn read_run(tx: &Connection, id: &str) -> Result<Run> {
    sr::find_run(tx, id)
        .map_err(db)?
        .ok_or_else(|| Error::internal("an updated run could not be read back"))
}

impl Ledger {
    /// Creates a pending run in a live session (`run create SESSION`; the
    /// seed's `Run.new` / `SessionManager.start_run`): event `run_created`
    /// carrying the new `run_id`, session rev + 1. Returns the run.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (input over 4 MiB or metadata over 256 KiB, not
    /// objects, a reused idempotency key), SESSION_NOT_FOUND,
    /// SESSION_INVALID_TRANSITION (terminal session), SESSION_CONFLICT
    /// (`if_rev`), STORE_BUSY.
    pub fn create_run(
        &self,
        session_id: &str,
        req: CreateRun,
        m: &Mutation,
    ) -> Result<Written<Run>> {
        parse_session_id(session_id)?;
        validate_key(m)?;
        let input = run_json("input", &req.input)?;
        if let Some(md) = &req.metadata {
            v::json_value("metadata", md)?;
        }
        let metadata = run_json("metadata", &req.metadata)?;
        let dg = key_digest(
            m,
            &VerbDigest {
                verb: "run_created",
                text: input.as_deref(),
                step: None,
                data: metadata.as_deref(),
                if_rev: m.if_rev,
            },
        )?;
        let now = self.now_ms();
        self.write(|tx| {
            if let Some(r) = replay_run(tx, session_id, m, dg.as_deref())? {
                return Ok(r);
            }
            let st = writable_state(
                tx,
                session_id,
                "create a run in",
                m.if_rev,
                m.lease.as_deref(),
                now,
            )?;
            let at = now.max(st.updated_at_ms);
            let mut attempt = 0;
            let run_id = loop {
                let id = new_run_id()?;
                let res = sr::insert_run(
                    tx,
                    id.as_str(),
                    session_id,
                    input.as_deref(),
                    metadata.as_deref().unwrap_or("{}"),
                    at,
                );
                match res {
                    Ok(()) => break id,
                    // A random 64-bit id colliding is vanishingly rare.
                    Err(e)
                        if attempt < 3
                            && e.sqlite_error_code()
                                == Some(rusqlite::ErrorCode::ConstraintViolation) =>
                    {
                        attempt += 1;
                    }
                    Err(e) => return Err(db(e)),
                }
            };
            touch(tx, session_id, at)?;
            let key = m.idempotency_key.as_deref().zip(dg.as_deref());
            let actor = self.opts.actor;
            let rid = Some(run_id.as_str());
            push_event(
                tx,
                actor,
                session_id,
                EventType::RunCreated.as_str(),
                None,
                None,
                rid,
                key,
            )?;
            read_run(tx, run_id.as_str()).map(Written::applied)
        })
        .map_err(|e| self.fill_path(e))
    }

    /// pending → running (`run start RUN`): event `run_started`. At most one
    /// run per session is running.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (malformed id), RUN_NOT_FOUND,
    /// RUN_INVALID_TRANSITION (not pending, or the session already has a
    /// running run: `details.running_run_id`), SESSION_INVALID_TRANSITION
    /// (terminal session), SESSION_CONFLICT, STORE_BUSY.
    pub fn start_run(&self, run_id: &str, m: &Mutation) -> Result<Written<Run>> {
        self.run_transition(run_id, RunVerb::Start, Args::None, m)
    }

    /// Adds token usage to a running run and, in the same transaction, to
    /// its session's usage (`run usage RUN`; the seed's
    /// `update_token_usage`, which accumulates): event `run_usage` with the
    /// amounts added. A budget crossed by it applies its policy (see
    /// `ledger::budgets`).
    ///
    /// # Errors
    /// INVALID_ARGUMENT (nothing given, an amount outside 0..=2^53−1, a run
    /// or session total that would pass 2^53−1), RUN_NOT_FOUND,
    /// RUN_INVALID_TRANSITION (not running), SESSION_INVALID_TRANSITION,
    /// SESSION_CONFLICT, STORE_BUSY.
    pub fn record_run_usage(
        &self,
        run_id: &str,
        req: RunUsageDelta,
        m: &Mutation,
    ) -> Result<Written<Run>> {
        if req.input_tokens.is_none() && req.output_tokens.is_none() && req.api_calls.is_none() {
            return Err(Error::invalid(
                "usage",
                "give at least one of --input-tokens, --output-tokens or --api-calls",
            ));
        }
        let add = RunUsage {
            input_tokens: check_count("input_tokens", req.input_tokens.unwrap_or(0))?,
            output_tokens: check_count("output_tokens", req.output_tokens.unwrap_or(0))?,
            api_calls: check_count("api_calls", req.api_calls.unwrap_or(0))?,
        };
        self.run_transition(run_id, RunVerb::Usage, Args::Usage(add), m)
    }

    /// Counts one more turn of a running run (`run turn RUN`; the seed's
    /// `increment_turn`): event `run_turn` with the new `turn_count`.
    ///
    /// # Errors
    /// As [`Ledger::start_run`] (RUN_INVALID_TRANSITION: not running).
    pub fn increment_turn(&self, run_id: &str, m: &Mutation) -> Result<Written<Run>> {
        self.run_transition(run_id, RunVerb::Turn, Args::None, m)
    }

    /// running → completed with an optional output (a JSON object ≤ 4 MiB,
    /// redacted; the seed's `set_output`): event `run_completed`; sets
    /// `ended_at_ms`.
    ///
    /// # Errors
    /// As [`Ledger::start_run`], and INVALID_ARGUMENT for the output.
    pub fn complete_run(
        &self,
        run_id: &str,
        output: Option<Value>,
        m: &Mutation,
    ) -> Result<Written<Run>> {
        let output = run_json("output", &output)?;
        self.run_transition(run_id, RunVerb::Complete, Args::Output(output), m)
    }

    /// pending | running → failed with an error `{code, message}` (the
    /// seed's `set_error`): event `run_failed` with the message as `detail`
    /// and `{"code": …}` as data. `code`: 1–128 characters, one line;
    /// `message`: 1–4096 characters; both redacted.
    ///
    /// # Errors
    /// As [`Ledger::start_run`], and INVALID_ARGUMENT for code or message.
    pub fn fail_run(&self, run_id: &str, error: RunError, m: &Mutation) -> Result<Written<Run>> {
        v::text("code", &error.code, 1, RUN_ERROR_CODE_MAX, Lines::Single)?;
        v::text("message", &error.message, 1, v::REASON_MAX, Lines::Multi)?;
        let args = Args::Error {
            code: redact(&error.code).into_owned(),
            message: redact(&error.message).into_owned(),
        };
        self.run_transition(run_id, RunVerb::Fail, args, m)
    }

    /// pending | running → cancelled (the seed's `cancel_run`): event
    /// `run_cancelled`.
    ///
    /// # Errors
    /// As [`Ledger::start_run`].
    pub fn cancel_run(&self, run_id: &str, m: &Mutation) -> Result<Written<Run>> {
        self.run_transition(run_id, RunVerb::Cancel, Args::None, m)
    }

    /// pending | running → timeout: event `run_timeout`.
    ///
    /// # Errors
    /// As [`Ledger::start_run`].
    pub fn timeout_run(&self, run_id: &str, m: &Mutation) -> Result<Written<Run>> {
        self.run_transition(run_id, RunVerb::Timeout, Args::None, m)
    }

    /// One run (`run show RUN`; the seed's `SessionStore.get_run`).
    ///
    /// # Errors
    /// INVALID_ARGUMENT (malformed id), RUN_NOT_FOUND.
    pub fn get_run(&self, run_id: &str) -> Result<Run> {
        parse_run_id(run_id)?;
        self.read(|tx| {
            sr::find_run(tx, run_id)
                .map_err(db)?
                .ok_or_else(|| Error::RunNotFound {
                    id: run_id.to_owned(),
                })
        })
        .map_err(|e| self.fill_path(e))
    }

    /// A session's runs in creation order, only those in `statuses` when it
    /// is not empty (`run list SESSION [--status S]...`; the seed's
    /// `list_runs(store, id, status: …)`).
    ///
    /// # Errors
    /// INVALID_ARGUMENT (malformed id), SESSION_NOT_FOUND.
    pub fn list_runs(&self, session_id: &str, statuses: &[RunStatus]) -> Result<Vec<Run>> {
        parse_session_id(session_id)?;
        self.read(|tx| {
            if !ss::session_exists(tx, session_id).map_err(db)? {
                return Err(Error::SessionNotFound {
                    id: session_id.to_owned(),
                });
            }
            let mut runs = sr::select_runs(tx, session_id).map_err(db)?;
            if !statuses.is_empty() {
                runs.retain(|r| statuses.contains(&r.status));
            }
            Ok(runs)
        })
        .map_err(|e| self.fill_path(e))
    }

    /// The session's running run, or `None` (`run active SESSION`; the
    /// seed's `get_active_run`).
    ///
    /// # Errors
    /// INVALID_ARGUMENT (malformed id), SESSION_NOT_FOUND.
    pub fn active_run(&self, session_id: &str) -> Result<Option<Run>> {
        parse_session_id(session_id)?;
        self.read(|tx| {
            if !ss::session_exists(tx, session_id).map_err(db)? {
                return Err(Error::SessionNotFound {
                    id: session_id.to_owned(),
                });
            }
            sr::find_running_run(tx, session_id).map_err(db)
        })
        .map_err(|e| self.fill_path(e))
    }

    /// The shared run transition (module docs).
    fn run_transition(
        &self,
        run_id: &str,
        verb: RunVerb,
        args: Args,
        m: &Mutation,
    ) -> Result<Written<Run>> {
        parse_run_id(run_id)?;
        validate_key(m)?;
        let (detail, data): (Option<String>, Option<String>) = match &args {
            Args::Usage(u) => (None, Some(to_json(u)?)),
            Args::Error { code, message } => {
                (Some(message.clone()), Some(to_json(&CodeData { code })?))
            }
            Args::Output(o) => (None, o.clone()),
            Args::None => (None, None),
        };
        let dg = key_digest(
            m,
            &VerbDigest {
                verb: verb.event_type(),
                text: detail.as_deref(),
                step: Some(run_id),
                data: data.as_deref(),
                if_rev: m.if_rev,
            },
        )?;
        // The output lives in the run; the event stays small.
        let data = if matches!(args, Args::Output(_)) {
            None
        } else {
            data
        };
        let now = self.now_ms();
        self.write(|tx| {
            let Some(run) = sr::find_run(tx, run_id).map_err(db)? else {
                return Err(Error::RunNotFound {
                    id: run_id.to_owned(),
                });
            };
            let sid = run.session_id.clone();
            if let Some(r) = replay_run(tx, &sid, m, dg.as_deref())? {
                return Ok(r);
            }
            // A terminal session first: its runs, all ended with it (see
            // `run_end`), are refused as SESSION_INVALID_TRANSITION.
            let st = writable_state(tx, &sid, "change a run of", None, m.lease.as_deref(), now)?;
            if verb.apply(run.status).is_none() {
                return Err(Error::RunInvalidTransition {
                    id: run_id.to_owned(),
                    from: run.status.as_str().to_owned(),
                    verb: verb.as_str().to_owned(),
                });
            }
            if verb == RunVerb::Start {
                if let Some(other) = sr::find_running_run(tx, &sid).map_err(db)? {
                    return Err(Error::RunAlreadyRunning {
                        id: run_id.to_owned(),
                        session_id: sid,
                        running_run_id: other.run_id.to_string(),
                    });
                }
            }
            if m.if_rev.is_some() {
                live_state(tx, &sid, "change a run of", m.if_rev)?;
            }
            let at = now.max(st.updated_at_ms);
            let mut turn_data = None;
            let n = match &args {
                Args::Usage(u) => {
                    add_total("input_tokens", run.usage.input_tokens, u.input_tokens)?;
                    add_total("output_tokens", run.usage.output_tokens, u.output_tokens)?;
                    add_total("api_calls", run.usage.api_calls, u.api_calls)?;
                    exec(
                        tx,
                        sr::UPDATE_RUN_USAGE,
                        params![run_id, at, u.input_tokens, u.output_tokens, u.api_calls],
                    )?
                }
                Args::Output(o) => exec(tx, sr::UPDATE_RUN_COMPLETE, params![run_id, at, o])?,
                Args::Error { code, message } => {
                    exec(tx, sr::UPDATE_RUN_FAIL, params![run_id, at, code, message])?
                }
                Args::None => {
                    let sql = match verb {
                        RunVerb::Start => sr::UPDATE_RUN_START,
                        RunVerb::Turn => {
                            turn_data = Some(to_json(&TurnData {
                                turn_count: run.turn_count + 1,
                            })?);
                            sr::UPDATE_RUN_TURN
                        }
                        RunVerb::Cancel => sr::UPDATE_RUN_CANCEL,
                        RunVerb::Timeout => sr::UPDATE_RUN_TIMEOUT,
                        _ => return Err(Error::internal("a run verb lost its arguments")),
                    };
                    exec(tx, sql, params![run_id, at])?
                }
            };
            if n != 1 {
                return Err(Error::internal("a run read under the write lock changed"));
            }
            let crossing = match &args {
                Args::Usage(u) => {
                    let add = Usage {
                        input_tokens: u.input_tokens,
                        output_tokens: u.output_tokens,
                        api_calls: u.api_calls,
                        duration_ms: 0,
                    };
                    let usage = add_usage(&st.usage, &add)?;
                    apply_usage(tx, &sid, &st, &usage, at)?
                }
                _ => {
                    touch(tx, &sid, at)?;
                    None
                }
            };
            let data = turn_data.or(data);
            let key = m.idempotency_key.as_deref().zip(dg.as_deref());
            push_event(
                tx,
                self.opts.actor,
                &sid,
                verb.event_type(),
                detail.as_deref(),
                data.as_deref(),
                Some(run_id),
                key,
            )?;
            if let Some(c) = &crossing {
                self.append_crossing(tx, &sid, c)?;
            }
            read_run(tx, run_id).map(Written::applied)
        })
        .map_err(|e| self.fill_path(e))
    }
}

fn exec(tx: &Connection, sql: &str, p: impl rusqlite::Params) -> Result<usize> {
    tx.prepare_cached(sql)
        .and_then(|mut s| s.execute(p))
        .map_err(db)
}

/// The session side of a run transition without usage: rev + 1 and
/// `updated_at_ms` (the session was read live under the lock).
fn touch(tx: &Connection, session_id: &str, at: i64) -> Result<()> {
    if exec(tx, ss::UPDATE_TOUCH[0], params![session_id, at])? != 1 {
        return Err(Error::internal(
            "a session read under the write lock changed before its update",
        ));
    }
    Ok(())
}
