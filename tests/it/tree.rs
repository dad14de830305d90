//! Hierarchies (docs/design.md, "Hierarchies") and the V2 → V4 upgrade of the workflow tables.

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

/// A child of `parent` in app `app`, completed.
fn ended_child(env: &TestEnv, parent: &str, app: &str) -> String {
    let id = env.create_with(&["--title", app, "--app", app, "--parent", parent]);
    env.json(&["session", "complete", &id, "--result", "ok"])
        .data();
    id
}

/// `{total, purges: [{purge_id, sessions, purged_at_ms}]}` of `parent`'s
/// purged children, from the tombstones themselves.
fn purged_children_rows(env: &TestEnv, parent: &str) -> Value {
    let rows = env.rows(
        "SELECT purge_id, count(*), max(purged_at_ms) FROM tombstones \
         WHERE parent_session_id = $1 GROUP BY purge_id ORDER BY purge_id",
        &[parent],
    );
    let purges: Vec<Value> = rows
        .iter()
        .map(|r| serde_json::json!({"purge_id": r[0], "sessions": r[1], "purged_at_ms": r[2]}))
        .collect();
    let total: i64 = rows.iter().map(|r| r[1].as_i64().unwrap()).sum();
    serde_json::json!({"total": total, "purges": purges})
}

/// Purged children of a live parent leave a trace: `show` and `session
/// tree` of the parent count them by purge (README, "Retention"), and a
/// child imported back counts among the children again.
#[test]
fn show_and_tree_of_a_parent_count_its_purged_children_by_purge() {
    let env = TestEnv::new();
    let parent = env.create_with(&["--title", "parent", "--app", "p"]);
    let mid = env.create_with(&["--title", "mid", "--app", "p", "--parent", &parent]);
    let c1 = ended_child(&env, &parent, "c1");
    let c2 = ended_child(&env, &parent, "c2");
    let c3 = ended_child(&env, &parent, "c3");
    let g1 = ended_child(&env, &mid, "c1");
    let none = serde_json::json!({"total": 0, "purges": []});
    assert_eq!(
        env.json(&["session", "show", &parent]).data()["purged_children"],
        none
    );
    let saved = env.dir.path().join("c1.jsonl");
    let p1 = env
        .json(&[
            "purge",
            "--app",
            "c1",
            "--export",
            saved.to_str().unwrap(),
            "--yes",
        ])
        .data();
    assert_eq!(p1["sessions"], 2);
    env.json(&["purge", "--app", "c2", "--yes"]).data();
    let want = purged_children_rows(&env, &parent);
    assert_eq!(want["total"], 2, "{want}");
    assert_eq!(want["purges"][0]["purge_id"], 1);
    assert_eq!(want["purges"][1]["purge_id"], 2);

    let show = env.json(&["session", "show", &parent]).data();
    assert_eq!(show["purged_children"], want);
    assert_eq!(show["children"]["total"], 2, "{}", show["children"]);
    let r = env.run(&["session", "show", &parent]);
    let line = format!(
        "purged     2 children: 1 by purge 1 ({}), 1 by purge 2 ({})\n",
        logbook::clock::format_ms(want["purges"][0]["purged_at_ms"].as_i64().unwrap()),
        logbook::clock::format_ms(want["purges"][1]["purged_at_ms"].as_i64().unwrap()),
    );
    assert!(r.stdout.contains(&line), "{}", r.stdout);

    let tree = env.json(&["session", "tree", &parent]).data();
    let nodes = tree["nodes"].as_array().unwrap();
    let node = |id: &str| {
        nodes
            .iter()
            .find(|n| n["session_id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(node(&parent)["purged_children"], want);
    assert_eq!(node(&parent)["child_count"], 2);
    assert_eq!(
        node(&mid)["purged_children"],
        purged_children_rows(&env, &mid)
    );
    assert_eq!(node(&mid)["purged_children"]["total"], 1);
    assert_eq!(node(&mid)["purged_children"]["purges"][0]["purge_id"], 1);
    assert_eq!(node(&c3)["purged_children"], none);
    let human = env.run(&["session", "tree", &parent]).stdout;
    assert!(
        human.contains(&format!("{parent} purged {}", &line["purged     ".len()..])),
        "{human}"
    );
    assert!(
        human.contains(&format!("{mid} purged 1 child: 1 by purge 1 (")),
        "{human}"
    );

    // A child imported back is a child again, not a purged one.
    env.json(&["import", saved.to_str().unwrap()]).data();
    let show = env.json(&["session", "show", &parent]).data();
    assert_eq!(show["children"]["total"], 3);
    assert_eq!(show["purged_children"]["total"], 1);
    assert_eq!(show["purged_children"]["purges"][0]["purge_id"], 2);
    assert_eq!(
        env.json(&["session", "show", &mid]).data()["purged_children"],
        none
    );
    let _ = (c1, c2, g1);
}

/// The keys of a JSON object's text, in the order written.
fn keys_in_order(text: &str) -> Vec<String> {
    struct Keys(Vec<String>);
    impl<'de> serde::de::Visitor<'de> for Keys {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            mut self,
            mut m: A,
        ) -> Result<Self::Value, A::Error> {
            while let Some((k, _)) = m.next_entry::<String, serde::de::IgnoredAny>()? {
                self.0.push(k);
            }
            Ok(self.0)
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    serde::Deserializer::deserialize_map(&mut de, Keys(Vec::new())).unwrap()
}

/// MCP's `logbook_session_show` returns what `session show --json` prints,
/// purged children included, and its description names those keys.
#[test]
fn mcp_show_of_a_parent_carries_its_purged_children_and_names_its_keys() {
    use crate::mcp::{call, connect, rt, text};
    let env = TestEnv::new();
    let parent = env.create_with(&["--title", "parent", "--app", "p"]);
    ended_child(&env, &parent, "gone");
    env.json(&["purge", "--app", "gone", "--yes"]).data();
    let shown = rt().block_on(async {
        let client = connect(&env, &[]).await;
        let r = text(
            &call(
                &client,
                "logbook_session_show",
                serde_json::json!({"session_id": parent}),
            )
            .await,
        );
        client.cancel().await.unwrap();
        r
    });
    let cli = env.json(&["session", "show", &parent]);
    assert_eq!(
        cli.stdout.trim(),
        format!("{{\"ok\":true,\"data\":{shown}}}")
    );
    let v: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(v["purged_children"]["total"], 1);
    assert_eq!(v["purged_children"]["purges"][0]["purge_id"], 1);
    let keys = keys_in_order(&shown);
    assert_eq!(
        keys,
        [
            "session",
            "events",
            "resolved",
            "children",
            "purged_children",
            "blocking_gate",
            "lease"
        ]
    );
    let listed = format!("{{{}}}", keys.join(", "));
    let tool = logbook::mcp::tools::find("logbook_session_show").unwrap();
    assert!(
        tool.description.starts_with(&format!("Return {listed}")),
        "{}",
        tool.description
    );
    // The README says the same, in its JSON section and its MCP table.
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    assert!(
        readme.contains(&format!("`show` returns `{listed}`")),
        "README's JSON section"
    );
    assert!(
        readme.contains(&format!("| `logbook_session_show` | `{listed}`")),
        "README's MCP table"
    );
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
    let latest = logbook::store::LATEST_VERSION;
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
