//! `Ledger`'s methods for runs (docs/python.md; docs/design.md, "Runs").

use crate::convert::*;
use crate::Ledger;
use logbook::{CreateRun, RunError, RunStatus, RunUsageDelta};
use pyo3::prelude::*;

#[pymethods]
impl Ledger {
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
