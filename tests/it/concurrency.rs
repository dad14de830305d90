//! Real OS processes racing on one database file.

use crate::common::*;
use std::process::Command;

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
    let c = env.sql();
    let mut st = c.prepare("SELECT json_extract(data, '$.step') FROM events WHERE session_id = ?1 AND seq > 0 ORDER BY seq").unwrap();
    let steps: Vec<String> = st
        .query_map([&id], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
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

/// Long-lived library writers (one `Ledger` per process, as an agent runs
/// it) stream checkpoints into one session at once. Once a writer has had to
/// wait, it keeps the writer lock across consecutive writes for a turn and
/// hands it over when the turn ends (`store::writelock`): every write still
/// lands exactly once, in each process's own order, with rev and seqs
/// contiguous — and every process gets turns, or it would not finish.
#[test]
fn streaming_library_writers_take_turns_and_all_land() {
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
    let c = env.sql();
    let mut st = c
        .prepare("SELECT json_extract(data, '$.step') FROM events WHERE session_id = ?1 AND seq > 0 ORDER BY seq")
        .unwrap();
    let steps: Vec<String> = st
        .query_map([&id], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
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
