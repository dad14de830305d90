//! PostgreSQL schema migrations (docs/design.md, "Backends"): refinery's runner
//! over the embedded `migrations/postgres/V<N>__<name>.sql`, one transaction
//! for all pending files, under an advisory lock.
//!
//! refinery takes no lock on PostgreSQL: two processes opening a new
//! database at once would both create the tables and one would fail. So
//! [`migrate`] first reads the schema's state without writing (the fast path:
//! a current database needs nothing more), and otherwise takes
//! `pg_advisory_lock(`[`MIGRATION_LOCK_KEY`]`)` on the connection, reads the
//! state again (another process may have just migrated), runs refinery's own
//! runner (grouped: all pending files and their history rows in one
//! transaction; divergent and missing versions abort), and releases the lock,
//! on error too. Advisory lock keys are per database, so databases on one
//! server do not wait for each other. The lock is a session lock: behind a
//! transaction-mode pooler, migrate over a direct (or session-mode)
//! connection.
//!
//! Refusals happen before anything is written, as on SQLite (refinery
//! creates its history table before it compares versions):
//! - a schema that holds tables but is not logbook's — its `sessions` table
//!   lacks the [`SCHEMA_MARKER`] comment, PostgreSQL's counterpart of
//!   SQLite's `PRAGMA application_id` — is STORE_CORRUPT (refinery's own
//!   history table alone, left by a run that failed, counts as empty);
//! - a history that names a version newer than [`LATEST_VERSION`] is
//!   STORE_VERSION_TOO_NEW;
//! - a history whose rows differ from the embedded files (name, checksum),
//!   that skips a version, or that refinery could not read, is STORE_CORRUPT;
//! - a database not encoded in UTF8 is STORE_IO (logbook stores UTF-8 text
//!   and counts its bytes).
//!
//! Messages name the database and schema (`current_database()`,
//! `current_schema()`), never the connection string.

use crate::error::{Error, Result};
use crate::store::sqlite::migrate::LATEST_VERSION;
use ::postgres::types::Type;
use ::postgres::Client;

mod embedded {
    //! The `migrations/postgres/` folder, embedded at build time by refinery.
    //! (refinery walks the folder recursively: SQLite's files sit beside it
    //! in `migrations/sqlite/`, never inside.)
    #![allow(missing_docs)]
    refinery::embed_migrations!("migrations/postgres");
}

/// The `pg_advisory_lock` key migrations run under: the ASCII bytes
/// `LGBKMIGR` as a big-endian i64 (5496434761415608146). Advisory lock keys
/// are per database; another application that happens to use the same key
/// in the same database only makes one wait for the other.
pub const MIGRATION_LOCK_KEY: i64 = 0x4C47_424B_4D49_4752;

/// The comment V1 sets on the `sessions` table: it marks a schema as
/// holding a logbook ledger (SQLite's `application_id` 0x4C47424B).
pub const SCHEMA_MARKER: &str =
    "logbook ledger (application id 0x4C47424B): one row per session; see docs/schema.md";

/// The SQLSTATE of every refusal by logbook's triggers (a class of its own,
/// `LB`, that PostgreSQL does not use). The message is the text of the
/// SQLite trigger's `RAISE(ABORT, …)`; the error's constraint field names
/// the trigger.
pub const INVARIANT_SQLSTATE: &str = "LB001";

/// The embedded PostgreSQL migrations, sorted by version.
pub fn embedded() -> Vec<refinery::Migration> {
    let mut list = embedded::migrations::runner().get_migrations().clone();
    list.sort_by_key(refinery::Migration::version);
    list
}

mod probe;

use probe::{probe, HistoryRow, Probe};

/// Whether refinery's runner can read a history row: it parses
/// `applied_on` as RFC 3339 and `checksum` as a u64, and panics otherwise.
fn readable(row: &HistoryRow) -> bool {
    let stamp = row.applied_on.as_deref().unwrap_or_default();
    let checksum_ok = row
        .checksum
        .as_deref()
        .is_some_and(|c| c.parse::<u64>().is_ok());
    row.name.is_some()
        && rfc3339_shaped(stamp)
        && stamp.parse::<jiff::Timestamp>().is_ok()
        && checksum_ok
}

