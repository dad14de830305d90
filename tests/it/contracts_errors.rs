//! The error contract as reviewed data (docs/design.md, "Contracts"): the code table
//! (`tests/golden/codes.txt`), `docs/errors.md` rendered from it with each
//! code's details, and the failure envelope of each library error variant
//! (`tests/golden/envelopes/library.txt`).
//!
//! A change fails here until the files are updated:
//! `UPDATE_GOLDEN=1 cargo test --test it contracts` (outside CI only; see
//! `golden.rs`), then review `git diff tests/golden docs/errors.md`.

use crate::golden::assert_golden;
use logbook::error::LatestEvent;
use logbook::{Envelope, Error, ErrorCode};
use serde_json::json;

/// One error of each variant shape, with fixed ids and paths.
fn samples() -> Vec<(&'static str, Error)> {
    let ses = "ses_0123456789abcdef";
    let run = "run_0123456789abcdef";
    let db = "/data/ledger.db";
    vec![
        (
            "InvalidArgument",
            Error::invalid("title", "must be 1-200 characters"),
        ),
        ("SessionNotFound", Error::SessionNotFound { id: ses.into() }),
        ("RunNotFound", Error::RunNotFound { id: run.into() }),
        (
            "Conflict",
            Error::Conflict {
                id: ses.into(),
                expected_rev: 2,
                actual_rev: 3,
                latest_event: Some(LatestEvent {
                    seq: 3,
                    event_type: "checkpoint".into(),
                    step: Some("deploy".into()),
                }),
            },
        ),
        (
            "LeaseHeld",
            Error::LeaseHeld {
                id: ses.into(),
                expires_at_ms: 1_767_225_600_000,
                pid: 4242,
                hostname: "build-1".into(),
            },
        ),
        ("Busy", Error::Busy { timeout_ms: 5000 }),
        (
            "Unavailable",
            Error::Unavailable {
                location: "postgres://agent@db.example:5432/ledger".into(),
                reason: "connection refused".into(),
            },
        ),
        (
            "CommitUnknown",
            Error::CommitUnknown {
                location: "postgres://agent@db.example:5432/ledger".into(),
            },
        ),
        (
            "InvalidTransition",
            Error::InvalidTransition {
                id: ses.into(),
                from: logbook::SessionStatus::Completed,
                verb: logbook::model::Verb::Pause,
            },
        ),
        (
            "RunInvalidTransition",
            Error::RunInvalidTransition {
                id: run.into(),
                from: "completed".into(),
                verb: "fail".into(),
            },
        ),
        (
            "RunAlreadyRunning",
            Error::RunAlreadyRunning {
                id: run.into(),
                session_id: ses.into(),
                running_run_id: "run_fedcba9876543210".into(),
            },
        ),
        (
            "Corrupt",
            Error::Corrupt {
                path: db.into(),
                reason: "the file is not a SQLite database".into(),
            },
        ),
        (
            "VersionTooNew",
            Error::VersionTooNew {
                path: db.into(),
                found: 99,
                supported: 7,
            },
        ),
        (
            "Io",
            Error::Io {
                context: "cannot create the database folder /data".into(),
                source: std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied"),
            },
        ),
        (
            "StoreIo",
            Error::StoreIo {
                context: "the disk is full".into(),
            },
        ),
        (
            "StoreFile",
            Error::StoreFile {
                path: db.into(),
                reason: "the file was replaced under this open handle".into(),
                hint: "reopen the database".into(),
            },
        ),
        (
            "Tampered",
            Error::Tampered {
                session_id: ses.into(),
                seq: 4,
                problem: "prev_hash".into(),
                expected: "5e".repeat(32),
                found: "00".repeat(32),
                broken_sessions: 1,
            },
        ),
        (
            "Unhealthy",
            Error::Unhealthy {
                code: ErrorCode::StoreCorrupt,
                problems: 1,
                first: "integrity: page 3 is damaged".into(),
                report: Box::new(json!({
                    "path": db,
                    "healthy": false,
                    "checks": [{"check": "integrity", "ok": false}],
                })),
            },
        ),
        (
            "GateNotFound",
            Error::GateNotFound {
                id: ses.into(),
                gate: "deploy".into(),
            },
        ),
        (
            "GateAlreadyDecided",
            Error::GateAlreadyDecided {
                id: ses.into(),
                gate: "deploy".into(),
                status: "approved".into(),
                decided_seq: 5,
            },
        ),
        (
            "GatePending",
            Error::GatePending {
                id: ses.into(),
                gate: "deploy".into(),
            },
        ),
        (
            "CheckpointNotFound",
            Error::CheckpointNotFound {
                id: ses.into(),
                seq: Some(7),
            },
        ),
        ("LeaseNotFound", Error::LeaseNotFound { id: ses.into() }),
        (
            "Internal",
            Error::internal("a conditional update matched no row"),
        ),
        ("Interrupted", Error::Interrupted { signal: 15 }),
        (
            "Incomplete",
            Error::Incomplete {
                cause: Box::new(Error::Interrupted { signal: 2 }),
                progress: "exported 2 session(s) before it stopped".into(),
                report: Box::new(json!({"sessions": 2, "events": 9, "out": null})),
            },
        ),
        (
            "ExportUnproven",
            Error::ExportUnproven {
                reason: "proves nothing about this ledger: none of its 2 session(s) is purged \
                         here with a tombstone that matches (1 not purged here, 1 with no \
                         tombstone here)"
                    .into(),
                sessions: vec![
                    logbook::ExportSession {
                        events: 4,
                        head_hash: "5e".repeat(32),
                        line: 1,
                        outcome: logbook::ExportOutcome::NotPurgedHere,
                        session_id: ses.into(),
                    },
                    logbook::ExportSession {
                        events: 2,
                        head_hash: "a7".repeat(32),
                        line: 2,
                        outcome: logbook::ExportOutcome::NoTombstone,
                        session_id: "ses_fedcba9876543210".into(),
                    },
                ],
            },
        ),
    ]
}

