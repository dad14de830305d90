//! How the CLI reads its arguments: help and version, unknown commands,
//! clap's usage errors re-worded, empty and blank free text, values that
//! begin with `-` stored verbatim or refused with a hint to attach them
//! with `=` (CASES C21), a flag missing its value, and a reader that closes
//! the pipe early.

use crate::cli_errors::refused;
use crate::common::*;
use logbook::Mutation;
use std::io::Read;
use std::process::Stdio;

#[test]
fn help_and_version_exit_0() {
    let env = TestEnv::new();
    let r = env.run(&["--help"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("session"));
    let r = env.run(&["session", "checkpoint", "--help"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("Example:"));
    // A version request at any level names the program, and honours --json.
    for args in [vec!["-V"], vec!["session", "create", "--title", "x", "-V"]] {
        let r = env.run(&args);
        assert_eq!(
            (r.code, r.stdout.as_str()),
            (0, concat!("logbook ", env!("CARGO_PKG_VERSION"), "\n")),
            "{args:?}"
        );
        let r = env.json(&args);
        assert_eq!(r.code, 0);
        assert_eq!(
            r.data(),
            serde_json::json!({"version": env!("CARGO_PKG_VERSION")})
        );
    }
    assert!(!env.path().exists());
    let r = env.run(&["--version"]);
    assert_eq!(
        (r.code, r.stdout.trim()),
        (0, concat!("logbook ", env!("CARGO_PKG_VERSION")))
    );
}

/// An unknown command is named (when it is a plain word) with clap's
/// suggestion; found by a fresh-user walkthrough, where every unknown
/// command was reported as "argument".
#[test]
fn an_unknown_command_is_named_with_a_suggestion() {
    let env = TestEnv::new();
    let cases: [(&[&str], &str); 4] = [
        (
            &["sesion", "list"],
            "unknown command `sesion`; did you mean `session`?",
        ),
        (&["session", "bogus"], "unknown command `bogus`"),
        // A flag where a command belongs is named too (it used to read just
        // "unknown command"); a token that is neither word nor flag is not.
        (
            &["help", "-V"],
            "unknown command `-V`: a command name was expected here, not a flag",
        ),
        (&["help", "Tok3n"], "unknown command"),
    ];
    for (args, message) in cases {
        let e = assert_error(&env.json(args), "INVALID_ARGUMENT", 2);
        assert_eq!(e["message"], message, "{args:?}");
        assert_eq!(e["details"]["field"], "command", "{args:?}");
    }
    // Token shapes made of lowercase words and dashes are never repeated
    // (found by adversarial testing: these were echoed as "words").
    for args in [
        vec!["sk-abcdefghijklmnopqrstuvwxyz"],
        vec!["session", "xoxb-abcdefghijklmnop"],
        vec!["help", "--glpat-abcdefghijklmnopqrst"],
        vec!["help", "-sk-abcdefghijklmnopqrstuvwxyz"],
    ] {
        let r = env.json(&args);
        let e = assert_error(&r, "INVALID_ARGUMENT", 2);
        assert_eq!(e["message"], "unknown command", "{args:?}");
        assert!(!r.stdout.contains("abcdefghijklm"), "{args:?}");
        assert!(!r.stderr.contains("abcdefghijklm"), "{args:?}");
    }
    assert!(!env.path().exists());
}

/// clap's usage errors keep their meaning when re-worded: a mistyped flag
/// names the similar one, a repeated flag says so, and a real conflict names
/// both flags (found by adversarial testing: all three said less or the
/// wrong thing). Each changes nothing.
#[test]
fn usage_errors_name_the_similar_repeated_and_conflicting_flags() {
    let env = TestEnv::new();
    let id = env.create("t");
    let cases: [(Vec<&str>, &str, &str); 4] = [
        (
            vec!["session", "checkpoint", &id, "--step", "s", "--nte", "x"],
            "--nte",
            "unexpected argument `--nte`; did you mean `--note`? (if it is a value that begins with `-`, attach it to its flag with `=`, e.g. `--note=-rf`)",
        ),
        (
            vec!["session", "checkpoint", &id, "--step", "a", "--step", "b"],
            "--step <STEP>",
            "`--step <STEP>` was given more than once",
        ),
        (
            vec!["session", "budget", &id, "--check", "--max-tokens", "5"],
            "--check",
            "`--check` cannot be used with `--max-tokens <N>`",
        ),
        // An empty positional: no `=` hint, which fits flags only.
        (vec!["backup", ""], "<DEST>", "`<DEST>` must not be empty"),
    ];
    for (args, field, message) in cases {
        let err = refused(&env, &id, &args, "INVALID_ARGUMENT", 2);
        assert_eq!(err["message"], message, "{args:?}");
        assert_eq!(err["details"]["field"], field, "{args:?}");
        assert_eq!(err["details"]["reason"], message, "{args:?}");
    }
    // The human form carries the same message.
    let r = env.run(&["session", "checkpoint", &id, "--step", "a", "--step", "b"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr
            .starts_with("error[INVALID_ARGUMENT]: `--step <STEP>` was given more than once\n"),
        "{}",
        r.stderr
    );
}

/// Free text is never empty, whichever way it is given (an empty `--note=`
/// recorded a checkpoint that said nothing, though a checkpoint needs a step,
/// a note or a reference: found by adversarial testing); and a value that
/// looks like a negative number is a value, not a flag (docs/design.md, "CLI"), also for
/// `run fail`.
#[test]
fn empty_free_text_is_refused_and_negative_looking_values_are_values() {
    let env = TestEnv::new();
    let id = env.create("t");
    let cases: [(Vec<&str>, &str); 6] = [
        (vec!["session", "checkpoint", &id, "--note="], "note"),
        (vec!["session", "checkpoint", &id, "--note", ""], "note"),
        (
            vec!["session", "checkpoint", &id, "--step", "s", "--note="],
            "note",
        ),
        (vec!["session", "checkpoint", &id, "--step="], "step"),
        (vec!["session", "create", "--title", "x", "--goal="], "goal"),
        (
            vec!["session", "event", &id, "--type", "x.build", "--detail="],
            "detail",
        ),
    ];
    for (args, field) in cases {
        let err = refused(&env, &id, &args, "INVALID_ARGUMENT", 2);
        assert_eq!(err["details"]["field"], field, "{args:?}");
        assert_eq!(err["details"]["reason"], "must not be empty", "{args:?}");
    }
    let d = env
        .json(&["session", "checkpoint", &id, "--note", "-5"])
        .data();
    assert_eq!(d["checkpoint"]["note"], "-5");
    let run = env.json(&["run", "create", &id]).data()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let d = env
        .json(&["run", "fail", &run, "--code", "-1", "--message", "-5"])
        .data();
    assert_eq!(
        d["error"],
        serde_json::json!({"code": "-1", "message": "-5"})
    );
}

/// docs/design.md, "Model": a title (or step) that is only whitespace names nothing and
/// is refused like an empty one, on create and on fork; nothing is written.
#[test]
fn blank_titles_and_steps_are_refused() {
    let env = TestEnv::new();
    let id = env.create("t");
    env.json(&["session", "checkpoint", &id, "--step", "s", "--state", "{}"])
        .data();
    for (args, field) in [
        (vec!["session", "create", "--title", "   "], "title"),
        (vec!["session", "create", "--title", "\u{3000}"], "title"),
        (
            vec!["session", "fork", &id, "--checkpoint", "1", "--title", " "],
            "title",
        ),
        (vec!["session", "checkpoint", &id, "--step", "  "], "step"),
    ] {
        let err = refused(&env, &id, &args, "INVALID_ARGUMENT", 2);
        assert_eq!(err["details"]["field"], field, "{args:?}");
        assert_eq!(
            err["details"]["reason"], "must not be only whitespace",
            "{args:?}"
        );
    }
}

/// A result, reason or note that is only whitespace says nothing, yet was
/// stored (newcomer tour #1): a session could end with a blank result or
/// reason. Refused like a blank title, naming the field, through the
/// library (so MCP too); nothing is written. An optional note or reason
/// may still be left out.
#[test]
fn blank_results_reasons_and_notes_are_refused() {
    let env = TestEnv::new();
    let a = env.create("active");
    let n = env.create_with(&["--title", "pending", "--pending"]);
    let p = env.create("paused");
    env.json(&["session", "pause", &p, "--reason", "lunch"])
        .data();
    let g = env.create("gated");
    env.json(&[
        "gate",
        "open",
        &g,
        "--gate",
        "review",
        "--kind",
        "user-approval",
    ])
    .data();
    for (id, args, field) in [
        (
            &a,
            vec!["session", "complete", &a, "--result", "   "],
            "result",
        ),
        (
            &a,
            vec!["session", "fail", &a, "--reason", " \t "],
            "reason",
        ),
        (
            &a,
            vec!["session", "cancel", &a, "--reason", "\n"],
            "reason",
        ),
        (&a, vec!["session", "pause", &a, "--reason", " "], "reason"),
        (&n, vec!["session", "start", &n, "--reason", "  "], "reason"),
        (&p, vec!["session", "resume", &p, "--reason", " "], "reason"),
        (
            &a,
            vec!["session", "checkpoint", &a, "--note", "   "],
            "note",
        ),
        (
            &a,
            vec![
                "session",
                "checkpoint",
                &a,
                "--step",
                "s",
                "--note",
                "\u{3000}",
            ],
            "note",
        ),
        (
            &a,
            vec!["session", "stage", &a, "start", "build", "--reason", " "],
            "reason",
        ),
        (
            &g,
            vec!["gate", "approve", &g, "--gate", "review", "--note", " "],
            "note",
        ),
        (
            &g,
            vec!["gate", "reject", &g, "--gate", "review", "--reason", "  "],
            "reason",
        ),
    ] {
        let err = refused(&env, id, &args, "INVALID_ARGUMENT", 2);
        assert_eq!(
            (&err["details"]["field"], &err["details"]["reason"]),
            (
                &serde_json::json!(field),
                &serde_json::json!("must not be only whitespace")
            ),
            "{args:?}"
        );
    }
    // Through MCP: the same refusal, the session unchanged.
    let before = env.show(&a);
    crate::mcp::rt().block_on(async {
        let client = crate::mcp::connect(&env, &[]).await;
        for (tool, key) in [
            ("logbook_session_complete", "result"),
            ("logbook_session_fail", "reason"),
            ("logbook_session_checkpoint", "note"),
        ] {
            let e = crate::mcp::err(
                &crate::mcp::call(
                    &client,
                    tool,
                    serde_json::json!({"session_id": a, key: " \n "}),
                )
                .await,
                "INVALID_ARGUMENT",
            );
            assert_eq!(
                (&e["details"]["field"], &e["details"]["reason"]),
                (
                    &serde_json::json!(key),
                    &serde_json::json!("must not be only whitespace")
                ),
                "{tool}"
            );
        }
    });
    assert_eq!(env.show(&a), before);
    // Absent optional text is fine; text around whitespace is kept whole.
    let d = env
        .json(&["session", "checkpoint", &a, "--step", "s"])
        .data();
    assert_eq!(d["checkpoint"]["note"], serde_json::Value::Null);
    env.json(&["gate", "approve", &g, "--gate", "review"])
        .data();
    let d = env
        .json(&["session", "complete", &a, "--result", " done "])
        .data();
    assert_eq!(d["final_result"], " done ");
}

/// C21: `--note=VALUE` always stores VALUE exactly.
#[test]
fn c21_attached_values_are_stored_exactly() {
    let env = TestEnv::new();
    let id = env.create("t");
    let mut rev = 1;
    for v in ["-x", "-rf was used", "--", "--force", "-5", "--json"] {
        let flag = format!("--note={v}");
        let d = env
            .json(&["session", "checkpoint", &id, "--step", "s1", &flag])
            .data();
        rev += 1;
        assert_eq!(
            (d["checkpoint"]["note"].as_str(), d["rev"].as_i64()),
            (Some(v), Some(rev))
        );
    }
    // `-5` space-separated is a value, not a flag (docs/design.md, "CLI").
    let d = env
        .json(&["session", "checkpoint", &id, "--step", "s1", "--note", "-5"])
        .data();
    assert_eq!(
        (d["checkpoint"]["note"].as_str(), d["rev"].as_i64()),
        (Some("-5"), Some(rev + 1))
    );
    // `-` alone is a value.
    let d = env
        .json(&["session", "create", "--title", "-", "--app", "a"])
        .data();
    assert_eq!(d["title"], "-");
}

/// Whether an error text hints to attach the value with `=`.
fn has_equals_hint(text: &str, flag: &str) -> bool {
    text.contains(&format!("{flag}=")) || text.contains("with `=`")
}

/// C21: a space-separated value starting with `-` is stored verbatim or
/// refused with INVALID_ARGUMENT (exit 2) and a hint to use `--flag=…`,
/// with and without --json; never read as another flag.
#[test]
fn c21_space_separated_hyphen_values_are_kept_or_refused_with_a_hint() {
    let env = TestEnv::new();
    let cases: [(&str, &str, &str); 4] = [
        ("checkpoint", "--note", "-rf was used"),
        ("checkpoint", "--note", "--"),
        ("fail", "--reason", "--force was needed"),
        ("checkpoint", "--note", "-x"),
    ];
    let mut problems = Vec::new();
    for (verb, flag, v) in cases {
        for json in [true, false] {
            let target = env.create("h");
            let before = env.show(&target);
            let mut a: Vec<&str> = if json { vec!["--json"] } else { vec![] };
            a.extend(["session", verb, target.as_str()]);
            if verb == "checkpoint" {
                a.extend(["--step", "s1"]);
            }
            a.extend([flag, v]);
            let r = env.run(&a);
            assert_no_panic(&r);
            if r.code == 0 {
                let stored = env.rows(
                    "SELECT detail FROM events WHERE session_id = $1 AND seq = 1",
                    &[&target],
                );
                assert_eq!(stored[0][0].as_str(), Some(v), "{verb} {flag} {v:?}");
                continue;
            }
            assert_eq!(
                env.show(&target),
                before,
                "a refused call changed the session"
            );
            let text = if json {
                assert_error(&r, "INVALID_ARGUMENT", 2);
                r.stdout.clone()
            } else {
                assert_eq!(r.code, 2);
                assert!(
                    r.stderr.starts_with("error[INVALID_ARGUMENT]"),
                    "{}",
                    r.stderr
                );
                r.stderr.clone()
            };
            if !has_equals_hint(&text, flag) {
                problems.push(format!(
                    "{verb} {flag} {v:?} (json: {json}): no `=` hint in {text:?}"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// C21: a flag missing its value is an INVALID_ARGUMENT envelope (exit 2)
/// saying the flag needs a value; `--json` is never stored as the note.
#[test]
fn c21_missing_value_is_a_usage_error() {
    let env = TestEnv::new();
    let id = env.create("t");
    let before = env.show(&id);
    let r = env.run(&[
        "session",
        "checkpoint",
        &id,
        "--step",
        "s1",
        "--note",
        "--json",
    ]);
    let e = assert_error(&r, "INVALID_ARGUMENT", 2);
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("--note") && msg.contains("value"), "{msg}");
    assert_eq!(env.show(&id), before);
    assert_eq!(
        env.scalar("SELECT count(*) FROM events WHERE detail = '--json'"),
        0
    );
}

/// C21: `show` of more than a pipe buffer into a reader that leaves after
/// one byte never panics ("failed printing to stdout") or exits 101.
#[test]
fn c21_closed_pipe_on_a_large_show_is_not_a_panic() {
    let env = TestEnv::new();
    let lg = env.ledger();
    let id = lib_create(&lg, "big", "a");
    for i in 0..200 {
        lg.checkpoint(&id, cp("k", Some(&kib_note(i))), &Mutation::default())
            .unwrap();
    }
    drop(lg);
    for json in [true, false] {
        let mut c = env.command();
        c.arg("--db").arg(env.path()).args(["session", "show", &id]);
        if json {
            c.arg("--json");
        }
        let mut child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        let mut one = [0_u8; 1];
        out.read_exact(&mut one).unwrap();
        drop(out); // `| head -c 1`
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let status = child.wait().unwrap();
        let r = Run {
            code: status.code().unwrap_or(-1),
            stdout: String::new(),
            stderr: err,
        };
        assert_no_panic(&r);
        assert_eq!(
            status.code(),
            Some(0),
            "json {json}: {status:?} {}",
            r.stderr
        );
    }
}

/// A negative number given as a flag's value without `=` is that flag's
/// value, refused by the flag's own rule and message (never clap's
/// "unexpected argument" without the flag's name, never Rust's "invalid
/// digit found in string"); nothing is written.
#[test]
fn negative_numbers_are_refused_by_their_flags_rule() {
    let env = TestEnv::new();
    let id = env.create("t");
    for (args, says) in [
        (
            vec![
                "session",
                "checkpoint",
                &id,
                "--step",
                "s",
                "--if-rev",
                "-1",
            ],
            "revision: an integer of 1 or more",
        ),
        (vec!["session", "lock", &id, "--ttl-ms", "-1"], "1"),
        (
            vec!["purge", "--keep-last", "-1", "--dry-run"],
            "an integer of 0 or more",
        ),
        (
            vec!["purge", "--keep-last=-1", "--dry-run"],
            "an integer of 0 or more",
        ),
        (
            vec!["--busy-timeout-ms", "-3", "session", "list"],
            "from 0 to 3600000",
        ),
        (
            vec!["sql", "SELECT 1", "--timeout-ms", "-1"],
            "from 1 to 3600000",
        ),
        (vec!["session", "events", &id, "--limit", "-1"], "1"),
    ] {
        let err = refused(&env, &id, &args, "INVALID_ARGUMENT", 2);
        let message = err["message"].as_str().unwrap();
        assert!(message.contains(says), "{args:?}: {message}");
        assert!(
            !message.contains("unexpected argument"),
            "{args:?}: {message}"
        );
        assert!(!message.contains("invalid digit"), "{args:?}: {message}");
    }
    let err = refused(
        &env,
        &id,
        &["session", "events", &id, "--after-seq", "-2"],
        "INVALID_ARGUMENT",
        2,
    );
    assert_eq!(
        err["details"]["reason"],
        "must be -1 or more (-1, the default, starts at the first event)"
    );
    let all = env
        .json(&["session", "events", &id, "--after-seq", "-1"])
        .data();
    assert_eq!(all["events"][0]["seq"], 0);
}
