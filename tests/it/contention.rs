//! Writers contending for one database (CASES C01, C03, C05, C10): writer
//! processes and library handles beside each other all land or get a
//! retryable STORE_BUSY / SESSION_CONFLICT (never "database is locked"); a
//! write that fails rolls back whole and leaves no lock behind; parallel
//! checkpoints lose no update and `--if-rev` has exactly one winner; seqs
//! stay unique and contiguous across writers and a restart.

use crate::common::*;
use logbook::{AppendEvent, ErrorCode, Ledger, LedgerOptions, Mutation};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

type CheckpointRow = (i64, Option<String>, Option<String>);

/// `(seq, step, note)` of a session's checkpoint events, by seq.
fn checkpoint_rows(env: &TestEnv, id: &str) -> Vec<CheckpointRow> {
    let text = |v: &Value| v.as_str().map(str::to_owned);
    env.rows(
        pick(
            "SELECT seq, json_extract(data, '$.step'), detail FROM events
             WHERE session_id = $1 AND type = 'checkpoint' ORDER BY seq",
            "SELECT seq, data::json->>'step', detail FROM events
             WHERE session_id = $1 AND type = 'checkpoint' ORDER BY seq",
        ),
        &[id],
    )
    .iter()
    .map(|r| (r[0].as_i64().unwrap(), text(&r[1]), text(&r[2])))
    .collect()
}

/// C01: 8 writer processes × 50 checkpoints on 8 sessions while 2 readers
/// list: every call succeeds, nothing says "database is locked".
#[test]
fn c01_parallel_writer_processes_all_succeed() {
    let env = TestEnv::new();
    let ids: Vec<String> = (1..=8).map(|i| env.create(&format!("w{i}"))).collect();
    let start = Barrier::new(ids.len() + 2);
    let done = AtomicBool::new(false);
    let (writes, reads) = std::thread::scope(|s| {
        let (env, start, done) = (&env, &start, &done);
        let writers: Vec<_> = ids
            .iter()
            .map(|id| {
                s.spawn(move || {
                    start.wait();
                    (1..=50)
                        .map(|n| {
                            let step = format!("s{n}");
                            env.json(&["session", "checkpoint", id, "--step", &step, "--note", "n"])
                        })
                        .collect::<Vec<Run>>()
                })
            })
            .collect();
        let readers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(move || {
                    start.wait();
                    let mut runs = Vec::new();
                    while !done.load(Ordering::SeqCst) {
                        runs.push(env.json(&["session", "list"]));
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    runs
                })
            })
            .collect();
        let writes: Vec<Vec<Run>> = writers.into_iter().map(|h| h.join().unwrap()).collect();
        done.store(true, Ordering::SeqCst);
        let reads: Vec<Vec<Run>> = readers.into_iter().map(|h| h.join().unwrap()).collect();
        (writes, reads)
    });
    for (id, runs) in ids.iter().zip(&writes) {
        for (n, r) in (1_i64..).zip(runs) {
            assert!(
                !r.stdout.contains("locked") && !r.stderr.contains("locked"),
                "{r:?}"
            );
            let d = r.data();
            assert_eq!(d["rev"], 1 + n, "{id} call {n}");
            assert_eq!(d["checkpoint"]["seq"], n);
            assert_eq!(d["checkpoint"]["step"], format!("s{n}"));
        }
        let want: Vec<CheckpointRow> = (1..=50)
            .map(|n| (n, Some(format!("s{n}")), Some("n".to_owned())))
            .collect();
        assert_eq!(checkpoint_rows(&env, id), want);
        assert_eq!(assert_rev_matches_events(&env, id), 51);
    }
    for runs in &reads {
        assert!(!runs.is_empty());
        for r in runs {
            assert!(
                !r.stdout.contains("locked") && !r.stderr.contains("locked"),
                "{r:?}"
            );
            assert_eq!(r.data()["sessions"].as_array().unwrap().len(), 8);
        }
    }
}