#[test]
fn library_error_envelopes_are_pinned() {
    let mut out = String::new();
    for (name, e) in samples() {
        out.push_str(&format!(
            "{name} [exit {}]\n{}\n\n",
            e.exit_code(),
            Envelope::<()>::error(&e).to_json().unwrap()
        ));
    }
    assert_golden("tests/golden/envelopes/library.txt", &out);
}

// ---------------------------------------------------------------------------
// The code table and docs/errors.md

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

#[test]
fn code_table_is_pinned() {
    let width = ErrorCode::ALL
        .iter()
        .map(|c| c.as_str().len())
        .max()
        .unwrap_or(0);
    let mut out = format!("{:width$}  exit  retryable  description\n", "code");
    for code in ErrorCode::ALL {
        let i = code.info();
        out.push_str(&format!(
            "{:width$}  {:<4}  {:<9}  {}\n",
            i.wire,
            i.exit,
            yes_no(i.retryable),
            i.description
        ));
    }
    assert_golden("tests/golden/codes.txt", &out);
}

/// What a sample's details show, where the code's description does not
/// say it already.
fn note(sample: &str) -> Option<&'static str> {
    Some(match sample {
        "InvalidArgument" => {
            "The field (or flag) and what is wrong with it. A clap usage error under `--json` \
             has the same shape (`field` is the flag, e.g. `--title <TITLE>`, or `command`); an \
             `import` with rejected sessions has the import report instead: its counts and \
             each rejection's file, line, session id, field and reason."
        }
        "Conflict" => {
            "`latest_event` is the session's newest event (`null` when it has none), so a \
             caller whose reply was lost can see whether its own write landed."
        }
        "LeaseHeld" => {
            "`expires_at_ms` is ms since the Unix epoch; `pid` and `hostname` name the owner."
        }
        "RunAlreadyRunning" => "`run start` while another run of the session is running.",
        "Io" => "An I/O failure of the OS or of SQLite: no details.",
        "StoreFile" => {
            "Found by logbook's own checks of the database's files, with what to do (`hint`)."
        }
        "Tampered" => {
            "The first broken link: `problem` is `hash`, `prev_hash`, `seq`, `snapshot`, \
             `missing_events` or `orphan_events`."
        }
        "Unhealthy" => {
            "`doctor` found problems: the code is the first failing check's (STORE_CORRUPT, \
             LEDGER_TAMPERED or STORE_IO) and the details are the whole doctor report (shortened \
             here)."
        }
        "CheckpointNotFound" => "`seq` is `null` when the latest snapshot was asked for.",
        "ExportUnproven" => {
            "`verify --export FILE` where no session of the file is purged here with a \
             tombstone that matches, so the file proves nothing about this ledger: `field` and \
             `reason` as above, and every session of the file with its line, event count, head \
             hash (recomputed from the file) and outcome, `not_purged_here` (the session is \
             still here) or `no_tombstone` (neither it nor a tombstone of it is here)."
        }
        "Interrupted" => "The signal's name.",
        "Unavailable" => {
            "The server could not be reached: nothing was written (`outcome` `not_applied`)."
        }
        "CommitUnknown" => {
            "The connection was lost after the write was sent: it may or may not have been \
             applied (`outcome` `unknown`); retry it with the same idempotency key (without \
             one, a retry may apply it twice)."
        }
        "Incomplete" => {
            "An `export` or `import` that stopped part-way: the counts of what was done, plus \
             the keys of its cause's details; the code is the cause's (INTERRUPTED here, \
             STORE_IO or STORE_BUSY for a disk or lock failure)."
        }
        _ => return None,
    })
}

