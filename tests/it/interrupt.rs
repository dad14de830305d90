//! Long commands stopped part-way (docs/design.md, "Interruption"), with real processes:
//! SIGINT and SIGTERM during `export --out FILE` and `import` leave no temp
//! file, print the counts so far in the INTERRUPTED envelope and exit 130 /
//! 143; an import that hits a full disk (an `RLIMIT_FSIZE` on the process,
//! so no root is needed) reports STORE_IO with the exact counts it
//! committed. Every count is checked against the database itself.

use crate::common::*;
use serde_json::{json, Value};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Sessions in the big input: enough that neither command can finish in
/// the moment between seeing it under way and the signal's arrival.
const BIG: usize = 12_000;
/// Events per generated session.
const EVENTS: usize = 3;

/// One generated session line: `ses_<i as 16 hex>`, three events with ~1 KB
/// of data each.
fn line(i: usize) -> String {
    let pad = "p".repeat(900);
    let events: Vec<Value> = (0..EVENTS)
        .map(|k| {
            json!({"seq": k, "type": if k == 0 { "created" } else { "x.step" },
                   "at_ms": 1_000 + i, "actor_type": "cli", "detail": format!("step {k}"),
                   "data": {"k": k, "pad": pad}, "run_id": null, "hash": ""})
        })
        .collect();
    json!({
        "format": "logbook.session.v1", "session_id": format!("ses_{:016x}", i + 1),
        "status": "active", "title": format!("big {i}"), "goal": null, "app": "big",
        "agent_id": null, "route": null, "stage": null, "parent_session_id": null, "tags": [],
        "context": {}, "metadata": {}, "actor": {"type": "cli", "id": null, "authenticated": false},
        "rev": EVENTS, "checkpoint_seq": null, "refs": [], "final_result": null, "end_reason": null,
        "usage": {"input_tokens": 0, "output_tokens": 0, "api_calls": 0, "duration_ms": 0},
        "created_at_ms": 1_000 + i, "updated_at_ms": 1_000 + i, "ended_at_ms": null,
        "events": events
    })
    .to_string()
}

/// The big jsonl input and a database holding it, built once per test run
/// (in cargo's target tmp folder; a finished build is marked and reused).
fn big() -> &'static (PathBuf, PathBuf) {
    static BIG_FIXTURE: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BIG_FIXTURE.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "interrupt-v{}-{BIG}",
            logbook::store::LATEST_VERSION
        ));
        let (jsonl, db) = (dir.join("big.jsonl"), dir.join("big.db"));
        if dir.join("done").exists() {
            return (jsonl, db);
        }
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let text: String = (0..BIG).map(|i| line(i) + "\n").collect();
        std::fs::write(&jsonl, text).unwrap();
        let env = TestEnv::new();
        let mut c = env.command();
        let out = c
            .arg("--db")
            .arg(&db)
            .args(["import", "--format", "jsonl"])
            .arg(&jsonl)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(dir.join("done"), "").unwrap();
        (jsonl, db)
    })
}

/// Polls `ready` until it holds (a command under way), then sends `signal`
/// to `child` and returns what it printed and its exit code.
fn stop_when(mut child: Child, signal: i32, mut ready: impl FnMut() -> bool) -> Run {
    let start = Instant::now();
    while !ready() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the command ended ({status}) before it was seen under way");
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "never got under way"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    child.wait_with_output().unwrap().into()
}

/// Rows of `table`, 0 while it does not exist yet.
fn count(env: &TestEnv, table: &str) -> u64 {
    let sql = format!("SELECT count(*) FROM {table}");
    let n: Option<i64> = if on_pg() {
        off_runtime(|| env.pg_client().query_one(&sql, &[]).ok().map(|r| r.get(0)))
    } else {
        env.sql().query_row(&sql, [], |r| r.get(0)).ok()
    };
    n.map_or(0, |n| u64::try_from(n).unwrap())
}

/// The INTERRUPTED envelope: exit 128 + signal, retryable, the signal named.
#[track_caller]
fn interrupted(r: &Run, signal: &str, exit: i32) -> Value {
    let j = r.json();
    assert_eq!(j["ok"], false, "{}", r.stdout);
    assert_eq!(
        j["error"]["code"], "INTERRUPTED",
        "{}\n{}",
        r.stdout, r.stderr
    );
    assert_eq!(j["error"]["retryable"], true);
    assert_eq!(r.code, exit, "{}", r.stdout);
    let d = j["error"]["details"].clone();
    assert_eq!(d["signal"], signal, "{d}");
    d
}

