//! Opening a database: path resolution, file modes, pragmas, probes (docs/design.md, "Storage").
//!
//! [`open`] is the one opener, used by the library, tests and benches. Order:
//! 1. create missing parent folders with mode 0700;
//! 2. create the file with mode 0600 (tighten an existing looser file, and its
//!    `-wal`/`-shm`; SQLite gives those the DB file's mode);
//! 3. open, set the busy timeout, `foreign_keys=ON`;
//! 4. read-only probes: SQLite header, `application_id`, `user_version`, so a
//!    foreign, corrupt or newer DB is refused before anything is written;
//! 5. `journal_mode=WAL` (checked), `synchronous`, `journal_size_limit`;
//! 6. migrate, inside one `BEGIN IMMEDIATE` (see `migrate.rs`).

use crate::error::{Error, Result};
use crate::store::sqlite::busy;
use crate::store::sqlite::files::{check_sqlite_name, refuse_hard_links};
use crate::store::sqlite::migrate;
use rusqlite::{Connection, OpenFlags};
use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// `PRAGMA application_id` of a logbook database ("LGBK").
pub const APPLICATION_ID: i32 = 0x4C47_424B;

/// WAL size the file is truncated back to after a checkpoint: 64 MiB
/// (above the ≈ 40 MiB the default autocheckpoint lets it reach).
pub const JOURNAL_SIZE_LIMIT_BYTES: i64 = 64 * 1024 * 1024;

/// SQLite's own default page cache: 2 MiB (`PRAGMA cache_size = -2000`).
pub const SQLITE_DEFAULT_CACHE_KIB: u32 = 2000;

/// `PRAGMA synchronous` level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// `synchronous=FULL` (default): an acknowledged write survives power loss.
    #[default]
    Full,
    /// `synchronous=NORMAL`: survives a process crash; the last commits may be
    /// lost on power loss or an OS crash.
    Normal,
}

/// How to open a store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// The database file.
    pub path: PathBuf,
    /// Busy timeout, ms.
    pub busy_timeout_ms: u64,
    /// Durability level.
    pub sync: SyncMode,
    /// `wal_autocheckpoint` in pages (SQLite's default 1000; 0 disables).
    pub wal_autocheckpoint_pages: u32,
    /// Page cache size in KiB (`PRAGMA cache_size = -N`); memory is taken
    /// only as pages are read.
    pub page_cache_kib: u32,
    /// Create the file (and its folders) when it is missing; otherwise a
    /// missing file is STORE_IO ("cannot read PATH") and nothing is created.
    pub create: bool,
}

fn io_err(context: String, source: std::io::Error) -> Error {
    Error::Io { context, source }
}

/// Creates missing folders of `dir` with mode 0700 (whatever the umask).
pub(crate) fn create_private_dirs(dir: &Path) -> Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_private_dirs(parent)?;
    }
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(|e| {
            io_err(
                format!("cannot set the mode of folder {}", dir.display()),
                e,
            )
        }),
        // Another process created it at the same instant: fine.
        Err(e) if e.kind() == ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(io_err(format!("cannot create folder {}", dir.display()), e)),
    }
}

/// Removes group/other bits from an existing file's mode; never loosens it.
fn tighten_mode(path: &Path) -> Result<()> {
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(format!("cannot read {}", path.display()), e)),
    };
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        // Best effort on files we do not own (read-only access).
        let _ = fs::set_permissions(path, fs::Permissions::from_mode(mode & 0o700));
    }
    Ok(())
}

