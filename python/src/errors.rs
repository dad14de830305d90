//! Library errors as Python exceptions: `LogbookError` and one subclass
//! per code of the library's code table ([`ErrorCode::TABLE`]), carrying
//! `.code`, `.message`, `.retryable` and `.details` as the CLI's error
//! envelope does (docs/errors.md).

use logbook::{Error, ErrorBody, ErrorCode};
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use std::ffi::CString;

use crate::convert::from_json;

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
pub(crate) fn class_name(wire: &str) -> String {
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

pub(crate) fn classes(py: Python<'_>) -> PyResult<&Vec<(ErrorCode, Py<PyType>)>> {
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

pub(crate) fn cstring(s: String) -> PyResult<CString> {
    CString::new(s).map_err(|e| PyException::new_err(e.to_string()))
}

/// The Python exception of a library error: its code's class, with
/// `.code`, `.message`, `.retryable` and `.details` as the CLI's error
/// envelope carries them.
pub(crate) fn to_py_err(py: Python<'_>, e: &Error) -> PyErr {
    match error_value(py, e) {
        Ok(err) => err,
        Err(err) => err,
    }
}

pub(crate) fn error_value(py: Python<'_>, e: &Error) -> PyResult<PyErr> {
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

/// INVALID_ARGUMENT naming `field`, as a Python exception.
pub(crate) fn invalid(py: Python<'_>, field: &str, reason: impl Into<String>) -> PyErr {
    to_py_err(py, &Error::invalid(field, reason))
}