fn export_stops(signal: i32, name: &str, exit: i32) {
    let (jsonl, db) = big();
    let env = TestEnv::new();
    // On PostgreSQL the big input is imported into the env's database
    // first (the shared file is SQLite's).
    let db: PathBuf = if on_pg() {
        env.json(&["import", "--format", "jsonl", jsonl.to_str().unwrap()])
            .data();
        env.db.clone()
    } else {
        db.clone()
    };
    let out_dir = env.dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let out = out_dir.join("all.jsonl");
    let child = env
        .command()
        .arg("--db")
        .arg(&db)
        .args(["export", "--format", "jsonl", "--json", "--out"])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Under way: its temp file beside FILE has data in it.
    let r = stop_when(child, signal, || {
        std::fs::read_dir(&out_dir).unwrap().any(|e| {
            let e = e.unwrap();
            e.file_name()
                .to_string_lossy()
                .starts_with("all.jsonl.tmp-")
                && e.metadata().is_ok_and(|m| m.len() > 0)
        })
    });
    let d = interrupted(&r, name, exit);
    let sessions = d["sessions"].as_u64().unwrap();
    assert!(sessions > 0 && sessions < BIG as u64, "{d}");
    assert_eq!(
        d,
        json!({"format": "jsonl", "sessions": sessions, "events": sessions * EVENTS as u64,
               "purge_records": 0, "tombstones": 0, "out": null, "signal": name})
    );
    let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("was not written (the temp file is removed)"),
        "{msg}"
    );
    // No debris: neither FILE nor its temp file.
    let left: Vec<_> = std::fs::read_dir(&out_dir).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    let v = env
        .command()
        .arg("--db")
        .arg(db)
        .args(["verify", "--json"])
        .output()
        .unwrap();
    assert!(v.status.success());
}

#[test]
fn sigint_during_export_removes_the_temp_file_prints_the_counts_and_exits_130() {
    export_stops(libc::SIGINT, "SIGINT", 130);
}

#[test]
fn sigterm_during_export_removes_the_temp_file_prints_the_counts_and_exits_143() {
    export_stops(libc::SIGTERM, "SIGTERM", 143);
}

/// Returns the env (its DB holds what was committed) and the details.
fn import_stops(signal: i32, name: &str, exit: i32) -> (TestEnv, Value) {
    let (jsonl, _) = big();
    let env = TestEnv::new();
    let child = env
        .command()
        .arg("--db")
        .arg(&env.db)
        .args(["import", "--format", "jsonl", "--json"])
        .arg(jsonl)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Under way: a first batch is committed.
    let r = stop_when(child, signal, || {
        (on_pg() || env.db.exists()) && count(&env, "sessions") > 0
    });
    let d = interrupted(&r, name, exit);
    let imported = count(&env, "sessions");
    assert!(imported > 0 && imported < BIG as u64, "{d}");
    // Batches are committed whole (256 sessions each).
    assert_eq!(imported % 256, 0, "{d}");
    assert_eq!(
        d,
        json!({"format": "jsonl", "imported": imported, "skipped": 0, "rejected": 0,
               "events": count(&env, "events"), "purge_records": 0, "tombstones": 0,
               "rejections": [], "rejections_omitted": 0, "signal": name})
    );
    assert_eq!(env.json(&["verify"]).code, 0);
    (env, d)
}

#[test]
fn sigint_during_import_keeps_whole_batches_prints_the_counts_and_exits_130() {
    import_stops(libc::SIGINT, "SIGINT", 130);
}

#[test]
fn sigterm_during_import_keeps_whole_batches_and_a_rerun_finishes_it() {
    let (env, d) = import_stops(libc::SIGTERM, "SIGTERM", 143);
    let before = d["imported"].as_u64().unwrap();
    let (jsonl, _) = big();
    let again = env
        .json(&["import", "--format", "jsonl", jsonl.to_str().unwrap()])
        .data();
    assert_eq!(again["skipped"], before);
    assert_eq!(again["imported"], BIG as u64 - before);
    assert_eq!(count(&env, "sessions"), BIG as u64);
    assert_eq!(env.json(&["verify"]).code, 0);
}