/// C01: every `Ledger` connection is in WAL mode with a busy timeout > 0,
/// shown by what the timeout does (not by reading the option back): while
/// another connection holds the write lock, a handle with 1234 ms gives up
/// with STORE_BUSY after at least 1234 ms, and a handle with the default
/// (5000 ms) waits the lock out and writes once it is released at 2 s.
#[test]
fn c01_every_ledger_connection_has_wal_and_a_busy_timeout() {
    let env = TestEnv::new();
    let id = env.create("t");
    let a = env.ledger();
    let b = env.ledger();
    let c = Ledger::open(LedgerOptions {
        busy_timeout_ms: 1234,
        ..LedgerOptions::at(env.path())
    })
    .unwrap();
    // PRAGMAs are SQLite's; the busy timeout holds on either.
    if !on_pg() {
        for l in [&a, &b, &c] {
            assert_eq!(l.pragma("journal_mode").unwrap(), "wal");
            assert_eq!(l.pragma("foreign_keys").unwrap(), "1");
        }
    }
    let lock = env.hold_write_lock(&id);
    let start = Instant::now();
    let holder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(2000));
        let released = Instant::now();
        lock.release();
        released
    });
    let e = c
        .checkpoint(&id, cp("blocked", None), &Mutation::default())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::StoreBusy);
    assert_eq!(e.details()["busy_timeout_ms"], 1234);
    assert!(
        start.elapsed() >= Duration::from_millis(1234),
        "{:?}",
        start.elapsed()
    );
    let s = a
        .checkpoint(&id, cp("waited", None), &Mutation::default())
        .unwrap();
    let done = Instant::now();
    let released = holder.join().unwrap();
    assert!(
        done >= released,
        "the default handle wrote before the lock was released"
    );
    assert_eq!(s.rev, 2);
    assert_eq!(assert_rev_matches_events(&env, &id), 2);
}

/// C01: contention longer than the busy timeout is STORE_BUSY (exit 4,
/// retryable) with nothing half-written; the default 5000 ms outlasts a 1 s
/// lock.
#[test]
fn c01_contention_past_the_busy_timeout_is_store_busy() {
    let env = TestEnv::new();
    let id = env.create("t");
    let before = env.show(&id);
    let lock = env.hold_write_lock(&id);

    let t = Instant::now();
    let r = env.json(&[
        "--busy-timeout-ms",
        "200",
        "session",
        "checkpoint",
        &id,
        "--step",
        "x",
    ]);
    let waited = t.elapsed();
    let e = assert_error(&r, "STORE_BUSY", 4);
    assert_eq!(e["details"]["busy_timeout_ms"], 200);
    assert!(
        waited >= Duration::from_millis(200) && waited < Duration::from_secs(4),
        "{waited:?}"
    );

    let r: Run = env
        .cli(&["session", "checkpoint", &id, "--step", "x"])
        .env("LOGBOOK_BUSY_TIMEOUT_MS", "300")
        .output()
        .unwrap()
        .into();
    let e = assert_error(&r, "STORE_BUSY", 4);
    assert_eq!(e["details"]["busy_timeout_ms"], 300);
    assert_eq!(env.show(&id), before);
    assert_eq!(assert_rev_matches_events(&env, &id), 1);

    let holder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        lock.release();
    });
    let t = Instant::now();
    let d = env.checkpoint(&id, "after");
    assert!(
        t.elapsed() >= Duration::from_millis(700),
        "{:?}",
        t.elapsed()
    );
    holder.join().unwrap();
    assert_eq!(d["rev"], 2);
    assert_eq!(assert_rev_matches_events(&env, &id), 2);
}

/// C03: a statement failing after the session UPDATE rolls the whole write
/// back (same bytes from show) and leaves no lock, from the CLI and from
/// one long-lived library handle, which then keeps working.
#[test]
fn c03_a_failed_write_rolls_back_and_releases_the_lock() {
    let env = TestEnv::new();
    let s = env.create("t");
    let id = s.as_str();
    // Long-lived handle, opened (and used) before the trigger exists.
    let lg = env.ledger();
    assert_eq!(
        lg.checkpoint(id, cp("warm", None), &Mutation::default())
            .unwrap()
            .rev,
        2
    );
    env.batch(pick(BOOM_TRIGGER, BOOM_TRIGGER_PG));
    let before = env.show(id);

    // (a) CLI, on every verb whose event carries the text.
    let cases: [&[&str]; 4] = [
        &["session", "checkpoint", id, "--step", "s", "--note", "BOOM"],
        &[
            "session",
            "event",
            id,
            "--type",
            "x.t",
            "--data",
            r#"{"k":"BOOM"}"#,
        ],
        &["session", "complete", id, "--result", "BOOM"],
        &["session", "fail", id, "--reason", "BOOM"],
    ];
    for args in cases {
        let r = env.json(args);
        assert_no_panic(&r);
        assert_error(&r, "INTERNAL", 1);
        assert_eq!(env.show(id), before, "{args:?}");
        assert_write_lock_free(&env);
    }

    // (b) library, the same handle.
    let errs = [
        lg.checkpoint(id, cp("s", Some("BOOM")), &Mutation::default())
            .unwrap_err(),
        lg.complete(id, "BOOM", &Mutation::default()).unwrap_err(),
        lg.append_event(
            id,
            AppendEvent {
                event_type: "x.t".into(),
                detail: Some("BOOM".into()),
                data: None,
            },
            &Mutation::default(),
        )
        .unwrap_err(),
    ];
    for e in &errs {
        assert_eq!(e.code().as_str(), "INTERNAL", "{e}");
    }
    assert_eq!(env.show(id), before);
    assert_eq!(rev_and_events(&env, id), (2, 2, 1));

    // Another process writes at once, well within its busy timeout.
    let t = Instant::now();
    let r = env.json(&[
        "--busy-timeout-ms",
        "5000",
        "session",
        "create",
        "--title",
        "x",
        "--app",
        "a",
    ]);
    assert_eq!(r.data()["rev"], 1);
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_write_lock_free(&env);

    // The same handle's next checkpoint succeeds with rev + 1.
    let ok = lg.checkpoint(id, cp("after", None), &at_rev(2)).unwrap();
    assert_eq!(ok.rev, 3);
    assert_eq!(assert_rev_matches_events(&env, id), 3);
}

