//! The global event feed and `--follow` (docs/design.md, "Feed").

use crate::common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn spawn_follower(env: &TestEnv, extra: &[&str]) -> Child {
    let mut c = env.command();
    c.arg("--db")
        .arg(env.path())
        .args(["events", "--follow", "--json"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c.spawn().unwrap()
}

/// Reads JSON lines from the child's stdout on a thread.
fn lines_of(child: &mut Child) -> mpsc::Receiver<Value> {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            let v: Value = serde_json::from_str(&line).unwrap();
            if tx.send(v).is_err() {
                break;
            }
        }
    });
    rx
}

fn sigint(child: &Child) {
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY-free: libc::kill on our own child's pid.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
}

fn wait_exit(child: &mut Child, within: Duration) -> Option<i32> {
    let until = Instant::now() + within;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code();
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("follower did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn all_events(env: &TestEnv) -> Vec<(i64, String, i64, String)> {
    env.rows(
        "SELECT event_id, session_id, seq, type FROM events ORDER BY event_id",
        &[],
    )
    .into_iter()
    .map(|r| {
        (
            r[0].as_i64().unwrap(),
            r[1].as_str().unwrap().to_owned(),
            r[2].as_i64().unwrap(),
            r[3].as_str().unwrap().to_owned(),
        )
    })
    .collect()
}

/// 8 writer processes commit 30 checkpoints each over 4 sessions while one
/// follower runs from cursor 0: it prints every committed event exactly
/// once, in event_id order, and exits 0 on SIGINT.
#[test]
fn a_follower_sees_every_event_exactly_once_in_order_under_8_writers() {
    let env = TestEnv::new();
    let sessions: Vec<String> = (0..4).map(|i| env.create(&format!("s{i}"))).collect();
    let mut follower = spawn_follower(&env, &[]);
    let rx = lines_of(&mut follower);
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let mut cmds = Vec::new();
            for k in 0..30 {
                let mut c = env.command();
                c.arg("--db").arg(env.path()).args([
                    "session",
                    "checkpoint",
                    &sessions[(w + k) % 4],
                    "--step",
                    &format!("w{w}-{k}"),
                    "--json",
                ]);
                cmds.push(c);
            }
            std::thread::spawn(move || {
                for mut c in cmds {
                    let out = c.output().unwrap();
                    assert_eq!(
                        out.status.code(),
                        Some(0),
                        "{}",
                        String::from_utf8_lossy(&out.stdout)
                    );
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let want = all_events(&env);
    assert_eq!(want.len(), 4 + 240);
    let mut got = Vec::new();
    let until = Instant::now() + Duration::from_secs(60);
    while got.len() < want.len() && Instant::now() < until {
        if let Ok(v) = rx.recv_timeout(Duration::from_millis(200)) {
            got.push((
                v["event_id"].as_i64().unwrap(),
                v["session_id"].as_str().unwrap().to_owned(),
                v["seq"].as_i64().unwrap(),
                v["type"].as_str().unwrap().to_owned(),
            ));
        }
    }
    // Nothing more arrives: no duplicates after the last one either.
    assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
    if on_pg() {
        // The server's feed runs in commit order, which event ids (drawn
        // before commit) need not follow: every event exactly once, each
        // session's in seq order.
        let mut sorted = got.clone();
        sorted.sort();
        assert_eq!(sorted, want);
        for s in &sessions {
            let seqs: Vec<i64> = got.iter().filter(|e| &e.1 == s).map(|e| e.2).collect();
            assert_eq!(seqs, (0..seqs.len() as i64).collect::<Vec<i64>>(), "{s}");
        }
    } else {
        assert_eq!(got, want);
        let ids: Vec<i64> = got.iter().map(|e| e.0).collect();
        assert_eq!(ids, (1..=244).collect::<Vec<i64>>());
    }
    sigint(&follower);
    assert_eq!(wait_exit(&mut follower, Duration::from_secs(10)), Some(0));
}

/// An idle follower notices that its reader went away and exits 0 without
/// waiting for another event; one that is writing exits 0 on the broken pipe.
#[test]
fn a_follower_exits_0_when_its_pipe_closes() {
    let env = TestEnv::new();
    env.create("a");
    let mut follower = spawn_follower(&env, &[]);
    let mut out = BufReader::new(follower.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.contains("\"type\":\"created\""), "{first}");
    drop(out);
    assert_eq!(wait_exit(&mut follower, Duration::from_secs(10)), Some(0));
}

/// `--limit N` with `--follow` exits 0 after N events; a later cursor
/// resumes exactly after the last one printed.
#[test]
fn follow_with_limit_and_resume_from_cursor() {
    let env = TestEnv::new();
    let s = env.create("a");
    for k in 0..5 {
        env.json(&["session", "checkpoint", &s, "--step", &format!("k{k}")]);
    }
    let r = env.run(&["events", "--follow", "--json", "--limit", "3"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let ids: Vec<i64> = r
        .stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["event_id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    assert_eq!(ids, vec![1, 2, 3]);
    let r = env.run(&[
        "events", "--follow", "--json", "--limit", "3", "--after", "3",
    ]);
    let ids: Vec<i64> = r
        .stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["event_id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    assert_eq!(ids, vec![4, 5, 6]);
}

// SQLite's WAL checkpoint (a server's follower waits on LISTEN).
sqlite_only! {
/// While a follower waits it holds no read transaction: a TRUNCATE
/// checkpoint from another connection completes and empties the WAL.
#[test]
fn an_idle_follower_holds_no_snapshot() {
    let env = TestEnv::new();
    let s = env.create("a");
    let mut follower = spawn_follower(&env, &[]);
    let rx = lines_of(&mut follower);
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    env.json(&["session", "checkpoint", &s, "--step", "x"]);
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let (busy, log, done): (i64, i64, i64) = env
        .sql()
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert_eq!((busy, log, done), (0, 0, 0));
    // And it still follows afterwards.
    env.json(&["session", "checkpoint", &s, "--step", "y"]);
    let v = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(v["data"]["step"], "y");
    sigint(&follower);
    assert_eq!(wait_exit(&mut follower, Duration::from_secs(10)), Some(0));
}
}

#[test]
fn feed_pages_filters_and_refusals() {
    let env = TestEnv::new();
    let a = env.create("a");
    let b = env.create("b");
    env.json(&["session", "checkpoint", &a, "--step", "a1"]);
    env.json(&[
        "session", "event", &b, "--type", "x.build", "--detail", "ok",
    ]);
    env.json(&["session", "complete", &a, "--result", "done"]);
    let ids = |d: &Value| -> Vec<i64> {
        d["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event_id"].as_i64().unwrap())
            .collect()
    };
    // A page's next_cursor resumes right after event `n` of the five: it is
    // `n` itself on SQLite; on PostgreSQL it is opaque (`TX.EVENT_ID`, or a
    // position past filtered-out events), so it is held to what it does.
    let resumes_after = |d: &Value, n: i64| {
        let c = d["next_cursor"].as_str().unwrap();
        if !on_pg() {
            assert_eq!(c, n.to_string());
        }
        let rest = env.json(&["events", "--after", c]).data();
        assert_eq!(ids(&rest), (n + 1..=5).collect::<Vec<i64>>(), "after {c}");
    };
    let p1 = env.json(&["events", "--limit", "2"]).data();
    assert_eq!(ids(&p1), vec![1, 2]);
    resumes_after(&p1, 2);
    // Each page continues from the cursor the last one handed out.
    let c1 = p1["next_cursor"].as_str().unwrap().to_owned();
    let p2 = env.json(&["events", "--limit", "2", "--after", &c1]).data();
    assert_eq!(ids(&p2), vec![3, 4]);
    resumes_after(&p2, 4);
    let c2 = p2["next_cursor"].as_str().unwrap().to_owned();
    let p3 = env.json(&["events", "--limit", "2", "--after", &c2]).data();
    assert_eq!(ids(&p3), vec![5]);
    resumes_after(&p3, 5);
    let c3 = p3["next_cursor"].as_str().unwrap().to_owned();
    let p4 = env.json(&["events", "--after", &c3]).data();
    assert_eq!(ids(&p4), Vec::<i64>::new());
    resumes_after(&p4, 5);
    // Filters: sessions (any of), types (any of).
    let d = env.json(&["events", "--session", &a]).data();
    assert_eq!(ids(&d), vec![1, 3, 5]);
    let d = env
        .json(&["events", "--session", &b, "--session", &a, "--limit", "2"])
        .data();
    assert_eq!(ids(&d), vec![1, 2]);
    resumes_after(&d, 2);
    let d = env
        .json(&["events", "--type", "x.build", "--type", "completed"])
        .data();
    assert_eq!(ids(&d), vec![4, 5]);
    resumes_after(&d, 5);
    let d = env
        .json(&["events", "--session", &b, "--type", "created"])
        .data();
    assert_eq!(ids(&d), vec![2]);
    resumes_after(&d, 5);
    // Refusals.
    for (args, field) in [
        (vec!["events", "--after", "abc"], "after"),
        (vec!["events", "--after", "-1"], "after"),
        (vec!["events", "--limit", "0"], "limit"),
        (vec!["events", "--limit", "1001"], "limit"),
        (vec!["events", "--type", "Bad Type"], "type"),
        (vec!["events", "--session", "nope"], "session_id"),
    ] {
        let e = assert_error(&env.json(&args), "INVALID_ARGUMENT", 2);
        assert_eq!(e["details"]["field"], field, "{args:?}");
    }
    assert_error(
        &env.json(&["events", "--session", "ses_00000000000000aa"]),
        "SESSION_NOT_FOUND",
        3,
    );
    // A cursor past the newest event (5) was never handed out: refused,
    // for one session too, rather than echoed back to skip events later.
    for args in [
        vec!["events", "--after", "999"],
        vec!["events", "--after", "6", "--session", &b],
    ] {
        let e = assert_error(&env.json(&args), "INVALID_ARGUMENT", 2);
        assert_eq!(e["details"]["field"], "after", "{args:?}");
    }
    // The newest event's own id is a cursor (on SQLite echoed back).
    resumes_after(&env.json(&["events", "--after", "5"]).data(), 5);
    // A flag is never taken as a value: `--after --json` is a missing
    // cursor, answered in JSON (the same for every flag that takes a number).
    for args in [
        vec!["events", "--after"],
        vec!["events", "--limit"],
        vec!["sql", "SELECT 1", "--timeout-ms"],
        vec!["session", "stage", &b, "start", "build", "--attempt"],
    ] {
        let e = assert_error(&env.json(&args), "INVALID_ARGUMENT", 2);
        let field = e["details"]["field"].as_str().unwrap();
        assert!(field.starts_with(args.last().unwrap()), "{args:?}: {field}");
    }
    // Human form: the table (a header, one row per event), then the cursor.
    let r = env.run(&["events", "--session", &b]);
    assert_eq!(r.code, 0);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", r.stdout);
    assert!(lines[0].starts_with("EVENT_ID  SESSION  "), "{}", lines[0]);
    assert!(
        lines[2].starts_with(&format!("       4  {b}    1  "))
            && lines[2].ends_with("  x.build  cli    ok"),
        "{}",
        lines[2]
    );
    let cursor = lines[3].strip_prefix("next cursor: ").unwrap();
    resumes_after(&serde_json::json!({ "next_cursor": cursor }), 5);
}

/// A human follower with nothing to print yet shows the header at once
/// (after its first read), then one row per event as it commits, under
/// that one header.
#[test]
fn an_idle_human_follower_prints_the_header_once_then_rows() {
    let env = TestEnv::new();
    let s = env.create("a");
    let mut c = env.command();
    c.arg("--db")
        .arg(env.path())
        .args(["events", "--follow", "--after", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut follower = c.spawn().unwrap();
    let out = follower.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let header = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        header.starts_with("EVENT_ID  SESSION                 SEQ  AT  ")
            && header.ends_with("  ACTOR  SUMMARY"),
        "{header}"
    );
    for step in ["one", "two"] {
        env.json(&["session", "checkpoint", &s, "--step", step]);
        let row = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(
            row.starts_with(&format!(
                "       {}  {s}  ",
                if step == "one" { 2 } else { 3 }
            )) && row.ends_with(&format!("  checkpoint           cli    step {step}")),
            "{row}"
        );
    }
    sigint(&follower);
    assert_eq!(wait_exit(&mut follower, Duration::from_secs(10)), Some(0));
    assert!(rx.try_recv().is_err(), "nothing after the rows");
}

/// `events --follow --from-now` prints nothing written before it started
/// (no `max(event_id)` by hand), then every later event once, in order;
/// without `--follow` it prints no events and the cursor to resume from.
#[test]
fn follow_from_now_prints_only_what_commits_after_it_starts_in_order() {
    let env = TestEnv::new();
    let s = env.create("a");
    for k in 0..3 {
        env.checkpoint(&s, &format!("before{k}"));
    }
    // A page from now: no events, a cursor after the newest.
    let page = env.json(&["events", "--from-now"]).data();
    assert_eq!(page["events"], serde_json::json!([]));
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    let rest = env.json(&["events", "--after", &cursor]).data();
    assert_eq!(rest["events"], serde_json::json!([]), "{rest}");
    // A human follower prints its header once its first read is done: the
    // start is fixed by then.
    let mut c = env.command();
    c.arg("--db")
        .arg(env.path())
        .args(["events", "--follow", "--from-now"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut follower = c.spawn().unwrap();
    let out = follower.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let header = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(header.starts_with("EVENT_ID  SESSION "), "{header}");
    let t = env.create("b");
    for k in 0..3 {
        env.checkpoint(if k == 1 { &t } else { &s }, &format!("after{k}"));
    }
    let rows: Vec<String> = (0..4)
        .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
        .collect();
    sigint(&follower);
    assert_eq!(wait_exit(&mut follower, Duration::from_secs(10)), Some(0));
    assert!(rx.try_recv().is_err(), "nothing after the four rows");
    let summaries: Vec<&str> = rows
        .iter()
        .map(|r| r.rsplit("  ").next().unwrap())
        .collect();
    assert_eq!(
        summaries,
        [
            "session created",
            "step after0",
            "step after1",
            "step after2"
        ],
        "{rows:#?}"
    );
    let ids: Vec<i64> = rows
        .iter()
        .map(|r| r.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    let newest: Vec<i64> = all_events(&env).iter().rev().take(4).map(|e| e.0).collect();
    assert_eq!(ids, newest.into_iter().rev().collect::<Vec<_>>());
    // --after and --from-now exclude each other.
    let r = env.json(&["events", "--from-now", "--after", "0"]);
    assert_error(&r, "INVALID_ARGUMENT", 2);
}

/// The library's follow with `from_now`: fixed before its first check,
/// JSON values of exactly the later events, in order; `from_now` with
/// `after` is refused naming `after`.
#[test]
fn library_follow_from_now_delivers_only_later_events() {
    let env = TestEnv::new();
    let s = env.create("a");
    env.checkpoint(&s, "before");
    let db = env.path().to_path_buf();
    let (started, ready) = mpsc::channel();
    let follower = std::thread::spawn(move || {
        let lg = open_ledger(&db);
        let q = logbook::FeedQuery {
            from_now: true,
            ..Default::default()
        };
        let mut got = Vec::new();
        let mut first = Some(started);
        lg.follow(
            &q,
            Duration::from_millis(5),
            |e| {
                got.push((e.event_type.clone(), e.seq));
                if got.len() == 3 {
                    std::ops::ControlFlow::Break(())
                } else {
                    std::ops::ControlFlow::Continue(())
                }
            },
            || {
                if let Some(tx) = first.take() {
                    tx.send(()).unwrap();
                }
                false
            },
        )
        .unwrap();
        got
    });
    ready.recv_timeout(Duration::from_secs(10)).unwrap();
    env.checkpoint(&s, "x");
    env.json(&["session", "pause", &s]);
    env.json(&["session", "resume", &s]);
    let got = follower.join().unwrap();
    let got: Vec<(&str, i64)> = got.iter().map(|(t, q)| (t.as_str(), *q)).collect();
    assert_eq!(got, [("checkpoint", 2), ("paused", 3), ("resumed", 4)]);
    let e = env
        .ledger()
        .feed(&logbook::FeedQuery {
            after: Some("0".into()),
            from_now: true,
            ..Default::default()
        })
        .unwrap_err();
    assert_eq!(e.code(), logbook::ErrorCode::InvalidArgument);
    assert_eq!(e.details()["field"], "after");
}
