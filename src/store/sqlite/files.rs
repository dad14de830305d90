//! Which files are the database's: its name as SQLite must read it, its
//! identity on disk, and the companions no output may overwrite.
//!
//! - [`check_sqlite_name`]: a database (or backup) name SQLite would not
//!   read as a plain file path (`file:` URIs, `:memory:`, the empty name)
//!   is refused before anything is created (docs/design.md, "Database files").
//! - [`FileId`]: the (device, inode) a handle opened, compared with what
//!   the path names now, so a long-lived handle notices a file replaced
//!   under it (docs/design.md, "Database files").
//! - [`refuse_hard_links`]: a database file with more than one name
//!   (hard links) is refused at open and before each transaction (attack
//!   report #2): SQLite would keep one `-wal`/`-shm` per name.
//! - [`DbFiles`]: the database and its `-wal`, `-shm`, `-lock` and
//!   `-journal`, resolved through `..` and symlinks and identified by
//!   (device, inode), so no command writes its output over one of them
//!   (docs/design.md, "Database files").
//!
//! No SQL here; `open.rs` and the `Ledger` call these.

use crate::error::{Error, Result};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// The suffixes of the files that belong to a database: the file itself,
/// SQLite's WAL, its shared-memory index, its rollback journal (a backup's
/// or an old file's), and logbook's writer lock.
pub const COMPANION_SUFFIXES: [&str; 5] = ["", "-wal", "-shm", "-journal", "-lock"];

/// Refuses a name SQLite would not open as the plain file it names: the
/// empty name (a private temporary database), `:memory:` (an in-memory
/// database, gone at exit), and a name beginning with `file:` (the bundled
/// SQLite reads it as a URI: `file:x.db` opens `x.db`, with any `?mode=`
/// or `?vfs=` it carries). `field` names the flag or argument.
///
/// A file whose name really begins with `file:` can still be named as
/// `./file:…`.
///
/// # Errors
/// INVALID_ARGUMENT naming `field`.
pub fn check_sqlite_name(path: &Path, field: &str) -> Result<()> {
    let bytes = path.as_os_str().as_encoded_bytes();
    if bytes.is_empty() {
        return Err(Error::invalid(field, "must be a file path; it is empty"));
    }
    if bytes == b":memory:" {
        return Err(Error::invalid(
            field,
            "`:memory:` is an in-memory SQLite database that would vanish at exit; logbook takes a file path (./:memory: for a file of that name)",
        ));
    }
    if bytes.starts_with(b"file:") {
        return Err(Error::invalid(
            field,
            "a name beginning with `file:` is read by SQLite as a URI, not as a file path; logbook takes a file path: drop the `file:`, or write ./file:… for a file whose name begins so",
        ));
    }
    if bytes.first().is_some_and(u8::is_ascii_whitespace)
        || bytes.last().is_some_and(u8::is_ascii_whitespace)
    {
        return Err(Error::invalid(
            field,
            "begins or ends with white space (a URL pasted with a space, or an empty value?); logbook takes a file path or a postgres:// URL as it is: write ./\" name\" for a file whose name begins with a space",
        ));
    }
    if looks_like_url(bytes) {
        return Err(Error::invalid(
            field,
            "looks like a URL but is not a postgres:// or postgresql:// one, so it would be taken as a local SQLite file; a server URL starts with postgres:// (or postgresql://); write ./NAME for a file whose name looks so",
        ));
    }
    Ok(())
}

/// Whether a location that is not a server URL looks like one (docs/design.md, "Backends"):
/// a scheme and `:/` (`pg://…`, `mysql://…`, `postgres:/…`), or
/// `postgres` / `postgresql` followed by `:` or `//` (`postgres:`,
/// `postgres//host/db`). Taken as a SQLite path, it would give exit 0 to
/// every write of an agent that meant to share a server's ledger.
fn looks_like_url(b: &[u8]) -> bool {
    let lower: Vec<u8> = b.iter().map(u8::to_ascii_lowercase).collect();
    for p in [&b"postgresql"[..], &b"postgres"[..]] {
        if let Some(rest) = lower.strip_prefix(p) {
            if rest.starts_with(b":") || rest.starts_with(b"//") {
                return true;
            }
        }
    }
    let scheme = b
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'.' | b'-'))
        .count();
    scheme > 0 && b[0].is_ascii_alphabetic() && b[scheme..].starts_with(b":/")
}

