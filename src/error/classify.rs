//! Driver errors classified by SQLite's numeric result codes, never by
//! their text (the one place besides `store/` that names rusqlite).

use super::Error;

impl Error {
    /// Classifies a driver error by SQLite's numeric result code.
    pub(crate) fn from_sqlite(err: rusqlite::Error, busy_timeout_ms: u64) -> Self {
        use rusqlite::ffi::ErrorCode as C;
        match err.sqlite_error_code() {
            Some(C::DatabaseBusy) | Some(C::DatabaseLocked) => Error::Busy {
                timeout_ms: busy_timeout_ms,
            },
            Some(C::NotADatabase) => Error::Corrupt {
                path: String::new(),
                reason: "the file is not a SQLite database".into(),
            },
            Some(C::DatabaseCorrupt) => Error::Corrupt {
                path: String::new(),
                reason: "the database file is damaged".into(),
            },
            Some(C::DiskFull) => Error::StoreIo {
                context: "the disk is full".into(),
            },
            Some(C::ReadOnly) => Error::StoreIo {
                context: "the database is read-only".into(),
            },
            Some(C::CannotOpen) => Error::StoreIo {
                context: "the database file cannot be opened".into(),
            },
            Some(C::PermissionDenied) => Error::StoreIo {
                context: "permission denied".into(),
            },
            Some(C::SystemIoFailure) => Error::StoreIo {
                context: "an I/O error occurred".into(),
            },
            _ => Error::Internal {
                message: format!("database error: {err}"),
            },
        }
    }
}
