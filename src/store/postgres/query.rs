//! `logbook sql` on a server: one statement that reads (by its first
//! keyword), in a `READ ONLY` transaction with a `statement_timeout`, so no
//! table can be written whatever the text says and nothing runs for long.
//! The statement runs with the connecting role's privileges: a superuser's
//! SELECT can still call the server's administrative functions
//! (docs/postgres.md, "What a server changes").
//!
//! Values come back as on SQLite: NULL → null, integers and floats →
//! numbers, booleans → true/false, text (and JSON) → strings, bytea →
//! lowercase hex. A column of any other type (numeric, timestamp, uuid,
//! arrays, …) is refused by name with the cast to write (`x::text`), rather
//! than printed in a form logbook would have to invent.

use super::errors::{classify, Class};
use crate::error::{Error, Result};
use crate::store::rows::{QueryResult, QUERY_MAX_ROWS};
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::{FromSql, Type};
use postgres::Client;
use serde_json::Value;

/// Text of a JSON or JSONB column (binary JSONB is a version byte, then
/// the text).
struct JsonText(String);

impl<'a> FromSql<'a> for JsonText {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let text = if *ty == Type::JSONB {
            raw.get(1..).unwrap_or_default()
        } else {
            raw
        };
        Ok(JsonText(std::str::from_utf8(text)?.to_owned()))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSON || *ty == Type::JSONB
    }
}

fn value(row: &postgres::Row, i: usize, ty: &Type) -> std::result::Result<Value, postgres::Error> {
    Ok(match *ty {
        Type::INT2 => row
            .try_get::<_, Option<i16>>(i)?
            .map_or(Value::Null, Value::from),
        Type::INT4 => row
            .try_get::<_, Option<i32>>(i)?
            .map_or(Value::Null, Value::from),
        Type::INT8 => row
            .try_get::<_, Option<i64>>(i)?
            .map_or(Value::Null, Value::from),
        Type::OID => row
            .try_get::<_, Option<u32>>(i)?
            .map_or(Value::Null, Value::from),
        Type::FLOAT4 => row
            .try_get::<_, Option<f32>>(i)?
            .and_then(|f| serde_json::Number::from_f64(f64::from(f)))
            .map_or(Value::Null, Value::Number),
        Type::FLOAT8 => row
            .try_get::<_, Option<f64>>(i)?
            .and_then(serde_json::Number::from_f64)
            .map_or(Value::Null, Value::Number),
        Type::BOOL => row
            .try_get::<_, Option<bool>>(i)?
            .map_or(Value::Null, Value::from),
        Type::BYTEA => row
            .try_get::<_, Option<Vec<u8>>>(i)?
            .map_or(Value::Null, |b| Value::String(hex::encode(b))),
        Type::JSON | Type::JSONB => row
            .try_get::<_, Option<JsonText>>(i)?
            .map_or(Value::Null, |j| Value::String(j.0)),
        _ => row
            .try_get::<_, Option<String>>(i)?
            .map_or(Value::Null, Value::String),
    })
}

/// Whether [`value`] reads a column of this type.
fn readable(ty: &Type) -> bool {
    matches!(
        *ty,
        Type::INT2
            | Type::INT4
            | Type::INT8
            | Type::OID
            | Type::FLOAT4
            | Type::FLOAT8
            | Type::BOOL
            | Type::BYTEA
            | Type::JSON
            | Type::JSONB
            | Type::TEXT
            | Type::VARCHAR
            | Type::BPCHAR
            | Type::NAME
            | Type::UNKNOWN
    )
}

/// A server error about the statement itself: INVALID_ARGUMENT with the
/// server's message (redacted); the connection's troubles keep their codes.
fn refused(e: &postgres::Error, location: &str) -> Error {
    // 25006 read_only_sql_transaction: the statement writes. As on SQLite,
    // that is the statement's fault (INVALID_ARGUMENT), not the store's:
    // elsewhere 25006 means a read-only server (STORE_IO).
    if e.code().is_some_and(|c| c.code() == "25006") {
        return Error::invalid(
            "sql",
            "must not write: logbook sql runs read-only statements only (SELECT, WITH, EXPLAIN)",
        );
    }
    match classify(e, location) {
        Class::Final(Error::Internal { .. }) | Class::Transient => {
            let why = e
                .as_db_error()
                .map_or_else(|| e.to_string(), |d| d.message().to_owned());
            let timeout = e.code().is_some_and(|c| c.code() == "57014");
            if timeout {
                Error::invalid(
                    "sql",
                    "ran longer than its timeout and was interrupted (see --timeout-ms)",
                )
            } else {
                Error::invalid("sql", crate::redact::redact(&why).into_owned())
            }
        }
        Class::Final(e) => e,
        Class::Lost(reason) => Error::Unavailable {
            location: location.to_owned(),
            reason,
        },
    }
}

