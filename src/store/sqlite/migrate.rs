//! Schema migrations: refinery's embedded `migrations/sqlite/V<N>__<name>.sql`,
//! applied atomically and race-free.
//!
//! refinery's own runner reads the applied versions outside the transaction
//! that applies the pending ones, so two processes opening a brand-new file at
//! the same instant both try V1 and one fails with "table already exists"; it
//! also creates its history table before it notices a newer schema. So logbook
//! embeds the migrations with refinery (names, versions, checksums) and
//! applies them itself: one `BEGIN IMMEDIATE` transaction re-reads the state
//! under the write lock, refuses a divergent history (STORE_CORRUPT), applies
//! every pending file in order, records each in refinery's
//! `refinery_schema_history` table (same columns and format, so refinery
//! tooling reads it), and sets `PRAGMA user_version` to the newest version —
//! the cheap "is this DB current?" check every open makes first.

use crate::error::Error;
use crate::store::sqlite::open::APPLICATION_ID;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

mod embedded {
    //! The `migrations/sqlite/` folder, embedded at build time by refinery.
    //! (refinery walks the folder recursively: PostgreSQL's files sit beside
    //! it in `migrations/postgres/`, never inside.)
    #![allow(missing_docs)]
    refinery::embed_migrations!("migrations/sqlite");
}

/// The table refinery uses for its history.
pub const HISTORY_TABLE: &str = "refinery_schema_history";

const CREATE_HISTORY: &str = "CREATE TABLE IF NOT EXISTS refinery_schema_history(
             version int4 PRIMARY KEY,
             name VARCHAR(255),
             applied_on VARCHAR(255),
             checksum VARCHAR(255));";

/// The embedded migrations, sorted by version.
pub fn embedded() -> Vec<refinery::Migration> {
    let mut list = embedded::migrations::runner().get_migrations().clone();
    list.sort_by_key(refinery::Migration::version);
    list
}

pub use crate::store::LATEST_VERSION;

/// The migration that adds the events' hash chain (`V2__event_hash_chain`).
const HASH_CHAIN_VERSION: i64 = 2;

/// The newest schema version this binary knows ([`LATEST_VERSION`]).
pub fn latest_version() -> i64 {
    LATEST_VERSION
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_version_matches_the_embedded_migrations() {
        let newest = embedded().last().map_or(0, |m| i64::from(m.version()));
        assert_eq!(
            LATEST_VERSION, newest,
            "bump LATEST_VERSION with each new migration"
        );
    }
}

/// What the read-only probe saw.
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    /// `PRAGMA application_id`.
    pub application_id: i32,
    /// `PRAGMA user_version`.
    pub user_version: i64,
    /// Number of objects in `sqlite_schema`.
    pub objects: i64,
    /// The newest version in refinery's history table, or `None` when the
    /// table is missing or empty. It can disagree with `user_version` when
    /// a newer logbook, or refinery's own tooling, migrated the file.
    pub history_max: Option<i64>,
}

/// Reads the header fields and the newest recorded migration without
/// writing anything.
pub fn probe(conn: &Connection) -> rusqlite::Result<Probe> {
    let (application_id, user_version, objects, has_history) = conn
        .prepare_cached(
            "SELECT (SELECT application_id FROM pragma_application_id),
                    (SELECT user_version FROM pragma_user_version),
                    (SELECT count(*) FROM sqlite_schema),
                    EXISTS (SELECT 1 FROM sqlite_schema
                            WHERE type = 'table' AND name = 'refinery_schema_history')",
        )?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
    let history_max = if has_history {
        conn.prepare_cached("SELECT max(version) FROM refinery_schema_history")?
            .query_row([], |r| r.get(0))?
    } else {
        None
    };
    Ok(Probe {
        application_id,
        user_version,
        objects,
        history_max,
    })
}

