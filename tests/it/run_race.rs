//! Run verbs racing from processes on one database (docs/design.md,
//! "Runs"; on PostgreSQL also docs/postgres.md, "One round trip per
//! write"): keyed usage from two processes and turns from a third while a
//! fourth ends each run once it has its first usage. Every acknowledged write is applied once and nothing else is: the
//! run's sums, its session's and the `run_*` events agree, every late write
//! is refused with RUN_INVALID_TRANSITION, and `verify` passes.
//!
//! The test binary re-executes itself running only `run_race_worker` (an
//! ignored test) with `LOGBOOK_RACE_MODE` set.

use crate::common::*;
use logbook::ledger::RunUsageDelta;
use logbook::{CreateRun, Ledger, LedgerOptions, Mutation, RunError};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};

/// Sessions (one run each) the workers race on.
const RUNS: usize = 24;

fn keyed(key: String) -> Mutation {
    Mutation {
        idempotency_key: Some(key),
        ..Default::default()
    }
}

/// Starts worker `n` in `mode` (`usage`, `turn` or `end`) on `runs`. It
/// prints `ready` once its ledger is open and starts when a line arrives
/// on its stdin; then its stdout is one `<run> <key>` line per
/// acknowledged write, its keys its own.
fn spawn_worker(
    db: &std::path::Path,
    n: usize,
    mode: &str,
    runs: &[String],
) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "run_race::run_race_worker",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env("LOGBOOK_RACE_MODE", mode)
        .env("LOGBOOK_RACE_WORKER", n.to_string())
        .env("LOGBOOK_RACE_DB", db)
        .env("LOGBOOK_RACE_RUNS", runs.join(","))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

