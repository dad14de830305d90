//! `logbook_ledger._native`: the Python binding of the logbook library
//! (docs/python.md; docs/design.md, "From Python").
//!
//! A thin layer, as the CLI is: each method turns its keyword arguments
//! into the library's request, calls the library with the GIL released,
//! and turns the answer into Python values through serde (the JSON shapes
//! of the CLI's `--json` `data`, loaded with Python's `json`). Errors
//! become `LogbookError` subclasses made from the library's code table
//! ([`ErrorCode::TABLE`]). Behaviour stays in the library.

use logbook::ledger::{resolve_path, PurgeFilter, PurgeRequest};
use logbook::{
    AppendEvent, CheckpointRequest, CreateSession, Error, ErrorBody, ErrorCode, FeedQuery,
    ForkRequest, Ledger as Inner, LedgerOptions, ListSessions, Mutation, SessionStatus, Written,
};
use logbook::{
    CreateRun, GateKind, LockRequest, OnExceed, RecordUsage, RunError, RunStatus, RunUsageDelta,
    SetBudget,
};
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyString, PyTuple, PyType};
use serde::Serialize;
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

pyo3::create_exception!(
    logbook_ledger,
    LogbookError,
    PyException,
    "A logbook error: `.code` (the stable code of docs/errors.md), `.retryable`, `.details` \
     (the error's details object as a dict) and `.message`."
);

/// The exception class of each code, made once from the code table.
static CLASSES: PyOnceLock<Vec<(ErrorCode, Py<PyType>)>> = PyOnceLock::new();

/// `SESSION_NOT_FOUND` → `SessionNotFound`.
fn class_name(wire: &str) -> String {
    wire.split('_')
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f
                    .to_uppercase()
                    .chain(c.flat_map(char::to_lowercase))
                    .collect(),
                None => String::new(),
            }
        })
        .collect()
}

fn classes(py: Python<'_>) -> PyResult<&Vec<(ErrorCode, Py<PyType>)>> {
    CLASSES.get_or_try_init(py, || {
        let base = py.get_type::<LogbookError>();
        ErrorCode::TABLE
            .iter()
            .map(|(code, info)| {
                let name = cstring(format!("logbook_ledger.{}", class_name(info.wire)))?;
                let doc = cstring(format!("{}: {}", info.wire, info.description))?;
                let ty = PyErr::new_type(py, &name, Some(&doc), Some(&base), None)?;
                Ok((*code, ty))
            })
            .collect()
    })
}

fn cstring(s: String) -> PyResult<CString> {
    CString::new(s).map_err(|e| PyException::new_err(e.to_string()))
}

/// The Python exception of a library error: its code's class, with
/// `.code`, `.message`, `.retryable` and `.details` as the CLI's error
/// envelope carries them.
fn to_py_err(py: Python<'_>, e: &Error) -> PyErr {
    match error_value(py, e) {
        Ok(err) => err,
        Err(err) => err,
    }
}

fn error_value(py: Python<'_>, e: &Error) -> PyResult<PyErr> {
    let body = ErrorBody::from(e);
    let details = from_json(py, &body.details)?;
    let code = e.code();
    let ty = classes(py)?.iter().find(|(c, _)| *c == code).map_or_else(
        || py.get_type::<LogbookError>(),
        |(_, t)| t.bind(py).clone(),
    );
    let inst = ty.call1((body.message.as_ref(),))?;
    inst.setattr("code", code.as_str())?;
    inst.setattr("message", body.message.as_ref())?;
    inst.setattr("retryable", body.retryable)?;
    inst.setattr("details", details)?;
    Ok(PyErr::from_value(inst))
}

/// `create_session`'s `checkpoint` dict as a request: the keys are
/// `checkpoint`'s keyword arguments; any other is INVALID_ARGUMENT.
fn first_checkpoint(py: Python<'_>, d: &Bound<'_, PyDict>) -> PyResult<CheckpointRequest> {
    let mut req = CheckpointRequest::default();
    for (k, v) in d.iter() {
        let key: String = k
            .extract()
            .map_err(|_| invalid(py, "checkpoint", "its keys must be strings"))?;
        let text = |v: &Bound<'_, PyAny>| -> PyResult<Option<String>> {
            if v.is_none() {
                return Ok(None);
            }
            v.extract()
                .map(Some)
                .map_err(|_| invalid(py, &key, "must be a string"))
        };
        match key.as_str() {
            "step" => req.step = text(&v)?,
            "note" => req.note = text(&v)?,
            "plan" => req.plan_ids = strings(py, "plan", Some(&v))?,
            "operation" => req.operation_ids = strings(py, "operation", Some(&v))?,
            "deployment" => req.deployment_ids = strings(py, "deployment", Some(&v))?,
            "state" => req.state = to_json(py, "state", Some(&v))?,
            _ => {
                return Err(invalid(
                    py,
                    "checkpoint",
                    format!(
                        "unknown key `{key}`: expected step, note, plan, operation, deployment \
                         or state"
                    ),
                ))
            }
        }
    }
    Ok(req)
}

