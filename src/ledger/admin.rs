//! `doctor` and `backup` (docs/design.md, "Doctor and backup").

use super::Ledger;
use crate::error::{Error, ErrorCode, Result};
use crate::store::{
    companion, create_private_dirs, header_says_wal, wal_has_frames, JOURNAL_SIZE_LIMIT_BYTES,
    WAL_MISMATCH,
};
use crate::store::{DbFiles, Drift, DriftKind};
use serde::Serialize;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// How a check of `doctor` came out (JSON: `"ok"`, `"warning"`,
/// `"problem"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckLevel {
    /// Nothing to report.
    Ok,
    /// Something to know that is no damage (an operator's own index, view
    /// or table): the check still passes, `doctor` exits 0.
    Warning,
    /// A failure: `doctor` fails with the check's code.
    Problem,
}

/// One check of `doctor`.
///
/// Serializes in the field order below; `level` and `warnings` came after
/// the first three, so older readers of `check`, `ok` and `detail` see no
/// change.
#[derive(Debug, Clone, Serialize)]
pub struct DoctorCheck {
    /// `schema`, `integrity`, `foreign_keys`, `hash_chain`,
    /// `schema_objects`, `journal_mode`, `file_modes`, `wal_size` or
    /// `wal_match`; on a server `schema`, `triggers`, `hash_chain` and
    /// `server`.
    pub check: &'static str,
    /// Whether it passed (false only at level `problem`).
    pub ok: bool,
    /// What was found, in words: the problems, then the warnings.
    pub detail: String,
    /// `ok`, `warning` or `problem`.
    pub level: CheckLevel,
    /// Each warning, in words (empty unless there are some; a check at
    /// level `problem` may carry warnings too).
    pub warnings: Vec<String>,
    #[serde(skip)]
    code: ErrorCode,
}

/// What `doctor` found.
#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    /// The database file.
    pub path: String,
    /// Whether every check passed (warnings allowed).
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
    /// Warnings over all checks (they leave `healthy` true).
    pub warnings: usize,
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

pub(super) fn check(check: &'static str, ok: bool, detail: String, code: ErrorCode) -> DoctorCheck {
    DoctorCheck {
        check,
        ok,
        detail,
        level: if ok {
            CheckLevel::Ok
        } else {
            CheckLevel::Problem
        },
        warnings: Vec::new(),
        code,
    }
}

