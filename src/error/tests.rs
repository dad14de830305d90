//! Unit tests of the code table and of each variant's `details` text.

use super::*;

/// One error of each variant shape, with fixed ids and paths; the name is
/// the variant's (a suffix tells two samples of one variant apart).
pub(super) fn samples() -> Vec<(&'static str, Error)> {
    let ses = "ses_0123456789abcdef";
    let run = "run_0123456789abcdef";
    vec![
        (
            "InvalidArgument",
            Error::invalid("title", "must be 1-200 characters"),
        ),
        ("SessionNotFound", Error::SessionNotFound { id: ses.into() }),
        (
            "SessionPurged",
            Error::SessionPurged {
                id: ses.into(),
                purge_id: 3,
                purged_at_ms: 1_796_000_000_000,
            },
        ),
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
            "Conflict.no_event",
            Error::Conflict {
                id: ses.into(),
                expected_rev: 2,
                actual_rev: 0,
                latest_event: None,
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
                from: crate::model::SessionStatus::Completed,
                verb: crate::model::Verb::Pause,
            },
        ),
        (
            "RunInvalidTransition",
            Error::RunInvalidTransition {
                id: run.into(),
                from: "succeeded".into(),
                verb: "fail".into(),
            },
        ),
        (
            "Corrupt",
            Error::Corrupt {
                path: "/data/ledger.db".into(),
                reason: "the file is not a SQLite database".into(),
            },
        ),
        (
            "VersionTooNew",
            Error::VersionTooNew {
                path: "/data/ledger.db".into(),
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
            "Tampered",
            Error::Tampered {
                session_id: ses.into(),
                seq: 4,
                problem: "hash".into(),
                expected: "aa".repeat(4),
                found: "bb".repeat(4),
                broken_sessions: 1,
            },
        ),
        (
            "Unhealthy",
            Error::Unhealthy {
                code: ErrorCode::StoreCorrupt,
                problems: 1,
                first: "integrity: page 3 is damaged".into(),
                report: Box::new(serde_json::json!({
                    "path": "/data/ledger.db",
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
        (
            "CheckpointNotFound.latest",
            Error::CheckpointNotFound {
                id: ses.into(),
                seq: None,
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
                report: Box::new(serde_json::json!({
                    "sessions": 2,
                    "events": 9,
                    "out": null,
                })),
            },
        ),
        (
            "Incomplete.overlap",
            Error::Incomplete {
                cause: Box::new(Error::Corrupt {
                    path: "/data/ledger.db".into(),
                    reason: "the database file is damaged".into(),
                }),
                progress: "imported 1 before it stopped".into(),
                report: Box::new(serde_json::json!({"path": "/in/export.jsonl", "imported": 1})),
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
            "StoreFile",
            Error::StoreFile {
                path: "/data/ledger.db".into(),
                reason: "the file was replaced under this open handle".into(),
                hint: "reopen the database".into(),
            },
        ),
        (
            "ExportUnproven",
            Error::ExportUnproven {
                reason: "proves nothing about this ledger: none of its 1 session(s) is purged \
                         here with a tombstone that matches (0 not purged here, 1 with no \
                         tombstone here)"
                    .into(),
                sessions: vec![crate::ledger::ExportSession {
                    events: 3,
                    head_hash: "ab".repeat(32),
                    line: 1,
                    outcome: crate::ledger::ExportOutcome::NoTombstone,
                    session_id: ses.into(),
                }],
            },
        ),
    ]
}

/// Each sample's `details` as the envelope prints it, pinned before the
/// details were built from `Serialize` structs: keys in alphabetical order
/// (serde_json's map order without `preserve_order`), nested objects too.
const DETAILS: &[(&str, &str)] = &[
    (
        "InvalidArgument",
        r#"{"field":"title","reason":"must be 1-200 characters"}"#,
    ),
    (
        "SessionNotFound",
        r#"{"session_id":"ses_0123456789abcdef"}"#,
    ),
    (
        "SessionPurged",
        r#"{"purge_id":3,"purged_at_ms":1796000000000,"session_id":"ses_0123456789abcdef"}"#,
    ),
    ("RunNotFound", r#"{"run_id":"run_0123456789abcdef"}"#),
    (
        "Conflict",
        r#"{"current_rev":3,"expected_rev":2,"latest_event":{"seq":3,"step":"deploy","type":"checkpoint"},"session_id":"ses_0123456789abcdef"}"#,
    ),
    (
        "Conflict.no_event",
        r#"{"current_rev":0,"expected_rev":2,"latest_event":null,"session_id":"ses_0123456789abcdef"}"#,
    ),
    (
        "LeaseHeld",
        r#"{"expires_at_ms":1767225600000,"hostname":"build-1","pid":4242,"session_id":"ses_0123456789abcdef"}"#,
    ),
    ("Busy", r#"{"busy_timeout_ms":5000}"#),
    (
        "Unavailable",
        r#"{"location":"postgres://agent@db.example:5432/ledger","outcome":"not_applied"}"#,
    ),
    (
        "CommitUnknown",
        r#"{"location":"postgres://agent@db.example:5432/ledger","outcome":"unknown"}"#,
    ),
    (
        "InvalidTransition",
        r#"{"session_id":"ses_0123456789abcdef","status":"completed","verb":"pause"}"#,
    ),
    (
        "RunInvalidTransition",
        r#"{"run_id":"run_0123456789abcdef","status":"succeeded","verb":"fail"}"#,
    ),
    ("Corrupt", r#"{"path":"/data/ledger.db"}"#),
    (
        "VersionTooNew",
        r#"{"found":99,"path":"/data/ledger.db","supported":7}"#,
    ),
    ("Io", r#"{}"#),
    ("StoreIo", r#"{}"#),
    (
        "Tampered",
        r#"{"broken_sessions":1,"expected":"aaaaaaaa","found":"bbbbbbbb","problem":"hash","seq":4,"session_id":"ses_0123456789abcdef"}"#,
    ),
    (
        "Unhealthy",
        r#"{"checks":[{"check":"integrity","ok":false}],"healthy":false,"path":"/data/ledger.db"}"#,
    ),
    (
        "GateNotFound",
        r#"{"gate":"deploy","session_id":"ses_0123456789abcdef"}"#,
    ),
    (
        "GateAlreadyDecided",
        r#"{"decided_seq":5,"gate":"deploy","session_id":"ses_0123456789abcdef","status":"approved"}"#,
    ),
    (
        "GatePending",
        r#"{"gate":"deploy","session_id":"ses_0123456789abcdef"}"#,
    ),
    (
        "CheckpointNotFound",
        r#"{"seq":7,"session_id":"ses_0123456789abcdef"}"#,
    ),
    (
        "CheckpointNotFound.latest",
        r#"{"seq":null,"session_id":"ses_0123456789abcdef"}"#,
    ),
    ("LeaseNotFound", r#"{"session_id":"ses_0123456789abcdef"}"#),
    ("Internal", r#"{}"#),
    ("Interrupted", r#"{"signal":"SIGTERM"}"#),
    (
        "Incomplete",
        r#"{"events":9,"out":null,"sessions":2,"signal":"SIGINT"}"#,
    ),
    (
        "Incomplete.overlap",
        r#"{"imported":1,"path":"/in/export.jsonl"}"#,
    ),
    (
        "RunAlreadyRunning",
        r#"{"run_id":"run_0123456789abcdef","running_run_id":"run_fedcba9876543210","session_id":"ses_0123456789abcdef","status":"pending","verb":"start"}"#,
    ),
    (
        "StoreFile",
        r#"{"hint":"reopen the database","path":"/data/ledger.db"}"#,
    ),
    (
        "ExportUnproven",
        r#"{"field":"export","reason":"proves nothing about this ledger: none of its 1 session(s) is purged here with a tombstone that matches (0 not purged here, 1 with no tombstone here)","sessions":[{"events":3,"head_hash":"abababababababababababababababababababababababababababababababab","line":1,"outcome":"no_tombstone","session_id":"ses_0123456789abcdef"}]}"#,
    ),
];

#[test]
fn details_text_of_every_variant_is_pinned() {
    let samples = samples();
    let names: Vec<&str> = samples.iter().map(|(n, _)| *n).collect();
    let pinned: Vec<&str> = DETAILS.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, pinned, "every sample has a pinned text");
    for ((name, e), (_, want)) in samples.iter().zip(DETAILS) {
        let got = serde_json::to_string(&e.details()).unwrap();
        assert_eq!(got, *want, "{name}");
    }
}

#[test]
fn code_table_matches_spec_section_3() {
    let rows: Vec<(&str, u8, bool)> = ErrorCode::TABLE
        .iter()
        .map(|(_, i)| (i.wire, i.exit, i.retryable))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("INVALID_ARGUMENT", 2, false),
            ("SESSION_NOT_FOUND", 3, false),
            ("RUN_NOT_FOUND", 3, false),
            ("SESSION_CONFLICT", 4, true),
            ("LEASE_HELD", 4, true),
            ("STORE_BUSY", 4, true),
            ("SESSION_INVALID_TRANSITION", 5, false),
            ("RUN_INVALID_TRANSITION", 5, false),
            ("STORE_CORRUPT", 6, false),
            ("STORE_VERSION_TOO_NEW", 6, false),
            ("STORE_IO", 6, false),
            ("LEDGER_TAMPERED", 6, false),
            ("GATE_NOT_FOUND", 3, false),
            ("GATE_ALREADY_DECIDED", 5, false),
            ("GATE_PENDING", 5, false),
            ("CHECKPOINT_NOT_FOUND", 3, false),
            ("LEASE_NOT_FOUND", 3, false),
            ("INTERNAL", 1, false),
            ("INTERRUPTED", 130, true),
            ("STORE_UNAVAILABLE", 4, true),
        ]
    );
}

#[test]
fn table_all_and_the_match_agree_for_every_code() {
    assert_eq!(ErrorCode::TABLE.len(), ErrorCode::ALL.len());
    for (i, (code, info)) in ErrorCode::TABLE.iter().enumerate() {
        // ALL lists the codes in declaration order, without a gap.
        assert_eq!(ErrorCode::ALL[i], *code);
        assert_eq!(*code as usize, i, "{code:?}");
        assert_eq!(code.info(), *info);
        assert_eq!(code.as_str(), info.wire);
        assert_eq!(code.exit_code(), info.exit);
        assert_eq!(code.retryable(), info.retryable);
        assert_eq!(code.to_string(), info.wire);
        assert_eq!(
            serde_json::to_string(code).unwrap(),
            format!("\"{}\"", info.wire)
        );
        // The wire string is the variant's name in SCREAMING_SNAKE case.
        let mut snake = String::new();
        for (j, ch) in format!("{code:?}").chars().enumerate() {
            if ch.is_ascii_uppercase() && j > 0 {
                snake.push('_');
            }
            snake.push(ch.to_ascii_uppercase());
        }
        assert_eq!(info.wire, snake);
        assert!(
            info.description.ends_with('.') && !info.description.contains("  "),
            "{code:?}: {}",
            info.description
        );
    }
}

#[test]
fn invalid_transition_names_status_and_verb() {
    let e = Error::invalid_transition(
        "ses_0123456789abcdef",
        crate::model::SessionStatus::Completed,
        crate::model::Verb::Pause,
    );
    assert_eq!(e.code(), ErrorCode::SessionInvalidTransition);
    assert_eq!(
        serde_json::to_string(&e.wire_details()).unwrap(),
        r#"{"session_id":"ses_0123456789abcdef","status":"completed","verb":"pause"}"#
    );
}

/// Serialized directly, the details come out in their structs' declaration
/// order; through a `Value` map (serde_json without `preserve_order`, as
/// this crate builds it) in sorted order: equal, so every shape declares
/// its fields in alphabetical order of their keys, as module `details` says.
#[test]
fn wire_details_keys_are_in_alphabetical_order() {
    for (name, e) in samples() {
        let direct = serde_json::to_string(&e.wire_details()).unwrap();
        let via_value = serde_json::to_string(&e.details()).unwrap();
        assert_eq!(direct, via_value, "{name}");
    }
}

/// The variant's name, by an exhaustive match: a new variant does not
/// compile here until it is named, and [`VARIANTS`] then asks for its sample.
fn variant(e: &Error) -> &'static str {
    match e {
        Error::InvalidArgument { .. } => "InvalidArgument",
        Error::SessionNotFound { .. } => "SessionNotFound",
        Error::SessionPurged { .. } => "SessionPurged",
        Error::RunNotFound { .. } => "RunNotFound",
        Error::Conflict { .. } => "Conflict",
        Error::LeaseHeld { .. } => "LeaseHeld",
        Error::Busy { .. } => "Busy",
        Error::Unavailable { .. } => "Unavailable",
        Error::CommitUnknown { .. } => "CommitUnknown",
        Error::InvalidTransition { .. } => "InvalidTransition",
        Error::RunInvalidTransition { .. } => "RunInvalidTransition",
        Error::Corrupt { .. } => "Corrupt",
        Error::VersionTooNew { .. } => "VersionTooNew",
        Error::Io { .. } => "Io",
        Error::StoreIo { .. } => "StoreIo",
        Error::Tampered { .. } => "Tampered",
        Error::Unhealthy { .. } => "Unhealthy",
        Error::GateNotFound { .. } => "GateNotFound",
        Error::GateAlreadyDecided { .. } => "GateAlreadyDecided",
        Error::GatePending { .. } => "GatePending",
        Error::CheckpointNotFound { .. } => "CheckpointNotFound",
        Error::LeaseNotFound { .. } => "LeaseNotFound",
        Error::Internal { .. } => "Internal",
        Error::Interrupted { .. } => "Interrupted",
        Error::Incomplete { .. } => "Incomplete",
        Error::RunAlreadyRunning { .. } => "RunAlreadyRunning",
        Error::StoreFile { .. } => "StoreFile",
        Error::ExportUnproven { .. } => "ExportUnproven",
    }
}

/// Every arm of [`variant`], in declaration order.
const VARIANTS: &[&str] = &[
    "InvalidArgument",
    "SessionNotFound",
    "SessionPurged",
    "RunNotFound",
    "Conflict",
    "LeaseHeld",
    "Busy",
    "Unavailable",
    "CommitUnknown",
    "InvalidTransition",
    "RunInvalidTransition",
    "Corrupt",
    "VersionTooNew",
    "Io",
    "StoreIo",
    "Tampered",
    "Unhealthy",
    "GateNotFound",
    "GateAlreadyDecided",
    "GatePending",
    "CheckpointNotFound",
    "LeaseNotFound",
    "Internal",
    "Interrupted",
    "Incomplete",
    "RunAlreadyRunning",
    "StoreFile",
    "ExportUnproven",
];

#[test]
fn every_variant_has_a_sample_named_after_it() {
    let mut seen: Vec<&str> = Vec::new();
    for (name, e) in samples() {
        let v = variant(&e);
        assert_eq!(name.split('.').next(), Some(v), "sample {name} is a {v}");
        if !seen.contains(&v) {
            seen.push(v);
        }
    }
    seen.sort_unstable();
    let mut all = VARIANTS.to_vec();
    all.sort_unstable();
    assert_eq!(seen, all);
}
