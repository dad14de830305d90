//! Real OS processes racing on one database file.

use crate::common::*;
use logbook::{CheckpointRequest, ErrorCode, Ledger, LedgerOptions, Mutation};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn cli(env: &TestEnv, db: &std::path::Path, args: &[&str]) -> Command {
    let mut c = env.command();
    c.arg("--db").arg(db).args(args);
    c
}

/// 16 processes race `checkpoint --if-rev R`: exactly one wins.
#[test]
fn if_rev_race_has_exactly_one_winner() {
    let env = TestEnv::new();
    let id = env.create("t");
    env.json(&["session", "checkpoint", &id, "--step", "warm"])
        .data();
    let r = 2;
    let cmds = (0..16)
        .map(|i| {
            let step = format!("s{i}");
            cli(
                &env,
                env.path(),
                &[
                    "session",
                    "checkpoint",
                    &id,
                    "--step",
                    &step,
                    "--if-rev",
                    "2",
                    "--json",
                ],
            )
        })
        .collect();
    let runs = race(env.dir.path(), cmds);
    let winners: Vec<&Run> = runs.iter().filter(|r| r.code == 0).collect();
    assert_eq!(winners.len(), 1, "{runs:#?}");
    for run in runs.iter().filter(|r| r.code != 0) {
        let err = assert_error(run, "SESSION_CONFLICT", 4);
        assert_eq!(err["details"]["current_rev"], r + 1);
    }
    let won_step = winners[0].data()["checkpoint"]["step"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(assert_rev_matches_events(&env, &id), r + 1);
    let last = env
        .json(&["session", "events", &id, "--after-seq", "1"])
        .data();
    assert_eq!(last["events"].as_array().unwrap().len(), 1);
    assert_eq!(last["events"][0]["data"]["step"], won_step.as_str());
}

/// The `data.step` of each event of a session after seq 0, by seq.
fn steps_after_create(env: &TestEnv, id: &str) -> Vec<String> {
    env.rows(
        &format!(
            "SELECT {} FROM events WHERE session_id = $1 AND seq > 0 ORDER BY seq",
            json_step()
        ),
        &[id],
    )
    .into_iter()
    .map(|r| r[0].as_str().unwrap().to_owned())
    .collect()
}

/// 8 processes × 40 checkpoints on one session, no guard: all succeed, revs
/// and seqs contiguous, no STORE_BUSY with the default timeout (C01, C05).
#[test]
fn unguarded_checkpoints_all_land() {
    let env = TestEnv::new();
    let id = env.create("t");
    let db = env.path().to_str().unwrap().to_owned();
    let cmds = (0..8)
        .map(|w| {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(r#"for i in $(seq 1 40); do "$0" --db "$1" session checkpoint "$2" --step "w$3-$i" --json || echo "EXIT $?"; done"#)
                .arg(bin())
                .arg(&db)
                .arg(&id)
                .arg(w.to_string())
                .env("PATH", std::env::var_os("PATH").unwrap());
            c
        })
        .collect();
    let runs = race(env.dir.path(), cmds);
    for (w, run) in runs.iter().enumerate() {
        assert_eq!(run.stdout.lines().count(), 40, "worker {w}: {}", run.stdout);
        for line in run.stdout.lines() {
            assert!(line.starts_with(r#"{"ok":true"#), "worker {w}: {line}");
        }
    }
    assert_eq!(assert_rev_matches_events(&env, &id), 321);
    // Each worker's steps are in its own order within the timeline.
    let steps = steps_after_create(&env, &id);
    assert_eq!(steps.len(), 320);
    for w in 0..8 {
        let mine: Vec<&String> = steps
            .iter()
            .filter(|s| s.starts_with(&format!("w{w}-")))
            .collect();
        let want: Vec<String> = (1..=40).map(|i| format!("w{w}-{i}")).collect();
        assert_eq!(mine, want.iter().collect::<Vec<_>>());
    }
}

// A new SQLite file, its folders' modes and the WAL.
sqlite_only! {
/// C04: 16 processes open a brand-new DB (and its missing folder) at the
/// same instant; all succeed, one history row per migration, WAL, 0700.
#[test]
fn many_processes_create_a_brand_new_db_at_once() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    for round in 0..20 {
        let db = env.dir.path().join(format!("r{round}/new/ledger.db"));
        let cmds = (0..16)
            .map(|i| {
                cli(
                    &env,
                    &db,
                    &[
                        "session",
                        "create",
                        "--title",
                        &format!("t{i}"),
                        "--app",
                        "a",
                        "--json",
                    ],
                )
            })
            .collect();
        let runs = race(env.dir.path(), cmds);
        for run in &runs {
            assert_eq!(run.code, 0, "round {round}: {run:?}");
            let low = format!("{}{}", run.stdout, run.stderr).to_lowercase();
            for bad in [
                "locked",
                "duplicate column",
                "already exists",
                "unique constraint",
            ] {
                assert!(!low.contains(bad), "{low}");
            }
        }
        let c = rusqlite::Connection::open(&db).unwrap();
        let (n, dup, mode, ic): (i64, i64, String, String) = c
            .query_row(
                "SELECT (SELECT count(*) FROM sessions),
                        (SELECT count(*) FROM (SELECT version FROM refinery_schema_history GROUP BY version HAVING count(*) > 1)),
                        (SELECT journal_mode FROM pragma_journal_mode),
                        (SELECT integrity_check FROM pragma_integrity_check)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        assert_eq!(
            (n, dup, mode.as_str(), ic.as_str()),
            (16, 0, "wal", "ok"),
            "round {round}"
        );
        for dir in [db.parent().unwrap(), db.parent().unwrap().parent().unwrap()] {
            assert_eq!(
                std::fs::metadata(dir).unwrap().permissions().mode() & 0o777,
                0o700
            );
        }
    }
}
}

/// Long-lived library writers (one `Ledger` per process, as an agent runs
/// it) stream checkpoints into one session at once, queued on the writer
/// lock (`store::sqlite::writelock`): every write lands exactly once, in each
/// process's own order, with rev and seqs contiguous — and every process
/// gets the lock, or it would not finish.
#[test]
fn streaming_library_writers_all_land_in_order() {
    let env = TestEnv::new();
    let id = env.create("t");
    let (procs, each) = (6u64, 150u64);
    let children: Vec<_> = (0..procs)
        .map(|p| crate::helper::spawn_writer(env.path(), &id, p * 1000, each))
        .collect();
    for (p, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "writer {p}: {:?}", out.status);
        let lines = String::from_utf8(out.stdout).unwrap();
        // `<seq> k<i>` per acknowledged write (the harness adds other lines).
        let steps: Vec<&str> = lines
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(seq, _)| seq.parse::<i64>().is_ok())
            .map(|(_, step)| step)
            .collect();
        let want: Vec<String> = (0..each)
            .map(|i| format!("k{}", p as u64 * 1000 + i))
            .collect();
        assert_eq!(steps, want, "writer {p} acknowledged these steps");
    }
    assert_eq!(
        assert_rev_matches_events(&env, &id),
        1 + (procs * each) as i64
    );
    let steps = steps_after_create(&env, &id);
    assert_eq!(steps.len() as u64, procs * each);
    for p in 0..procs {
        let mine: Vec<&String> = steps
            .iter()
            .filter(|s| s[1..].parse::<u64>().unwrap() / 1000 == p)
            .collect();
        let want: Vec<String> = (0..each).map(|i| format!("k{}", p * 1000 + i)).collect();
        assert_eq!(
            mine,
            want.iter().collect::<Vec<_>>(),
            "writer {p}'s steps in the timeline"
        );
    }
}

// SQLite's writer queue (the `-lock` file) and its locks.
sqlite_only! {
// ------------------------------------------------------------ the writer queue

/// The writer lock file of the database at `db`: `<canonical path>-lock`.
fn lock_file(db: &Path) -> PathBuf {
    PathBuf::from(format!(
        "{}-lock",
        std::fs::canonicalize(db).unwrap().display()
    ))
}

/// Another holder of the writer queue: a file description of the test's own.
fn hold_queue(db: &Path) -> File {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(lock_file(db))
        .unwrap();
    f.lock().unwrap();
    f
}

fn opts(db: &Path, busy_timeout_ms: u64) -> LedgerOptions {
    LedgerOptions {
        busy_timeout_ms,
        ..LedgerOptions::at(db)
    }
}

fn step(n: &str) -> CheckpointRequest {
    CheckpointRequest {
        step: Some(n.into()),
        ..Default::default()
    }
}

/// A writer that gives up waiting for the writer queue (STORE_BUSY) leaves
/// no lock behind: its waiting thread releases the lock it gets late, or
/// hands it to the same handle's next write.
#[test]
fn abandoned_queue_waits_leave_no_lock_behind() {
    let env = TestEnv::new();
    let s = env.create("t");
    let a = Ledger::open(opts(env.path(), 200)).unwrap();
    for round in 0..3 {
        let holder = hold_queue(env.path());
        let t = Instant::now();
        let e = a
            .checkpoint(&s, step("blocked"), &Mutation::default())
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::StoreBusy, "round {round}");
        assert!(t.elapsed() >= Duration::from_millis(200));
        drop(holder);
        if round == 1 {
            // Give the abandoned waiter time to get and release the lock.
            std::thread::sleep(Duration::from_millis(100));
        }
        // Both this handle and a fresh one can write again at once.
        a.checkpoint(&s, step("a"), &Mutation::default()).unwrap();
        let b = Ledger::open(opts(env.path(), 200)).unwrap();
        b.checkpoint(&s, step("b"), &Mutation::default()).unwrap();
    }
    assert_eq!(assert_rev_matches_events(&env, &s), 7);
}

/// The lock file is named from the database's canonical path, so writers
/// that reach one database through a symlink, a symlinked folder or `..`
/// queue on one lock: while the queue is held, each of them waits and gets
/// STORE_BUSY at its timeout (exit 4) and writes nothing; once it is free,
/// each of them writes.
#[test]
fn writers_through_any_spelling_of_the_path_queue_on_one_lock() {
    let env = TestEnv::new();
    let s = env.create("t");
    let d = env.dir.path();
    std::os::unix::fs::symlink(env.path(), d.join("link.db")).unwrap();
    std::os::unix::fs::symlink(d, d.join("dirlink")).unwrap();
    std::fs::create_dir(d.join("sub")).unwrap();
    let spellings = [
        d.join("link.db"),
        d.join("dirlink/ledger.db"),
        d.join("sub/../link.db"),
        env.path().to_path_buf(),
    ];
    let write = |db: &Path, n: &str| -> Run {
        let mut c = env.command();
        c.env("LOGBOOK_BUSY_TIMEOUT_MS", "200")
            .arg("--db")
            .arg(db)
            .args(["session", "checkpoint", &s, "--step", n, "--json"]);
        c.output().unwrap().into()
    };
    let holder = hold_queue(env.path());
    for db in &spellings {
        assert_error(&write(db, "blocked"), "STORE_BUSY", 4);
    }
    assert!(!d.join("link.db-lock").exists());
    assert_eq!(assert_rev_matches_events(&env, &s), 1);
    drop(holder);
    for (i, db) in spellings.iter().enumerate() {
        write(db, &format!("s{i}")).data();
    }
    assert_eq!(assert_rev_matches_events(&env, &s), 5);
}

/// A lock file that cannot be used (here a folder in its place) does not
/// stop writes: they go on with SQLite's own locking, which still orders
/// them and waits for the busy timeout.
#[test]
fn an_unusable_lock_file_falls_back_to_sqlite_locking() {
    let env = TestEnv::new();
    let s = env.create("t");
    let lock = lock_file(env.path());
    std::fs::remove_file(&lock).unwrap();
    std::fs::create_dir(&lock).unwrap();
    let a = Ledger::open(opts(env.path(), 5000)).unwrap();
    a.checkpoint(&s, step("a"), &Mutation::default()).unwrap();
    // Another client holds SQLite's write lock: a short timeout runs out…
    let other = env.sql();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let short = Ledger::open(opts(env.path(), 200)).unwrap();
    let t = Instant::now();
    let e = short
        .checkpoint(&s, step("blocked"), &Mutation::default())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::StoreBusy);
    assert!(t.elapsed() >= Duration::from_millis(200));
    // … and a writer with time left waits until the lock is released.
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        other.execute_batch("COMMIT").unwrap();
    });
    a.checkpoint(&s, step("b"), &Mutation::default()).unwrap();
    release.join().unwrap();
    assert_eq!(assert_rev_matches_events(&env, &s), 3);
    assert!(lock.is_dir());
}

/// One busy timeout bounds the whole wait: the queue, then SQLite's own
/// lock (held here by another client) gets only what is left of it.
#[test]
fn one_busy_timeout_bounds_the_queue_and_sqlite_waits_together() {
    let env = TestEnv::new();
    let s = env.create("t");
    let a = Ledger::open(opts(env.path(), 2000)).unwrap();
    let other = env.sql();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let holder = hold_queue(env.path());
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        drop(holder);
    });
    let t = Instant::now();
    let e = a
        .checkpoint(&s, step("blocked"), &Mutation::default())
        .unwrap_err();
    let waited = t.elapsed();
    assert_eq!(e.code(), ErrorCode::StoreBusy);
    release.join().unwrap();
    // The queue took 1.5 s of the 2 s; a fresh 2 s for SQLite's lock would
    // end at 3.5 s.
    assert!(waited >= Duration::from_millis(2000), "{waited:?}");
    assert!(waited < Duration::from_millis(3000), "{waited:?}");
    other.execute_batch("ROLLBACK").unwrap();
    a.checkpoint(&s, step("a"), &Mutation::default()).unwrap();
    assert_eq!(assert_rev_matches_events(&env, &s), 2);
}
}