/// A file's identity: (device, inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
}

impl FileId {
    /// The identity of what `path` names now (symlinks followed).
    ///
    /// # Errors
    /// The `stat` error (NotFound when nothing is there).
    pub fn of(path: &Path) -> io::Result<FileId> {
        fs::metadata(path).map(|m| FileId::from_meta(&m))
    }

    pub(crate) fn from_meta(m: &fs::Metadata) -> FileId {
        FileId {
            dev: m.dev(),
            ino: m.ino(),
        }
    }
}

/// Refuses a database file that has more than one name (`st_nlink > 1`,
/// hard links), for writing and for reading alike. SQLite names the
/// `-wal` and `-shm` after the name it opened (and logbook its writer
/// lock), so each name of one file gets its own: commits through one name
/// sit in a WAL the others never read, and are lost to them, and the
/// file's event chain ends up broken. A reader through another name would
/// miss commits too.
///
/// # Errors
/// STORE_IO ([`Error::StoreFile`]) saying why, with what to do in its hint.
pub fn refuse_hard_links(path: &Path, meta: &fs::Metadata) -> Result<()> {
    let names = meta.nlink();
    if names <= 1 {
        return Ok(());
    }
    Err(Error::StoreFile {
        path: path.display().to_string(),
        reason: format!(
            "the database file has {names} names (hard links); logbook refuses it because hard links give SQLite one -wal/-shm per name for one database: writes through each name are lost to the other and break the event chain"
        ),
        hint: format!(
            "use one name: remove the other links once no logbook process uses them (`find <folder> -samefile {}` lists them); for a second copy use `cp` (or `logbook backup`), not `ln`",
            path.display()
        ),
    })
}

/// Resolves `path` as the kernel would when creating it now: absolute,
/// with every symlink of its existing part followed (dangling ones too:
/// writing through a dangling link creates its target) and `..` applied to
/// the resolved folder. Components that do not exist yet are appended as
/// written (they cannot be links), so a missing folder followed by `..`
/// resolves where creating it would land.
fn resolve(path: &Path) -> io::Result<PathBuf> {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    let mut todo: VecDeque<OsString> = VecDeque::new();
    let mut out = PathBuf::from("/");
    push_components(&abs, &mut todo, &mut out);
    let mut links = 0;
    while let Some(name) = todo.pop_front() {
        if name == ".." {
            out.pop();
            continue;
        }
        let next = out.join(&name);
        match fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > 40 {
                    return Err(io::Error::other("too many levels of symbolic links"));
                }
                let target = fs::read_link(&next)?;
                let mut rest: VecDeque<OsString> = VecDeque::new();
                push_components(&target, &mut rest, &mut out);
                rest.extend(todo);
                todo = rest;
            }
            _ => out = next,
        }
    }
    Ok(out)
}

/// Queues the components of `p` (`.` dropped); an absolute `p` restarts
/// `out` at the root.
fn push_components(p: &Path, todo: &mut VecDeque<OsString>, out: &mut PathBuf) {
    for c in p.components() {
        match c {
            Component::RootDir | Component::Prefix(_) => *out = PathBuf::from("/"),
            Component::CurDir => {}
            Component::ParentDir => todo.push_back(OsString::from("..")),
            Component::Normal(n) => todo.push_back(n.to_os_string()),
        }
    }
}

/// The files of one database, resolved once, to check outputs against.
#[derive(Debug, Clone)]
pub struct DbFiles {
    /// Each companion's resolved path, in [`COMPANION_SUFFIXES`] order.
    files: Vec<PathBuf>,
}

impl DbFiles {
    /// Resolves the database at `db` and its companions
    /// ([`COMPANION_SUFFIXES`]).
    ///
    /// # Errors
    /// STORE_IO when the current folder or a link cannot be read.
    pub fn of(db: &Path) -> Result<DbFiles> {
        let resolved = resolve(db).map_err(|e| Error::Io {
            context: format!("cannot resolve {}", db.display()),
            source: e,
        })?;
        let files = COMPANION_SUFFIXES
            .iter()
            .map(|s| crate::store::sqlite::open::companion(&resolved, s))
            .collect();
        Ok(DbFiles { files })
    }