/// The `schema_objects` check. A missing or altered logbook object is a
/// problem (STORE_CORRUPT). So is an extra trigger or UNIQUE index: either
/// can change or refuse logbook's own writes. Any other extra object — an
/// index, view or table an operator made for a dashboard — is a warning
/// naming it, left as it is.
fn schema_objects_check(drift: &[Drift]) -> DoctorCheck {
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let mut extra = Vec::new();
    for d in drift {
        let (t, n) = (&d.object_type, &d.name);
        match d.kind {
            DriftKind::Missing => problems.push(format!("{t} {n} is missing")),
            DriftKind::Differs => problems.push(format!("{t} {n} differs from its migration")),
            DriftKind::Extra if t == "trigger" => problems.push(format!(
                "trigger {n} is not part of logbook's schema (it can change or refuse logbook's writes)"
            )),
            DriftKind::Extra if d.unique => problems.push(format!(
                "unique index {n} is not part of logbook's schema (it can refuse logbook's writes)"
            )),
            DriftKind::Extra => {
                warnings.push(format!("{t} {n} is not part of logbook's schema"));
                extra.push(format!("{t} {n}"));
            }
        }
    }
    let mut detail = if problems.is_empty() {
        if extra.is_empty() {
            "every table, index, trigger and view is as the migrations made it".to_owned()
        } else {
            "logbook's tables, indexes, triggers and views are as the migrations made it".to_owned()
        }
    } else {
        problems.join("; ")
    };
    if !extra.is_empty() {
        detail.push_str(&format!(
            "; not logbook's (left as they are): {}",
            extra.join(", ")
        ));
    }
    let mut c = check(
        "schema_objects",
        problems.is_empty(),
        detail,
        ErrorCode::StoreCorrupt,
    );
    if c.ok && !warnings.is_empty() {
        c.level = CheckLevel::Warning;
    }
    c.warnings = warnings;
    c
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
    /// trigger and view is as the migrations made it (an operator's own
    /// index, view or table is a warning, not a failure), `integrity_check`,
    /// `foreign_key_check`, every hash chain, journal mode, file modes, the
    /// WAL's size, and whether the WAL belongs to the file (`wal_match`,
    /// see below). Changes nothing (beyond what opening did: migrating an
    /// older schema, tightening modes — which is then reported).
    ///
    /// `wal_match` fails when the file is damaged with its `-wal` applied
    /// but sound without it: the `-wal` is an earlier file's (SQLite ties a
    /// WAL to its database by name only). The report then says to stop
    /// every process using the database and move the `-wal` and `-shm`
    /// aside, and this handle no longer checkpoints when it closes, so the
    /// WAL's frames are not copied into the file.
    ///
    /// `modes_before` are the file modes seen before this handle was opened
    /// (see [`Ledger::file_modes`]).
    ///
    /// # Errors
    /// An `Unhealthy` error when any check fails (warnings alone are no
    /// failure): its code is the first failing check's (`wal_match` first
    /// when it fails, as it explains the others; STORE_CORRUPT for schema,
    /// schema objects (a missing or altered logbook object, an extra
    /// trigger or UNIQUE index), integrity, foreign keys, journal mode, WAL
    /// match; LEDGER_TAMPERED for the chain; STORE_IO for modes and WAL
    /// size), its details the whole report. STORE_IO when the file was
    /// replaced under this handle ([`Ledger::check_file`]).
    pub fn doctor(&self, modes_before: &[(PathBuf, Option<u32>)]) -> Result<DoctorReport> {
        self.check_file()?;
        if self.store.sqlite().is_none() {
            return self.doctor_server();
        }
        let store = self.store.sqlite_for("doctor's file checks")?;
        let mut checks = Vec::new();
        let (user_version, history) = store.schema_versions()?;
        let latest = crate::store::LATEST_VERSION;
        checks.push(check(
            "schema",
            user_version == latest && history == latest,
            if user_version == history {
                format!("version {user_version} (history {history}; this logbook's latest {latest})")
            } else {
                // docs/design.md, "Database files": the two records of the schema must agree.
                format!(
                    "user_version {user_version} and refinery_schema_history's newest version {history} disagree (this logbook's latest {latest}): another tool changed one of them"
                )
            },
            ErrorCode::StoreCorrupt,
        ));
        checks.extend(self.content_checks()?);
        let (sessions, events, page_size, page_count, freelist_count, journal) = store.sizes()?;
        // A read-only open without a -shm reads a WAL file as immutable,
        // and SQLite then says `delete`: the file's header decides.
        let header_wal = store.is_read_only()
            && !journal.eq_ignore_ascii_case("wal")
            && header_says_wal(&self.path);
        checks.push(check(
            "journal_mode",
            journal.eq_ignore_ascii_case("wal") || header_wal,
            if header_wal {
                "wal (from the file header: this read-only open reads the file as immutable, as it has no -wal and no -shm can be made here)".into()
            } else {
                journal.clone()
            },
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
        checks.push(self.wal_match(&checks));
        checks.push(free_pages(store.free_space()?));
        let problems = checks.iter().filter(|c| !c.ok).count();
        let warnings = checks.iter().map(|c| c.warnings.len()).sum();
        Self::doctor_outcome(DoctorReport {
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
            warnings,
        })
    }

    /// The checks of the file's content: `integrity`, `foreign_keys`,
    /// `hash_chain`, `schema_objects`. A damaged file that SQLite refuses to
    /// read fails the check instead of ending the report.
    fn content_checks(&self) -> Result<Vec<DoctorCheck>> {
        let store = self.store.sqlite_for("doctor's file checks")?;
        let damaged = |name, code, e: Error| match e {
            Error::Corrupt { reason, .. } => Ok(check(name, false, reason, code)),
            other => Err(other),
        };
        let mut checks = Vec::new();
        checks.push(match store.integrity_check() {
            Ok(ic) => {
                let ok = ic.len() == 1 && ic[0] == "ok";
                check("integrity", ok, ic.join("; "), ErrorCode::StoreCorrupt)
            }
            Err(e) => damaged("integrity", ErrorCode::StoreCorrupt, e)?,
        });
        checks.push(match store.foreign_key_violations() {
            Ok((0, _)) => check(
                "foreign_keys",
                true,
                "no violations".into(),
                ErrorCode::StoreCorrupt,
            ),
            Ok((fk, rows)) => check(
                "foreign_keys",
                false,
                format!("{fk} violation(s): {}", rows.join("; ")),
                ErrorCode::StoreCorrupt,
            ),
            Err(e) => damaged("foreign_keys", ErrorCode::StoreCorrupt, e)?,
        });
        checks.push(self.hash_chain_check()?);
        checks.push(match store.schema_drift() {
            Ok(drift) => schema_objects_check(&drift),
            Err(e) => damaged("schema_objects", ErrorCode::StoreCorrupt, e)?,
        });
        checks.push(self.stray_tombstones_check()?);
        Ok(checks)
    }

    /// `tombstones`: no tombstone stands beside the session
    /// incarnation it says was purged (one written by raw SQL without its
    /// deletes, before schema V8: a purge skips such a session).
    pub(super) fn stray_tombstones_check(&self) -> Result<DoctorCheck> {
        const SHOWN: i64 = 10;
        let ids = self.read(|tx| tx.stray_tombstones(SHOWN + 1))?;
        Ok(if ids.is_empty() {
            check(
                "tombstones",
                true,
                "no purged session is still here (one imported again is a new incarnation)".into(),
                ErrorCode::LedgerTampered,
            )
        } else {
            let more = if ids.len() > SHOWN as usize {
                ", …"
            } else {
                ""
            };
            let shown: Vec<&str> = ids
                .iter()
                .take(SHOWN as usize)
                .map(String::as_str)
                .collect();
            check(
                "tombstones",
                false,
                format!(
                    "a tombstone says these sessions were purged, but they are still here (written without its deletes, by raw SQL): {}{more}",
                    shown.join(", ")
                ),
                ErrorCode::LedgerTampered,
            )
        })
    }

    /// `hash_chain`: every session's chain recomputed ([`Ledger::verify`]).
    pub(super) fn hash_chain_check(&self) -> Result<DoctorCheck> {
        Ok(match self.verify(&[]) {
            Ok(r) => check(
                "hash_chain",
                true,
                format!("{} session(s), {} event(s) verified", r.sessions, r.events),
                ErrorCode::LedgerTampered,
            ),
            Err(e @ Error::Tampered { .. }) => check(
                "hash_chain",
                false,
                e.to_string(),
                ErrorCode::LedgerTampered,
            ),
            Err(Error::Corrupt { reason, .. }) => {
                check("hash_chain", false, reason, ErrorCode::StoreCorrupt)
            }
            Err(e) => return Err(e),
        })
    }

    /// Turns checks into the report, or the error of the first problem
    /// (`wal_match` first: it explains the others).
    pub(super) fn doctor_outcome(report: DoctorReport) -> Result<DoctorReport> {
        let mut failed: Vec<&DoctorCheck> = report.checks.iter().filter(|c| !c.ok).collect();
        failed.sort_by_key(|c| c.check != "wal_match");
        let first = failed
            .first()
            .map(|c| (c.code, format!("{}: {}", c.check, c.detail)));
        let problems = failed.len();
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

    /// `wal_match`: whether the `-wal` beside the file belongs to it. SQLite
    /// ties a WAL to its database by name only and applies whatever frames
    /// a `-wal` of that name holds (their salts and checksums only show
    /// that the frames belong to that WAL), so a file moved over the
    /// database while the old `-wal` stayed gets the old file's pages. When
    /// the content checks fail with the WAL applied but pass on the file
    /// alone (opened as immutable, its `-wal` ignored), the WAL is the
    /// cause: this check fails (STORE_CORRUPT) and says what to do, and
    /// this connection no longer checkpoints on close, so the damage is not
    /// copied into the file. A foreign WAL whose frames happen to leave a
    /// sound database cannot be told from the file's own.
    fn wal_match(&self, checks: &[DoctorCheck]) -> DoctorCheck {
        let content = ["integrity", "foreign_keys", "hash_chain", "schema_objects"];
        let damaged = checks.iter().any(|c| !c.ok && content.contains(&c.check));
        let ok = |detail: &str| check("wal_match", true, detail.into(), ErrorCode::StoreCorrupt);
        if !wal_has_frames(&self.path) {
            return ok("no WAL frames");
        }
        if !damaged {
            return ok("the WAL's frames leave a sound database");
        }
        if let Some(store) = self.store.sqlite() {
            store.keep_wal_on_close();
        }
        let alone = self
            .file_alone()
            .and_then(|l| l.content_checks())
            .map(|cs| cs.iter().all(|c| c.ok));
        match alone {
            Ok(true) => check(
                "wal_match",
                false,
                WAL_MISMATCH.into(),
                ErrorCode::StoreCorrupt,
            ),
            _ => ok("the file is damaged without its WAL too: not a WAL mismatch"),
        }
    }

    /// The database's own files (it and its `-wal`, `-shm`, `-journal`,
    /// `-lock`), resolved now, to refuse as the destination of any output:
    /// every command that writes a file (`export --out`, `backup`) checks
    /// its destination with [`DbFiles::refuse`] before writing anything.
    ///
    /// # Errors
    /// STORE_IO when the path cannot be resolved.
    pub fn own_files(&self) -> Result<DbFiles> {
        match self.store.path() {
            Some(p) => DbFiles::of(p),
            None => Ok(DbFiles::none()),
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
    /// INVALID_ARGUMENT when `dest` exists, names the database or one of
    /// its companions (`-wal`, `-shm`, `-journal`, `-lock`; through `..`,
    /// symlinks and hard links: see [`Ledger::own_files`]), or is a name
    /// SQLite would not read as a file path (empty, `:memory:`, `file:…`);
    /// STORE_IO when it cannot be written or the database file was replaced
    /// under this handle; INTERRUPTED when
    /// [`LedgerOptions::interrupt`](crate::LedgerOptions::interrupt) was
    /// triggered during the copy (the temp file is removed, `dest` is not
    /// created).
    pub fn backup(&self, dest: &Path) -> Result<BackupReport> {
        // SQLite opens the copy by a name derived from `dest`.
        let store = self.store.sqlite_for("backup (on a server, use pg_dump)")?;
        crate::store::check_sqlite_name(dest, "dest")?;
        self.own_files()?.refuse(dest, "dest")?;
        self.check_file()?;
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
        let (pages, sessions, events) = store.backup_to(&tmp).map_err(cleanup)?;
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

/// The `free_pages` check (always passes; docs/design.md, "Retention"): the free pages in the
/// file and whether `purge` can give them back (`auto_vacuum`).
fn free_pages((mode, free, page_size): (i64, i64, i64)) -> DoctorCheck {
    let detail = match mode {
        2 => format!(
            "{free} free page(s) ({} bytes); auto_vacuum incremental: purge returns freed pages to the file system",
            free * page_size
        ),
        1 => format!("{free} free page(s); auto_vacuum full"),
        _ => format!(
            "{free} free page(s) ({} bytes); auto_vacuum none (a file made before schema version 7): free pages are reused, and one VACUUM with every writer stopped gives them back (`sqlite3 FILE 'PRAGMA auto_vacuum=INCREMENTAL; VACUUM;'`)",
            free * page_size
        ),
    };
    check("free_pages", true, detail, ErrorCode::StoreIo)
}
