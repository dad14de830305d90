//! Runs (docs/design.md, "Runs"; the AgentSessionManager's `Run` and
//! `SessionManager` run functions).
//!
//! Run model → library: `Run.new` / `SessionManager.start_run` →
//! [`Ledger::create_run`]; `Run.update_status(run, :running)` →
//! [`Ledger::start_run`]; `Run.update_token_usage` →
//! [`Ledger::record_run_usage`]; `Run.increment_turn` →
//! [`Ledger::increment_turn`]; `Run.set_output` → [`Ledger::complete_run`];
//! `Run.set_error` → [`Ledger::fail_run`]; `SessionManager.cancel_run` →
//! [`Ledger::cancel_run`]; [`Ledger::timeout_run`]; `SessionStore.get_run`,
//! `list_runs(…, status:)`, `get_active_run` → [`Ledger::get_run`],
//! [`Ledger::list_runs`], [`Ledger::active_run`]; `Run.to_map` /
//! `from_map` → [`Run::to_json`] / [`Run::from_json`]. logbook records runs;
//! it never executes them (docs/design.md, "Scope": it never executes, decides or
//! authorizes anything), so there is no `execute_run`: the agent starts, reports on
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

mod change;

use super::budgets::check_count;
use super::request::{key_digest, parse_session_id, validate_key, Mutation, VerbDigest};
use super::write::{key_reused, one_or, Op, Write};
use super::written::Written;
use super::Ledger;
use crate::error::{Error, Result};
use crate::model::{EventType, Run, RunError, RunId, RunStatus, RunUsage, RunVerb, Verb};
use crate::redact::{redact, redact_json};
use crate::store::rows::KeyHit;
use crate::store::{OneRunChange, OneRunWrite, SessionChange, Tx};
use crate::validate::{self as v, Lines};
use change::{change_of, change_run};
use serde::Serialize;
use serde_json::Value;

/// Largest run input or output: 4 MiB of compact JSON (docs/design.md, "Runs").
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

/// What a replay of a run verb answers with: the run its key's event
/// names, read now. A key a session verb used on this session, retried by
/// a run verb, is the same key with other arguments.
fn replay_run(tx: &mut dyn Tx, hit: &KeyHit) -> Result<Run> {
    let Some(run_id) = hit.run_id.as_deref() else {
        return Err(key_reused());
    };
    read_run(tx, run_id)
}

fn read_run(tx: &mut dyn Tx, id: &str) -> Result<Run> {
    tx.find_run(id)?
        .ok_or_else(|| Error::internal("an updated run could not be read back"))
}

