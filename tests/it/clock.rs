//! The clock decides nothing (CASES C06, C07, C08): optimistic concurrency
//! runs on the rev counter, so a frozen or stepped-back clock never makes a
//! false conflict; the process time zone changes no stored time and no
//! output byte; and writes in one millisecond keep one deterministic order,
//! in events, lists and cursor walks.

use crate::common::*;
use logbook::{Clock, Ledger, LedgerOptions, Mutation};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// 2030-01-01T00:00:00Z in ms: the frozen clock of C06 and C08.
const FROZEN_MS: i64 = 1_893_456_000_000;

/// `at_ms` of a session's events by seq; asserts it never drops.
#[track_caller]
fn at_ms_never_drops(env: &TestEnv, id: &str) -> Vec<i64> {
    let at: Vec<i64> = env
        .rows(
            "SELECT at_ms FROM events WHERE session_id = $1 ORDER BY seq",
            &[id],
        )
        .iter()
        .map(|r| r[0].as_i64().unwrap())
        .collect();
    for (i, w) in at.windows(2).enumerate() {
        assert!(w[1] >= w[0], "at_ms dropped at seq {}: {w:?}", i + 1);
    }
    at
}

/// Runs `n` checkpoints, each with `--if-rev` = the rev the previous returned.
fn occ_loop(lg: &Ledger, id: &str, from_rev: i64, n: i64, mut tick: impl FnMut()) -> i64 {
    let mut r = from_rev;
    for i in 0..n {
        tick();
        let s = lg
            .checkpoint(id, cp("s", None), &at_rev(r))
            .unwrap_or_else(|e| panic!("call {i} with --if-rev {r} refused: {e}"));
        assert_eq!(s.rev, r + 1);
        r = s.rev;
    }
    r
}

/// C06: 500 back-to-back `--if-rev` checkpoints through the library under a
/// normal, a frozen and a stepped-back clock: never a false conflict, rev
/// ends at 501, at_ms never drops.
#[test]
fn c06_occ_uses_the_rev_counter_not_the_clock() {
    // Normal clock.
    let env = TestEnv::new();
    let lg = env.ledger();
    let id = lib_create(&lg, "normal", "a");
    assert_eq!(occ_loop(&lg, &id, 1, 500, || {}), 501);
    assert_eq!(assert_rev_matches_events(&env, &id), 501);
    at_ms_never_drops(&env, &id);

    // Frozen clock: every write in the same millisecond.
    let env = TestEnv::new();
    let (clock, _) = Clock::fixed(FROZEN_MS);
    let lg = Ledger::open(LedgerOptions {
        clock,
        ..LedgerOptions::at(env.path())
    })
    .unwrap();
    let id = lib_create(&lg, "frozen", "a");
    assert_eq!(occ_loop(&lg, &id, 1, 500, || {}), 501);
    assert_eq!(assert_rev_matches_events(&env, &id), 501);
    let at = at_ms_never_drops(&env, &id);
    assert!(at.iter().all(|&a| a == FROZEN_MS));

    // 250 calls, then the clock steps back one hour for 250 more.
    let env = TestEnv::new();
    let start = now_ms();
    let (clock, cell) = Clock::fixed(start);
    let lg = Ledger::open(LedgerOptions {
        clock,
        ..LedgerOptions::at(env.path())
    })
    .unwrap();
    let id = lib_create(&lg, "stepped", "a");
    let tick = || {
        cell.fetch_add(1, Ordering::SeqCst);
    };
    let r = occ_loop(&lg, &id, 1, 250, tick);
    cell.store(start + 250 - 3_600_000, Ordering::SeqCst);
    assert_eq!(occ_loop(&lg, &id, r, 250, tick), 501);
    assert_eq!(assert_rev_matches_events(&env, &id), 501);
    let at = at_ms_never_drops(&env, &id);
    assert_eq!(
        (at.len(), at[250], at[500]),
        (501, start + 250, start + 250)
    );
}

