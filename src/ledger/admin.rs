//! `doctor` and `backup` (issue 3 §5).

use super::Ledger;
use crate::error::{Error, ErrorCode, Result};
use crate::store::admin as sql;
use crate::store::open::{companion, create_private_dirs, JOURNAL_SIZE_LIMIT_BYTES};
use serde::Serialize;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// One check of `doctor`.
#[derive(Debug, Clone, Serialize)]
pub struct DoctorCheck {
    /// `schema`, `schema_objects`, `integrity`, `foreign_keys`,
    /// `hash_chain`, `journal_mode`, `file_modes` or `wal_size`.
    pub check: &'static str,
    /// Whether it passed.
    pub ok: bool,
    /// What was found, in words.
    pub detail: String,
    #[serde(skip)]
    code: ErrorCode,
}

/// What `doctor` found.
#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    /// The database file.
    pub path: String,
    /// Whether every check passed.
    pub healthy: bool,
    /// Each check, in the order run.
    pub checks: Vec<DoctorCheck>,
    /// `PRAGMA user_version`.
    pub schema_version: i64,
    /// Sessions in the file.
    pub sessions: i64,
    /// Events in the file.
    pub events: i64,
    /// Size of the database file, bytes.
    pub db_bytes: u64,
    /// Size of its `-wal` file, bytes (0 when absent).
    pub wal_bytes: u64,
    /// `page_size` × `page_count` is the file's logical size.
    pub page_size: i64,
    /// Pages in use or free.
    pub page_count: i64,
    /// Free pages (reclaimable by VACUUM).
    pub freelist_count: i64,
}

/// What `backup` wrote.
#[derive(Debug, Clone, Serialize)]
pub struct BackupReport {
    /// The new file.
    pub dest: String,
    /// Pages copied.
    pub pages: i64,
    /// Its size, bytes.
    pub bytes: u64,
    /// Sessions in the copy.
    pub sessions: i64,
    /// Events in the copy.
    pub events: i64,
}

/// A WAL larger than this is reported as a problem: twice the size a
/// checkpoint truncates it back to, so something (a reader holding an old
/// snapshot) keeps checkpoints from finishing.
pub const WAL_PROBLEM_BYTES: u64 = 2 * JOURNAL_SIZE_LIMIT_BYTES as u64;

fn mode_of(path: &Path) -> Option<u32> {
    std::fs::metadata(path).ok().map(|m| m.mode() & 0o7777)
}

fn check(check: &'static str, ok: bool, detail: String, code: ErrorCode) -> DoctorCheck {
    DoctorCheck {
        check,
        ok,
        detail,
        code,
    }
}

/// Modes as found before the open (which tightens the database's own
/// files): anything readable or writable by others is a problem.
fn file_modes(path: &Path, before: &[(PathBuf, Option<u32>)]) -> DoctorCheck {
    let mut problems = Vec::new();
    for (p, m) in before {
        if let Some(m) = m {
            if m & 0o077 != 0 {
                let now = mode_of(p).unwrap_or(*m);
                problems.push(format!(
                    "{} was {:04o} (now {:04o}; want 0600)",
                    p.display(),
                    m,
                    now
                ));
            }
        }
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Some(m) = mode_of(dir) {
            // Writable by others without the sticky bit: they could replace
            // the database file.
            if m & 0o022 != 0 && m & 0o1000 == 0 {
                problems.push(format!(
                    "folder {} is {:04o}; others can write to it",
                    dir.display(),
                    m
                ));
            }
        }
    }
    if problems.is_empty() {
        check(
            "file_modes",
            true,
            "database, WAL, shm and lock files are owner-only".into(),
            ErrorCode::StoreIo,
        )
    } else {
        check("file_modes", false, problems.join("; "), ErrorCode::StoreIo)
    }
}