    /// No files (a database on a server).
    pub fn none() -> DbFiles {
        DbFiles { files: Vec::new() }
    }

    /// Refuses an output path that names the database or one of its
    /// companions: by its resolved path (through `..` and symlinks, the
    /// destination existing or not) or, when it exists, by (device, inode)
    /// (a hard link). `field` names the flag or argument.
    ///
    /// # Errors
    /// INVALID_ARGUMENT naming `field`; STORE_IO when the path cannot be
    /// resolved.
    pub fn refuse(&self, dest: &Path, field: &str) -> Result<()> {
        let resolved = resolve(dest).map_err(|e| Error::Io {
            context: format!("cannot resolve {}", dest.display()),
            source: e,
        })?;
        let dest_id = FileId::of(dest).ok();
        for (i, p) in self.files.iter().enumerate() {
            // Identities are read now: a -wal or -shm may have appeared
            // since the handle opened.
            let same_id = dest_id.is_some() && FileId::of(p).ok() == dest_id;
            if *p == resolved || same_id {
                let what = match COMPANION_SUFFIXES[i] {
                    "" => "the database file itself".to_owned(),
                    s => format!("the database's `{s}` file"),
                };
                return Err(Error::invalid(
                    field,
                    format!("names {what} ({}); writing there would destroy the database: choose another path", p.display()),
                ));
            }
        }
        Ok(())
    }

    /// Refuses an output already open (the CLI's stdout, which a shell may
    /// have pointed at the database with `>>`) that is one of the database's
    /// files, by (device, inode). A pipe or terminal passes.
    ///
    /// # Errors
    /// INVALID_ARGUMENT naming `field`.
    pub fn refuse_open(&self, out: impl std::os::fd::AsFd, field: &str) -> Result<()> {
        let Ok(meta) = out
            .as_fd()
            .try_clone_to_owned()
            .and_then(|fd| fs::File::from(fd).metadata())
        else {
            return Ok(());
        };
        let id = Some(FileId::from_meta(&meta));
        for (i, p) in self.files.iter().enumerate() {
            if FileId::of(p).ok() == id {
                return Err(Error::invalid(
                    field,
                    format!(
                        "is the database's {} file ({}); writing there would destroy the database: redirect it to another file",
                        match COMPANION_SUFFIXES[i] {
                            "" => "own",
                            s => s,
                        },
                        p.display()
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sqlite_would_misread_are_refused() {
        for bad in [
            "",
            ":memory:",
            "file:x.db",
            "file:/tmp/x.db?mode=ro",
            "file:",
        ] {
            let e = check_sqlite_name(Path::new(bad), "db").unwrap_err();
            assert!(
                matches!(&e, Error::InvalidArgument { field, .. } if field == "db"),
                "{bad:?}: {e}"
            );
        }
        for ok in [
            "x.db",
            "./file:x.db",
            "/tmp/file:x.db",
            "FILE:x.db",
            "./:memory:",
            "d/file:x",
        ] {
            check_sqlite_name(Path::new(ok), "db").unwrap();
        }
    }

    #[test]
    fn resolve_follows_links_dotdot_and_missing_folders() {
        let d = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(d.path()).unwrap();
        fs::create_dir(root.join("real")).unwrap();
        fs::write(root.join("real/t.db"), b"x").unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
        std::os::unix::fs::symlink("real/t.db-wal", root.join("dangling")).unwrap();
        let want = root.join("real/t.db");
        for p in [
            root.join("real/t.db"),
            root.join("link/t.db"),
            root.join("real/../real/./t.db"),
            root.join("link/../real/t.db"),
            root.join("real/new/deeper/../../t.db"),
        ] {
            assert_eq!(resolve(&p).unwrap(), want, "{}", p.display());
        }
        assert_eq!(
            resolve(&root.join("dangling")).unwrap(),
            root.join("real/t.db-wal")
        );
    }
}