// A file size limit of the process: a server's files are not its own.
sqlite_only! {
/// The disk fills part-way (the process may not grow a file past a limit:
/// `write` fails with EFBIG, as on a full disk). The STORE_IO error used to
/// have empty details though batches had been committed.
#[test]
fn an_import_that_hits_a_full_disk_reports_exactly_what_it_committed() {
    let env = TestEnv::new();
    // Three sessions that exist already (skipped) and two bad lines
    // (rejected) open the input; then sessions until the disk is full.
    let mut text = String::new();
    for i in 0..3 {
        let id = env.create(&format!("existing {i}"));
        let l = env
            .run(&["export", "--format", "jsonl", "--session", &id])
            .stdout;
        text.push_str(&l);
    }
    text.push_str("{not json\n");
    text.push_str(&line(0).replace("\"rev\":3", "\"rev\":99"));
    text.push('\n');
    for i in 1..3_000 {
        text.push_str(&line(i));
        text.push('\n');
    }
    let input = env.dir.path().join("in.jsonl");
    std::fs::write(&input, text).unwrap();
    let (sessions_before, events_before) = (count(&env, "sessions"), count(&env, "events"));
    let db_len = std::fs::metadata(&env.db).unwrap().len();
    // Room for a few batches of the WAL, not for all of them.
    let limit = db_len + 3 * 1024 * 1024;
    let mut c = env.command();
    c.arg("--db")
        .arg(&env.db)
        .args(["import", "--format", "jsonl", "--json"])
        .arg(&input);
    // SAFETY: setrlimit and signal are async-signal-safe; they only change
    // the child's own limits and dispositions before exec.
    unsafe {
        c.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // EFBIG instead of being killed by SIGXFSZ.
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    let r: Run = c.output().unwrap().into();
    let e = assert_error(&r, "STORE_IO", 6);
    let d = &e["details"];
    let imported = count(&env, "sessions") - sessions_before;
    assert!(
        imported > 0 && imported < 2_999,
        "some batches and not all: {d}"
    );
    assert_eq!(
        (
            d["format"].clone(),
            d["imported"].clone(),
            d["skipped"].clone(),
            d["rejected"].clone(),
            d["events"].clone(),
            d["rejections_omitted"].clone(),
        ),
        (
            json!("jsonl"),
            json!(imported),
            json!(3),
            json!(2),
            json!(count(&env, "events") - events_before),
            json!(0),
        ),
        "{d}"
    );
    let fields: Vec<&str> = d["rejections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["line", "rev"]);
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!("imported {imported}, skipped 3, rejected 2")),
        "{msg}"
    );
    assert_eq!(env.json(&["verify"]).code, 0);
}

}

/// The library side, without a process: a triggered `LedgerOptions::interrupt`
/// stops backup and both exports before anything is left behind, and the
/// error says which signal and what was done (nothing).
#[test]
fn a_triggered_interrupt_stops_backup_and_exports_leaving_nothing() {
    use logbook::{CreateSession, ErrorCode, Interrupt, Ledger, LedgerOptions};
    let env = TestEnv::new();
    let interrupt = Interrupt::new();
    let mut opts = LedgerOptions::at(env.path());
    opts.interrupt = interrupt.clone();
    let ledger = Ledger::open(opts).unwrap();
    ledger.create_session(CreateSession::titled("one")).unwrap();
    interrupt.trigger(libc::SIGINT);
    let out = env.dir.path().join("out");
    std::fs::create_dir(&out).unwrap();

    // backup is SQLite's (a server is copied with pg_dump).
    if !on_pg() {
        let e = ledger.backup(&out.join("copy.db")).unwrap_err();
        assert_eq!((e.code(), e.exit_code()), (ErrorCode::Interrupted, 130));
        assert_eq!(e.details(), json!({"signal": "SIGINT"}));
    }

    let e = ledger
        .export_jsonl_file(&[], &out.join("x.jsonl"))
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Interrupted);
    assert!(matches!(
        e.root(),
        logbook::Error::Interrupted { signal: 2 }
    ));
    assert_eq!(
        e.details(),
        json!({"format": "jsonl", "sessions": 0, "events": 0, "purge_records": 0,
               "tombstones": 0, "out": null, "signal": "SIGINT"})
    );

    let e = ledger.export_phelix(&[], &out.join("phelix")).unwrap_err();
    assert_eq!(e.code(), ErrorCode::Interrupted);
    assert_eq!(e.details()["sessions"], 0);
    // Only the (empty) folders the Phelix export created are there.
    let mut left: Vec<String> = walk(&out);
    left.sort();
    assert_eq!(left, ["phelix", "phelix/sessions"]);
}

fn walk(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            found.extend(walk(&p).into_iter().map(|x| format!("{rel}/{x}")));
        }
        found.push(rel);
    }
    found
}