/// C06 through the CLI, normal clock (scaled down to 100 calls).
#[test]
fn c06_cli_if_rev_loop_never_conflicts() {
    let env = TestEnv::new();
    let id = env.create("t");
    let mut r = 1_i64;
    for _ in 0..100 {
        let rs = r.to_string();
        let d = env
            .json(&["session", "checkpoint", &id, "--step", "s", "--if-rev", &rs])
            .data();
        assert_eq!(d["rev"], r + 1);
        // The next call passes the rev this one returned, as an agent would.
        r = d["rev"].as_i64().unwrap();
    }
    assert_eq!(assert_rev_matches_events(&env, &id), 101);
    at_ms_never_drops(&env, &id);
}

fn run_tz(env: &TestEnv, tz: &str, args: &[&str]) -> Run {
    let mut c = env.command();
    c.env("TZ", tz).arg("--db").arg(env.path()).args(args);
    c.output().unwrap().into()
}

/// C07: the process time zone changes nothing: stored times are UTC epoch
/// ms, output is byte-identical, `--since` reads one instant three ways, and
/// an offset-less time is refused.
#[test]
fn c07_time_zone_changes_nothing() {
    let env = TestEnv::new();
    let t0 = now_ms();
    let ny = "America/New_York";
    let tzs = [ny, "Asia/Kolkata", "UTC"];
    let create = |title: &str| {
        id_of(
            &run_tz(
                &env,
                ny,
                &[
                    "session", "create", "--title", title, "--app", "a", "--json",
                ],
            )
            .data(),
        )
    };
    let s1 = create("t1");
    std::thread::sleep(Duration::from_millis(20));
    let s2 = create("t2");
    let t1 = now_ms();

    for id in [&s1, &s2] {
        let row = &env.rows(
            pick(
                "SELECT typeof(created_at_ms), typeof(updated_at_ms), created_at_ms, updated_at_ms
                 FROM sessions WHERE session_id = $1",
                "SELECT pg_typeof(created_at_ms)::text, pg_typeof(updated_at_ms)::text,
                        created_at_ms, updated_at_ms
                 FROM sessions WHERE session_id = $1",
            ),
            &[id],
        )[0];
        let (ca, ua) = (row[2].as_i64().unwrap(), row[3].as_i64().unwrap());
        let int = pick("integer", "bigint");
        assert_eq!((row[0].as_str(), row[1].as_str()), (Some(int), Some(int)));
        assert!(ca >= t0 - 2000 && ca <= t1 + 2000, "{ca} not near {t0}");
        assert!(ua >= t0 - 2000 && ua <= t1 + 2000, "{ua} not near {t0}");
        for args in [
            vec!["session", "show", id.as_str(), "--json"],
            vec!["session", "show", id.as_str()],
        ] {
            let outs: Vec<String> = tzs
                .iter()
                .map(|tz| {
                    let r = run_tz(&env, tz, &args);
                    assert_eq!(r.code, 0, "{}", r.stderr);
                    r.stdout
                })
                .collect();
            assert!(outs.iter().all(|o| *o == outs[0]), "{outs:#?}");
        }
        let shown: Value = serde_json::from_str(&env.show(id)).unwrap();
        assert!(shown["data"]["session"]["created_at_ms"].is_i64());
        assert!(shown["data"]["session"]["updated_at_ms"].is_i64());
    }
    for args in [vec!["session", "list", "--json"], vec!["session", "list"]] {
        let outs: Vec<String> = tzs
            .iter()
            .map(|tz| run_tz(&env, tz, &args).stdout)
            .collect();
        assert!(outs.iter().all(|o| *o == outs[0]), "{outs:#?}");
    }

    // One instant, three spellings: s2's creation time (since is inclusive).
    let t = serde_json::from_str::<Value>(&env.show(&s2)).unwrap()["data"]["session"]
        ["created_at_ms"]
        .as_i64()
        .unwrap();
    let z = logbook::clock::format_ms(t);
    let ist = logbook::clock::format_ms(t + 19_800_000).replace('Z', "+05:30");
    let spellings = [z, ist, t.to_string()];
    let mut outs = Vec::new();
    for tz in tzs {
        for since in &spellings {
            let r = run_tz(&env, tz, &["session", "list", "--since", since, "--json"]);
            assert_eq!(
                listed(&r.data()),
                vec![s2.clone()],
                "--since {since} under {tz}"
            );
            outs.push(r.stdout);
        }
        let r = run_tz(
            &env,
            tz,
            &[
                "session",
                "list",
                "--since",
                "2030-01-01T00:00:00",
                "--json",
            ],
        );
        let e = assert_error(&r, "INVALID_ARGUMENT", 2);
        assert_eq!(e["details"]["field"], "since");
    }
    assert!(outs.iter().all(|o| *o == outs[0]));
}

