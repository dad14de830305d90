//! The run tools (docs/design.md, "MCP"): one
//! [`ToolSpec`] per `logbook run …` verb, listed in [`super::tools::TOOLS`].
//!
//! Inputs mirror the CLI's flags (`run` → `run_id`, `session` →
//! `session_id`, `--input-tokens` → `input_tokens`, …); JSON-valued flags
//! take a JSON object directly. A mutation returns the whole run after the
//! change, as `logbook run … --json` prints it in `data`. Where the CLI's
//! `data` is not a JSON object, the tool wraps it in one, because MCP's
//! `structuredContent` is an object: `run_list` returns `{"runs": […]}`
//! (the CLI prints the array) and `run_active` returns `{"run": …}` (the
//! CLI prints the run or `null`).
//! Every mutation takes an `idempotency_key`; none takes `if_rev` or an
//! actor (the actor is `mcp`). Errors are the library's codes (docs/errors.md):
//! RUN_NOT_FOUND, RUN_INVALID_TRANSITION, SESSION_NOT_FOUND,
//! SESSION_INVALID_TRANSITION (terminal session), INVALID_ARGUMENT (an
//! amount outside 0..=2^53−1, a malformed id, caps), LEASE_HELD,
//! STORE_BUSY.
//!
//! Unlike a session, a run can be cancelled over MCP: ending one's own
//! execution is an agent's ordinary report, not an operator's override.

use super::args::{Args, Field, Kind};
use super::tools::{mutation, to_json, written, Reply, ToolSpec};
use crate::error::{Error, Result};
use crate::ledger::{CreateRun, Ledger, RunUsageDelta};
use crate::model::{Run, RunError, RunStatus};
use serde::Serialize;

/// The run statuses, in the model's order (the `status` filter's enum).
const RUN_STATUSES: &[&str] = &[
    "pending",
    "running",
    "completed",
    "failed",
    "cancelled",
    "timeout",
];

const RUN_ID: Field = Field::req("run_id", Kind::Text, "Run id: run_ + 16 hex");
const SESSION_ID: Field = Field::req("session_id", Kind::Text, "Session id: ses_ + 16 hex");
const RUN_KEY: Field = Field::opt(
    "idempotency_key",
    Kind::Text,
    "Up to 128 characters. A retry with the same key applies nothing again and returns the run; the same key with other arguments is INVALID_ARGUMENT",
);
const COUNT_DOC: &str = "An integer from 0 to 2^53-1 (9007199254740991) to add";

/// Errors every run verb on an existing run may return.
macro_rules! run_errors {
    () => {
        " Errors: INVALID_ARGUMENT, RUN_NOT_FOUND, RUN_INVALID_TRANSITION, \
         SESSION_INVALID_TRANSITION (the session has ended), LEASE_HELD, STORE_BUSY."
    };
}

/// `logbook_run_list`'s output: `{"runs": […]}`.
#[derive(Serialize)]
struct RunList {
    runs: Vec<Run>,
}

/// `logbook_run_active`'s output: `{"run": …}` (`null` when none runs).
#[derive(Serialize)]
struct ActiveRun {
    run: Option<Run>,
}

/// `logbook_run_create`.
pub const CREATE: ToolSpec = ToolSpec {
    name: "logbook_run_create",
    title: "Create a run",
    description: "Create a pending run in a live (pending, active or paused) session and \
        return it. Event run_created; the session's rev goes up by 1, as for every run change. \
        Errors: INVALID_ARGUMENT (input over 4 MiB, metadata over 256 KiB), SESSION_NOT_FOUND, \
        SESSION_INVALID_TRANSITION (the session has ended), LEASE_HELD, STORE_BUSY.",
    fields: &[
        SESSION_ID,
        Field::opt(
            "input",
            Kind::Object,
            "Input data: a JSON object, at most 4 MiB compact",
        ),
        Field::opt(
            "metadata",
            Kind::Object,
            "A JSON object, at most 256 KiB compact",
        ),
        RUN_KEY,
    ],
    read_only: false,
    run: create,
};

