//! `doctor` on a PostgreSQL server (docs/design.md, "Backends"): what a server database can
//! have wrong that logbook can see — its schema version, a trigger missing
//! or switched off (`ALTER TABLE … DISABLE TRIGGER` turns off invariants
//! and foreign keys), a broken hash chain — and its sizes. Integrity of the
//! pages and the WAL are the server's own business (`amcheck`, its logs).

use super::admin::{check, DoctorReport};
use super::Ledger;
use crate::error::{Error, ErrorCode, Result};

impl Ledger {
    /// The checks `schema`, `triggers`, `hash_chain`, `server`; the report
    /// gives the server's block size as `page_size`, the database's size
    /// (`pg_database_size`) as `db_bytes`, and 0 for `wal_bytes` and
    /// `freelist_count` (no such files or lists on a server).
    ///
    /// # Errors
    /// As [`Ledger::doctor`]: an `Unhealthy` error (STORE_CORRUPT for the
    /// schema or triggers, LEDGER_TAMPERED for the chain);
    /// STORE_UNAVAILABLE.
    pub(super) fn doctor_server(&self) -> Result<DoctorReport> {
        let facts = self.store.server_facts()?;
        let latest = crate::store::LATEST_VERSION;
        let mut checks = vec![check(
            "schema",
            facts.schema_current && facts.schema_version == latest,
            format!(
                "version {} (this logbook's latest {latest})",
                facts.schema_version
            ),
            ErrorCode::StoreCorrupt,
        )];
        let mut problems = Vec::new();
        if !facts.missing_triggers.is_empty() {
            problems.push(format!(
                "missing: {} (a migration's trigger was dropped)",
                facts.missing_triggers.join(", ")
            ));
        }
        if !facts.disabled_triggers.is_empty() {
            problems.push(format!(
                "disabled: {} (ALTER TABLE … ENABLE TRIGGER ALL restores them; rows written meanwhile were not checked)",
                facts.disabled_triggers.join(", ")
            ));
        }
        let expected = crate::store::expected_triggers().len();
        checks.push(check(
            "triggers",
            problems.is_empty(),
            if problems.is_empty() {
                format!("{expected} trigger(s) present and enabled")
            } else {
                problems.join("; ")
            },
            ErrorCode::StoreCorrupt,
        ));
        checks.push(self.hash_chain_check()?);
        checks.push(self.stray_tombstones_check()?);
        checks.push(check(
            "server",
            true,
            format!("PostgreSQL {}", facts.server_version),
            ErrorCode::StoreIo,
        ));
        let problems = checks.iter().filter(|c| !c.ok).count();
        let warnings = checks.iter().map(|c| c.warnings.len()).sum();
        let block = facts.block_size.max(1);
        Self::doctor_outcome(DoctorReport {
            path: self.path.display().to_string(),
            healthy: problems == 0,
            checks,
            schema_version: facts.schema_version,
            sessions: facts.sessions,
            events: facts.events,
            db_bytes: facts.db_bytes,
            wal_bytes: 0,
            page_size: block,
            page_count: i64::try_from(facts.db_bytes)
                .map_err(|_| Error::internal("database size beyond i64"))?
                / block,
            freelist_count: 0,
            warnings,
        })
    }
}