/// Gives SQLite's `-wal` and `-shm` companions of `path` owner read and
/// write if they lack them (best effort: only the owner may). SQLite creates
/// them with the database file's mode, so a reader of a 0400 file leaves
/// 0400 companions behind, and every later writer would fail with "read-only"
/// once the file is writable again. Only adds owner bits; the full
/// tightening to 0600 waits for the probe ([`tighten_existing`]).
fn ensure_companions_owner_rw(path: &Path) {
    for suffix in ["-wal", "-shm"] {
        let p = companion(path, suffix);
        if let Ok(m) = fs::metadata(&p) {
            let mode = m.permissions().mode() & 0o7777;
            if mode & 0o600 != 0o600 {
                let _ = fs::set_permissions(&p, fs::Permissions::from_mode(mode | 0o600));
            }
        }
    }
}

pub(crate) fn companion(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Prepares the file: private parent folders, the file created 0600 (a
/// missing file is STORE_IO instead when `create` is false). Returns whether
/// this call created it.
///
/// An existing path is never touched here: it must be a regular file with
/// one name (a folder, device or FIFO, or a file with hard links, is
/// refused with STORE_IO before anything happens: [`refuse_hard_links`]),
/// and its mode is tightened only after the probe has shown it is a logbook
/// database ([`tighten_existing`]), so pointing `--db` at someone else's
/// file changes nothing about it.
fn prepare_file(path: &Path, create: bool) -> Result<bool> {
    match fs::metadata(path) {
        Ok(m) if m.is_file() => return refuse_hard_links(path, &m).map(|()| false),
        Ok(_) => {
            return Err(io_err(
                format!("{} is not a regular file", path.display()),
                std::io::Error::from(ErrorKind::InvalidInput),
            ))
        }
        Err(e) if e.kind() == ErrorKind::NotFound && create => {}
        Err(e) => return Err(io_err(format!("cannot read {}", path.display()), e)),
    }
    if let Some(parent) = path.parent() {
        create_private_dirs(parent)?;
    }
    match fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => {
            fs::set_permissions(path, fs::Permissions::from_mode(0o600))
                .map_err(|e| io_err(format!("cannot set the mode of {}", path.display()), e))?;
            Ok(true)
        }
        // Another process created it at the same instant.
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io_err(format!("cannot create {}", path.display()), e)),
    }
}

/// Tightens a confirmed logbook database and its `-wal`/`-shm` to owner-only
/// (never loosens a mode).
fn tighten_existing(path: &Path) -> Result<()> {
    tighten_mode(path)?;
    tighten_mode(&companion(path, "-wal"))?;
    tighten_mode(&companion(path, "-shm"))
}