/// C05 (a): 30 parallel checkpoints without --if-rev: none is lost.
#[test]
fn c05_parallel_checkpoints_lose_no_update() {
    let env = TestEnv::new();
    let id = env.create("t");
    let cmds = (1..=30)
        .map(|i| {
            let (step, note) = (format!("s{i}"), format!("n{i}"));
            env.cli(&[
                "--busy-timeout-ms",
                "30000",
                "session",
                "checkpoint",
                &id,
                "--step",
                &step,
                "--note",
                &note,
            ])
        })
        .collect();
    let runs = race(env.dir.path(), cmds);
    let mut revs: Vec<i64> = runs
        .iter()
        .map(|r| r.data()["rev"].as_i64().unwrap())
        .collect();
    revs.sort_unstable();
    assert_eq!(revs, (2..=31).collect::<Vec<i64>>());

    let rows = checkpoint_rows(&env, &id);
    assert_eq!(rows.len(), 30);
    let mut steps: Vec<String> = rows.iter().map(|r| r.1.clone().unwrap()).collect();
    steps.sort();
    let mut want: Vec<String> = (1..=30).map(|i| format!("s{i}")).collect();
    want.sort();
    assert_eq!(steps, want);
    for (_, step, note) in &rows {
        assert_eq!(
            note.as_deref(),
            Some(step.as_deref().unwrap().replacen('s', "n", 1).as_str())
        );
    }
    assert_eq!(assert_rev_matches_events(&env, &id), 31);
    let shown: Value = serde_json::from_str(&env.show(&id)).unwrap();
    let last = rows.last().unwrap();
    assert_eq!(shown["data"]["session"]["checkpoint"]["seq"], last.0);
    assert_eq!(
        shown["data"]["session"]["checkpoint"]["step"],
        last.1.as_deref().unwrap()
    );
}

/// C05 (b): 30 parallel checkpoints with the same --if-rev: exactly one wins,
/// 29 get SESSION_CONFLICT carrying the current rev.
#[test]
fn c05_parallel_if_rev_checkpoints_have_exactly_one_winner() {
    let env = TestEnv::new();
    let id = env.create("t");
    let r = env.checkpoint(&id, "s0")["rev"].as_i64().unwrap();
    assert_eq!(r, 2);
    let rs = r.to_string();
    let cmds = (1..=30)
        .map(|i| {
            let step = format!("s{i}");
            env.cli(&[
                "--busy-timeout-ms",
                "30000",
                "session",
                "checkpoint",
                &id,
                "--step",
                &step,
                "--if-rev",
                &rs,
            ])
        })
        .collect();
    let runs = race(env.dir.path(), cmds);
    let winners: Vec<usize> = (1..)
        .zip(&runs)
        .filter(|(_, run)| run.code == 0)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(winners.len(), 1, "{runs:?}");
    let w = winners[0];
    for (i, run) in (1..).zip(&runs) {
        if i == w {
            let d = run.data();
            assert_eq!(d["rev"], r + 1);
            assert_eq!(d["checkpoint"]["step"], format!("s{w}"));
            continue;
        }
        let e = assert_error(run, "SESSION_CONFLICT", 4);
        assert_eq!(
            e["details"],
            json!({
                "session_id": id,
                "expected_rev": r,
                "current_rev": r + 1,
                "latest_event": {"seq": r, "type": "checkpoint", "step": format!("s{w}")},
            })
        );
    }
    assert_eq!(assert_rev_matches_events(&env, &id), r + 1);
    assert_eq!(
        checkpoint_rows(&env, &id),
        vec![
            (1, Some("s0".into()), None),
            (2, Some(format!("s{w}")), None)
        ]
    );
}