impl Ledger {
    /// Creates a pending run in a live session (`run create SESSION`; the
    /// the run model's `Run.new` / `SessionManager.start_run`): event `run_created`
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
        let op = Op {
            id: session_id,
            verb: Verb::CreateRun,
            m,
            digest: dg.as_deref(),
        };
        // With a key, on a server: one statement (docs/postgres.md, "One
        // round trip per write"); otherwise, or when it applies nothing,
        // the pipeline (with an id of its own).
        if let (Some(key), Some(digest)) = (m.idempotency_key.as_deref(), dg.as_deref()) {
            if self.store.writes_one_statement() {
                let run_id = new_run_id()?;
                let lease = m.lease.as_deref().map(super::guards::token_sha256);
                let one = OneRunWrite {
                    run_id: run_id.as_str(),
                    change: OneRunChange::Create {
                        session_id,
                        input: input.as_deref(),
                        metadata: metadata.as_deref().unwrap_or("{}"),
                    },
                    now_ms: self.now_ms(),
                    if_rev: m.if_rev,
                    event_type: EventType::RunCreated.as_str(),
                    detail: None,
                    data: None,
                    actor_type: self.opts.actor,
                    idempotency: (key, digest),
                    lease_sha256: lease.as_deref(),
                };
                let outcome = self.store.run_one(&one).map_err(|e| self.fill_path(e))?;
                return one_or(outcome, || self.create_run_pipeline(op, &input, &metadata));
            }
        }
        self.create_run_pipeline(op, &input, &metadata)
    }

    /// [`Ledger::create_run`] through the write pipeline.
    fn create_run_pipeline(
        &self,
        op: Op<'_>,
        input: &Option<String>,
        metadata: &Option<String>,
    ) -> Result<Written<Run>> {
        let session_id = op.id;
        self.mutate(
            op,
            |_| Ok(()),
            |w, ()| {
                let at = w.at();
                let mut attempt = 0;
                let run_id = loop {
                    let id = new_run_id()?;
                    let fresh = w.tx().insert_run(
                        id.as_str(),
                        session_id,
                        input.as_deref(),
                        metadata.as_deref().unwrap_or("{}"),
                        at,
                    )?;
                    match fresh {
                        true => break id,
                        // A random 64-bit id colliding is vanishingly rare.
                        false if attempt < 3 => attempt += 1,
                        false => {
                            return Err(Error::internal("four random run ids in a row were taken"))
                        }
                    }
                };
                w.update(SessionChange::default())?;
                let rid = Some(run_id.as_str());
                w.event(EventType::RunCreated.as_str(), None, None, rid)?;
                read_run(w.tx(), run_id.as_str())
            },
            &mut replay_run,
        )
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
    /// its session's usage (`run usage RUN`; the run model's
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
                "give at least one of input_tokens, output_tokens or api_calls",
            ));
        }
        let add = RunUsage {
            input_tokens: check_count("input_tokens", req.input_tokens.unwrap_or(0))?,
            output_tokens: check_count("output_tokens", req.output_tokens.unwrap_or(0))?,
            api_calls: check_count("api_calls", req.api_calls.unwrap_or(0))?,
        };
        self.run_transition(run_id, RunVerb::Usage, Args::Usage(add), m)
    }

    /// Counts one more turn of a running run (`run turn RUN`; the run model's
    /// `increment_turn`): event `run_turn` with the new `turn_count`.
    ///
    /// # Errors
    /// As [`Ledger::start_run`] (RUN_INVALID_TRANSITION: not running).
    pub fn increment_turn(&self, run_id: &str, m: &Mutation) -> Result<Written<Run>> {
        self.run_transition(run_id, RunVerb::Turn, Args::None, m)
    }

    /// running → completed with an optional output (a JSON object ≤ 4 MiB,
    /// redacted; the run model's `set_output`): event `run_completed`; sets
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
    /// the run model's `set_error`): event `run_failed` with the message as `detail`
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

    /// pending | running → cancelled (the run model's `cancel_run`): event
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

    /// One run (`run show RUN`; the run model's `SessionStore.get_run`).
    ///
    /// # Errors
    /// INVALID_ARGUMENT (malformed id), RUN_NOT_FOUND.
    pub fn get_run(&self, run_id: &str) -> Result<Run> {
        parse_run_id(run_id)?;
        self.read(|tx| {
            tx.find_run(run_id)?.ok_or_else(|| Error::RunNotFound {
                id: run_id.to_owned(),
            })
        })
        .map_err(|e| self.fill_path(e))
    }

    /// A session's runs in creation order, only those in `statuses` when it
    /// is not empty (`run list SESSION [--status S]...`; the run model's
    /// `list_runs(store, id, status: …)`).
    ///
    /// # Errors
    /// INVALID_ARGUMENT (malformed id), SESSION_NOT_FOUND.
    pub fn list_runs(&self, session_id: &str, statuses: &[RunStatus]) -> Result<Vec<Run>> {
        parse_session_id(session_id)?;
        self.read(|tx| {
            if !tx.session_exists(session_id)? {
                return Err(Error::SessionNotFound {
                    id: session_id.to_owned(),
                });
            }
            let mut runs = tx.select_runs(session_id)?;
            if !statuses.is_empty() {
                runs.retain(|r| statuses.contains(&r.status));
            }
            Ok(runs)
        })
        .map_err(|e| self.fill_path(e))
    }

    /// The session's running run, or `None` (`run active SESSION`; the
    /// the run model's `get_active_run`).
    ///
    /// # Errors
    /// INVALID_ARGUMENT (malformed id), SESSION_NOT_FOUND.
    pub fn active_run(&self, session_id: &str) -> Result<Option<Run>> {
        parse_session_id(session_id)?;
        self.read(|tx| {
            if !tx.session_exists(session_id)? {
                return Err(Error::SessionNotFound {
                    id: session_id.to_owned(),
                });
            }
            tx.find_running_run(session_id)
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
        // The session's `--if-rev` is checked after the run's own rules (a
        // run verb's refusals, in order: the session, its lease, the run,
        // the session's rev).
        let m_run = Mutation {
            if_rev: None,
            ..m.clone()
        };
        let pipeline = || {
            self.write(|tx| {
                let Some(run) = tx.find_run(run_id)? else {
                    return Err(Error::RunNotFound {
                        id: run_id.to_owned(),
                    });
                };
                let sid = run.session_id.clone();
                let op = Op {
                    id: &sid,
                    verb: Verb::ChangeRun,
                    m: &m_run,
                    digest: dg.as_deref(),
                };
                // The run again under the session's lock (a server locks
                // the row in `mutate_in`): the read above may predate a
                // writer that changed the run while this one waited.
                let locked = |tx: &mut dyn crate::store::Tx| {
                    tx.find_run(run_id)?.ok_or_else(|| Error::RunNotFound {
                        id: run_id.to_owned(),
                    })
                };
                let body = |w: &mut Write<'_, '_>, run: Run| {
                    change_run(
                        w,
                        &run,
                        verb,
                        &args,
                        detail.as_deref(),
                        data.as_deref(),
                        m.if_rev,
                    )
                };
                self.mutate_in(tx, op, locked, body, &mut replay_run)
            })
            .map_err(|e| self.fill_path(e))
        };
        // With a key, on a server: one statement (docs/postgres.md, "One
        // round trip per write"), which applies only where the pipeline
        // would apply exactly this; otherwise the pipeline.
        let (Some(key), Some(digest)) = (m.idempotency_key.as_deref(), dg.as_deref()) else {
            return pipeline();
        };
        if !self.store.writes_one_statement() {
            return pipeline();
        }
        let lease = m.lease.as_deref().map(super::guards::token_sha256);
        let one = OneRunWrite {
            run_id,
            change: OneRunChange::Change(change_of(verb, &args)?),
            now_ms: self.now_ms(),
            if_rev: m.if_rev,
            event_type: verb.event_type(),
            detail: detail.as_deref(),
            data: data.as_deref(),
            actor_type: self.opts.actor,
            idempotency: (key, digest),
            lease_sha256: lease.as_deref(),
        };
        let outcome = self.store.run_one(&one).map_err(|e| self.fill_path(e))?;
        one_or(outcome, pipeline)
    }
}