/// Opens (creating if needed) and migrates the database at `cfg.path`.
///
/// # Errors
/// STORE_IO (folders, file, permissions), STORE_CORRUPT (not a logbook SQLite
/// file), STORE_VERSION_TOO_NEW (schema newer than this binary), STORE_BUSY
/// (locked past the busy timeout while switching to WAL or migrating).
pub fn open(cfg: &StoreConfig) -> Result<Connection> {
    check_sqlite_name(&cfg.path, "db")?;
    prepare_file(&cfg.path, cfg.create)?;
    // Before SQLite opens them: a read-only -shm would make this connection
    // a reader only.
    ensure_companions_owner_rw(&cfg.path);
    let display = cfg.path.display().to_string();
    let db_err = |e: rusqlite::Error| {
        unwritable_storage(&e, &cfg.path)
            .unwrap_or_else(|| with_path(Error::from_sqlite(e, cfg.busy_timeout_ms), &display))
    };

    #[allow(clippy::disallowed_methods)]
    let mut conn = Connection::open_with_flags(
        &cfg.path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(db_err)?;
    conn.pragma_update(None, "foreign_keys", true)
        .map_err(db_err)?;
    let probe = match checked_probe(&mut conn, cfg.busy_timeout_ms, &display, db_err) {
        Ok(p) => p,
        Err(e @ Error::Corrupt { .. }) => {
            // Closing the last connection would checkpoint the WAL into
            // the file: never do that to a file that reads as damaged.
            keep_wal_on_close(&conn);
            return Err(explain_wal_mismatch(e, &cfg.path));
        }
        Err(e) => return Err(e),
    };
    // A brand-new file gives freed pages back to the file system on
    // request (`PRAGMA incremental_vacuum`, run by `purge`; docs/design.md, "Retention"). The
    // mode can only be chosen before the first table exists.
    if probe.user_version == 0 {
        let pages: i64 = conn
            .pragma_query_value(None, "page_count", |r| r.get(0))
            .map_err(db_err)?;
        if pages == 0 {
            conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")
                .map_err(db_err)?;
        }
    }
    // Ours (or brand new and empty): now it is safe to tighten its mode.
    // -wal/-shm created from here on take the DB file's (now 0600) mode.
    tighten_existing(&cfg.path)?;

    set_wal(&conn, cfg.busy_timeout_ms).map_err(db_err)?;
    let sync = match cfg.sync {
        SyncMode::Full => "FULL",
        SyncMode::Normal => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", sync)
        .map_err(db_err)?;
    conn.pragma_update(None, "journal_size_limit", JOURNAL_SIZE_LIMIT_BYTES)
        .map_err(db_err)?;
    conn.pragma_update(None, "wal_autocheckpoint", cfg.wal_autocheckpoint_pages)
        .map_err(db_err)?;
    conn.pragma_update(None, "cache_size", -i64::from(cfg.page_cache_kib))
        .map_err(db_err)?;
    conn.set_prepared_statement_cache_capacity(64);
    define_writer(&conn).map_err(db_err)?;

    if probe.user_version < migrate::latest_version() {
        migrate::migrate(&conn, &display).map_err(|e| match e {
            migrate::MigrateError::Db(e) => db_err(e),
            migrate::MigrateError::Refused(e) => e,
        })?;
    }
    Ok(conn)
}

/// Defines `logbook_writer()` on a read-write connection: the schema's
/// retention triggers accept a purge record claiming the CLI, MCP or the
/// library only from a connection that defines it (docs/schema.md,
/// "Retention"); raw SQL (the `sqlite3` shell, any client that has not
/// defined it) records actor `sql`. It returns 1.
fn define_writer(conn: &Connection) -> rusqlite::Result<()> {
    conn.create_scalar_function(
        "logbook_writer",
        0,
        rusqlite::functions::FunctionFlags::SQLITE_UTF8
            | rusqlite::functions::FunctionFlags::SQLITE_DETERMINISTIC,
        |_| Ok(1i64),
    )
}

/// What every connection does before it trusts the file, read-write or
/// read-only: set the busy timeout (`busy.rs`), check B-tree cells on read
/// (damage is STORE_CORRUPT instead of trusted; a full check is
/// `integrity_check`), and refuse a foreign or newer database without
/// writing anything.
fn checked_probe(
    conn: &mut Connection,
    busy_timeout_ms: u64,
    display: &str,
    db_err: impl Fn(rusqlite::Error) -> Error,
) -> Result<migrate::Probe> {
    busy::set_timeout(conn, busy_timeout_ms).map_err(&db_err)?;
    conn.pragma_update(None, "cell_size_check", true)
        .map_err(&db_err)?;
    let probe = migrate::probe(conn).map_err(&db_err)?;
    migrate::check_probe(&probe, display)?;
    Ok(probe)
}

/// STORE_IO naming `--read-only` when a read-write open failed because
/// SQLite cannot create or write the `-wal`/`-shm` files beside `path`:
/// read-only storage, or a folder this user may not write. `None` for any
/// other failure.
fn unwritable_storage(e: &rusqlite::Error, path: &Path) -> Option<Error> {
    use rusqlite::ffi::ErrorCode as C;
    if !matches!(
        e.sqlite_error_code(),
        Some(C::CannotOpen | C::ReadOnly | C::PermissionDenied)
    ) {
        return None;
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let why = match nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK) {
        Ok(()) => return None,
        Err(nix::errno::Errno::EROFS) => "it is on read-only storage",
        Err(_) => "this user may not write to its folder",
    };
    Some(Error::StoreFile {
        path: path.display().to_string(),
        reason: format!("cannot be opened for writing: {why}, and SQLite must create or write its -wal and -shm files there even to read"),
        hint: "to read it, pass --read-only (Ledger::open_read_only); to write to it, copy it (with its -wal, if there is one) to writable storage".into(),
    })
}

/// Disables SQLite's checkpoint when this connection closes, so a WAL it
/// found the file damaged with stays beside the file untouched (the last
/// connection to close would otherwise copy its frames into the file,
/// making a mismatched WAL's damage permanent).
pub(crate) fn keep_wal_on_close(conn: &Connection) {
    let _ = conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    );
}

/// Whether `path` has a `-wal` holding more than its 32-byte header (frames,
/// committed or not).
pub(crate) fn wal_has_frames(path: &Path) -> bool {
    fs::metadata(companion(path, "-wal")).is_ok_and(|m| m.len() > 32)
}

/// A `file:` URI naming `path` exactly (every byte outside a safe set
/// percent-encoded), with `query` appended.
fn file_uri(path: &Path, query: &str) -> String {
    let mut uri = String::from(if path.is_absolute() {
        "file://"
    } else {
        "file:"
    });
    for b in path.as_os_str().as_encoded_bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'/' | b'.' | b'-' | b'_' | b'~' => {
                uri.push(char::from(*b));
            }
            _ => uri.push_str(&format!("%{b:02X}")),
        }
    }
    uri.push('?');
    uri.push_str(query);
    uri
}

