//! `verify --export FILE` (README.md, "Retention: purging old sessions";
//! docs/import-export.md, "Checking an export against the tombstones"):
//! every session of the file is reported by outcome — matched, not purged
//! here, no tombstone — and a file with no match proves nothing
//! (INVALID_ARGUMENT, field `export`). Backend-neutral.

use crate::common::*;
use logbook::ledger::{PurgeFilter, PurgeRequest};
use logbook::{ErrorCode, ExportOutcome, Ledger, Mutation};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// An ended session of `app` (created, one checkpoint, completed).
fn ended(lg: &Ledger, app: &str) -> String {
    let id = lib_create(lg, "work", app);
    lg.checkpoint(&id, cp("s1", None), &Mutation::default())
        .unwrap();
    lg.complete(&id, "ok", &Mutation::default()).unwrap();
    id
}

/// Purges `app`, writing its sessions to `out`.
fn purge_app(lg: &Ledger, app: &str, out: &Path) {
    let req = PurgeRequest {
        filter: PurgeFilter {
            app: Some(app.to_owned()),
            ..PurgeFilter::default()
        },
        export: Some(out.to_path_buf()),
    };
    lg.purge(&req, &mut |_, _| {}).unwrap();
}

/// A session of no ledger here: one line with its hashes left out.
fn foreign_line() -> String {
    crate::purge::seed_lines(1, 3, "elsewhere", now_ms(), "completed", 0xf0f0)
}

/// The hash of the last event of a file's line, as the file has it.
fn head_in(line: &str) -> String {
    let v: Value = serde_json::from_str(line).unwrap();
    let evs = v["events"].as_array().unwrap();
    evs.last().unwrap()["hash"].as_str().unwrap().to_owned()
}

/// `(line, session, events, outcome)` of each session of a report's list.
fn outcomes(sessions: &[logbook::ExportSession]) -> Vec<(u64, String, u64, ExportOutcome)> {
    sessions
        .iter()
        .map(|s| (s.line, s.session_id.clone(), s.events, s.outcome))
        .collect()
}

/// Two purged sessions, one still here, one of no ledger here: a file
/// holding the four. Returns the env, its ledger, the ids in file order
/// and the file.
fn mixed() -> (TestEnv, Ledger, Vec<String>, PathBuf) {
    let (env, lg) = fresh_ledger();
    // The export writes sessions in id order.
    let mut old = [ended(&lg, "old"), ended(&lg, "old")];
    old.sort();
    let [a, b] = old;
    let c = ended(&lg, "keep");
    let purged = env.dir.path().join("purged.jsonl");
    purge_app(&lg, "old", &purged);
    let kept = env.dir.path().join("kept.jsonl");
    lg.export_jsonl_file(std::slice::from_ref(&c), &kept)
        .unwrap();
    let foreign = foreign_line();
    let d = serde_json::from_str::<Value>(foreign.trim()).unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let file = env.dir.path().join("mixed.jsonl");
    let text = std::fs::read_to_string(&purged).unwrap()
        + &std::fs::read_to_string(&kept).unwrap()
        + &foreign;
    std::fs::write(&file, text).unwrap();
    (env, lg, vec![a, b, c, d], file)
}

/// Today's behaviour pinned by this test: a mixed file used to report only
/// its matched sessions (a count), saying nothing of the others.
#[test]
fn verify_export_reports_every_session_of_the_file_by_outcome() {
    let (_env, lg, ids, file) = mixed();
    let r = lg.verify_with_export(&[], Some(&file)).unwrap();
    assert_eq!(r.export_checked, Some(2));
    let sessions = r.export_sessions.expect("export_sessions");
    assert_eq!(
        outcomes(&sessions),
        vec![
            (1, ids[0].clone(), 3, ExportOutcome::Matched),
            (2, ids[1].clone(), 3, ExportOutcome::Matched),
            (3, ids[2].clone(), 3, ExportOutcome::NotPurgedHere),
            (4, ids[3].clone(), 3, ExportOutcome::NoTombstone),
        ]
    );
    // A matched head is the file's own (and its tombstone's).
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(sessions[0].head_hash, head_in(lines[0]));
    assert_eq!(sessions[2].head_hash, head_in(lines[2]));
    assert_eq!(sessions[3].head_hash.len(), 64);
    // The JSON shape: keys in alphabetical order, outcomes snake_case.
    assert_eq!(
        serde_json::to_value(&sessions[2]).unwrap(),
        json!({"events": 3, "head_hash": head_in(lines[2]), "line": 3,
               "outcome": "not_purged_here", "session_id": ids[2]})
    );
}

