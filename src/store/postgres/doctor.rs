//! What `logbook doctor` checks on a server (docs/design.md, "Backends"): the schema's
//! version, that every trigger the migrations create is there and enabled
//! (PostgreSQL's `ALTER TABLE … DISABLE TRIGGER` switches off invariants
//! and foreign keys alike, which SQLite has no way to do), and the sizes a
//! report shows. The hash chains are checked by the ledger (`verify`).

use super::migrate;
use crate::error::{Error, Result};
use postgres::Client;

/// The facts of a server database `doctor` reports.
#[derive(Debug, Clone, Default)]
pub struct PgFacts {
    /// The newest version in refinery's history (0: none).
    pub schema_version: i64,
    /// Whether every embedded migration is applied and none is unknown.
    pub schema_current: bool,
    /// Triggers the migrations create that are missing (table.trigger).
    pub missing_triggers: Vec<String>,
    /// Triggers on ledger tables that are disabled (table.trigger; a
    /// foreign key's internal triggers as table.constraint).
    pub disabled_triggers: Vec<String>,
    /// Rows of `sessions`.
    pub sessions: i64,
    /// Rows of `events`.
    pub events: i64,
    /// `pg_database_size(current_database())`, bytes.
    pub db_bytes: u64,
    /// The server's block size, bytes.
    pub block_size: i64,
    /// `server_version`.
    pub server_version: String,
}

/// The triggers the embedded migrations create (`CREATE [OR REPLACE]
/// TRIGGER name … ON table`), as `table.name`, sorted; those a later
/// migration drops (`DROP TRIGGER [IF EXISTS] name ON table`) left out.
pub fn expected_triggers() -> Vec<String> {
    static RE: std::sync::OnceLock<Option<regex::Regex>> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::Regex::new(
            r"(?is)\b(CREATE(?:\s+OR\s+REPLACE)?|DROP)\s+TRIGGER\s+(?:IF\s+EXISTS\s+)?(\w+)\b.*?\bON\s+(\w+)",
        )
        .ok()
    });
    let Some(re) = re else { return Vec::new() };
    let mut out: Vec<String> = Vec::new();
    for m in migrate::embedded() {
        for c in re.captures_iter(m.sql().unwrap_or_default()) {
            let key = format!(
                "{}.{}",
                c[3].to_ascii_lowercase(),
                c[2].to_ascii_lowercase()
            );
            if c[1].to_ascii_uppercase().starts_with("DROP") {
                out.retain(|k| *k != key);
            } else if !out.contains(&key) {
                out.push(key);
            }
        }
    }
    out.sort();
    out
}

/// Reads [`PgFacts`] in one read-only transaction.
///
/// # Errors
/// The server's (as [`super::errors::to_error`]).
pub fn facts(client: &mut Client, location: &str) -> Result<PgFacts> {
    let schema_current = migrate::is_current(client)?;
    let err = |e: postgres::Error| super::errors::to_error(&e, location);
    let mut tx = client
        .build_transaction()
        .read_only(true)
        .start()
        .map_err(err)?;
    let row = tx
        .query_one(
            "SELECT COALESCE((SELECT max(version)::int8 FROM refinery_schema_history), 0),
                    (SELECT count(*) FROM sessions), (SELECT count(*) FROM events),
                    pg_database_size(current_database()),
                    current_setting('block_size')::int8, current_setting('server_version')",
            &[],
        )
        .map_err(err)?;
    let present: Vec<(String, bool)> = tx
        .query(
            "SELECT DISTINCT c.relname || '.' || COALESCE(k.conname, t.tgname), t.tgenabled <> 'D'
             FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
             LEFT JOIN pg_constraint k ON k.oid = t.tgconstraint AND t.tgisinternal
             WHERE c.relnamespace = current_schema()::regnamespace
               AND c.relkind = 'r' AND c.relname <> 'refinery_schema_history'",
            &[],
        )
        .map_err(err)?
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, bool>(1)))
        .collect();
    tx.rollback().map_err(err)?;
    let expected = expected_triggers();
    let missing_triggers = expected
        .iter()
        .filter(|e| !present.iter().any(|(p, _)| p == *e))
        .cloned()
        .collect();
    let mut disabled_triggers: Vec<String> = present
        .iter()
        .filter(|(_, enabled)| !enabled)
        .map(|(p, _)| p.clone())
        .collect();
    disabled_triggers.sort();
    let db_bytes: i64 = row.get(3);
    Ok(PgFacts {
        schema_version: row.get(0),
        schema_current,
        missing_triggers,
        disabled_triggers,
        sessions: row.get(1),
        events: row.get(2),
        db_bytes: u64::try_from(db_bytes)
            .map_err(|_| Error::internal("pg_database_size returned a negative size"))?,
        block_size: row.get(4),
        server_version: row.get(5),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_triggers_are_read_from_the_migrations() {
        let t = expected_triggers();
        // Every CREATE TRIGGER of migrations/postgres/ (48 today), each
        // with the table it is on.
        assert_eq!(t.len(), 48, "{t:?}");
        assert!(
            t.contains(&"events.events_seq_contiguous".to_owned()),
            "{t:?}"
        );
        assert!(
            t.contains(&"sessions.sessions_no_truncate".to_owned()),
            "{t:?}"
        );
        assert!(
            t.contains(&"session_gates.session_gates_decide_once".to_owned()),
            "{t:?}"
        );
    }
}