/// Opens the database file alone, as immutable (its `-wal` ignored,
/// nothing locked or written), read-only.
pub(crate) fn open_file_alone(path: &Path) -> rusqlite::Result<Connection> {
    #[allow(clippy::disallowed_methods)]
    let conn = Connection::open_with_flags(
        file_uri(path, "immutable=1"),
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI,
    )?;
    conn.pragma_update(None, "query_only", true)?;
    let _ = conn.set_limit(rusqlite::limits::Limit::SQLITE_LIMIT_ATTACHED, 0);
    Ok(conn)
}

/// Opens `path` read-only with its `-wal` indexed in this process's memory
/// instead of a `-shm` file: the `unix-none` VFS (no file locks) and
/// `locking_mode=EXCLUSIVE` set before the first read, which is SQLite's
/// documented way to use WAL without shared memory. For a folder with no
/// `-shm` that cannot hold one, so no writer is running; the connection
/// never checkpoints (its WAL is opened read-only, and checkpoint-on-close
/// is off).
fn open_wal_in_memory(path: &Path, flags: OpenFlags) -> rusqlite::Result<Connection> {
    #[allow(clippy::disallowed_methods)]
    let conn = Connection::open_with_flags_and_vfs(path, flags, c"unix-none")?;
    keep_wal_on_close(&conn);
    let mode: String =
        conn.pragma_update_and_check(None, "locking_mode", "EXCLUSIVE", |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("exclusive") {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
            Some(format!("locking_mode stayed {mode}")),
        ));
    }
    conn.query_row("SELECT count(*) FROM sqlite_schema", [], |_| Ok(()))?;
    Ok(conn)
}

/// The reason given when a database reads as damaged with its `-wal`
/// applied but the file alone is sound.
pub const WAL_MISMATCH: &str = "with its -wal applied the database is damaged, but the file alone is sound: the -wal most likely belongs to an earlier file of this name (a backup moved over the database while logbook or another SQLite client had it open, or the files copied apart). Stop every process using the database, move its -wal and -shm aside (do not delete them until the data is safe), and run `logbook doctor` again; see README \"Backup and restore\"";