/// INVALID_ARGUMENT naming `field`, as a Python exception.
fn invalid(py: Python<'_>, field: &str, reason: impl Into<String>) -> PyErr {
    to_py_err(py, &Error::invalid(field, reason))
}

static JSON: PyOnceLock<(Py<PyAny>, Py<PyAny>)> = PyOnceLock::new();

/// Python's `json.loads` and `json.dumps`.
fn json(py: Python<'_>) -> PyResult<&(Py<PyAny>, Py<PyAny>)> {
    JSON.get_or_try_init(py, || {
        let m = py.import("json")?;
        Ok((m.getattr("loads")?.unbind(), m.getattr("dumps")?.unbind()))
    })
}

/// A serde value as Python values (through its JSON text).
fn from_json<T: Serialize + ?Sized>(py: Python<'_>, v: &T) -> PyResult<Py<PyAny>> {
    let text = serde_json::to_string(v)
        .map_err(|e| to_py_err(py, &Error::internal(format!("cannot serialize: {e}"))))?;
    loads(py, &text)
}

fn loads(py: Python<'_>, text: &str) -> PyResult<Py<PyAny>> {
    Ok(json(py)?.0.bind(py).call1((text,))?.unbind())
}

/// A Python value given for a JSON flag (`context`, `metadata`, `state`,
/// `data`) as a JSON value; INVALID_ARGUMENT naming `field` when Python's
/// `json` cannot encode it. The library checks that it is an object and
/// its size.
fn to_json(
    py: Python<'_>,
    field: &str,
    v: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<serde_json::Value>> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    let text = json(py)?
        .1
        .bind(py)
        .call((v,), Some(&[("allow_nan", false)].into_py_dict(py)?))
        .map_err(|e| invalid(py, field, format!("cannot be encoded as JSON: {e}")))?;
    let text: String = text.extract()?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| invalid(py, field, format!("is not JSON: {e}")))
}

use pyo3::types::IntoPyDict;

/// A keyword that takes one string or a sequence of them (a CLI flag that
/// can be repeated: `tag`, `plan`, `status`, …).
fn strings(py: Python<'_>, field: &str, v: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(Vec::new());
    };
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(vec![s.to_string()]);
    }
    v.extract::<Vec<String>>()
        .map_err(|_| invalid(py, field, "expected a string or a sequence of strings"))
}

fn statuses(py: Python<'_>, v: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<SessionStatus>> {
    strings(py, "status", v)?
        .iter()
        .map(|s| {
            s.parse::<SessionStatus>()
                .map_err(|e| invalid(py, "status", e))
        })
        .collect()
}

/// A time keyword: ms since the epoch (an int) or text as the CLI takes it
/// (RFC 3339 with offset, or epoch ms).
fn time(py: Python<'_>, field: &str, v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<i64>> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    if let Ok(ms) = v.extract::<i64>() {
        return Ok(Some(ms));
    }
    let text: String = v
        .extract()
        .map_err(|_| invalid(py, field, "expected epoch ms (an int) or an RFC 3339 time"))?;
    logbook::clock::parse_time(field, &text)
        .map(Some)
        .map_err(|e| to_py_err(py, &e))
}

fn mutation(
    if_rev: Option<i64>,
    idempotency_key: Option<String>,
    lease: Option<String>,
) -> Mutation {
    Mutation {
        if_rev,
        idempotency_key,
        lease,
    }
}

/// Parses a keyword's value with the library's own names (`GateKind`,
/// `OnExceed`, `RunStatus`); INVALID_ARGUMENT naming `field`.
fn parse<T: std::str::FromStr<Err = String>>(py: Python<'_>, field: &str, v: &str) -> PyResult<T> {
    v.parse::<T>().map_err(|e| invalid(py, field, e))
}

