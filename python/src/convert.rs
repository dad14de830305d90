//! Keyword arguments into the library's requests, and its answers into
//! Python values (the JSON shapes of the CLI's `--json` `data`).

use crate::errors::{invalid, to_py_err};
use logbook::{CheckpointRequest, Error, Mutation, SessionStatus};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyString};
use serde::Serialize;

/// `create_session`'s `checkpoint` dict as a request: the keys are
/// `checkpoint`'s keyword arguments; any other is INVALID_ARGUMENT.
pub(crate) fn first_checkpoint(
    py: Python<'_>,
    d: &Bound<'_, PyDict>,
) -> PyResult<CheckpointRequest> {
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
            "payload" => req.payload = bytes_arg(py, "payload", Some(&v))?,
            _ => {
                return Err(invalid(
                    py,
                    "checkpoint",
                    format!(
                        "unknown key `{key}`: expected step, note, plan, operation, deployment, \
                         state or payload"
                    ),
                ))
            }
        }
    }
    Ok(req)
}

/// A `bytes` or `bytearray` argument (`None`: absent), copied once; any
/// other type is INVALID_ARGUMENT on `field`.
pub(crate) fn bytes_arg(
    py: Python<'_>,
    field: &str,
    v: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Vec<u8>>> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    if let Ok(b) = v.cast::<PyBytes>() {
        return Ok(Some(b.as_bytes().to_vec()));
    }
    if let Ok(b) = v.cast::<PyByteArray>() {
        return Ok(Some(b.to_vec()));
    }
    Err(invalid(py, field, "must be bytes or a bytearray"))
}

static JSON: PyOnceLock<(Py<PyAny>, Py<PyAny>)> = PyOnceLock::new();

/// Python's `json.loads` and `json.dumps`.
pub(crate) fn json(py: Python<'_>) -> PyResult<&(Py<PyAny>, Py<PyAny>)> {
    JSON.get_or_try_init(py, || {
        let m = py.import("json")?;
        Ok((m.getattr("loads")?.unbind(), m.getattr("dumps")?.unbind()))
    })
}

/// A serde value as Python values (through its JSON text).
pub(crate) fn from_json<T: Serialize + ?Sized>(py: Python<'_>, v: &T) -> PyResult<Py<PyAny>> {
    let text = serde_json::to_string(v)
        .map_err(|e| to_py_err(py, &Error::internal(format!("cannot serialize: {e}"))))?;
    loads(py, &text)
}

pub(crate) fn loads(py: Python<'_>, text: &str) -> PyResult<Py<PyAny>> {
    Ok(json(py)?.0.bind(py).call1((text,))?.unbind())
}

/// A Python value given for a JSON flag (`context`, `metadata`, `state`,
/// `data`) as a JSON value; INVALID_ARGUMENT naming `field` when Python's
/// `json` cannot encode it. The library checks that it is an object and
/// its size.
pub(crate) fn to_json(
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
pub(crate) fn strings(
    py: Python<'_>,
    field: &str,
    v: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<String>> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(Vec::new());
    };
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(vec![s.to_string()]);
    }
    v.extract::<Vec<String>>()
        .map_err(|_| invalid(py, field, "expected a string or a sequence of strings"))
}

pub(crate) fn statuses(
    py: Python<'_>,
    v: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<SessionStatus>> {
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
pub(crate) fn time(
    py: Python<'_>,
    field: &str,
    v: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<i64>> {
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

pub(crate) fn mutation(
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
pub(crate) fn parse<T: std::str::FromStr<Err = String>>(
    py: Python<'_>,
    field: &str,
    v: &str,
) -> PyResult<T> {
    v.parse::<T>().map_err(|e| invalid(py, field, e))
}