/// Turns a STORE_CORRUPT found on opening into [`WAL_MISMATCH`] when
/// `path` has WAL frames and the file alone passes `quick_check` and the
/// probe (a WAL is tied to its database by name only: SQLite applies
/// whatever frames a `-wal` of that name holds).
fn explain_wal_mismatch(e: Error, path: &Path) -> Error {
    if !wal_has_frames(path) || !file_alone_sound(path) {
        return e;
    }
    match e {
        Error::Corrupt { path, .. } => Error::Corrupt {
            path,
            reason: WAL_MISMATCH.to_owned(),
        },
        other => other,
    }
}

/// Whether the file alone (no WAL) is a logbook database that passes
/// `quick_check`.
fn file_alone_sound(path: &Path) -> bool {
    let Ok(conn) = open_file_alone(path) else {
        return false;
    };
    let probe_ok = migrate::probe(&conn)
        .ok()
        .is_some_and(|p| migrate::check_probe(&p, "").is_ok());
    let check: rusqlite::Result<String> = conn.query_row("PRAGMA quick_check(1)", [], |r| r.get(0));
    probe_ok && check.is_ok_and(|c| c == "ok")
}

/// Whether the file's header marks it as a WAL database (bytes 18 and 19,
/// the write and read format versions, are 2). A read-only open of such a
/// file without its `-shm` reads it as immutable, and SQLite then reports
/// `journal_mode` as `delete`.
pub fn header_says_wal(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 20];
    fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| head[18] == 2 && head[19] == 2)
}

/// The background checkpointer's own connection (`store::checkpointer`) on
/// a database this process has already opened and migrated: read-write,
/// no busy handler (a PASSIVE checkpoint never waits), nothing else set.
pub(crate) fn open_checkpointer(path: &Path) -> rusqlite::Result<Connection> {
    #[allow(clippy::disallowed_methods)]
    Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
}

/// Fills the path into STORE_CORRUPT errors raised by the driver.
pub(crate) fn with_path(err: Error, path: &str) -> Error {
    match err {
        Error::Corrupt { reason, .. } => Error::Corrupt {
            path: path.to_owned(),
            reason,
        },
        other => other,
    }
}

/// Switches to WAL. Changing the journal mode needs a moment of exclusive
/// access, which SQLite reports as busy without always calling the busy
/// handler, so retry until the timeout when many processes open a brand-new
/// file at once.
fn set_wal(conn: &Connection, timeout_ms: u64) -> rusqlite::Result<()> {
    let current: String = conn.pragma_query_value(None, "journal_mode", |r| r.get(0))?;
    if current.eq_ignore_ascii_case("wal") {
        return Ok(());
    }
    let start = Instant::now();
    let mut pause = Duration::from_micros(200);
    loop {
        let res: rusqlite::Result<String> =
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0));
        match res {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
            Ok(_) | Err(_) if start.elapsed() < Duration::from_millis(timeout_ms) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Ok(mode) => {
                return Err(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                    Some(format!("journal_mode stayed {mode}")),
                ))
            }
            Err(e) => return Err(e),
        }
    }
}