/// C08: under a frozen clock, 50 checkpoints through one long-lived handle
/// read back in submission order, identically every time; 20 sessions
/// created in the same millisecond list in one deterministic order and a
/// cursor walk returns each once. (The CLI-under-faketime source is not
/// run: there is no libfaketime here, and the CLI has no clock override.)
#[test]
fn c08_equal_timestamps_keep_a_deterministic_order() {
    let env = TestEnv::new();
    let (clock, _) = Clock::fixed(FROZEN_MS);
    let lg = Ledger::open(LedgerOptions {
        clock,
        ..LedgerOptions::at(env.path())
    })
    .unwrap();
    let id = lib_create(&lg, "t", "b");
    for i in 1..=50_i64 {
        let s = lg
            .checkpoint(&id, cp(&format!("s{i}"), None), &Mutation::default())
            .unwrap();
        assert_eq!(s.checkpoint.as_ref().unwrap().seq, i);
    }
    assert_eq!(
        at_ms_never_drops(&env, &id),
        vec![FROZEN_MS; 51],
        "all in one millisecond"
    );
    let shows: Vec<String> = (0..10).map(|_| env.show(&id)).collect();
    assert!(shows.iter().all(|s| *s == shows[0]));
    let evs: Vec<String> = (0..10)
        .map(|_| {
            env.json(&["session", "events", &id, "--limit", "1000"])
                .stdout
        })
        .collect();
    assert!(evs.iter().all(|s| *s == evs[0]));
    let want: Vec<(i64, Value)> = (1..=50).map(|i| (i, json!(format!("s{i}")))).collect();
    for events in [
        serde_json::from_str::<Value>(&shows[0]).unwrap()["data"]["events"].clone(),
        serde_json::from_str::<Value>(&evs[0]).unwrap()["data"]["events"].clone(),
    ] {
        let events = events.as_array().unwrap();
        assert_eq!(events.len(), 51);
        assert_eq!(events[0]["type"], "created");
        let got: Vec<(i64, Value)> = events[1..]
            .iter()
            .map(|e| (e["seq"].as_i64().unwrap(), e["data"]["step"].clone()))
            .collect();
        assert_eq!(got, want);
    }
    let lib_reads: Vec<String> = (0..10)
        .map(|_| serde_json::to_string(&lg.show_session(&id).unwrap()).unwrap())
        .collect();
    assert!(lib_reads.iter().all(|s| *s == lib_reads[0]));

    // 20 sessions in one millisecond.
    let ids: Vec<String> = (0..20)
        .map(|i| lib_create(&lg, &format!("l{i}"), "a"))
        .collect();
    assert_eq!(
        env.scalar("SELECT count(DISTINCT created_at_ms) FROM sessions WHERE app = 'a'"),
        1
    );
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    let pages: Vec<String> = (0..10)
        .map(|_| {
            env.json(&["session", "list", "--app", "a", "--limit", "5"])
                .stdout
        })
        .collect();
    assert!(pages.iter().all(|p| *p == pages[0]));
    let first: Value = serde_json::from_str(&pages[0]).unwrap();
    assert_eq!(listed(&first["data"]), newest_first[..5].to_vec());

    let mut walked = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..10 {
        let mut a = vec!["session", "list", "--app", "a", "--limit", "5"];
        if let Some(c) = &cursor {
            a.extend(["--cursor", c.as_str()]);
        }
        let d = env.json(&a).data();
        walked.extend(listed(&d));
        match d["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => {
                cursor = None;
                break;
            }
        }
    }
    assert!(cursor.is_none(), "the walk did not end");
    assert_eq!(walked, newest_first);
}
