//! The database's own files (docs/design.md, "Database files"): no command writes its output
//! over the database or a companion, whatever the path looks like, and
//! `--db` is a file path, never a SQLite URI or `:memory:`. The files and
//! folders logbook creates are private, and a loose existing DB is
//! tightened (CASES C24).

use crate::common::*;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Every file under `dir` (recursively) with its bytes; `-shm` files are
/// listed without their bytes (readers write their read marks there).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                todo.push(p.clone());
                out.insert(p, None);
            } else if m.file_type().is_symlink() {
                out.insert(
                    p.clone(),
                    Some(
                        std::fs::read_link(&p)
                            .unwrap()
                            .into_os_string()
                            .into_encoded_bytes(),
                    ),
                );
            } else if p.to_string_lossy().ends_with("-shm") {
                out.insert(p, None);
            } else {
                let bytes = std::fs::read(&p).unwrap();
                out.insert(p, Some(bytes));
            }
        }
    }
    out
}

/// A database with two sessions whose `-wal`, `-shm` and `-lock` exist
/// (the returned connection keeps the WAL live), plus a `sub` folder, a
/// symlink to the database, a hard link to its `-lock` (a hard link to the
/// database itself makes it unopenable: see
/// [`a_database_with_a_second_name_is_refused_at_open`]), a symlinked
/// folder, and a dangling symlink to the (missing) `-journal`.
fn live_db() -> (TestEnv, rusqlite::Connection) {
    let env = TestEnv::new();
    env.create("one");
    let keep = env.sql();
    keep.query_row("SELECT count(*) FROM sessions", [], |r| r.get::<_, i64>(0))
        .unwrap();
    env.create("two");
    let d = env.dir.path();
    for s in ["-wal", "-shm", "-lock"] {
        assert!(companion(env.path(), s).exists(), "{s} exists");
    }
    std::fs::create_dir(d.join("sub")).unwrap();
    std::os::unix::fs::symlink("ledger.db", d.join("link.db")).unwrap();
    std::os::unix::fs::symlink(d, d.join("dirlink")).unwrap();
    std::os::unix::fs::symlink("ledger.db-journal", d.join("dangling")).unwrap();
    std::fs::hard_link(companion(env.path(), "-lock"), d.join("hard.db")).unwrap();
    (env, keep)
}

/// Every way of naming the database or a companion: (label, current folder
/// relative to the env's folder, the path as given).
fn shapes(env: &TestEnv) -> Vec<(&'static str, &'static str, String)> {
    let d = env.dir.path().display().to_string();
    let name = env
        .dir
        .path()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    vec![
        ("absolute", "", format!("{d}/ledger.db")),
        ("./ relative", "", "./ledger.db".into()),
        ("../ relative", "sub", format!("../../{name}/ledger.db")),
        (
            "missing folder then ..",
            "",
            format!("{d}/new/../ledger.db"),
        ),
        ("symlink", "", format!("{d}/link.db")),
        ("symlinked folder", "", format!("{d}/dirlink/ledger.db")),
        ("hard link to -lock", "", format!("{d}/hard.db")),
        ("live -wal", "", format!("{d}/ledger.db-wal")),
        ("live -shm", "", format!("{d}/ledger.db-shm")),
        ("-lock", "", format!("{d}/ledger.db-lock")),
        ("missing -journal", "", format!("{d}/ledger.db-journal")),
        ("dangling symlink to -journal", "", format!("{d}/dangling")),
        ("../ to -wal", "sub", "../ledger.db-wal".into()),
    ]
}

/// Runs `logbook --db ABS_DB ARGS --json` from `cwd` (relative to the env's
/// folder).
fn run_in(env: &TestEnv, cwd: &str, args: &[String]) -> Run {
    let mut c = env.command();
    c.current_dir(env.dir.path().join(cwd))
        .arg("--db")
        .arg(env.path())
        .args(args)
        .arg("--json");
    c.output().unwrap().into()
}