/// C10: a library writer A (then, after A is abandoned without closing, a new
/// writer B) interleaved with CLI appends: seqs stay unique and contiguous,
/// and the schema declares (session_id, seq) unique.
#[test]
fn c10_seq_stays_unique_across_writers_and_a_restart() {
    let env = TestEnv::new();
    let id = env.create("t");
    let mut cli_runs: Vec<Run> = Vec::new();
    let mut n = 0;
    for (name, abandon) in [("a", true), ("b", false)] {
        let runs = std::thread::scope(|s| {
            let (env, id) = (&env, &id);
            let writer = s.spawn(move || {
                let lg = env.ledger();
                for i in 1..=20 {
                    lg.append_event(
                        id,
                        AppendEvent {
                            event_type: format!("x.{name}"),
                            detail: Some(format!("{name}{i}")),
                            data: None,
                        },
                        &Mutation::default(),
                    )
                    .unwrap_or_else(|e| panic!("writer {name} append {i}: {e}"));
                    std::thread::sleep(Duration::from_millis(15));
                }
                if abandon {
                    // Like `kill -9`: the connection is never closed.
                    std::mem::forget(lg);
                }
            });
            let runs: Vec<Run> = (1..=20)
                .map(|i| {
                    let detail = format!("c{}", n + i);
                    env.json(&[
                        "session", "event", id, "--type", "x.cli", "--detail", &detail,
                    ])
                })
                .collect();
            writer.join().unwrap();
            runs
        });
        n += 20;
        cli_runs.extend(runs);
    }
    for r in &cli_runs {
        assert!(!r.stdout.contains("UNIQUE constraint failed"), "{r:?}");
        assert!(!r.stderr.contains("UNIQUE constraint failed"), "{r:?}");
        r.data();
    }
    let dups = env.scalar(
        "SELECT count(*) FROM (SELECT session_id, seq, count(*) FROM events
         GROUP BY session_id, seq HAVING count(*) > 1) d",
    );
    assert_eq!(dups, 0);
    let stats = env.rows(
        "SELECT count(*), min(seq), max(seq) FROM events WHERE session_id = $1",
        &[&id],
    );
    assert_eq!(stats[0], [json!(81), json!(0), json!(80)]);
    let per_type = |t: &str| -> (i64, i64, i64, i64) {
        let r = &env.rows(
            "SELECT count(*), count(DISTINCT detail), min(seq), max(seq) FROM events
             WHERE session_id = $1 AND type = $2",
            &[id.as_str(), t],
        )[0];
        let int = |i: usize| r[i].as_i64().unwrap();
        (int(0), int(1), int(2), int(3))
    };
    let (a, b, x) = (per_type("x.a"), per_type("x.b"), per_type("x.cli"));
    assert_eq!((a.0, a.1, b.0, b.1, x.0, x.1), (20, 20, 20, 20, 40, 40));
    assert!(
        b.2 > a.3,
        "seq restarted after the restart: A {a:?}, B {b:?}"
    );
    assert_eq!(assert_rev_matches_events(&env, &id), 81);

    // The schema declares (session_id, seq) unique.
    if on_pg() {
        let defs: Vec<String> = env
            .rows(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema()
                 AND tablename = 'events'",
                &[],
            )
            .into_iter()
            .map(|r| r[0].as_str().unwrap().to_owned())
            .collect();
        assert!(
            defs.iter().any(|d| d.starts_with("CREATE UNIQUE INDEX")
                && d.ends_with("USING btree (session_id, seq)")),
            "{defs:?}"
        );
        return;
    }
    let c = env.sql();
    let mut st = c
        .prepare("SELECT name, \"unique\" FROM pragma_index_list('events')")
        .unwrap();
    let indexes: Vec<(String, i64)> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let unique_on_seq = indexes.iter().any(|(name, unique)| {
        let cols: Vec<String> = c
            .prepare("SELECT name FROM pragma_index_info(?1) ORDER BY seqno")
            .unwrap()
            .query_map([name], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        *unique == 1 && cols == ["session_id", "seq"]
    });
    assert!(unique_on_seq, "{indexes:?}");
}