/// `docs/errors.md`: the code table, then each code's details, from
/// [`ErrorCode::ALL`] and the samples.
fn errors_md() -> String {
    let mut md = String::from(
        "# Error codes\n\
         \n\
         <!-- Generated from the code table (src/error/code.rs) and the sample errors of\n\
         tests/it/contracts_errors.rs; do not edit. After a change, run\n\
         `UPDATE_GOLDEN=1 cargo test --test it contracts` and review the diff. -->\n\
         \n\
         Every error logbook reports has a stable code. Codes are only ever\n\
         added, never renamed or reused. With `--json` the CLI prints the failure\n\
         envelope on stdout, one line:\n\
         \n\
         ```json\n\
         {\"ok\":false,\"error\":{\"code\":\"…\",\"message\":\"…\",\"retryable\":false,\"details\":{…}}}\n\
         ```\n\
         \n\
         without it, `error[CODE]: message` on stderr. An MCP tool error carries the\n\
         same `error` object (`isError: true`). The process exits with the code's exit\n\
         code; `retryable` says whether the same call may succeed if sent again\n\
         unchanged. Messages name the field and the limit, never the rejected value.\n\
         \n\
         | code | exit | retryable | when |\n\
         |---|---|---|---|\n",
    );
    for code in ErrorCode::ALL {
        let i = code.info();
        md.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            i.wire,
            i.exit,
            yes_no(i.retryable),
            i.description
        ));
    }
    md.push_str(
        "\n## Details\n\
         \n\
         The `details` object of each code, as logbook prints it (ids and paths made\n\
         up). Keys come in alphabetical order.\n",
    );
    let samples = samples();
    for code in ErrorCode::ALL {
        md.push_str(&format!("\n### {}\n", code.as_str()));
        let mut shown: Vec<String> = Vec::new();
        for (name, e) in samples.iter().filter(|(_, e)| e.code() == code) {
            let text = serde_json::to_string(&e.wire_details()).unwrap();
            if shown.contains(&text) {
                continue;
            }
            md.push('\n');
            if let Some(n) = note(name) {
                md.push_str(&format!("{n}\n\n"));
            }
            md.push_str(&format!("```json\n{text}\n```\n"));
            shown.push(text);
        }
    }
    md
}

#[test]
fn docs_errors_md_is_rendered_from_the_code_table() {
    let samples = samples();
    for code in ErrorCode::ALL {
        assert!(
            samples.iter().any(|(_, e)| e.code() == code),
            "{code} has no sample error, so docs/errors.md would show no details for it"
        );
    }
    assert_golden("docs/errors.md", &errors_md());
}