/// Asserts that every shape is refused for the command `make` builds around
/// the path, with INVALID_ARGUMENT naming `field`, and nothing on disk
/// changed (each shape on a fresh database; every shape that fails is
/// listed).
#[track_caller]
fn assert_every_shape_refused(make: impl Fn(&str) -> Vec<String>, field: &str) {
    let mut failures = Vec::new();
    let probe = live_db();
    let all = shapes(&probe.0);
    drop(probe);
    for (i, (label, ..)) in all.iter().enumerate() {
        let (env, keep) = live_db();
        let (_, cwd, path) = shapes(&env).swap_remove(i);
        let before = snapshot(env.dir.path());
        let r = run_in(&env, cwd, &make(&path));
        let j = r.json();
        let refused = (j["ok"].as_bool(), j["error"]["code"].as_str(), r.code)
            == (Some(false), Some("INVALID_ARGUMENT"), 2)
            && j["error"]["details"]["field"] == field
            && j["error"]["details"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains("destroy the database"));
        let unchanged = snapshot(env.dir.path()) == before;
        drop(keep);
        let intact = env.json(&["session", "list"]).json()["data"]["sessions"]
            .as_array()
            .map(Vec::len)
            == Some(2);
        if !(refused && unchanged && intact) {
            failures.push(format!(
                "{label} ({path}): refused {refused}, files unchanged {unchanged}, database intact {intact}: {}",
                r.stdout.trim()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} shape(s) not refused:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn export_jsonl_refuses_every_name_of_the_database_and_its_companions() {
    assert_every_shape_refused(
        |p| {
            ["export", "--format", "jsonl", "--out", p]
                .map(String::from)
                .to_vec()
        },
        "out",
    );
}

#[test]
fn export_phelix_refuses_every_name_of_the_database_and_its_companions() {
    assert_every_shape_refused(
        |p| {
            ["export", "--format", "phelix", "--out", p]
                .map(String::from)
                .to_vec()
        },
        "out",
    );
}

#[test]
fn backup_refuses_every_name_of_the_database_and_its_companions() {
    assert_every_shape_refused(|p| ["backup", p].map(String::from).to_vec(), "dest");
}

/// The check refuses only the database's own files: outputs beside it, and
/// a Phelix export into its folder, work.
#[test]
fn outputs_beside_the_database_are_still_written() {
    let (env, keep) = live_db();
    let d = env.dir.path();
    let r = run_in(
        &env,
        "",
        &["export", "--format", "jsonl", "--out", "ledger.db.jsonl"].map(String::from),
    );
    assert_eq!(r.data()["sessions"], 2);
    let r = run_in(
        &env,
        "sub",
        &["export", "--format", "phelix", "--out", ".."].map(String::from),
    );
    assert_eq!(r.data()["sessions"], 2);
    assert_eq!(std::fs::read_dir(d.join("sessions")).unwrap().count(), 2);
    let r = run_in(&env, "", &["backup", "ledger.db.bak"].map(String::from));
    assert_eq!(r.data()["sessions"], 2);
    drop(keep);
}

/// Runs `logbook ARGS --json` (no `--db` unless ARGS hold one) from the
/// env's folder, with `vars` set.
fn run_here(env: &TestEnv, args: &[&str], vars: &[(&str, &str)]) -> Run {
    let mut c = env.command();
    c.current_dir(env.dir.path()).args(args).arg("--json");
    for (k, v) in vars {
        c.env(k, v);
    }
    c.output().unwrap().into()
}

/// Puts the folder back as `before` listed it: files created since are
/// removed and changed files rewritten (so one failure does not hide the
/// next).
fn restore(env: &TestEnv, before: &BTreeMap<PathBuf, Option<Vec<u8>>>) {
    for (p, _) in snapshot(env.dir.path()) {
        if !before.contains_key(&p) {
            let _ = std::fs::remove_dir_all(&p);
            let _ = std::fs::remove_file(&p);
        }
    }
    for (p, bytes) in before {
        if let Some(b) = bytes {
            std::fs::write(p, b).unwrap();
        }
    }
}

/// `--db file:uri.db` beside a real `uri.db`, `--db :memory:`, and the same
/// through LOGBOOK_DB, are refused with INVALID_ARGUMENT naming `db` on
/// every open path (read-write, read-only, sql, doctor, verify, events),
/// before anything is created; a backup destination `file:…` is refused
/// naming `dest`. `./file:uri.db` is a plain file, created 0600.
#[test]
fn sqlite_uri_and_memory_names_are_refused_on_every_open_path() {
    let env = TestEnv::new();
    let real = env.dir.path().join("uri.db");
    let r = run_here(
        &env,
        &[
            "--db",
            real.to_str().unwrap(),
            "session",
            "create",
            "--title",
            "real",
        ],
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stdout);
    for s in ["-wal", "-shm", "-lock"] {
        let _ = std::fs::remove_file(companion(&real, s));
    }
    let before = snapshot(env.dir.path());
    let mut failures = Vec::new();
    let verbs: [&[&str]; 8] = [
        &["session", "create", "--title", "t"],
        &["session", "list"],
        &["--read-only", "session", "list"],
        &["sql", "SELECT count(*) FROM sessions"],
        &["doctor"],
        &["verify"],
        &["events"],
        &["--read-only", "doctor"],
    ];
    let absolute = format!("file:{}", real.display());
    // Mistyped server URLs (and a pasted space) would be taken as local
    // files, and every write of an agent meant for the server would "work".
    for name in [
        "file:uri.db",
        ":memory:",
        "file:uri.db?mode=rwc",
        &absolute,
        " postgres://postgres@127.0.0.1:1/x",
        "pg://postgres@127.0.0.1:1/x",
        "postgres//postgres@127.0.0.1:1/x",
        "postgres:",
        "PostgreSQL:/h/x",
        "mysql://x/y",
        " ",
        "uri.db ",
    ] {
        for verb in verbs {
            for via_env in [false, true] {
                let mut args = vec!["--busy-timeout-ms", "200"];
                let vars: Vec<(&str, &str)> = if via_env {
                    vec![("LOGBOOK_DB", name)]
                } else {
                    args.extend(["--db", name]);
                    vec![]
                };
                args.extend_from_slice(verb);
                let r = run_here(&env, &args, &vars);
                let j = r.json();
                let refused = (j["error"]["code"].as_str(), r.code)
                    == (Some("INVALID_ARGUMENT"), 2)
                    && j["error"]["details"]["field"] == "db";
                let now = snapshot(env.dir.path());
                if !refused || now != before {
                    failures.push(format!(
                        "{name} {verb:?} (LOGBOOK_DB: {via_env}): refused {refused}, files unchanged {}: {}",
                        now == before,
                        r.stdout.trim()
                    ));
                    restore(&env, &before);
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} open(s) not refused:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let e = assert_error(
        &run_here(
            &env,
            &["--db", real.to_str().unwrap(), "backup", "file:copy.db"],
            &[],
        ),
        "INVALID_ARGUMENT",
        2,
    );
    assert_eq!(e["details"]["field"], "dest");
    for s in ["-wal", "-shm", "-lock"] {
        let _ = std::fs::remove_file(companion(&real, s));
    }
    assert_eq!(snapshot(env.dir.path()), before);
    // A file whose name begins with `file:` is reachable as ./file:…
    let r = run_here(
        &env,
        &[
            "--db",
            "./file:uri.db",
            "session",
            "create",
            "--title",
            "literal",
        ],
        &[],
    );
    assert_eq!(r.data()["title"], "literal");
    let lit = env.dir.path().join("file:uri.db");
    assert_eq!(
        std::fs::metadata(&lit).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let r = run_here(&env, &["--db", "./file:uri.db", "session", "list"], &[]);
    assert_eq!(r.data()["sessions"][0]["title"], "literal");
    let r = run_here(&env, &["--db", "uri.db", "session", "list"], &[]);
    assert_eq!(r.data()["sessions"][0]["title"], "real");
}

/// `export` to a stdout that a shell appended to the database file (`>>`),
/// or to its live `-wal`, is refused before anything is written (the
/// redirect `>` would have emptied the file before logbook ran: nothing can
/// undo that, but nothing is written into it either).
#[test]
fn export_to_a_stdout_that_is_the_database_is_refused() {
    let (env, keep) = live_db();
    for target in ["ledger.db", "ledger.db-wal"] {
        let before = snapshot(env.dir.path());
        let out = std::fs::OpenOptions::new()
            .append(true)
            .open(env.dir.path().join(target))
            .unwrap();
        let mut c = env.command();
        c.arg("--db")
            .arg(env.path())
            .args(["export", "--format", "jsonl"])
            .stdout(out);
        let r: Run = c.output().unwrap().into();
        assert_eq!(r.code, 2, "{target}: {}", r.stderr);
        assert!(
            r.stderr
                .starts_with("error[INVALID_ARGUMENT]: invalid `stdout`"),
            "{target}: {}",
            r.stderr
        );
        assert_eq!(snapshot(env.dir.path()), before, "{target}");
    }
    drop(keep);
    assert_eq!(
        env.json(&["session", "list"]).data()["sessions"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

/// `logbook ARGS…` under `umask 022`, with extra environment.
fn run_umask(env: &TestEnv, extra: &[(&str, &Path)], args: &[&str]) -> Run {
    let mut c = env.sh("umask 022; exec \"$@\"");
    c.arg("sh").arg(bin()).args(args);
    for (k, v) in extra {
        c.env(k, v);
    }
    c.output().unwrap().into()
}

/// C24: under umask 022, folders logbook creates are 0700 and the DB, -wal
/// and -shm are 0600; at an explicit path and at the default location.
#[test]
fn c24_files_and_created_folders_are_private() {
    let env = TestEnv::new();
    let sub = env.dir.path().join("sub");
    let db = sub.join("dir/ledger.db");
    let dbs = db.to_str().unwrap();
    let d = run_umask(
        &env,
        &[],
        &[
            "--db", dbs, "session", "create", "--title", "t", "--app", "a", "--json",
        ],
    )
    .data();
    let id = id_of(&d);
    run_umask(
        &env,
        &[],
        &[
            "--db",
            dbs,
            "session",
            "checkpoint",
            &id,
            "--step",
            "s",
            "--json",
        ],
    )
    .data();
    assert_eq!(mode_of(&sub), 0o700);
    assert_eq!(mode_of(&sub.join("dir")), 0o700);
    assert_eq!(mode_of(&db), 0o600);
    let holder = open_ledger(&db);
    run_umask(
        &env,
        &[],
        &[
            "--db",
            dbs,
            "session",
            "checkpoint",
            &id,
            "--step",
            "s2",
            "--json",
        ],
    )
    .data();
    for p in [db.clone(), companion(&db, "-wal"), companion(&db, "-shm")] {
        assert_eq!(mode_of(&p), 0o600, "{}", p.display());
    }
    drop(holder);

    // Default location: no --db, no LOGBOOK_DB, XDG_DATA_HOME set.
    let xdg = env.dir.path().join("xdg");
    let d = run_umask(
        &env,
        &[("XDG_DATA_HOME", xdg.as_path())],
        &["session", "create", "--title", "t", "--app", "a", "--json"],
    )
    .data();
    let db = xdg.join("logbook/logbook.db");
    assert!(db.exists());
    assert_eq!(mode_of(&xdg), 0o700);
    assert_eq!(mode_of(&xdg.join("logbook")), 0o700);
    assert_eq!(mode_of(&db), 0o600);
    let holder = open_ledger(&db);
    run_umask(
        &env,
        &[("XDG_DATA_HOME", xdg.as_path())],
        &["session", "checkpoint", &id_of(&d), "--step", "s", "--json"],
    )
    .data();
    for p in [db.clone(), companion(&db, "-wal"), companion(&db, "-shm")] {
        assert_eq!(mode_of(&p), 0o600, "{}", p.display());
    }
    drop(holder);
}

/// C24: an existing DB left at 0644 is tightened to 0600; a folder logbook
/// did not create keeps its mode.
#[test]
fn c24_an_existing_loose_db_is_tightened() {
    let env = TestEnv::new();
    let own = env.dir.path().join("mine");
    fs::create_dir(&own).unwrap();
    fs::set_permissions(&own, fs::Permissions::from_mode(0o750)).unwrap();
    let db = own.join("ledger.db");
    let dbs = db.to_str().unwrap();
    let id = id_of(
        &run_umask(
            &env,
            &[],
            &["--db", dbs, "session", "create", "--title", "t", "--json"],
        )
        .data(),
    );
    fs::set_permissions(&db, fs::Permissions::from_mode(0o644)).unwrap();
    run_umask(
        &env,
        &[],
        &[
            "--db",
            dbs,
            "session",
            "checkpoint",
            &id,
            "--step",
            "s",
            "--json",
        ],
    )
    .data();
    assert_eq!(mode_of(&db), 0o600);
    assert_eq!(
        mode_of(&own),
        0o750,
        "a folder logbook did not create was changed"
    );
}

/// The STORE_IO a database file with `names` names is refused with
/// (attack report #2), named as `path`.
#[track_caller]
fn assert_hard_links_refused(r: &Run, path: &Path, names: u32) {
    let e = assert_error(r, "STORE_IO", 6);
    assert_eq!(
        e["message"],
        format!(
            "{}: the database file has {names} names (hard links); logbook refuses it because hard links give SQLite one -wal/-shm per name for one database: writes through each name are lost to the other and break the event chain",
            path.display()
        )
    );
    assert_eq!(
        e["details"]["hint"],
        format!(
            "use one name: remove the other links once no logbook process uses them (`find <folder> -samefile {}` lists them); for a second copy use `cp` (or `logbook backup`), not `ln`",
            path.display()
        )
    );
}

/// Two hard links to one database are two `-wal`/`-shm` pairs for one
/// file: writes through each name were acknowledged and lost to the other
/// (attack report #2). Every open through either name, for writing or for
/// reading, and `doctor`, is refused with STORE_IO, and nothing is
/// written; with one name again all works.
#[test]
fn a_database_with_a_second_name_is_refused_at_open() {
    let env = TestEnv::new();
    let s = env.create("one");
    let other = env.dir.path().join("other.db");
    fs::hard_link(env.path(), &other).unwrap();
    let before = snapshot(env.dir.path());
    for db in [env.path(), other.as_path()] {
        let run = |args: &[&str]| -> Run {
            let mut c = env.command();
            c.arg("--db").arg(db).args(args).arg("--json");
            c.output().unwrap().into()
        };
        for args in [
            &["session", "create", "--title", "two"][..],
            &["session", "checkpoint", &s, "--step", "x"],
            &["session", "list"],
            &["--read-only", "session", "show", &s],
            &["doctor"],
            &["verify"],
        ] {
            let r = run(args);
            assert_hard_links_refused(&r, db, 2);
        }
    }
    assert_eq!(snapshot(env.dir.path()), before, "nothing was written");
    let third = env.dir.path().join("third.db");
    fs::hard_link(env.path(), &third).unwrap();
    assert_hard_links_refused(&env.json(&["session", "list"]), env.path(), 3);
    fs::remove_file(&other).unwrap();
    fs::remove_file(&third).unwrap();
    assert_eq!(
        listed(&env.json(&["session", "list"]).data()),
        vec![s.clone()]
    );
    env.checkpoint(&s, "x");
}

/// A second name given while a handle is open (`ln` beside a running
/// `mcp serve`) is found before its next transaction: refused, nothing
/// written; once the link is gone the handle works again.
#[test]
fn a_second_name_given_under_an_open_handle_is_refused() {
    let (env, lg) = fresh_ledger();
    let s = lib_create(&lg, "one", "a");
    let other = env.dir.path().join("other.db");
    fs::hard_link(env.path(), &other).unwrap();
    let e = lg
        .checkpoint(&s, cp("x", None), &logbook::Mutation::default())
        .unwrap_err();
    assert_eq!(e.code(), logbook::ErrorCode::StoreIo);
    assert!(
        e.to_string()
            .contains("the database file has 2 names (hard links)"),
        "{e}"
    );
    assert_eq!(
        lg.get_session(&s).unwrap_err().code(),
        logbook::ErrorCode::StoreIo
    );
    fs::remove_file(&other).unwrap();
    assert_eq!(lg.get_session(&s).unwrap().rev, 1);
    lg.checkpoint(&s, cp("x", None), &logbook::Mutation::default())
        .unwrap();
    assert_eq!(lg.get_session(&s).unwrap().rev, 2);
}
