//! `logbook_ledger._native`: the Python binding of the logbook library
//! (docs/python.md; docs/design.md, "From Python").
//!
//! A thin layer, as the CLI is: each method turns its keyword arguments
//! into the library's request, calls the library with the GIL released,
//! and turns the answer into Python values through serde (the JSON shapes
//! of the CLI's `--json` `data`, loaded with Python's `json`). Errors
//! become `LogbookError` subclasses made from the library's code table
//! ([`ErrorCode::TABLE`]). Behaviour stays in the library.

use logbook::ledger::resolve_path;
use logbook::{
    AppendEvent, CheckpointRequest, CreateSession, Error, ErrorCode, FeedQuery, Ledger as Inner,
    LedgerOptions, ListSessions, Written,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

mod convert;
mod errors;
mod runs;
mod workflow;

use convert::*;
use errors::*;

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
    /// `plan`, `operation`, `deployment`, `state`, `payload`), at rev 2 with that
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
    /// `deployment`: a string or a list) and a snapshot (`state`, a dict,
    /// and beside it `payload`, bytes kept exactly and never redacted, ≤ 16
    /// MiB).
    #[pyo3(signature = (id, *, step=None, note=None, plan=None, operation=None, deployment=None,
        state=None, payload=None, if_rev=None, idempotency_key=None, lease=None))]
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
        payload: Option<&Bound<'_, PyAny>>,
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
            payload: bytes_arg(py, "payload", payload)?,
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