/// Whether `s` is `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`, the RFC 3339
/// form refinery writes and reads.
fn rfc3339_shaped(s: &str) -> bool {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    if !(digits(0..4)
        && at(4, b'-')
        && digits(5..7)
        && at(7, b'-')
        && digits(8..10)
        && at(10, b'T')
        && digits(11..13)
        && at(13, b':')
        && digits(14..16)
        && at(16, b':')
        && digits(17..19))
    {
        return false;
    }
    let mut i = 19;
    if at(i, b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    match b.get(i) {
        Some(b'Z') => i + 1 == b.len(),
        Some(b'+' | b'-') => {
            digits(i + 1..i + 3) && at(i + 3, b':') && digits(i + 4..i + 6) && i + 6 == b.len()
        }
        _ => false,
    }
}

/// Refuses a foreign, newer or divergent schema; `Ok(true)` when it is
/// current (every embedded migration applied, nothing else).
fn check(p: &Probe) -> Result<bool> {
    let corrupt = |reason: String| Error::Corrupt {
        path: p.place.clone(),
        reason,
    };
    if p.encoding != "UTF8" {
        return Err(Error::StoreIo {
            context: format!(
                "{}: the database is encoded in {}; logbook needs UTF8 (CREATE DATABASE … ENCODING 'UTF8' TEMPLATE template0)",
                p.place, p.encoding
            ),
        });
    }
    let rows: &[HistoryRow] = p.history.as_deref().unwrap_or_default();
    // The newest recorded version decides first, as on SQLite.
    if let Some(found) = rows.iter().map(|r| r.version).max() {
        if found > LATEST_VERSION && p.marked {
            return Err(Error::VersionTooNew {
                path: p.place.clone(),
                found,
                supported: LATEST_VERSION,
            });
        }
    }
    if p.objects > 0 && !p.marked {
        return Err(corrupt(
            "the schema holds tables that are not logbook's (its `sessions` table, if any, lacks logbook's marker comment); use an empty database or schema for logbook".into(),
        ));
    }
    if p.marked && rows.is_empty() {
        return Err(corrupt(
            "logbook's tables are there but refinery_schema_history does not record their migrations".into(),
        ));
    }
    if !p.marked && !rows.is_empty() {
        return Err(corrupt(
            "refinery_schema_history records migrations, but logbook's tables are missing".into(),
        ));
    }
    let list = embedded();
    for r in rows {
        let Some(m) = list.iter().find(|m| i64::from(m.version()) == r.version) else {
            return Err(corrupt(format!(
                "refinery_schema_history records version {}, which no logbook migration has",
                r.version
            )));
        };
        if !readable(r) {
            return Err(corrupt(format!(
                "refinery_schema_history's row of version {} is malformed (applied_on must be RFC 3339, checksum a u64)",
                r.version
            )));
        }
        if r.name.as_deref() != Some(m.name()) || r.checksum != Some(m.checksum().to_string()) {
            return Err(corrupt(format!(
                "migration V{} in the history differs from the one this logbook embeds",
                r.version
            )));
        }
    }
    let newest = rows.iter().map(|r| r.version).max().unwrap_or(0);
    if let Some(m) = list.iter().find(|m| {
        i64::from(m.version()) < newest && !rows.iter().any(|r| r.version == i64::from(m.version()))
    }) {
        return Err(corrupt(format!(
            "refinery_schema_history skips migration V{} below its newest, V{newest}",
            m.version()
        )));
    }
    Ok(rows.len() == list.len())
}

/// Whether the schema is current (every embedded migration applied):
/// what a read-only open requires, as it may not migrate.
///
/// # Errors
/// As [`migrate`]'s refusals (foreign, newer or divergent schema).
pub fn is_current(client: &mut Client) -> Result<bool> {
    check(&probe(client)?)
}

/// Brings the connection's schema (`current_schema()`) to [`LATEST_VERSION`]:
/// nothing when it is current, else every pending migration in one
/// transaction under `pg_advisory_lock(`[`MIGRATION_LOCK_KEY`]`)`, which is
/// released before this returns, on error too. Safe when many processes
/// open one new database at once: they wait for the lock in turn, and each
/// version is applied once. Waits for the lock as long as the connection's
/// `lock_timeout` allows (none by default).
///
/// # Errors
/// STORE_CORRUPT: the schema holds tables that are not logbook's, or
/// refinery's history is divergent, malformed or skips a version;
/// STORE_VERSION_TOO_NEW: the history names a version newer than this
/// logbook knows. Both are found before anything is written.
/// STORE_IO: the database is not UTF8, the search_path names no schema, or
/// the role may not create the tables (SQLSTATE 42501); STORE_UNAVAILABLE:
/// the connection failed or the server is shutting down or restarting
/// (SQLSTATE classes 08, 57); STORE_BUSY: `lock_timeout` ran out waiting for the lock, or the
/// server cancelled the transaction (serialization failure, deadlock);
/// INTERNAL: any other server error (its SQLSTATE and message).
///
/// Rule: docs/design.md, "Backends" (schema changes under a lock).
pub fn migrate(client: &mut Client) -> Result<()> {
    if check(&probe(client)?)? {
        return Ok(());
    }
    client
        .query_typed(
            "SELECT pg_catalog.pg_advisory_lock($1)",
            &[(&MIGRATION_LOCK_KEY, Type::INT8)],
        )
        .map_err(|e| from_pg(&e, "taking the migration lock"))?;
    let outcome = migrate_locked(client);
    let unlocked = client
        .query_typed(
            "SELECT pg_catalog.pg_advisory_unlock($1)",
            &[(&MIGRATION_LOCK_KEY, Type::INT8)],
        )
        .map_err(|e| from_pg(&e, "releasing the migration lock"));
    // A closed connection has released the lock with the session; the
    // migration's own error is the one to report.
    outcome?;
    unlocked.map(|_| ())
}

/// The part of [`migrate`] that runs under the lock.
fn migrate_locked(client: &mut Client) -> Result<()> {
    let p = probe(client)?;
    if check(&p)? {
        return Ok(());
    }
    embedded::migrations::runner()
        .set_grouped(true)
        .set_abort_divergent(true)
        .set_abort_missing(true)
        .run(client)
        .map(|_| ())
        .map_err(|e| from_refinery(&e, &p.place))
}

/// A refinery error as logbook's (a fallback: the probe refuses newer and
/// divergent histories before refinery runs).
fn from_refinery(e: &refinery::Error, place: &str) -> Error {
    use refinery::error::Kind;
    match e.kind() {
        Kind::MissingVersion(m) if i64::from(m.version()) > LATEST_VERSION => {
            Error::VersionTooNew {
                path: place.to_owned(),
                found: i64::from(m.version()),
                supported: LATEST_VERSION,
            }
        }
        Kind::MissingVersion(m) => Error::Corrupt {
            path: place.to_owned(),
            reason: format!(
                "refinery_schema_history and the embedded migrations disagree on V{}",
                m.version()
            ),
        },
        Kind::DivergentVersion(applied, _) => Error::Corrupt {
            path: place.to_owned(),
            reason: format!(
                "migration V{} in the history differs from the one this logbook embeds",
                applied.version()
            ),
        },
        Kind::Connection(what, source) => match source.downcast_ref::<::postgres::Error>() {
            Some(pg) => match pg.as_db_error() {
                // A migration's CREATE met an object of that name (a
                // function, type or table logbook's probe does not
                // recognize): the schema is not logbook's to change, and
                // the grouped migration rolled back whole.
                Some(d) if is_duplicate_object(d.code()) => Error::Corrupt {
                    path: place.to_owned(),
                    reason: format!(
                        "the schema holds an object of a name logbook creates, which is not \
                         logbook's ({}; SQLSTATE {}); nothing was changed: move it, or give \
                         logbook a schema of its own",
                        d.message(),
                        d.code().code()
                    ),
                },
                _ => from_pg(pg, what),
            },
            None => Error::internal(format!("migrating {place}: {what}")),
        },
        other => Error::internal(format!("migrating {place}: {other}")),
    }
}

/// Whether `code` says a CREATE met an object of the same name: a table or
/// view (42P07), function (42723), schema (42P06) or other object (42710).
fn is_duplicate_object(code: &::postgres::error::SqlState) -> bool {
    use ::postgres::error::SqlState;
    [
        SqlState::DUPLICATE_TABLE,
        SqlState::DUPLICATE_FUNCTION,
        SqlState::DUPLICATE_SCHEMA,
        SqlState::DUPLICATE_OBJECT,
    ]
    .contains(code)
}

/// A driver error met while migrating, classified by SQLSTATE (never by
/// its text). The server's message is kept for the unexpected ones: it
/// comes from the server, which never sees the connection string.
fn from_pg(e: &::postgres::Error, doing: &str) -> Error {
    use ::postgres::error::SqlState;
    let lost = |what: &str| Error::Unavailable {
        location: String::new(), // filled in by the store
        reason: format!("{doing}: {what}"),
    };
    let Some(code) = e.code() else {
        // No SQLSTATE: the connection failed or closed.
        return lost("the connection to the server failed or was closed");
    };
    let class = code.code().get(..2).unwrap_or_default();
    if class == "08" || class == "57" {
        // Connection failures; the server shutting down, restarting or
        // ending the session: it can be tried again.
        return lost(&format!(
            "the connection was lost or the server is restarting (SQLSTATE {})",
            code.code()
        ));
    }
    if *code == SqlState::T_R_SERIALIZATION_FAILURE
        || *code == SqlState::T_R_DEADLOCK_DETECTED
        || *code == SqlState::LOCK_NOT_AVAILABLE
        || *code == SqlState::QUERY_CANCELED
    {
        return Error::Busy { timeout_ms: 0 };
    }
    let what = match class {
        "28" => Some("the server refused the login"),
        "42" if *code == SqlState::INSUFFICIENT_PRIVILEGE => Some(
            "permission denied: the role may not create or read logbook's tables in this schema",
        ),
        "53" => Some("the server is out of resources (disk, memory or connections)"),
        "25" if *code == SqlState::READ_ONLY_SQL_TRANSACTION => Some("the server is read-only"),
        _ => None,
    };
    match what {
        Some(w) => Error::StoreIo {
            context: format!("{doing}: {w} (SQLSTATE {})", code.code()),
        },
        None => Error::internal(format!(
            "{doing}: database error SQLSTATE {}: {}",
            code.code(),
            e.as_db_error().map_or("", |d| d.message())
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_key_spells_lgbkmigr() {
        assert_eq!(MIGRATION_LOCK_KEY.to_be_bytes(), *b"LGBKMIGR");
    }

    #[test]
    fn postgres_migrations_end_at_the_shared_latest_version() {
        let list = embedded();
        let versions: Vec<i64> = list.iter().map(|m| i64::from(m.version())).collect();
        assert_eq!(versions, (1..=LATEST_VERSION).collect::<Vec<_>>());
        let sqlite: Vec<String> = crate::store::sqlite::migrate::embedded()
            .iter()
            .map(|m| m.name().to_owned())
            .collect();
        let pg: Vec<String> = list.iter().map(|m| m.name().to_owned()).collect();
        assert_eq!(pg, sqlite);
    }

    #[test]
    fn every_marker_and_message_is_in_the_migrations() {
        let sql: String = embedded()
            .iter()
            .filter_map(|m| m.sql().map(str::to_owned))
            .collect();
        assert!(sql.contains(&format!("COMMENT ON TABLE sessions IS '{SCHEMA_MARKER}'")));
        assert!(sql.contains(&format!("ERRCODE = '{INVARIANT_SQLSTATE}'")));
    }

    fn row(version: i64, applied_on: &str, checksum: &str) -> HistoryRow {
        HistoryRow {
            version,
            name: Some("x".into()),
            applied_on: Some(applied_on.into()),
            checksum: Some(checksum.into()),
        }
    }

    #[test]
    fn history_rows_refinery_would_panic_on_are_unreadable() {
        assert!(readable(&row(
            1,
            "2026-12-01T23:02:30.123456Z",
            "18189890400841197429"
        )));
        assert!(readable(&row(1, "2026-12-01T23:02:30+01:00", "1")));
        assert!(!readable(&row(1, "yesterday", "1")));
        assert!(!readable(&row(1, "2026-12-01 23:02:30Z", "1")));
        assert!(!readable(&row(1, "2026-12-01T23:02:30Z", "-1")));
        assert!(!readable(&row(
            1,
            "2026-12-01T23:02:30Z",
            "18446744073709551616"
        )));
        assert!(!readable(&row(1, "2026-12-01T23:02:30Z", "")));
    }
}
