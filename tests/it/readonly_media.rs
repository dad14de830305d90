//! A database on read-only media (docs/design.md, "Database files"): `--read-only` reads the
//! committed transactions of a copied `-wal` (never a snapshot that hides
//! them), `--read-only doctor` passes a clean WAL database, and a
//! read-write open fails with STORE_IO whose hint names `--read-only`.
//!
//! The media: as root, the folder bind-mounted read-only onto itself in a
//! private mount namespace of the command (`unshare -m`), or, without
//! that, the command run as user `nobody` on a folder it may not write; as
//! another user, a folder and files without write permission. A machine
//! offering none of these skips, except under CI, where that fails.

use crate::common::*;
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Media {
    /// Root: a read-only bind mount in the command's own mount namespace.
    Mount,
    /// Root without mount namespaces: run as `nobody`.
    Nobody,
    /// Not root: the folder and files lose their write bits.
    Modes,
}

fn sh_ok(script: &str, dir: &Path) -> bool {
    Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", script])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success())
}

/// How this machine can offer read-only media; `None` skips (fails under CI).
fn media() -> Option<Media> {
    // SAFETY-free: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        return Some(Media::Modes);
    }
    let probe = tempfile::tempdir().unwrap();
    let script =
        r#"mount --bind -o ro "$0" "$0" || exit 1; touch "$0/probe" 2>/dev/null && exit 1; exit 0"#;
    if sh_ok(script, probe.path()) {
        return Some(Media::Mount);
    }
    if Path::new("/usr/bin/setpriv").exists() {
        return Some(Media::Nobody);
    }
    None
}

/// A folder holding a copy of a database, made read-only as `media` says.
struct OnMedia {
    dir: tempfile::TempDir,
    db: PathBuf,
    media: Media,
}

impl OnMedia {
    /// Copies `files` (the database first) of `env` into a new folder.
    fn new(env: &TestEnv, suffixes: &[&str], media: Media) -> OnMedia {
        let dir = tempfile::Builder::new()
            // Bytes a file: URI must escape, and a non-ASCII name.
            .prefix("logbook media é#%?")
            .tempdir_in("/tmp")
            .unwrap();
        let db = dir.path().join("ledger.db");
        for s in suffixes {
            std::fs::copy(companion(env.path(), s), companion(&db, s)).unwrap();
        }
        // Owner-only files (so doctor's mode check passes), in a folder the
        // command's user may not write.
        let (dir_mode, file_mode) = match media {
            Media::Mount => (0o700, 0o600),
            Media::Nobody => (0o755, 0o400),
            Media::Modes => (0o555, 0o400),
        };
        for s in suffixes {
            let p = companion(&db, s);
            if media == Media::Nobody {
                std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
            }
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(file_mode)).unwrap();
        }
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(dir_mode)).unwrap();
        OnMedia { dir, db, media }
    }

    /// Runs `logbook --db DB ARGS` (`--json` unless `human`) on the media.
    fn run(&self, args: &[&str], human: bool) -> Run {
        let mut c = match self.media {
            Media::Mount => {
                let mut c = Command::new("unshare");
                c.args(["-m", "--propagation", "private", "sh", "-c"])
                    .arg(r#"mount --bind -o ro "$0" "$0" && exec "$@""#)
                    .arg(self.dir.path())
                    .arg(bin());
                c
            }
            Media::Nobody => {
                let mut c = Command::new("/usr/bin/setpriv");
                c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                    .arg(bin());
                c
            }
            Media::Modes => Command::new(bin()),
        };
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", "/nonexistent")
            .arg("--db")
            .arg(&self.db)
            .args(args);
        if !human {
            c.arg("--json");
        }
        c.output().unwrap().into()
    }

    /// The folder's files and their bytes.
    fn files(&self) -> Vec<(String, Vec<u8>)> {
        let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let name = e.file_name().to_string_lossy().into_owned();
                (name, std::fs::read(e.path()).unwrap())
            })
            .collect();
        v.sort();
        v
    }
}

impl Drop for OnMedia {
    fn drop(&mut self) {
        // Writable again, so the folder can be removed.
        let _ = std::fs::set_permissions(self.dir.path(), std::fs::Permissions::from_mode(0o700));
    }
}

/// The media strategy, or `None` to skip (a panic under CI).
fn media_or_skip() -> Option<Media> {
    let m = media();
    precondition(
        m.is_some(),
        "a way to offer read-only media (unshare and mount, setpriv, or a non-root user)",
    );
    m
}

