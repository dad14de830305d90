//! `logbook sql`: one read-only statement, any shape of result.

use crate::store::rows::{QueryResult, QUERY_MAX_ROWS};
use rusqlite::types::ValueRef;
use rusqlite::Connection;
use serde_json::Value;

/// Why a statement was refused before it ran, or stopped.
#[derive(Debug)]
pub enum QueryError {
    /// Not exactly one statement, or one that would write, or a result too
    /// large or too slow.
    Refused(&'static str),
    /// SQLite rejected or failed it.
    Db(rusqlite::Error),
}

impl From<rusqlite::Error> for QueryError {
    fn from(e: rusqlite::Error) -> Self {
        QueryError::Db(e)
    }
}

fn to_json(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::from(i),
        ValueRef::Real(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        ValueRef::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Value::String(hex::encode(b)),
    }
}

/// Why SQLite refused a `logbook sql` statement: its message, and for a
/// syntax error the byte offset, not the statement's text (docs/errors.md:
/// a message never repeats the rejected value).
pub fn reason(e: &rusqlite::Error) -> String {
    match e {
        rusqlite::Error::SqlInputError { msg, offset, .. } => format!("{msg} (at byte {offset})"),
        // The connection attaches nothing (its limit is 0), so SQLite's
        // words for an ATTACH are "too many attached databases - max 0".
        e if e.to_string().starts_with("too many attached databases") => {
            "must not ATTACH a database: logbook sql reads this ledger only".to_owned()
        }
        e => e.to_string(),
    }
}

/// Runs one statement that `sqlite3_stmt_readonly` says does not write.
/// It is interrupted after `timeout_ms`.
pub fn run(conn: &Connection, sql: &str, timeout_ms: u64) -> Result<QueryResult, QueryError> {
    if sql.trim().is_empty() {
        return Err(QueryError::Refused("is empty"));
    }
    let mut stmt = match conn.prepare(sql) {
        Ok(s) => s,
        Err(rusqlite::Error::MultipleStatement) => {
            return Err(QueryError::Refused("must be exactly one statement"))
        }
        Err(e) => return Err(QueryError::Db(e)),
    };
    if !stmt.readonly() {
        return Err(QueryError::Refused(
            "must not write: logbook sql runs read-only statements only (SELECT, WITH, EXPLAIN, read-only PRAGMAs)",
        ));
    }
    let columns: Vec<String> = stmt.column_names().map(str::to_owned).collect();
    let n = columns.len();
    // A watchdog interrupts the statement at the timeout (a recursive CTE
    // can run forever); it ends as soon as the query does.
    let handle = conn.get_interrupt_handle();
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            wait.recv_timeout(std::time::Duration::from_millis(timeout_ms))
        {
            handle.interrupt();
            return true;
        }
        false
    });
    let result = (|| {
        let mut rows = Vec::new();
        let mut cursor = stmt.query([])?;
        while let Some(row) = cursor.next()? {
            if rows.len() == QUERY_MAX_ROWS {
                return Err(QueryError::Refused(
                    "returns more than 100,000 rows; add a LIMIT or narrow the WHERE",
                ));
            }
            let mut out = Vec::with_capacity(n);
            for i in 0..n {
                out.push(to_json(row.get_ref(i)?));
            }
            rows.push(out);
        }
        Ok(rows)
    })();
    let _ = done.send(());
    let timed_out = watchdog.join().unwrap_or(false);
    match result {
        Ok(rows) => Ok(QueryResult { columns, rows }),
        Err(QueryError::Db(e))
            if timed_out
                || e.sqlite_error_code()
                    == Some(rusqlite::ffi::ErrorCode::OperationInterrupted) =>
        {
            Err(QueryError::Refused(
                "ran longer than its timeout and was interrupted (see --timeout-ms)",
            ))
        }
        Err(e) => Err(e),
    }
}