/// Refuses a foreign or newer database.
///
/// # Errors
/// STORE_CORRUPT for a SQLite file that is not logbook's; STORE_VERSION_TOO_NEW
/// for a schema newer than [`latest_version`], by `user_version` or by
/// refinery's history (docs/design.md, "Database files").
pub fn check_probe(p: &Probe, path: &str) -> Result<(), Error> {
    let fresh = p.application_id == 0 && p.user_version == 0 && p.objects == 0;
    if !fresh && p.application_id != APPLICATION_ID {
        return Err(Error::Corrupt {
            path: path.to_owned(),
            reason: "the file is a SQLite database, but not a logbook database".into(),
        });
    }
    // The newer of the two records decides: a file that refinery's history
    // says a newer logbook migrated is refused even if `user_version` lags.
    let found = p.user_version.max(p.history_max.unwrap_or(0));
    if found > latest_version() {
        return Err(Error::VersionTooNew {
            path: path.to_owned(),
            found,
            supported: latest_version(),
        });
    }
    Ok(())
}

/// A migration failure: a driver error, or a refusal.
#[derive(Debug)]
pub enum MigrateError {
    /// SQLite failed.
    Db(rusqlite::Error),
    /// The history is divergent or newer.
    Refused(Error),
}

impl From<rusqlite::Error> for MigrateError {
    fn from(e: rusqlite::Error) -> Self {
        MigrateError::Db(e)
    }
}

/// Applies every pending migration in one IMMEDIATE transaction.
pub fn migrate(conn: &Connection, path: &str) -> Result<(), MigrateError> {
    let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
    // Re-read under the write lock: another process may have just migrated.
    let p = probe(&tx)?;
    check_probe(&p, path).map_err(MigrateError::Refused)?;
    let list = embedded();
    if p.user_version >= latest_version() {
        return Ok(tx.commit()?);
    }
    // An existing file is checked before it is upgraded: migrating a damaged
    // database would bury the damage under new writes.
    if p.objects > 0 {
        let ok: String = tx.query_row("PRAGMA quick_check(1)", [], |r| r.get(0))?;
        if ok != "ok" {
            return Err(MigrateError::Refused(Error::Corrupt {
                path: path.to_owned(),
                reason: "the database fails its integrity check".into(),
            }));
        }
    }
    tx.execute_batch(CREATE_HISTORY)?;
    let mut applied: Vec<(i64, String)> = Vec::new();
    {
        let mut stmt =
            tx.prepare("SELECT version, checksum FROM refinery_schema_history ORDER BY version")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
        for row in rows {
            applied.push(row?);
        }
    }
    for (version, checksum) in &applied {
        match list.iter().find(|m| i64::from(m.version()) == *version) {
            None => {
                return Err(MigrateError::Refused(Error::VersionTooNew {
                    path: path.to_owned(),
                    found: *version,
                    supported: latest_version(),
                }))
            }
            Some(m) if m.checksum().to_string() != *checksum => {
                return Err(MigrateError::Refused(Error::Corrupt {
                    path: path.to_owned(),
                    reason: format!("migration V{version} in the history differs from the one this logbook embeds"),
                }))
            }
            Some(_) => {}
        }
    }
    let now = jiff::Timestamp::now().to_string();
    for m in &list {
        let version = i64::from(m.version());
        if applied.iter().any(|(v, _)| *v == version) {
            continue;
        }
        tx.execute_batch(m.sql().unwrap_or_default())?;
        if version == HASH_CHAIN_VERSION {
            // SQL has no SHA-256: the rows that predate the chain get their
            // hashes here, in the same transaction.
            crate::store::sqlite::sql::chain::backfill(&tx)?;
        }
        tx.execute(
            "INSERT INTO refinery_schema_history (version, name, applied_on, checksum) VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![version, m.name(), now, m.checksum().to_string()],
        )?;
    }
    // Header fields; the values are our own constants, not user input.
    tx.execute_batch(&format!(
        "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {};",
        latest_version()
    ))?;
    let fk_problem: Option<String> = tx
        .query_row(
            "SELECT \"table\" FROM pragma_foreign_key_check LIMIT 1",
            [],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(table) = fk_problem {
        return Err(MigrateError::Refused(Error::Corrupt {
            path: path.to_owned(),
            reason: format!("foreign key check failed in table {table} after migrating"),
        }));
    }
    Ok(tx.commit()?)
}
