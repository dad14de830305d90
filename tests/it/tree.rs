//! Hierarchies (issue 4 §2) and the V2 → V4 upgrade of the workflow tables.

use crate::common::*;
use serde_json::Value;

#[test]
fn create_with_parent_requires_an_existing_session() {
    let env = TestEnv::new();
    let e = assert_error(
        &env.json(&[
            "session",
            "create",
            "--title",
            "t",
            "--parent",
            "ses_00000000000000aa",
        ]),
        "SESSION_NOT_FOUND",
        3,
    );
    assert_eq!(e["details"]["session_id"], "ses_00000000000000aa");
    assert_error(
        &env.json(&["session", "create", "--title", "t", "--parent", "nope"]),
        "INVALID_ARGUMENT",
        2,
    );
    assert_eq!(env.count_or_zero("sessions"), 0);
}

#[test]
fn tree_lists_descendants_depth_first_with_status_and_show_counts_children() {
    let env = TestEnv::new();
    let root = env.create("root");
    let a = env.create_with(&["--title", "a", "--parent", &root]);
    let a1 = env.create_with(&["--title", "a1", "--parent", &a]);
    let b = env.create_with(&["--title", "b", "--parent", &root, "--pending"]);
    let a2 = env.create_with(&["--title", "a2", "--parent", &a]);
    env.json(&["session", "complete", &a1, "--result", "ok"])
        .data();
    env.json(&["session", "fail", &a2, "--reason", "no"]).data();
    let _other = env.create("unrelated");

    let t = env.json(&["session", "tree", &root]).data();
    let nodes: Vec<(String, i64, String, i64)> = t["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["session_id"].as_str().unwrap().to_owned(),
                n["depth"].as_i64().unwrap(),
                n["status"].as_str().unwrap().to_owned(),
                n["child_count"].as_i64().unwrap(),
            )
        })
        .collect();
    let want = [
        (root.clone(), 0, "active", 2),
        (a.clone(), 1, "active", 2),
        (a1.clone(), 2, "completed", 0),
        (a2.clone(), 2, "failed", 0),
        (b.clone(), 1, "pending", 0),
    ]
    .map(|(i, d, s, c)| (i, d, s.to_owned(), c));
    assert_eq!(nodes, want);
    assert_eq!(t["truncated"], false);
    assert_eq!(t["nodes"][2]["parent_session_id"], a.as_str());
    // A subtree.
    let t = env.json(&["session", "tree", &a]).data();
    assert_eq!(t["nodes"].as_array().unwrap().len(), 3);
    assert_eq!(t["nodes"][0]["parent_session_id"], root.as_str());
    let human = env.run(&["session", "tree", &root]).stdout;
    assert!(human.contains(&format!("    {a1}  completed")), "{human}");

    let v = env.json(&["session", "show", &a]).data();
    assert_eq!(
        v["children"],
        serde_json::json!({"total": 2, "pending": 0, "active": 0, "paused": 0, "completed": 1, "failed": 1, "cancelled": 0})
    );
    assert_eq!(
        env.json(&["session", "show", &a1]).data()["children"]["total"],
        0
    );
    let human = env.run(&["session", "show", &root]).stdout;
    assert!(
        human.contains("children   2 (pending 1, active 1"),
        "{human}"
    );
    // `list --parent` returns the direct children.
    let l = env.json(&["session", "list", "--parent", &root]).data();
    let ids: Vec<&str> = l["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [b.as_str(), a.as_str()]);
    assert_error(
        &env.json(&["session", "tree", "ses_00000000000000aa"]),
        "SESSION_NOT_FOUND",
        3,
    );
}

/// A parent cycle planted with raw SQL is walked once, not forever.
#[test]
fn tree_survives_a_planted_cycle() {
    let env = TestEnv::new();
    let a = env.create("a");
    let b = env.create_with(&["--title", "b", "--parent", &a]);
    env.batch(&format!(
        "UPDATE sessions SET parent_session_id = '{b}', rev = rev + 1 WHERE session_id = '{a}'"
    ));
    let t = env.json(&["session", "tree", &a]).data();
    assert_eq!(t["nodes"].as_array().unwrap().len(), 2);
}

// A V2 SQLite file.
sqlite_only! {
/// C25 for V4: the V2 fixture upgrades with its rows intact, and every
/// workflow verb works on it.
#[test]
fn v2_fixture_upgrades_to_v4_and_the_workflow_verbs_work() {
    let env = TestEnv::new();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/v2.db"),
        env.path(),
    )
    .unwrap();
    let rows = |c: &rusqlite::Connection| -> (i64, i64, String) {
        let mut st = c
            .prepare("SELECT json_array(session_id, status, title, rev, updated_at_ms) FROM sessions ORDER BY session_id")
            .unwrap();
        let v: Vec<String> = st
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let n = |t: &str| {
            c.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
                .unwrap()
        };
        (n("sessions"), n("events"), v.join("\n"))
    };
    let before = rows(&env.sql());
    assert_eq!(env.json(&["session", "list"]).code, 0);
    let c = env.sql();
    assert_eq!(rows(&c), before);
    let (ver, hist, ic): (i64, i64, String) = c
        .query_row(
            "SELECT (SELECT user_version FROM pragma_user_version),
                    (SELECT max(version) FROM refinery_schema_history),
                    (SELECT integrity_check FROM pragma_integrity_check)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    let latest = logbook::store::migrate::LATEST_VERSION;
    assert_eq!((ver, hist, ic.as_str()), (latest, latest, "ok"));
    let s: String = c
        .query_row(
            "SELECT session_id FROM sessions WHERE status = 'paused' LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    env.json(&["session", "resume", &s]).data();
    let cp = env
        .json(&[
            "session",
            "checkpoint",
            &s,
            "--step",
            "up",
            "--state",
            r#"{"k":1}"#,
        ])
        .data();
    let seq = cp["checkpoint"]["seq"].as_i64().unwrap().to_string();
    env.json(&["gate", "open", &s, "--gate", "g", "--kind", "auto"])
        .data();
    env.json(&["session", "restore", &s, "--checkpoint", &seq])
        .data();
    let child = env.json(&["session", "fork", &s]).data();
    let tok = env.json(&["session", "lock", &s]).data()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    env.json(&["session", "unlock", &s, "--token", &tok]).data();
    assert_eq!(
        env.json(&["session", "tree", &s]).data()["nodes"][1]["session_id"],
        child["session_id"]
    );
    let v: Value = env.json(&["verify"]).data();
    assert_eq!(v["sessions"].as_i64(), Some(6));
}
}