/// The statements `sql` runs on a server, by their first keyword: those
/// that only read. A `READ ONLY` transaction refuses writes to tables, but
/// not `COPY … TO` (a file or a program on the server's host), `LOCK`,
/// `LISTEN`, `PREPARE`, `CALL`, `DO` or a `COMMIT` of the transaction
/// itself.
const READ_KEYWORDS: [&str; 6] = ["select", "with", "values", "table", "explain", "show"];

/// Refuses a statement whose first keyword (after comments, white space
/// and opening parentheses) is not one of [`READ_KEYWORDS`].
///
/// # Errors
/// INVALID_ARGUMENT (field `sql`).
fn check_kind(text: &str) -> Result<()> {
    let mut rest = text;
    loop {
        let t = rest.trim_start().trim_start_matches('(');
        if let Some(after) = t.strip_prefix("--") {
            rest = after.split_once('\n').map_or("", |(_, r)| r);
        } else if let Some(after) = t.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, r)| r);
        } else if t.len() != rest.len() {
            rest = t;
        } else {
            break;
        }
    }
    let word: String = rest
        .chars()
        .take_while(char::is_ascii_alphabetic)
        .collect::<String>()
        .to_ascii_lowercase();
    if READ_KEYWORDS.contains(&word.as_str()) {
        return Ok(());
    }
    Err(Error::invalid(
        "sql",
        "must be a statement that reads: SELECT, WITH, VALUES, TABLE, EXPLAIN or SHOW (on a server, COPY, LOCK, CALL, DO, transaction control and the like are refused too)",
    ))
}

/// Runs one read-only statement: in a `READ ONLY` transaction (the server
/// refuses any write in it, SQLSTATE 25006), with `statement_timeout` at
/// `timeout_ms`. The statement is prepared inside the transaction and
/// closed with it, so nothing outlives the transaction (pooler-safe).
///
/// # Errors
/// INVALID_ARGUMENT (field `sql`): empty, more than one statement, a write,
/// a column type logbook does not print, a result over 100,000 rows, the
/// timeout, or any error of the statement (the server's message, redacted);
/// STORE_UNAVAILABLE, STORE_IO for the connection.
pub fn run(
    client: &mut Client,
    text: &str,
    timeout_ms: u64,
    location: &str,
) -> Result<QueryResult> {
    if text.trim().is_empty() {
        return Err(Error::invalid("sql", "is empty"));
    }
    check_kind(text)?;
    let mut tx = client
        .build_transaction()
        .read_only(true)
        .start()
        .map_err(|e| refused(&e, location))?;
    // A number logbook checked (1..=3,600,000), not input.
    tx.batch_execute(&format!("SET LOCAL statement_timeout = {timeout_ms}"))
        .map_err(|e| refused(&e, location))?;
    let stmt = match tx.prepare(text) {
        Ok(s) => s,
        // 42601 syntax_error covers "cannot insert multiple commands into a
        // prepared statement".
        Err(e)
            if e.as_db_error()
                .is_some_and(|d| d.message().contains("multiple commands")) =>
        {
            return Err(Error::invalid("sql", "must be exactly one statement"))
        }
        Err(e) => return Err(refused(&e, location)),
    };
    let columns: Vec<String> = stmt.columns().iter().map(|c| c.name().to_owned()).collect();
    let types: Vec<Type> = stmt.columns().iter().map(|c| c.type_().clone()).collect();
    if let Some((name, ty)) = columns.iter().zip(&types).find(|(_, t)| !readable(t)) {
        return Err(Error::invalid(
            "sql",
            format!(
                "column `{name}` has type {ty}, which logbook does not print: cast that expression to text in the query (e.g. `SELECT now()::text`, `SELECT tx_id::text FROM events`)"
            ),
        ));
    }
    let mut rows = tx
        .query_raw(&stmt, std::iter::empty::<&dyn postgres::types::ToSql>())
        .map_err(|e| refused(&e, location))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(|e| refused(&e, location))? {
        if out.len() == QUERY_MAX_ROWS {
            return Err(Error::invalid(
                "sql",
                "returns more than 100,000 rows; add a LIMIT or narrow the WHERE",
            ));
        }
        let mut vals = Vec::with_capacity(types.len());
        for (i, ty) in types.iter().enumerate() {
            vals.push(value(&row, i, ty).map_err(|e| refused(&e, location))?);
        }
        out.push(vals);
    }
    drop(rows);
    // Read-only: ending it either way changes nothing.
    let _ = tx.rollback();
    Ok(QueryResult { columns, rows: out })
}