/// Today a file none of whose sessions has a tombstone here gives
/// "0 purged sessions match" and succeeds.
#[test]
fn verify_export_of_a_file_that_proves_nothing_is_invalid_argument() {
    let (env, lg, ids, file) = mixed();
    // Only the session still here and the foreign one.
    let text = std::fs::read_to_string(&file).unwrap();
    let rest: String = text.lines().skip(2).map(|l| format!("{l}\n")).collect();
    let nothing = env.dir.path().join("nothing.jsonl");
    std::fs::write(&nothing, rest).unwrap();
    let e = lg.verify_with_export(&[], Some(&nothing)).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    let logbook::Error::ExportUnproven { sessions, .. } = &e else {
        panic!("expected ExportUnproven, got {e:?}");
    };
    assert_eq!(
        outcomes(sessions),
        vec![
            (1, ids[2].clone(), 3, ExportOutcome::NotPurgedHere),
            (2, ids[3].clone(), 3, ExportOutcome::NoTombstone),
        ]
    );
    let d = e.details();
    assert_eq!(d["field"], "export");
    assert_eq!(
        d["reason"],
        "proves nothing about this ledger: none of its 2 session(s) is purged here with a \
         tombstone that matches (1 not purged here, 1 with no tombstone here)"
    );
    assert_eq!(d["sessions"][1]["outcome"], "no_tombstone");
    // An empty file proves nothing either.
    let empty = env.dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let e = lg.verify_with_export(&[], Some(&empty)).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    assert_eq!(e.details()["sessions"], json!([]));
}

/// A mismatch fails the check whatever else matched (LEDGER_TAMPERED).
#[test]
fn verify_export_fails_on_a_mismatch_even_beside_matches() {
    let (env, lg, ids, file) = mixed();
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // The second purged session with its last event's detail changed and
    // its hashes left out: its own chain holds, its tombstone's does not.
    let mut v: Value = serde_json::from_str(lines[1]).unwrap();
    for e in v["events"].as_array_mut().unwrap() {
        e["hash"] = json!("");
    }
    v["events"][2]["detail"] = json!("other");
    v["final_result"] = json!("other");
    let bad = env.dir.path().join("bad.jsonl");
    std::fs::write(&bad, format!("{}\n{v}\n", lines[0])).unwrap();
    let e = lg.verify_with_export(&[], Some(&bad)).unwrap_err();
    assert_eq!(e.code(), ErrorCode::LedgerTampered);
    assert_eq!(e.details()["problem"], "tombstone");
    assert_eq!(e.details()["session_id"], ids[1].as_str());
}

/// The CLI: each session in a table, the counts in one line; exit 0 with a
/// match, 2 (INVALID_ARGUMENT) without, the sessions then on stdout and in
/// the JSON details.
#[test]
fn verify_export_cli_lists_each_session_and_exits_by_the_rule() {
    let (env, _lg, ids, file) = mixed();
    let f = file.to_str().unwrap();
    let r = env.run(&["verify", "--export", f]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let want = format!(
        "export: 2 of 4 session(s) match their tombstones; 1 not purged here, 1 with no tombstone here\n\
         LINE  SESSION               EVENTS  OUTCOME\n\
         \x20  1  {}       3  matched\n\
         \x20  2  {}       3  matched\n\
         \x20  3  {}       3  not purged here\n\
         \x20  4  {}       3  no tombstone\n",
        ids[0], ids[1], ids[2], ids[3]
    );
    assert!(r.stdout.ends_with(&want), "{}", r.stdout);
    let v = env.json(&["verify", "--export", f]).data();
    assert_eq!(v["export_checked"], 2);
    let got: Vec<(Value, Value)> = v["export_sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["session_id"].clone(), s["outcome"].clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (json!(ids[0]), json!("matched")),
            (json!(ids[1]), json!("matched")),
            (json!(ids[2]), json!("not_purged_here")),
            (json!(ids[3]), json!("no_tombstone")),
        ]
    );

    let text = std::fs::read_to_string(&file).unwrap();
    let rest: String = text.lines().skip(2).map(|l| format!("{l}\n")).collect();
    let nothing = env.dir.path().join("nothing.jsonl");
    std::fs::write(&nothing, rest).unwrap();
    let n = nothing.to_str().unwrap();
    let r = env.run(&["verify", "--export", n]);
    assert_eq!(r.code, 2);
    assert_eq!(
        r.stdout,
        format!(
            "LINE  SESSION               EVENTS  OUTCOME\n\
             \x20  1  {}       3  not purged here\n\
             \x20  2  {}       3  no tombstone\n",
            ids[2], ids[3]
        )
    );
    assert!(
        r.stderr
            .starts_with("error[INVALID_ARGUMENT]: invalid `export`: proves nothing"),
        "{}",
        r.stderr
    );
    let r = env.json(&["verify", "--export", n]);
    let d = assert_error(&r, "INVALID_ARGUMENT", 2)["details"].clone();
    assert_eq!(d["field"], "export");
    assert_eq!(d["sessions"][0]["session_id"], ids[2].as_str());
    assert_eq!(d["sessions"][0]["outcome"], "not_purged_here");
}
