//! The SQLite implementation of the store interface ([`crate::store::Tx`]) over one
//! open transaction of a rusqlite connection.
//!
//! Each method binds its statement's parameters and maps its rows; the SQL
//! itself lives as `const`s in the table modules (`sessions`, `events`, …).
//! The one statement built here is the guarded session UPDATE, from fixed
//! fragments only: statuses as literals (an `OR` chain: SQLite re-prepares
//! a statement whose bound values it planned on, and builds a temp B-tree
//! for an `IN` list of three or more), every value a parameter.

use crate::error::{Error, Result};
use crate::store::{SessionChange, SessionGuard};
use rusqlite::types::Value;
use rusqlite::Connection;

/// A driver error, classified by SQLite's code (the handle fills in its
/// path and busy timeout).
pub(crate) fn db(e: rusqlite::Error) -> Error {
    Error::from_sqlite(e, 0)
}

/// Whether a driver error is a constraint violation (a UNIQUE key taken).
fn is_constraint(e: &rusqlite::Error) -> bool {
    e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation)
}

/// The store interface over one open SQLite transaction (or read
/// snapshot) of `conn`.
#[derive(Debug)]
pub struct SqliteTx<'c> {
    conn: &'c Connection,
}

impl<'c> SqliteTx<'c> {
    /// Wraps a connection whose transaction the caller opened and ends.
    pub fn new(conn: &'c Connection) -> Self {
        SqliteTx { conn }
    }

    /// The connection (for the SQLite-only checks that sit beside the
    /// interface: doctor, `sql`, backup).
    pub fn conn(&self) -> &'c Connection {
        self.conn
    }
}

/// The guarded session UPDATE's SQL and parameters (`?1` id, `?2` now):
/// `rev + 1`, `updated_at_ms` moved (never backwards), the change's
/// columns, only where the status is one of the guard's — and the rev is
/// the guard's, when it has one.
///
/// No RETURNING: SQLite buffers RETURNING rows in an ephemeral table on
/// every call; the event insert reads what it needs from the row instead.
/// The statuses are literals in an `OR` chain: a bound status (or an
/// `?N IS NULL OR …` guard) lets SQLite fold the binding into the plan and
/// re-prepare the statement on every call, and an `IN` list of three or
/// more constants builds a temporary B-tree on every run. Each shape of
/// change has its own text, so each stays prepared in the statement cache
/// (`tests/it/schema.rs`, `conditional_updates_are_never_reprepared`).
pub fn session_update(
    id: &str,
    g: SessionGuard<'_>,
    c: &SessionChange<'_>,
) -> (String, Vec<Value>) {
    let mut sql =
        String::from("UPDATE sessions SET rev = rev + 1, updated_at_ms = max(updated_at_ms, ?2)");
    let mut p: Vec<Value> = vec![Value::Text(id.to_owned()), Value::Integer(c.now_ms)];
    let mut bind = |sql: &mut String, col: &str, v: Value| {
        p.push(v);
        sql.push_str(&format!(", {col} = ?{}", p.len()));
    };
    if let Some(s) = c.status {
        // A status from the enum: a literal, not user input.
        sql.push_str(&format!(", status = '{}'", s.as_str()));
        if s.is_terminal() {
            sql.push_str(", ended_at_ms = max(updated_at_ms, ?2)");
        }
    }
    if let Some(r) = c.final_result {
        bind(&mut sql, "final_result", Value::Text(r.to_owned()));
    }
    if let Some(r) = c.end_reason {
        bind(&mut sql, "end_reason", Value::Text(r.to_owned()));
    }
    if let Some(stage) = c.stage {
        bind(
            &mut sql,
            "stage",
            stage.map_or(Value::Null, |s| Value::Text(s.to_owned())),
        );
    }
    if c.checkpoint_at_next_seq {
        sql.push_str(
            ", checkpoint_seq = (SELECT coalesce(max(seq) + 1, 0) FROM events \
             WHERE session_id = sessions.session_id)",
        );
    }
    if let Some(u) = c.usage {
        bind(&mut sql, "input_tokens", Value::Integer(u.input_tokens));
        bind(&mut sql, "output_tokens", Value::Integer(u.output_tokens));
        bind(&mut sql, "api_calls", Value::Integer(u.api_calls));
        bind(&mut sql, "duration_ms", Value::Integer(u.duration_ms));
    }
    let statuses: Vec<String> = g
        .from
        .iter()
        .map(|s| format!("status = '{}'", s.as_str()))
        .collect();
    sql.push_str(&format!(
        " WHERE session_id = ?1 AND ({})",
        statuses.join(" OR ")
    ));
    if let Some(rev) = g.rev {
        p.push(Value::Integer(rev));
        sql.push_str(&format!(" AND rev = ?{}", p.len()));
    }
    (sql, p)
}

fn exec(conn: &Connection, sql: &str, p: impl rusqlite::Params) -> Result<usize> {
    conn.prepare_cached(sql)
        .and_then(|mut s| s.execute(p))
        .map_err(db)
}

mod interface;