/// `logbook_run_start`.
pub const START: ToolSpec = ToolSpec {
    name: "logbook_run_start",
    title: "Start a run",
    description: concat!(
        "Start a pending run (pending -> running); a session has at most one running run \
         (RUN_INVALID_TRANSITION with details.running_run_id otherwise). Returns the run.",
        run_errors!()
    ),
    fields: &[RUN_ID, RUN_KEY],
    read_only: false,
    run: start,
};

/// `logbook_run_usage`.
pub const USAGE: ToolSpec = ToolSpec {
    name: "logbook_run_usage",
    title: "Record run usage",
    description: concat!(
        "Add token usage to a running run and to its session's usage; give at least one \
         amount. A run or session total that would pass 2^53-1 is INVALID_ARGUMENT. A budget \
         crossed by this write applies its policy. Returns the run.",
        run_errors!()
    ),
    fields: &[
        RUN_ID,
        Field::opt("input_tokens", Kind::Int, COUNT_DOC),
        Field::opt("output_tokens", Kind::Int, COUNT_DOC),
        Field::opt("api_calls", Kind::Int, COUNT_DOC),
        RUN_KEY,
    ],
    read_only: false,
    run: usage,
};

/// `logbook_run_turn`.
pub const TURN: ToolSpec = ToolSpec {
    name: "logbook_run_turn",
    title: "Count a run turn",
    description: concat!(
        "Count one more turn of a running run (event run_turn with the new turn_count). \
         Returns the run.",
        run_errors!()
    ),
    fields: &[RUN_ID, RUN_KEY],
    read_only: false,
    run: turn,
};

/// `logbook_run_complete`.
pub const COMPLETE: ToolSpec = ToolSpec {
    name: "logbook_run_complete",
    title: "Complete a run",
    description: concat!(
        "Complete a running run (terminal), optionally with an output. Returns the run.",
        run_errors!()
    ),
    fields: &[
        RUN_ID,
        Field::opt(
            "output",
            Kind::Object,
            "Output data: a JSON object, at most 4 MiB compact",
        ),
        RUN_KEY,
    ],
    read_only: false,
    run: complete,
};

/// `logbook_run_fail`.
pub const FAIL: ToolSpec = ToolSpec {
    name: "logbook_run_fail",
    title: "Fail a run",
    description: concat!(
        "Fail a pending or running run (terminal) with an error code and message. Returns \
         the run.",
        run_errors!()
    ),
    fields: &[
        RUN_ID,
        Field::req(
            "code",
            Kind::Text,
            "Error code, 1-128 characters, one line, e.g. provider_timeout",
        ),
        Field::req("message", Kind::Text, "Error message, 1-4096 characters"),
        RUN_KEY,
    ],
    read_only: false,
    run: fail,
};

/// `logbook_run_cancel`.
pub const CANCEL: ToolSpec = ToolSpec {
    name: "logbook_run_cancel",
    title: "Cancel a run",
    description: concat!(
        "Cancel a pending or running run (terminal). Returns the run.",
        run_errors!()
    ),
    fields: &[RUN_ID, RUN_KEY],
    read_only: false,
    run: cancel,
};

/// `logbook_run_timeout`.
pub const TIMEOUT: ToolSpec = ToolSpec {
    name: "logbook_run_timeout",
    title: "Time out a run",
    description: concat!(
        "Mark a pending or running run as timed out (terminal). Returns the run.",
        run_errors!()
    ),
    fields: &[RUN_ID, RUN_KEY],
    read_only: false,
    run: timeout,
};

/// `logbook_run_show`.
pub const SHOW: ToolSpec = ToolSpec {
    name: "logbook_run_show",
    title: "Show a run",
    description: "Return one run. Errors: INVALID_ARGUMENT, RUN_NOT_FOUND.",
    fields: &[RUN_ID],
    read_only: true,
    run: show,
};