impl Ledger {
    /// Checks the database: schema version, that every table, index,
    /// trigger and view is as the migrations made it, `integrity_check`,
    /// `foreign_key_check`, every hash chain, journal mode, file modes and
    /// the WAL's size. Changes nothing (beyond what opening did: migrating
    /// an older schema, tightening modes — which is then reported).
    ///
    /// `modes_before` are the file modes seen before this handle was opened
    /// (see [`Ledger::file_modes`]).
    ///
    /// # Errors
    /// An `Unhealthy` error when any check fails: its code is the first
    /// failing check's (STORE_CORRUPT for schema, integrity, foreign keys,
    /// journal mode; LEDGER_TAMPERED for the chain; STORE_IO for modes and
    /// WAL size), its details the whole report.
    pub fn doctor(&self, modes_before: &[(PathBuf, Option<u32>)]) -> Result<DoctorReport> {
        let db = |e| self.db_err(e);
        let mut checks = Vec::new();
        let (user_version, history) = sql::schema_versions(&self.conn).map_err(db)?;
        let latest = crate::store::migrate::latest_version();
        checks.push(check(
            "schema",
            user_version == latest && history == latest,
            format!("version {user_version} (history {history}; this logbook's latest {latest})"),
            ErrorCode::StoreCorrupt,
        ));
        let ic = sql::integrity_check(&self.conn).map_err(db)?;
        let ic_ok = ic.len() == 1 && ic[0] == "ok";
        checks.push(check(
            "integrity",
            ic_ok,
            ic.join("; "),
            ErrorCode::StoreCorrupt,
        ));
        let (fk, fk_rows) = sql::foreign_key_violations(&self.conn).map_err(db)?;
        checks.push(check(
            "foreign_keys",
            fk == 0,
            if fk == 0 {
                "no violations".into()
            } else {
                format!("{fk} violation(s): {}", fk_rows.join("; "))
            },
            ErrorCode::StoreCorrupt,
        ));
        match self.verify(&[]) {
            Ok(r) => checks.push(check(
                "hash_chain",
                true,
                format!("{} session(s), {} event(s) verified", r.sessions, r.events),
                ErrorCode::LedgerTampered,
            )),
            Err(e @ Error::Tampered { .. }) => checks.push(check(
                "hash_chain",
                false,
                e.to_string(),
                ErrorCode::LedgerTampered,
            )),
            Err(e) => return Err(e),
        }
        let drift = sql::schema_drift(&self.conn).map_err(db)?;
        checks.push(check(
            "schema_objects",
            drift.is_empty(),
            if drift.is_empty() {
                "every table, index, trigger and view is as the migrations made it".into()
            } else {
                drift.join("; ")
            },
            ErrorCode::StoreCorrupt,
        ));
        let (sessions, events, page_size, page_count, freelist_count, journal) =
            sql::sizes(&self.conn).map_err(db)?;
        checks.push(check(
            "journal_mode",
            journal.eq_ignore_ascii_case("wal"),
            journal.clone(),
            ErrorCode::StoreCorrupt,
        ));
        checks.push(file_modes(&self.path, modes_before));
        let wal_bytes = std::fs::metadata(companion(&self.path, "-wal")).map_or(0, |m| m.len());
        checks.push(check(
            "wal_size",
            wal_bytes <= WAL_PROBLEM_BYTES,
            if wal_bytes <= WAL_PROBLEM_BYTES {
                format!("{wal_bytes} bytes")
            } else {
                format!(
                    "{wal_bytes} bytes, over {WAL_PROBLEM_BYTES}: a reader holding an old snapshot keeps checkpoints from resetting it"
                )
            },
            ErrorCode::StoreIo,
        ));
        let failed: Vec<&DoctorCheck> = checks.iter().filter(|c| !c.ok).collect();
        let first = failed
            .first()
            .map(|c| (c.code, format!("{}: {}", c.check, c.detail)));
        let problems = failed.len();
        let report = DoctorReport {
            path: self.path.display().to_string(),
            healthy: problems == 0,
            checks,
            schema_version: user_version,
            sessions,
            events,
            db_bytes: std::fs::metadata(&self.path).map_or(0, |m| m.len()),
            wal_bytes,
            page_size,
            page_count,
            freelist_count,
        };
        match first {
            None => Ok(report),
            Some((code, first)) => Err(Error::Unhealthy {
                code,
                problems,
                first,
                report: Box::new(serde_json::to_value(&report).unwrap_or_default()),
            }),
        }
    }

    /// The modes of a database's files (`DB`, `-wal`, `-shm`, `-lock`), for
    /// [`Ledger::doctor`] — read before opening, which tightens them.
    pub fn file_modes(path: &Path) -> Vec<(PathBuf, Option<u32>)> {
        ["", "-wal", "-shm", "-lock"]
            .iter()
            .map(|s| {
                let p = companion(path, s);
                let m = mode_of(&p);
                (p, m)
            })
            .collect()
    }

    /// Writes a consistent copy of the database, as of one snapshot, to a
    /// new file `dest` (mode 0600; missing folders 0700), with SQLite's
    /// online backup API, while other processes go on writing. The copy is
    /// written beside `dest` under a temporary name, checked
    /// (`quick_check`), and renamed into place, so `dest` never holds half
    /// a copy.
    ///
    /// # Errors
    /// INVALID_ARGUMENT when `dest` exists or is the database itself;
    /// STORE_IO when it cannot be written; INTERRUPTED when
    /// [`LedgerOptions::interrupt`](crate::LedgerOptions::interrupt) was
    /// triggered during the copy (the temp file is removed, `dest` is not
    /// created).
    pub fn backup(&self, dest: &Path) -> Result<BackupReport> {
        if dest.as_os_str().is_empty() {
            return Err(Error::invalid("dest", "must be a file path"));
        }
        if std::fs::symlink_metadata(dest).is_ok() {
            return Err(Error::invalid(
                "dest",
                "already exists; backup never overwrites a file",
            ));
        }
        if let Some(parent) = dest.parent() {
            create_private_dirs(parent)?;
        }
        let mut tmp = dest.as_os_str().to_owned();
        tmp.push(format!(".tmp-{}", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let io = |what: &str, e: std::io::Error| Error::Io {
            context: format!("cannot {what} {}", dest.display()),
            source: e,
        };
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| io("create", e))?;
        let cleanup = |e: Error| {
            let _ = std::fs::remove_file(&tmp);
            let _ = std::fs::remove_file(companion(&tmp, "-journal"));
            e
        };
        let (pages, sessions, events) =
            sql::backup_to(&self.conn, &tmp).map_err(|e| cleanup(self.db_err(e)))?;
        // A signal during the copy (one backup step): the copy is dropped.
        self.opts.interrupt.check().map_err(cleanup)?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| cleanup(io("set the mode of", e)))?;
        std::fs::rename(&tmp, dest).map_err(|e| cleanup(io("rename the copy to", e)))?;
        if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
            if let Ok(d) = std::fs::File::open(parent) {
                let _ = d.sync_all();
            }
        }
        Ok(BackupReport {
            dest: dest.display().to_string(),
            pages,
            bytes: std::fs::metadata(dest).map_or(0, |m| m.len()),
            sessions,
            events,
        })
    }
}