#[test]
#[ignore = "a worker process run_verbs_racing_from_processes starts, not a test"]
fn run_race_worker() {
    let mode = std::env::var("LOGBOOK_RACE_MODE")
        .expect("LOGBOOK_RACE_MODE: this is a worker process a test starts, not a test");
    let db = std::env::var("LOGBOOK_RACE_DB").unwrap();
    let runs = std::env::var("LOGBOOK_RACE_RUNS").unwrap();
    let worker = std::env::var("LOGBOOK_RACE_WORKER").unwrap();
    let lg = Ledger::open(LedgerOptions {
        busy_timeout_ms: 30_000,
        ..LedgerOptions::at(db)
    })
    .unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    std::io::stdin().read_line(&mut String::new()).unwrap();
    for (i, run) in runs.split(',').enumerate() {
        if mode == "end" {
            // End the run while the writers are at it: after its first
            // usage (waiting at most 30 s), then 0–4 ms later.
            let t = std::time::Instant::now();
            while lg.get_run(run).unwrap().usage.api_calls == 0
                && t.elapsed() < std::time::Duration::from_secs(30)
            {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            std::thread::sleep(std::time::Duration::from_millis((i % 5) as u64));
            let key = format!("end-{i}");
            let m = keyed(key.clone());
            match i % 4 {
                0 => lg.complete_run(run, None, &m).map(drop),
                1 => lg.cancel_run(run, &m).map(drop),
                2 => lg
                    .fail_run(
                        run,
                        RunError {
                            code: "E".into(),
                            message: "m".into(),
                        },
                        &m,
                    )
                    .map(drop),
                _ => lg.timeout_run(run, &m).map(drop),
            }
            .unwrap();
            writeln!(out, "{run} {key}").unwrap();
            continue;
        }
        for n in 0..10_000 {
            let key = format!("{mode}{worker}-{i}-{n}");
            let r = if mode == "usage" {
                let delta = RunUsageDelta {
                    input_tokens: Some(1),
                    output_tokens: Some(2),
                    api_calls: Some(1),
                };
                lg.record_run_usage(run, delta, &keyed(key.clone()))
                    .map(drop)
            } else {
                lg.increment_turn(run, &keyed(key.clone())).map(drop)
            };
            match r {
                Ok(()) => writeln!(out, "{run} {key}").unwrap(),
                Err(e) if e.code().as_str() == "RUN_INVALID_TRANSITION" => break,
                Err(e) => panic!("{mode} on {run}: {e}"),
            }
        }
    }
    out.flush().unwrap();
}

/// A started worker and its stdout.
struct Worker {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Worker {
    fn start(db: &std::path::Path, n: usize, mode: &str, runs: &[String]) -> Self {
        let mut child = spawn_worker(db, n, mode, runs);
        let out = BufReader::new(child.stdout.take().unwrap());
        Worker { child, out }
    }

    /// Waits for its `ready` (beside the test harness's own lines).
    fn ready(&mut self) {
        let mut line = String::new();
        while line.trim_end() != "ready" {
            line.clear();
            assert_ne!(
                self.out.read_line(&mut line).unwrap(),
                0,
                "a worker ended unready"
            );
        }
    }

    fn go(&mut self) {
        let mut stdin = self.child.stdin.take().unwrap();
        writeln!(stdin, "go").unwrap();
    }

    /// The `<run> <key>` lines it printed, once it has finished.
    fn acknowledged(mut self) -> Vec<(String, String)> {
        let mut text = String::new();
        self.out.read_to_string(&mut text).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "a worker failed: {status:?}");
        text.lines()
            .filter(|l| l.starts_with("run_"))
            .map(|l| {
                let (run, key) = l.split_once(' ').unwrap();
                (run.to_owned(), key.to_owned())
            })
            .collect()
    }
}

#[test]
fn run_verbs_racing_from_processes_apply_each_acknowledged_write_once() {
    let env = TestEnv::new();
    let lg = env.ledger();
    let mut sessions = Vec::new();
    let mut runs = Vec::new();
    for i in 0..RUNS {
        let id = lib_create(&lg, &format!("race {i}"), "race");
        let run = lg
            .create_run(&id, CreateRun::default(), &Mutation::default())
            .unwrap()
            .run_id
            .to_string();
        lg.start_run(&run, &Mutation::default()).unwrap();
        sessions.push(id);
        runs.push(run);
    }
    let mut workers: Vec<_> = ["usage", "usage", "turn", "end"]
        .iter()
        .enumerate()
        .map(|(n, mode)| Worker::start(&env.db, n, mode, &runs))
        .collect();
    workers.iter_mut().for_each(Worker::ready);
    workers.iter_mut().for_each(Worker::go);
    let acks: Vec<Vec<(String, String)>> = workers.into_iter().map(Worker::acknowledged).collect();
    let count = |w: &[usize], run: &str| -> i64 {
        w.iter()
            .map(|&i| acks[i].iter().filter(|(r, _)| r == run).count() as i64)
            .sum()
    };
    for (id, run) in sessions.iter().zip(&runs) {
        let (u, t) = (count(&[0, 1], run), count(&[2], run));
        assert_eq!(count(&[3], run), 1, "{run} ended once");
        assert!(u > 0, "{run} was ended before its first usage");
        let r = lg.get_run(run).unwrap();
        let s = lg.get_session(id).unwrap();
        assert_eq!(
            (
                r.usage.input_tokens,
                r.usage.output_tokens,
                r.usage.api_calls,
                r.turn_count
            ),
            (u, 2 * u, u, t),
            "{run}: its sums against its acknowledged writes"
        );
        assert_eq!(
            (
                s.usage.input_tokens,
                s.usage.output_tokens,
                s.usage.api_calls
            ),
            (u, 2 * u, u),
            "{id}: the session's sums against its one run's"
        );
        // created, run_created, run_started, the writes and the end.
        let events = 3 + u + t + 1;
        assert_eq!(s.rev, events, "{id}: one rev per event");
        assert_eq!(
            lg.verify(std::slice::from_ref(id)).unwrap().events,
            events as u64,
            "{id}: its events"
        );
    }
}