/// `logbook_run_list`.
pub const LIST: ToolSpec = ToolSpec {
    name: "logbook_run_list",
    title: "List a session's runs",
    description: "Return {runs}: the session's runs in creation order, only those in \
        `status` when given. Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND.",
    fields: &[
        SESSION_ID,
        Field::opt(
            "status",
            Kind::EnumList(RUN_STATUSES),
            "Any of these statuses",
        ),
    ],
    read_only: true,
    run: list,
};

/// `logbook_run_active`.
pub const ACTIVE: ToolSpec = ToolSpec {
    name: "logbook_run_active",
    title: "The running run",
    description: "Return {run}: the session's running run, or null when none is running. \
        Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND.",
    fields: &[SESSION_ID],
    read_only: true,
    run: active,
};

fn create(l: &Ledger, a: &Args) -> Result<Reply> {
    let req = CreateRun {
        input: a.object("input"),
        metadata: a.object("metadata"),
    };
    written(&l.create_run(&a.required_text("session_id")?, req, &mutation(a))?)
}

fn start(l: &Ledger, a: &Args) -> Result<Reply> {
    written(&l.start_run(&a.required_text("run_id")?, &mutation(a))?)
}

fn usage(l: &Ledger, a: &Args) -> Result<Reply> {
    let req = RunUsageDelta {
        input_tokens: a.int("input_tokens"),
        output_tokens: a.int("output_tokens"),
        api_calls: a.int("api_calls"),
    };
    written(&l.record_run_usage(&a.required_text("run_id")?, req, &mutation(a))?)
}

fn turn(l: &Ledger, a: &Args) -> Result<Reply> {
    written(&l.increment_turn(&a.required_text("run_id")?, &mutation(a))?)
}

fn complete(l: &Ledger, a: &Args) -> Result<Reply> {
    let run = l.complete_run(
        &a.required_text("run_id")?,
        a.object("output"),
        &mutation(a),
    )?;
    written(&run)
}

fn fail(l: &Ledger, a: &Args) -> Result<Reply> {
    let e = RunError {
        code: a.required_text("code")?,
        message: a.required_text("message")?,
    };
    written(&l.fail_run(&a.required_text("run_id")?, e, &mutation(a))?)
}

fn cancel(l: &Ledger, a: &Args) -> Result<Reply> {
    written(&l.cancel_run(&a.required_text("run_id")?, &mutation(a))?)
}

fn timeout(l: &Ledger, a: &Args) -> Result<Reply> {
    written(&l.timeout_run(&a.required_text("run_id")?, &mutation(a))?)
}

fn show(l: &Ledger, a: &Args) -> Result<Reply> {
    to_json(&l.get_run(&a.required_text("run_id")?)?)
}

fn list(l: &Ledger, a: &Args) -> Result<Reply> {
    let statuses = a
        .list("status")
        .iter()
        .map(|s| {
            s.parse::<RunStatus>()
                .map_err(|_| Error::invalid("status", "not a run status"))
        })
        .collect::<Result<Vec<_>>>()?;
    let runs = l.list_runs(&a.required_text("session_id")?, &statuses)?;
    to_json(&RunList { runs })
}

fn active(l: &Ledger, a: &Args) -> Result<Reply> {
    let run = l.active_run(&a.required_text("session_id")?)?;
    to_json(&ActiveRun { run })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_enum_matches_the_model() {
        let model: Vec<&str> = RunStatus::VARIANTS.iter().map(|s| s.as_str()).collect();
        assert_eq!(RUN_STATUSES, model.as_slice());
    }

    #[test]
    fn mutations_take_a_key_and_reads_do_not() {
        for t in [
            CREATE, START, USAGE, TURN, COMPLETE, FAIL, CANCEL, TIMEOUT, SHOW, LIST, ACTIVE,
        ] {
            let keyed = t.fields.iter().any(|f| f.name == "idempotency_key");
            assert_eq!(keyed, !t.read_only, "{}", t.name);
        }
    }
}
