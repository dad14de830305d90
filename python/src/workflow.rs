//! `Ledger`'s methods for snapshots, fork and restore, retention, usage
//! and budgets, gates and leases (docs/python.md).

use crate::convert::*;
use crate::errors::{invalid, to_py_err};
use crate::Ledger;
use logbook::ledger::{PurgeFilter, PurgeRequest};
use logbook::{ForkRequest, GateKind, LockRequest, OnExceed, RecordUsage, SetBudget};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::path::PathBuf;

#[pymethods]
impl Ledger {
    /// A session's checkpoint snapshots (`session checkpoints`).
    fn checkpoints(&self, py: Python<'_>, id: String) -> PyResult<Py<PyAny>> {
        self.call(py, |l| l.list_snapshots(&id))
    }

    /// One checkpoint snapshot with its state: the one at seq
    /// `checkpoint`, or the newest. Its `payload` is the bytes stored
    /// beside the state, or `None`.
    #[pyo3(signature = (id, *, checkpoint=None))]
    fn snapshot(&self, py: Python<'_>, id: String, checkpoint: Option<i64>) -> PyResult<Py<PyAny>> {
        let mut payload = None;
        let out = self.call(py, |l| {
            let mut s = l.snapshot(&id, checkpoint)?;
            payload = s.payload.take();
            Ok(s)
        })?;
        let bytes = payload.map(|p| PyBytes::new(py, &p));
        out.bind(py).set_item("payload", bytes)?;
        Ok(out)
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
}
