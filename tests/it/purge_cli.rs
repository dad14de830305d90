//! `logbook purge`'s command line (README, "Retention: purging old
//! sessions"): the order of its checks, the prompt, what a dry run lists
//! and refuses, the filter's JSON shape, and the field its `--export`
//! errors name. Backend-neutral; the database-file guard is `sqlite_only!`.

use crate::common::*;
use crate::purge::{seed, seed_lines};
use logbook::ledger::{PurgeFilter, PurgeRequest};
use logbook::{Error, Interrupt, Ledger, LedgerOptions};
use serde_json::{json, Value};
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Stdio;

/// `n` completed sessions of app `a` (3 events each), seeded by import.
fn seeded(env: &TestEnv, n: usize, salt: u32) {
    seed(
        env,
        &seed_lines(n, 3, "a", 1_700_000_000_000, "completed", salt),
    );
}

/// The canonical filter of `--app a` as JSON.
fn app_a() -> Value {
    json!({"ended_before_ms": null, "app": "a", "statuses": [], "keep_last": null})
}

/// Runs `logbook --db DB ARGS…` with a terminal (a pseudo-terminal) as
/// stdin, answers `answer` to the prompt, and returns what it printed.
fn with_terminal(env: &TestEnv, args: &[&str], answer: &str) -> Run {
    let (mut master, slave) = {
        let (mut m, mut s) = (-1, -1);
        // SAFETY: openpty writes two new descriptors, owned from here on.
        let rc = unsafe {
            libc::openpty(
                &mut m,
                &mut s,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: both descriptors were just opened and are owned by nothing else.
        unsafe {
            (
                std::fs::File::from(OwnedFd::from_raw_fd(m)),
                OwnedFd::from_raw_fd(s),
            )
        }
    };
    let child = env
        .command()
        .arg("--db")
        .arg(&env.db)
        .args(args)
        .stdin(Stdio::from(slave))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    master.write_all(answer.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    drop(master);
    out.into()
}

#[test]
fn the_filter_is_checked_before_yes() {
    let env = TestEnv::new();
    seeded(&env, 2, 11);
    let long_app = "x".repeat(129);
    // No --yes and stdin is not a terminal: the filter's error comes first.
    for (args, field) in [
        (vec!["purge"], "filter"),
        (vec!["purge", "--status", "active"], "status"),
        (vec!["purge", "--app", &long_app], "app"),
        (vec!["purge", "--ended-before", "yesterday"], "ended_before"),
    ] {
        let r = env.json(&args);
        assert_eq!(
            assert_error(&r, "INVALID_ARGUMENT", 2)["details"]["field"],
            field,
            "{args:?}"
        );
        let r = env.run(&args);
        assert_eq!(r.code, 2);
        assert!(
            r.stderr
                .starts_with(&format!("error[INVALID_ARGUMENT]: invalid `{field}`")),
            "{args:?}: {}",
            r.stderr
        );
    }
    // A good filter without --yes still needs it.
    let r = env.json(&["purge", "--app", "a"]);
    assert_eq!(
        assert_error(&r, "INVALID_ARGUMENT", 2)["details"]["field"],
        "yes"
    );
    assert_eq!(env.count_or_zero("tombstones"), 0);
}

#[test]
fn no_at_the_prompt_purges_nothing_and_exits_1_without_an_error() {
    let env = TestEnv::new();
    seeded(&env, 3, 12);
    let r = with_terminal(&env, &["purge", "--app", "a"], "n\n");
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(r.stdout, "");
    assert!(
        r.stderr.contains("purge 3 session(s) for good? [y/N] "),
        "{}",
        r.stderr
    );
    assert!(r.stderr.ends_with("nothing purged\n"), "{}", r.stderr);
    assert!(!r.stderr.contains("error["), "{}", r.stderr);
    assert!(!r.stderr.contains("INVALID_ARGUMENT"), "{}", r.stderr);
    assert_eq!(env.count_or_zero("purges"), 0);
    assert_eq!(env.count_or_zero("tombstones"), 0);
    assert_eq!(env.count_or_zero("sessions"), 3);
    // An empty answer is a no too.
    let r = with_terminal(&env, &["purge", "--app", "a"], "\n");
    assert_eq!((r.code, r.stdout.as_str()), (1, ""));
    assert_eq!(env.count_or_zero("sessions"), 3);
    // And yes purges.
    let r = with_terminal(&env, &["purge", "--app", "a"], "y\n");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .starts_with("purge 1: purged 3 session(s), 9 event(s)"),
        "{}",
        r.stdout
    );
    assert_eq!(env.count_or_zero("tombstones"), 3);
    assert_eq!(env.count_or_zero("sessions"), 0);
}

#[test]
fn a_dry_run_lists_every_chosen_id_and_refuses_export() {
    let env = TestEnv::new();
    seeded(&env, 25, 13);
    let want: Vec<String> = (0..25).map(|i| format!("ses_{:08x}{i:08x}", 13)).collect();
    let plan = env.json(&["purge", "--app", "a", "--dry-run"]).data();
    assert_eq!(plan["sessions"], 25);
    assert_eq!(plan["first"].as_array().unwrap().len(), 10);
    let ids: Vec<String> = plan["session_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, want);
    let human = env.run(&["purge", "--app", "a", "--dry-run"]);
    assert_eq!(human.code, 0);
    assert!(
        human
            .stdout
            .ends_with("… and 15 more (`purge --dry-run --json` lists every id)\n"),
        "{}",
        human.stdout
    );
    // --export with --dry-run is refused, naming `export`, and no file is
    // written.
    let f = env.dir.path().join("dry.jsonl");
    for extra in [&[][..], &["--yes"][..]] {
        let mut args = vec!["purge", "--app", "a", "--dry-run", "--export"];
        args.push(f.to_str().unwrap());
        args.extend_from_slice(extra);
        let r = env.json(&args);
        assert_eq!(
            assert_error(&r, "INVALID_ARGUMENT", 2)["details"]["field"],
            "export"
        );
    }
    assert!(!f.exists(), "a dry run wrote its --export");
    assert_eq!(env.count_or_zero("purges"), 0);
    // The library says the same.
    let lg = env.ledger();
    let req = PurgeRequest {
        filter: PurgeFilter {
            app: Some("a".into()),
            ..PurgeFilter::default()
        },
        export: Some(f.clone()),
    };
    match lg.purge_dry_run(&req) {
        Err(Error::InvalidArgument { field, .. }) => assert_eq!(field, "export"),
        other => panic!("{other:?}"),
    }
    assert!(!f.exists());
}

#[test]
fn the_filter_is_a_json_object_in_the_plan_the_report_and_the_progress() {
    let env = TestEnv::new();
    seeded(&env, 2, 14);
    let r = env.json(&["purge", "--app", "a", "--status", "completed", "--dry-run"]);
    assert!(
        r.stdout.starts_with(
            r#"{"ok":true,"data":{"filter":{"ended_before_ms":null,"app":"a","statuses":["completed"],"keep_last":null},"sessions":2,"#
        ),
        "{}",
        r.stdout
    );
    let rep = env.json(&["purge", "--app", "a", "--yes"]).data();
    assert_eq!(rep["plan"]["filter"], app_a());
    // A report cut short (here by an interruption after the first batch)
    // carries the same object in its details.
    let env = TestEnv::new();
    seeded(&env, 60, 15);
    let interrupt = Interrupt::new();
    let mut opts = LedgerOptions::at(&env.db);
    opts.interrupt = interrupt.clone();
    let lg = Ledger::open(opts).unwrap();
    let req = PurgeRequest {
        filter: PurgeFilter {
            app: Some("a".into()),
            ..PurgeFilter::default()
        },
        export: None,
    };
    let e = lg
        .purge(&req, &mut |_, _| interrupt.trigger(libc::SIGINT))
        .expect_err("the interrupted purge finished");
    let Error::Incomplete { report, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(report["plan"]["filter"], app_a());
    assert_eq!(report["sessions"], 50);
    let details = serde_json::to_value(e.wire_details()).unwrap();
    assert_eq!(details["plan"]["filter"], app_a(), "{details}");
}

sqlite_only! {
    #[test]
    fn purge_export_errors_name_the_field_export() {
        let env = TestEnv::new();
        seeded(&env, 2, 16);
        let journal = format!("{}-journal", env.db.display());
        let r = env.json(&["purge", "--app", "a", "--export", &journal, "--yes"]);
        let e = assert_error(&r, "INVALID_ARGUMENT", 2);
        assert_eq!(e["details"]["field"], "export", "{e}");
        assert!(e["message"].as_str().unwrap().starts_with("invalid `export`: "), "{e}");
        assert!(!std::path::Path::new(&journal).exists());
        assert_eq!(env.count_or_zero("tombstones"), 0);
    }
}