/// Opens an existing database for reading only (`--read-only`, `sql`):
/// `SQLITE_OPEN_READ_ONLY`, `query_only`, no ATTACH. Never creates, migrates,
/// tightens modes or writes anything, so it works on a file the user may
/// only read.
///
/// When the folder cannot hold SQLite's `-shm` file (read-only storage, or
/// a folder this user may not write) and there is none, no writer can be
/// running (a writer needs that `-shm`), and:
/// - with no `-wal`, or an empty one, the file is opened as immutable:
///   exact, as every committed transaction is in the file;
/// - with a non-empty `-wal` (copied with the file, say), its committed
///   transactions are read through an in-memory WAL index: SQLite's
///   `unix-none` VFS with `locking_mode=EXCLUSIVE`, which never needs the
///   `-shm`, takes no lock and writes nothing. An immutable open would
///   silently hide those transactions.
///
/// # Errors
/// STORE_IO (no such file, unreadable, a `-shm` that exists but cannot be
/// opened, a `-wal` that cannot be read there, or a schema older than this
/// logbook: migrating is a write), STORE_CORRUPT, STORE_VERSION_TOO_NEW,
/// INVALID_ARGUMENT (a name SQLite would not read as a file path:
/// [`check_sqlite_name`]).
pub fn open_read_only(path: &Path, busy_timeout_ms: u64) -> Result<Connection> {
    check_sqlite_name(path, "db")?;
    let display = path.display().to_string();
    match fs::metadata(path) {
        Ok(m) if m.is_file() => refuse_hard_links(path, &m)?,
        Ok(_) => {
            return Err(io_err(
                format!("{display} is not a regular file"),
                std::io::Error::from(ErrorKind::InvalidInput),
            ))
        }
        Err(e) => return Err(io_err(format!("cannot read {display}"), e)),
    }
    let db_err = |e: rusqlite::Error| with_path(Error::from_sqlite(e, busy_timeout_ms), &display);
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    #[allow(clippy::disallowed_methods)]
    let first = Connection::open_with_flags(path, flags).and_then(|c| {
        // Touch the schema: this is where a missing, uncreatable -shm shows.
        c.query_row("SELECT count(*) FROM sqlite_schema", [], |_| Ok(()))?;
        Ok(c)
    });
    let mut conn = match first {
        Ok(c) => {
            // SQLite may have just created them with this file's mode.
            ensure_companions_owner_rw(path);
            c
        }
        // No -shm and no right to create one: SQLite reports CANTOPEN or
        // READONLY_CANTINIT.
        Err(e)
            if matches!(
                e.sqlite_error_code(),
                Some(rusqlite::ffi::ErrorCode::CannotOpen | rusqlite::ffi::ErrorCode::ReadOnly)
            ) && fs::symlink_metadata(companion(path, "-shm")).is_err() =>
        {
            let wal_len = fs::metadata(companion(path, "-wal")).map_or(0, |m| m.len());
            if wal_len == 0 {
                open_file_alone(path).map_err(db_err)?
            } else {
                open_wal_in_memory(path, flags).map_err(|e| Error::StoreFile {
                    path: display.clone(),
                    reason: format!(
                        "its -wal holds {wal_len} bytes of transactions not yet in the file, there is no -shm and none can be created here, and SQLite cannot read the -wal without one ({})",
                        Error::from_sqlite(e, busy_timeout_ms)
                    ),
                    hint: format!(
                        "copy the database together with its -wal to writable storage and read it there, or checkpoint it before copying (sqlite3 {display} 'PRAGMA wal_checkpoint(TRUNCATE)')"
                    ),
                })?
            }
        }
        Err(e) => return Err(db_err(e)),
    };
    conn.pragma_update(None, "query_only", true)
        .map_err(db_err)?;
    let _ = conn.set_limit(rusqlite::limits::Limit::SQLITE_LIMIT_ATTACHED, 0);
    let probe = checked_probe(&mut conn, busy_timeout_ms, &display, db_err)?;
    if probe.user_version < migrate::latest_version() {
        return Err(Error::StoreIo {
            context: format!(
                "{display} is at schema version {} and needs migrating to {}, which a read-only open does not do; run one logbook command on it without --read-only first",
                probe.user_version,
                migrate::latest_version()
            ),
        });
    }
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_uri_escapes_every_byte_sqlite_could_misread() {
        assert_eq!(
            file_uri(Path::new("/tmp/a b/é#%?x.db"), "immutable=1"),
            "file:///tmp/a%20b/%C3%A9%23%25%3Fx.db?immutable=1"
        );
        // A path starting with `//` keeps an empty authority.
        assert_eq!(file_uri(Path::new("//x/y.db"), "q"), "file:////x/y.db?q");
        assert_eq!(file_uri(Path::new("rel/y.db"), "q"), "file:rel/y.db?q");
    }
}
