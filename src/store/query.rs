//! `logbook sql`: one read-only statement, any shape of result.

use rusqlite::types::ValueRef;
use rusqlite::Connection;
use serde_json::Value;

/// The result of a query: column names and rows of JSON values (NULL →
/// null, integers and reals → numbers, text → strings, blobs → lowercase
/// hex strings).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct QueryResult {
    /// Column names, in order.
    pub columns: Vec<String>,
    /// Each row, one value per column.
    pub rows: Vec<Vec<Value>>,
}

/// Why a statement was refused before it ran.
#[derive(Debug)]
pub enum QueryError {
    /// Not exactly one statement, or one that would write.
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

/// Runs one statement that `sqlite3_stmt_readonly` says does not write.
pub fn run(conn: &Connection, sql: &str) -> Result<QueryResult, QueryError> {
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
    let mut rows = Vec::new();
    let mut cursor = stmt.query([])?;
    while let Some(row) = cursor.next()? {
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            out.push(to_json(row.get_ref(i)?));
        }
        rows.push(out);
    }
    Ok(QueryResult { columns, rows })
}