/// A database of 4 sessions, 3 of them only in its `-wal`, copied with the
/// `-wal` and without a `-shm` (as a copy of a live database is).
fn copied_with_wal(media: Media) -> (TestEnv, OnMedia, Vec<String>) {
    let env = TestEnv::new();
    let mut ids = vec![env.create("in the file")];
    let keep = env.sql();
    keep.query_row("SELECT count(*) FROM sessions", [], |r| r.get::<_, i64>(0))
        .unwrap();
    for t in ["wal one", "wal two", "wal three"] {
        ids.push(env.create(t));
    }
    let on = OnMedia::new(&env, &["", "-wal"], media);
    drop(keep);
    // The precondition: the file alone holds 1 session, the WAL the rest.
    let alone = tempfile::tempdir().unwrap();
    std::fs::copy(&on.db, alone.path().join("alone.db")).unwrap();
    let n: i64 = rusqlite::Connection::open(alone.path().join("alone.db"))
        .unwrap()
        .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1, "three sessions are only in the -wal");
    (env, on, ids)
}

#[test]
fn read_only_reads_the_committed_wal_of_a_copy_on_read_only_media() {
    let Some(media) = media_or_skip() else {
        return;
    };
    let (_env, on, ids) = copied_with_wal(media);
    let before = on.files();
    let d = on.run(&["--read-only", "session", "list"], false).data();
    let titles: Vec<&str> = d["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["title"].as_str().unwrap())
        .collect();
    assert_eq!(titles.len(), 4, "{titles:?} ({media:?})");
    let d = on
        .run(&["--read-only", "session", "show", &ids[3]], false)
        .data();
    assert_eq!(d["session"]["title"], "wal three");
    let d = on.run(&["--read-only", "verify"], false).data();
    assert_eq!(
        (d["sessions"].as_i64(), d["events"].as_i64()),
        (Some(4), Some(4)),
        "{d}"
    );
    let d = on
        .run(&["sql", "SELECT count(*) AS n FROM sessions"], false)
        .data();
    assert_eq!(d["rows"], json!([[4]]));
    let d = on.run(&["--read-only", "events"], false).data();
    assert_eq!(d["events"].as_array().unwrap().len(), 4);
    let d = on.run(&["--read-only", "doctor"], false).data();
    assert_eq!(
        (d["healthy"].as_bool(), d["sessions"].as_i64()),
        (Some(true), Some(4)),
        "{d}"
    );
    assert_eq!(on.files(), before, "nothing was written to the media");
}

#[test]
fn read_only_doctor_passes_a_clean_wal_database_on_read_only_media() {
    let Some(media) = media_or_skip() else {
        return;
    };
    let env = TestEnv::new();
    env.create("clean");
    assert!(!companion(env.path(), "-wal").exists());
    let on = OnMedia::new(&env, &[""], media);
    let d = on.run(&["--read-only", "doctor"], false).data();
    assert_eq!(d["healthy"], true, "{d}");
    let jm = d["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "journal_mode")
        .unwrap()
        .clone();
    assert_eq!(jm["ok"], true, "{jm}");
    assert!(jm["detail"].as_str().unwrap().starts_with("wal"), "{jm}");
    let d = on.run(&["--read-only", "session", "list"], false).data();
    assert_eq!(d["sessions"][0]["title"], "clean");
    assert_eq!(on.files().len(), 1);
}

/// Without `--read-only`, reading a database on read-only media fails with
/// STORE_IO whose hint names `--read-only` (in `details.hint` under
/// `--json`, as a `hint:` line otherwise), with or without a `-wal`.
#[test]
fn a_read_write_open_on_read_only_media_is_store_io_naming_read_only() {
    let Some(media) = media_or_skip() else {
        return;
    };
    let (env, with_wal, _) = copied_with_wal(media);
    let clean = OnMedia::new(&env, &[""], media);
    for on in [&with_wal, &clean] {
        let before = on.files();
        for verb in [
            &["session", "list"][..],
            &["doctor"],
            &["verify"],
            &["session", "create", "--title", "t"],
        ] {
            let e = assert_error(&on.run(verb, false), "STORE_IO", 6);
            let hint = e["details"]["hint"].as_str().unwrap_or_default();
            assert!(hint.contains("--read-only"), "{verb:?}: {e}");
            let r = on.run(verb, true);
            assert_eq!(r.code, 6);
            assert!(r.stderr.starts_with("error[STORE_IO]"), "{}", r.stderr);
            assert!(
                r.stderr
                    .lines()
                    .any(|l| l.starts_with("hint: ") && l.contains("--read-only")),
                "{}",
                r.stderr
            );
        }
        assert_eq!(on.files(), before);
    }
}