/// A handle on one logbook database (docs/design.md, "Library" and "From Python").
///
/// `Ledger(db=None, *, busy_timeout_ms=None, read_only=False)` resolves
/// `db` exactly as the CLI's `--db` does: a SQLite file's path, a
/// `postgres://` URL, or (None) `$LOGBOOK_DB`, else
/// `$XDG_DATA_HOME/logbook/logbook.db`, else
/// `~/.local/share/logbook/logbook.db`. `LOGBOOK_BUSY_TIMEOUT_MS` and
/// `LOGBOOK_SYNC` apply as for the CLI; `busy_timeout_ms` overrides the
/// former. `read_only=True` is the CLI's `--read-only`.
///
/// Every method releases the GIL while it touches the database; one
/// `Ledger` may be shared between threads (its calls run one at a time).
/// Mutations return the session (a dict, the CLI's `--json` `data`) as a
/// `Written` dict whose `.replayed` is `None`, or `{"rev", "seq"}` for an
/// idempotent replay. Errors raise `LogbookError` subclasses.
#[pyclass(module = "logbook_ledger._native", frozen)]
struct Ledger {
    inner: Mutex<Option<Inner>>,
    location: String,
}

fn lock(m: &Mutex<Option<Inner>>) -> MutexGuard<'_, Option<Inner>> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Ledger {
    /// Runs `f` on the library handle with the GIL released, and returns
    /// its value as Python values.
    fn call<T, F>(&self, py: Python<'_>, f: F) -> PyResult<Py<PyAny>>
    where
        T: Serialize + Send,
        F: FnOnce(&Inner) -> logbook::Result<T> + Send,
    {
        let out = py.detach(|| {
            let guard = lock(&self.inner);
            match guard.as_ref() {
                Some(l) => f(l),
                None => Err(Error::invalid("ledger", "this Ledger was closed")),
            }
        });
        match out {
            Ok(v) => from_json(py, &v),
            Err(e) => Err(to_py_err(py, &e)),
        }
    }

    /// As [`Ledger::call`] for a mutation: a `Written` dict with its
    /// `.replayed`.
    fn write<T, F>(&self, py: Python<'_>, f: F) -> PyResult<Py<PyAny>>
    where
        T: Serialize + Send,
        F: FnOnce(&Inner) -> logbook::Result<Written<T>> + Send,
    {
        let out = py.detach(|| {
            let guard = lock(&self.inner);
            match guard.as_ref() {
                Some(l) => f(l),
                None => Err(Error::invalid("ledger", "this Ledger was closed")),
            }
        });
        let w = out.map_err(|e| to_py_err(py, &e))?;
        let data = from_json(py, &w.value)?;
        let replayed = match w.replayed {
            Some(r) => from_json(py, &r)?,
            None => py.None(),
        };
        let cls = py.import("logbook_ledger._written")?.getattr("Written")?;
        Ok(cls.call1((data, replayed))?.unbind())
    }
}

#[pymethods]
impl Ledger {
    #[new]
    #[pyo3(signature = (db=None, *, busy_timeout_ms=None, read_only=false))]
    fn new(
        py: Python<'_>,
        db: Option<PathBuf>,
        busy_timeout_ms: Option<u64>,
        read_only: bool,
    ) -> PyResult<Self> {
        let opened = py.detach(|| -> logbook::Result<Inner> {
            let mut opts = LedgerOptions::from_env()?;
            opts.path = Some(resolve_path(db.as_deref())?);
            if let Some(ms) = busy_timeout_ms {
                opts.busy_timeout_ms =
                    logbook::ledger::parse_timeout("busy_timeout_ms", &ms.to_string())?;
            }
            if read_only {
                Inner::open_read_only(opts)
            } else {
                Inner::open(opts)
            }
        });
        let inner = opened.map_err(|e| to_py_err(py, &e))?;
        let location = inner.path().to_string_lossy().into_owned();
        Ok(Ledger {
            inner: Mutex::new(Some(inner)),
            location,
        })
    }

    /// The database this handle uses: a file's path, or a server's URL
    /// without its password.
    #[getter]
    fn path(&self) -> String {
        self.location.clone()
    }

    fn __repr__(&self) -> String {
        format!("Ledger({:?})", self.location)
    }

    /// Closes the handle (its connection); later calls raise
    /// InvalidArgument. Closing twice is allowed.
    fn close(&self, py: Python<'_>) {
        let inner = py.detach(|| lock(&self.inner).take());
        py.detach(move || drop(inner));
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> bool {
        self.close(py);
        false
    }

    /// Creates a session (`logbook session create`): active, or pending
    /// with `pending=True`. Returns the session at rev 1 — or, given
    /// `checkpoint` (a dict of `checkpoint`'s keywords: `step`, `note`,
    /// `plan`, `operation`, `deployment`, `state`), at rev 2 with that
    /// first checkpoint recorded in the same transaction (one commit).
    #[pyo3(signature = (title, *, app=None, goal=None, agent=None, parent=None, route=None,
        stage=None, tag=None, context=None, metadata=None, pending=false, idempotency_key=None,
        checkpoint=None))]
    #[allow(clippy::too_many_arguments)]
    fn create_session(
        &self,
        py: Python<'_>,
        title: String,
        app: Option<String>,
        goal: Option<String>,
        agent: Option<String>,
        parent: Option<String>,
        route: Option<String>,
        stage: Option<String>,
        tag: Option<&Bound<'_, PyAny>>,
        context: Option<&Bound<'_, PyAny>>,
        metadata: Option<&Bound<'_, PyAny>>,
        pending: bool,
        idempotency_key: Option<String>,
        checkpoint: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        let checkpoint = checkpoint.map(|d| first_checkpoint(py, d)).transpose()?;
        let req = CreateSession {
            title,
            goal,
            app,
            agent_id: agent,
            route,
            stage,
            parent_session_id: parent,
            tags: strings(py, "tag", tag)?,
            context: to_json(py, "context", context)?,
            metadata: to_json(py, "metadata", metadata)?,
            pending,
            idempotency_key,
            checkpoint,
        };
        self.write(py, |l| l.create_session(req))
    }

    /// Starts a pending session (pending → active; event `started`).
    #[pyo3(signature = (id, *, reason=None, if_rev=None, idempotency_key=None, lease=None))]
    fn start(
        &self,
        py: Python<'_>,
        id: String,
        reason: Option<String>,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let m = mutation(if_rev, idempotency_key, lease);
        self.write(py, |l| l.start(&id, reason, &m))
    }

    /// Pauses an active session (active → paused; event `paused`).
    #[pyo3(signature = (id, *, reason=None, if_rev=None, idempotency_key=None, lease=None))]
    fn pause(
        &self,
        py: Python<'_>,
        id: String,
        reason: Option<String>,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let m = mutation(if_rev, idempotency_key, lease);
        self.write(py, |l| l.pause(&id, reason, &m))
    }

    /// Resumes a paused session (paused → active; event `resumed`).
    #[pyo3(signature = (id, *, reason=None, if_rev=None, idempotency_key=None, lease=None))]
    fn resume(
        &self,
        py: Python<'_>,
        id: String,
        reason: Option<String>,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let m = mutation(if_rev, idempotency_key, lease);
        self.write(py, |l| l.resume(&id, reason, &m))
    }

    /// Records a checkpoint on an active session (`session checkpoint`):
    /// a step, a note, linked references (`plan`, `operation`,
    /// `deployment`: a string or a list) and a snapshot (`state`, a dict).
    #[pyo3(signature = (id, *, step=None, note=None, plan=None, operation=None, deployment=None,
        state=None, if_rev=None, idempotency_key=None, lease=None))]
    #[allow(clippy::too_many_arguments)]
    fn checkpoint(
        &self,
        py: Python<'_>,
        id: String,
        step: Option<String>,
        note: Option<String>,
        plan: Option<&Bound<'_, PyAny>>,
        operation: Option<&Bound<'_, PyAny>>,
        deployment: Option<&Bound<'_, PyAny>>,
        state: Option<&Bound<'_, PyAny>>,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let req = CheckpointRequest {
            step,
            note,
            plan_ids: strings(py, "plan", plan)?,
            operation_ids: strings(py, "operation", operation)?,
            deployment_ids: strings(py, "deployment", deployment)?,
            state: to_json(py, "state", state)?,
        };
        let m = mutation(if_rev, idempotency_key, lease);
        self.write(py, |l| l.checkpoint(&id, req, &m))
    }

    /// Completes an active session with a result (event `completed`).
    #[pyo3(signature = (id, *, result, if_rev=None, idempotency_key=None, lease=None))]
    fn complete(
        &self,
        py: Python<'_>,
        id: String,
        result: String,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let m = mutation(if_rev, idempotency_key, lease);
        self.write(py, |l| l.complete(&id, &result, &m))
    }

    /// Fails a session (pending, active or paused) with a reason.
    #[pyo3(signature = (id, *, reason, if_rev=None, idempotency_key=None, lease=None))]
    fn fail(
        &self,
        py: Python<'_>,
        id: String,
        reason: String,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let m = mutation(if_rev, idempotency_key, lease);
        self.write(py, |l| l.fail(&id, &reason, &m))
    }

    /// Cancels a session (pending, active or paused) with a reason.
    #[pyo3(signature = (id, *, reason, if_rev=None, idempotency_key=None, lease=None))]
    fn cancel(
        &self,
        py: Python<'_>,
        id: String,
        reason: String,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let m = mutation(if_rev, idempotency_key, lease);
        self.write(py, |l| l.cancel(&id, &reason, &m))
    }

    /// Appends an agent's own event (`type` = `x.NAME`) to a live session.
    #[pyo3(signature = (id, *, r#type, detail=None, data=None, if_rev=None, idempotency_key=None,
        lease=None))]
    #[allow(clippy::too_many_arguments)]
    fn append_event(
        &self,
        py: Python<'_>,
        id: String,
        r#type: String,
        detail: Option<String>,
        data: Option<&Bound<'_, PyAny>>,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let req = AppendEvent {
            event_type: r#type,
            detail,
            data: to_json(py, "data", data)?,
        };
        let m = mutation(if_rev, idempotency_key, lease);
        self.write(py, |l| l.append_event(&id, req, &m))
    }

    /// A session with all its events (`session show`).
    fn show_session(&self, py: Python<'_>, id: String) -> PyResult<Py<PyAny>> {
        self.call(py, |l| l.show_session(&id))
    }

    /// A page of sessions, newest created first (`session list`); pass the
    /// page's `next_cursor` as `cursor` to go on.
    #[pyo3(signature = (*, status=None, app=None, agent=None, tag=None, parent=None, since=None,
        until=None, order="created", limit=None, cursor=None))]
    #[allow(clippy::too_many_arguments)]
    fn list_sessions(
        &self,
        py: Python<'_>,
        status: Option<&Bound<'_, PyAny>>,
        app: Option<String>,
        agent: Option<String>,
        tag: Option<String>,
        parent: Option<String>,
        since: Option<&Bound<'_, PyAny>>,
        until: Option<&Bound<'_, PyAny>>,
        order: &str,
        limit: Option<i64>,
        cursor: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let order_updated = match order {
            "created" => false,
            "updated" => true,
            _ => return Err(invalid(py, "order", "expected `created` or `updated`")),
        };
        let req = ListSessions {
            statuses: statuses(py, status)?,
            app,
            agent_id: agent,
            tag,
            parent,
            since_ms: time(py, "since", since)?,
            until_ms: time(py, "until", until)?,
            order_updated,
            limit,
            cursor,
        };
        self.call(py, |l| l.list_sessions(&req))
    }

    /// A page of one session's events in seq order (`session events`);
    /// pass `next_after_seq` as `after_seq` to go on.
    #[pyo3(signature = (id, *, after_seq=None, limit=None))]
    fn session_events(
        &self,
        py: Python<'_>,
        id: String,
        after_seq: Option<i64>,
        limit: Option<i64>,
    ) -> PyResult<Py<PyAny>> {
        self.call(py, |l| l.session_events(&id, after_seq, limit))
    }

    /// A page of the global event feed (`logbook events`): pass the page's
    /// `next_cursor` as `after` to go on; `session` and `type` filter (a
    /// string or a list); `from_now=True` starts after the newest event
    /// (`events --from-now`: an empty page whose cursor a follower keeps).
    #[pyo3(signature = (*, after=None, session=None, r#type=None, limit=None, from_now=false))]
    fn feed(
        &self,
        py: Python<'_>,
        after: Option<String>,
        session: Option<&Bound<'_, PyAny>>,
        r#type: Option<&Bound<'_, PyAny>>,
        limit: Option<i64>,
        from_now: bool,
    ) -> PyResult<Py<PyAny>> {
        let q = FeedQuery {
            after,
            sessions: strings(py, "session", session)?,
            types: strings(py, "type", r#type)?,
            limit,
            from_now,
        };
        self.call(py, |l| l.feed(&q))
    }

    /// Recomputes the event hash chains (`logbook verify`) of the given
    /// sessions, or of every session; raises LedgerTampered at the first
    /// break.
    #[pyo3(signature = (ids=None))]
    fn verify(&self, py: Python<'_>, ids: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        let ids = strings(py, "ids", ids)?;
        self.call(py, |l| l.verify(&ids))
    }

    /// A session's checkpoint snapshots (`session checkpoints`).
    fn checkpoints(&self, py: Python<'_>, id: String) -> PyResult<Py<PyAny>> {
        self.call(py, |l| l.list_snapshots(&id))
    }

    /// One checkpoint snapshot with its state: the one at seq
    /// `checkpoint`, or the newest.
    #[pyo3(signature = (id, *, checkpoint=None))]
    fn snapshot(&self, py: Python<'_>, id: String, checkpoint: Option<i64>) -> PyResult<Py<PyAny>> {
        self.call(py, |l| l.snapshot(&id, checkpoint))
    }

    /// Restores a session's context and stage from the snapshot at seq
    /// `checkpoint` (`session restore`; event `checkpoint_restored`).
    #[pyo3(signature = (id, *, checkpoint, if_rev=None, idempotency_key=None, lease=None))]
    fn restore(
        &self,
        py: Python<'_>,
        id: String,
        checkpoint: i64,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let m = mutation(if_rev, idempotency_key, lease);
        self.write(py, |l| l.restore(&id, checkpoint, &m))
    }

    /// Forks a child session from a snapshot (`session fork`; default: the
    /// newest). Returns the child.
    #[pyo3(signature = (id, *, checkpoint=None, title=None, if_rev=None, idempotency_key=None,
        lease=None))]
    #[allow(clippy::too_many_arguments)]
    fn fork(
        &self,
        py: Python<'_>,
        id: String,
        checkpoint: Option<i64>,
        title: Option<String>,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let req = ForkRequest { checkpoint, title };
        let m = mutation(if_rev, idempotency_key, lease);
        self.write(py, |l| l.fork(&id, &req, &m))
    }

    /// Purges ended sessions for good, leaving tombstones and a purge
    /// record (`logbook purge --yes`; README "Retention"). With
    /// `dry_run=True`, returns the plan and changes nothing.
    #[pyo3(signature = (*, ended_before=None, app=None, status=None, keep_last=None, session=None,
        export=None, dry_run=false))]
    #[allow(clippy::too_many_arguments)]
    fn purge(
        &self,
        py: Python<'_>,
        ended_before: Option<&Bound<'_, PyAny>>,
        app: Option<String>,
        status: Option<&Bound<'_, PyAny>>,
        keep_last: Option<u64>,
        session: Option<&Bound<'_, PyAny>>,
        export: Option<PathBuf>,
        dry_run: bool,
    ) -> PyResult<Py<PyAny>> {
        let req = PurgeRequest {
            filter: PurgeFilter {
                ended_before_ms: time(py, "ended_before", ended_before)?,
                app,
                statuses: statuses(py, status)?,
                keep_last,
                sessions: strings(py, "session", session)?,
            },
            export,
        };
        req.check(dry_run).map_err(|e| to_py_err(py, &e))?;
        if dry_run {
            self.call(py, |l| l.purge_dry_run(&req))
        } else {
            self.call(py, |l| l.purge(&req, &mut |_, _| {}))
        }
    }

    // Runs, usage, budgets, gates and leases (`logbook run …`, `session
    // usage|budget|gate|lock|unlock`).

    /// Adds usage to a live session (`session usage`); a budget crossed by
    /// this write applies its policy.
    #[pyo3(signature = (id, *, input_tokens=None, output_tokens=None, api_calls=None,
        duration_ms=None, if_rev=None, idempotency_key=None, lease=None))]
    #[allow(clippy::too_many_arguments)]
    fn usage(
        &self,
        py: Python<'_>,
        id: String,
        input_tokens: Option<i64>,
        output_tokens: Option<i64>,
        api_calls: Option<i64>,
        duration_ms: Option<i64>,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let req = RecordUsage {
            input_tokens,
            output_tokens,
            api_calls,
            duration_ms,
        };
        let m = mutation(if_rev, idempotency_key, lease);
        self.write(py, |l| l.record_usage(&id, req, &m))
    }

    /// A session's budget (`session budget`): with limits or `on_exceed`
    /// sets them; with `reset=True` counts from now; else reads it.
    #[pyo3(signature = (id, *, max_tokens=None, max_api_calls=None, max_duration_ms=None,
        on_exceed=None, reset=false, if_rev=None, idempotency_key=None, lease=None))]
    #[allow(clippy::too_many_arguments)]
    fn budget(
        &self,
        py: Python<'_>,
        id: String,
        max_tokens: Option<i64>,
        max_api_calls: Option<i64>,
        max_duration_ms: Option<i64>,
        on_exceed: Option<String>,
        reset: bool,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let on_exceed = on_exceed
            .map(|v| parse::<OnExceed>(py, "on_exceed", &v))
            .transpose()?;
        let m = mutation(if_rev, idempotency_key, lease);
        let set = max_tokens.is_some()
            || max_api_calls.is_some()
            || max_duration_ms.is_some()
            || on_exceed.is_some();
        if set && reset {
            return Err(invalid(
                py,
                "reset",
                "give either limits or reset=True, not both",
            ));
        }
        if reset {
            return self.write(py, |l| l.reset_budget(&id, &m));
        }
        if !set {
            return self.call(py, |l| l.check_budget(&id));
        }
        let req = SetBudget {
            max_tokens,
            max_api_calls,
            max_duration_ms,
            on_exceed,
        };
        self.write(py, |l| l.set_budget(&id, req, &m))
    }

    /// Opens a gate on an active session (`session gate open`; `kind`:
    /// `auto`, `user-approval` or `step-confirm`).
    #[pyo3(signature = (id, *, gate, kind, if_rev=None, idempotency_key=None, lease=None))]
    #[allow(clippy::too_many_arguments)]
    fn open_gate(
        &self,
        py: Python<'_>,
        id: String,
        gate: String,
        kind: String,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let kind = parse::<GateKind>(py, "kind", &kind)?;
        let m = mutation(if_rev, idempotency_key, lease);
        self.write(py, |l| l.open_gate(&id, &gate, kind, &m))
    }

    /// Approves a pending gate (`session gate approve`).
    #[pyo3(signature = (id, *, gate, note=None, if_rev=None, idempotency_key=None, lease=None))]
    #[allow(clippy::too_many_arguments)]
    fn approve_gate(
        &self,
        py: Python<'_>,
        id: String,
        gate: String,
        note: Option<String>,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let m = mutation(if_rev, idempotency_key, lease);
        self.write(py, |l| l.approve_gate(&id, &gate, note, &m))
    }

    /// Rejects a pending gate (`session gate reject`): the session fails,
    /// or is cancelled with `abort=True`.
    #[pyo3(signature = (id, *, gate, reason, abort=false, if_rev=None, idempotency_key=None,
        lease=None))]
    #[allow(clippy::too_many_arguments)]
    fn reject_gate(
        &self,
        py: Python<'_>,
        id: String,
        gate: String,
        reason: String,
        abort: bool,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let m = mutation(if_rev, idempotency_key, lease);
        self.write(py, |l| l.reject_gate(&id, &gate, &reason, abort, &m))
    }

    /// A session's gates (`session gate list`).
    fn gates(&self, py: Python<'_>, id: String) -> PyResult<Py<PyAny>> {
        self.call(py, |l| l.list_gates(&id))
    }

    /// Takes (or with `lease`, renews) a session's lease (`session lock`);
    /// the owner is this process unless `owner_pid` says otherwise.
    #[pyo3(signature = (id, *, ttl_ms=None, owner_pid=None, if_rev=None, lease=None))]
    fn lock(
        &self,
        py: Python<'_>,
        id: String,
        ttl_ms: Option<i64>,
        owner_pid: Option<u32>,
        if_rev: Option<i64>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let req = LockRequest { ttl_ms, owner_pid };
        let m = mutation(if_rev, None, lease);
        self.call(py, |l| l.lock(&id, &req, &m))
    }

    /// Releases a session's lease (`session unlock`).
    #[pyo3(signature = (id, *, lease, if_rev=None, idempotency_key=None))]
    fn unlock(
        &self,
        py: Python<'_>,
        id: String,
        lease: String,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let m = mutation(if_rev, idempotency_key, None);
        self.write(py, |l| l.unlock(&id, &lease, &m))
    }

    /// Creates a pending run of a session (`run create`).
    #[pyo3(signature = (session, *, input=None, metadata=None, if_rev=None, idempotency_key=None,
        lease=None))]
    #[allow(clippy::too_many_arguments)]
    fn create_run(
        &self,
        py: Python<'_>,
        session: String,
        input: Option<&Bound<'_, PyAny>>,
        metadata: Option<&Bound<'_, PyAny>>,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let req = CreateRun {
            input: to_json(py, "input", input)?,
            metadata: to_json(py, "metadata", metadata)?,
        };
        let m = mutation(if_rev, idempotency_key, lease);
        self.write(py, |l| l.create_run(&session, req, &m))
    }

    /// Starts a pending run (`run start`).
    #[pyo3(signature = (run, *, if_rev=None, idempotency_key=None, lease=None))]
    fn start_run(
        &self,
        py: Python<'_>,
        run: String,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let m = mutation(if_rev, idempotency_key, lease);
        self.write(py, |l| l.start_run(&run, &m))
    }

    /// Adds usage to a running run and its session (`run usage`).
    #[pyo3(signature = (run, *, input_tokens=None, output_tokens=None, api_calls=None,
        if_rev=None, idempotency_key=None, lease=None))]
    #[allow(clippy::too_many_arguments)]
    fn run_usage(
        &self,
        py: Python<'_>,
        run: String,
        input_tokens: Option<i64>,
        output_tokens: Option<i64>,
        api_calls: Option<i64>,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let req = RunUsageDelta {
            input_tokens,
            output_tokens,
            api_calls,
        };
        let m = mutation(if_rev, idempotency_key, lease);
        self.write(py, |l| l.record_run_usage(&run, req, &m))
    }

    /// Counts a turn of a running run (`run turn`).
    #[pyo3(signature = (run, *, if_rev=None, idempotency_key=None, lease=None))]
    fn run_turn(
        &self,
        py: Python<'_>,
        run: String,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let m = mutation(if_rev, idempotency_key, lease);
        self.write(py, |l| l.increment_turn(&run, &m))
    }

    /// Completes a running run with an optional output (`run complete`).
    #[pyo3(signature = (run, *, output=None, if_rev=None, idempotency_key=None, lease=None))]
    fn complete_run(
        &self,
        py: Python<'_>,
        run: String,
        output: Option<&Bound<'_, PyAny>>,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let output = to_json(py, "output", output)?;
        let m = mutation(if_rev, idempotency_key, lease);
        self.write(py, |l| l.complete_run(&run, output, &m))
    }

    /// Fails a run with an error code and message (`run fail`).
    #[pyo3(signature = (run, *, code, message, if_rev=None, idempotency_key=None, lease=None))]
    #[allow(clippy::too_many_arguments)]
    fn fail_run(
        &self,
        py: Python<'_>,
        run: String,
        code: String,
        message: String,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let m = mutation(if_rev, idempotency_key, lease);
        self.write(py, |l| l.fail_run(&run, RunError { code, message }, &m))
    }

    /// Cancels a pending or running run (`run cancel`).
    #[pyo3(signature = (run, *, if_rev=None, idempotency_key=None, lease=None))]
    fn cancel_run(
        &self,
        py: Python<'_>,
        run: String,
        if_rev: Option<i64>,
        idempotency_key: Option<String>,
        lease: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let m = mutation(if_rev, idempotency_key, lease);
        self.write(py, |l| l.cancel_run(&run, &m))
    }

    /// A run (`run show`).
    fn get_run(&self, py: Python<'_>, run: String) -> PyResult<Py<PyAny>> {
        self.call(py, |l| l.get_run(&run))
    }

    /// A session's runs, oldest first (`run list`), optionally by status.
    #[pyo3(signature = (session, *, status=None))]
    fn list_runs(
        &self,
        py: Python<'_>,
        session: String,
        status: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let statuses = strings(py, "status", status)?
            .iter()
            .map(|s| parse::<RunStatus>(py, "status", s))
            .collect::<PyResult<Vec<_>>>()?;
        self.call(py, |l| l.list_runs(&session, &statuses))
    }
}

/// The module: `Ledger`, `LogbookError` and one subclass per code
/// (`SessionNotFound`, `SessionConflict`, …), and `ERROR_CODES`, the code
/// table (wire string → exit code, retryable, description).
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Ledger>()?;
    m.add("LogbookError", py.get_type::<LogbookError>())?;
    for (code, ty) in classes(py)? {
        m.add(class_name(code.as_str()).as_str(), ty.bind(py))?;
    }
    let table = PyDict::new(py);
    for (_, info) in ErrorCode::TABLE {
        table.set_item(info.wire, (info.exit, info.retryable, info.description))?;
    }
    m.add("ERROR_CODES", table)?;
    Ok(())
}
