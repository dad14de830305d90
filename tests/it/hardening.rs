//! Regressions from adversarial testing: hostile paths keep their modes,
//! `INSERT OR REPLACE` cannot get around the triggers, stored JSON always
//! prints on one line, a skewed clock does not pin later sessions, and
//! idempotency keys never reach the disk.

use crate::common::*;
use std::os::unix::fs::PermissionsExt;

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

// File modes of SQLite paths.
sqlite_only! {
#[test]
fn hostile_db_paths_keep_their_modes() {
    let env = TestEnv::new();
    // A folder.
    let dir = env.dir.path().join("shared");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let r = env
        .command()
        .args(["--db", dir.to_str().unwrap(), "session", "list", "--json"])
        .output()
        .unwrap();
    assert_error(&Run::from(r), "STORE_IO", 6);
    assert_eq!(mode(&dir), 0o1777);
    // Another program's file, and a symlink to it.
    let notes = env.dir.path().join("notes.txt");
    std::fs::write(
        &notes,
        b"not a database, just some notes that are long enough",
    )
    .unwrap();
    std::fs::set_permissions(&notes, std::fs::Permissions::from_mode(0o664)).unwrap();
    let link = env.dir.path().join("link.db");
    std::os::unix::fs::symlink(&notes, &link).unwrap();
    for p in [&notes, &link] {
        let r = env
            .command()
            .args(["--db", p.to_str().unwrap(), "session", "list", "--json"])
            .output()
            .unwrap();
        assert_error(&Run::from(r), "STORE_CORRUPT", 6);
    }
    assert_eq!(mode(&notes), 0o664);
    // A device node is refused before SQLite touches it.
    let r = env
        .command()
        .args(["--db", "/dev/null", "session", "list", "--json"])
        .output()
        .unwrap();
    assert_error(&Run::from(r), "STORE_IO", 6);
    assert_eq!(mode(std::path::Path::new("/dev/null")), 0o666);
    // A loose logbook database is still tightened (CASES C24).
    env.create("t");
    std::fs::set_permissions(env.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
    env.json(&["session", "list"]).data();
    assert_eq!(mode(env.path()), 0o600);
}
}

#[test]
fn insert_or_replace_cannot_bypass_the_triggers() {
    let env = TestEnv::new();
    let s = env.create("t");
    env.json(&["session", "checkpoint", &s, "--step", "a"])
        .data();
    env.json(&["session", "complete", &s, "--result", "r"])
        .data();
    let before = env.show(&s);
    // SQLite's REPLACE (a delete and an insert) and PostgreSQL's upsert
    // (an update) both meet the triggers.
    let pg = [
        format!("INSERT INTO sessions (insert_seq, session_id, status, title, actor_type, rev, created_at_ms, updated_at_ms) SELECT insert_seq, session_id, 'active', title, actor_type, rev, created_at_ms, updated_at_ms FROM sessions WHERE session_id = '{s}' ON CONFLICT (session_id) DO UPDATE SET status = 'active', rev = sessions.rev + 1"),
        format!("INSERT INTO sessions (insert_seq, session_id, status, title, actor_type, rev, created_at_ms, updated_at_ms) SELECT insert_seq, 'ses_00000000000000ff', status, title, actor_type, rev, created_at_ms, updated_at_ms FROM sessions WHERE session_id = '{s}' ON CONFLICT (insert_seq) DO UPDATE SET session_id = EXCLUDED.session_id"),
        format!("INSERT INTO events (event_id, session_id, seq, type, at_ms, actor_type) SELECT event_id, session_id, 3, 'x.forged', at_ms, 'cli' FROM events WHERE session_id = '{s}' AND seq = 1 ON CONFLICT (event_id) DO UPDATE SET seq = 3, type = 'x.forged'"),
        format!("INSERT INTO session_data (insert_seq, session_id, goal) SELECT insert_seq, session_id, 'forged' FROM sessions WHERE session_id = '{s}' ON CONFLICT (insert_seq) DO UPDATE SET goal = 'forged'"),
        format!("UPDATE session_data SET goal = 'forged' WHERE session_id = '{s}'"),
        "INSERT INTO events (session_id, seq, type, at_ms, actor_type) VALUES ('ses_00000000000000ee', 0, 'x.orphan', 0, 'cli')".to_owned(),
    ];
    let sqlite = [
        format!("INSERT OR REPLACE INTO sessions (insert_seq, session_id, status, title, actor_type, rev, created_at_ms, updated_at_ms) SELECT insert_seq, session_id, 'active', title, actor_type, rev, created_at_ms, updated_at_ms FROM sessions WHERE session_id = '{s}'"),
        format!("REPLACE INTO sessions (insert_seq, session_id, status, title, actor_type, rev, created_at_ms, updated_at_ms) SELECT insert_seq, 'ses_00000000000000ff', status, title, actor_type, rev, created_at_ms, updated_at_ms FROM sessions WHERE session_id = '{s}'"),
        format!("INSERT OR REPLACE INTO events (event_id, session_id, seq, type, at_ms, actor_type) SELECT event_id, session_id, 3, 'x.forged', at_ms, 'cli' FROM events WHERE session_id = '{s}' AND seq = 1"),
        format!("INSERT OR REPLACE INTO session_data (insert_seq, session_id, goal) SELECT insert_seq, session_id, 'forged' FROM sessions WHERE session_id = '{s}'"),
        format!("UPDATE session_data SET goal = 'forged' WHERE session_id = '{s}'"),
        "PRAGMA foreign_keys = OFF; INSERT INTO events (session_id, seq, type, at_ms, actor_type) VALUES ('ses_00000000000000ee', 0, 'x.orphan', 0, 'cli')".to_owned(),
    ];
    for sql in if on_pg() { pg } else { sqlite } {
        let err = env.try_batch(&sql).unwrap_err();
        assert!(err.contains("logbook:"), "{sql}: {err}");
    }
    assert_eq!(env.show(&s), before);
}

#[test]
fn hand_edited_pretty_json_still_prints_one_line() {
    let env = TestEnv::new();
    let s = env.create("t");
    env.batch(&format!(
        "UPDATE session_data SET context = '{{\n  \"a\": 1,\n  \"b\": \"x y\"\n}}' WHERE session_id = '{s}'"
    ));
    for args in [vec!["session", "list"], vec!["session", "show", s.as_str()]] {
        let r = env.json(&args);
        assert_eq!(r.stdout.lines().count(), 1, "{}", r.stdout);
        assert!(
            r.stdout.contains(r#""context":{"a":1,"b":"x y"}"#),
            "{}",
            r.stdout
        );
    }
}

/// docs/design.md, "Clock": `created_at_ms` never goes below an earlier session's,
/// however far the clock steps back (as event times never go below their
/// session's previous event), so created order stays insertion order.
#[test]
fn created_at_ms_never_goes_backwards_when_the_clock_steps_back() {
    use logbook::{Clock, CreateSession, Ledger, LedgerOptions, ListSessions};
    use std::sync::atomic::Ordering;
    let env = TestEnv::new();
    let t = 1_900_000_000_000_i64;
    let (clock, now) = Clock::fixed(t);
    let lg = Ledger::open(LedgerOptions {
        clock,
        ..LedgerOptions::at(env.path())
    })
    .unwrap();
    let create = |title: &str| lg.create_session(CreateSession::titled(title)).unwrap();
    assert_eq!(create("first").created_at_ms, t);
    // One hour back: held at the newest session's time.
    now.store(t - 3_600_000, Ordering::SeqCst);
    let held = create("after the step back");
    assert_eq!((held.created_at_ms, held.updated_at_ms), (t, t));
    // A day back: still held.
    now.store(t - 86_400_000, Ordering::SeqCst);
    assert_eq!(create("a day back").created_at_ms, t);
    // The clock catches up: its own time again.
    now.store(t + 5, Ordering::SeqCst);
    assert_eq!(create("caught up").created_at_ms, t + 5);
    // The default order (newest created first) is insertion order.
    let page = lg.list_sessions(&ListSessions::default()).unwrap();
    let titles: Vec<&str> = page.sessions.iter().map(|s| s.title.as_str()).collect();
    assert_eq!(
        titles,
        ["caught up", "a day back", "after the step back", "first"]
    );
}

#[test]
fn idempotency_keys_and_secrets_in_keys_never_reach_the_disk() {
    let env = TestEnv::new();
    let s = env.create("t");
    let key = "AKIAIOSFODNN7EXAMPLE";
    env.json(&[
        "session",
        "checkpoint",
        &s,
        "--step",
        "a",
        "--idempotency-key",
        key,
    ])
    .data();
    let again = env
        .json(&[
            "session",
            "checkpoint",
            &s,
            "--step",
            "a",
            "--idempotency-key",
            key,
        ])
        .data();
    assert_eq!(again["rev"], 2);
    let r = env.json(&[
        "session",
        "event",
        &s,
        "--type",
        "x.sk-example0000example0000abcd",
    ]);
    assert_error(&r, "INVALID_ARGUMENT", 2);
    let bytes = if on_pg() {
        env.db_bytes()
    } else {
        env.sql()
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .unwrap();
        let mut bytes = std::fs::read(env.path()).unwrap();
        if let Ok(w) = std::fs::read(format!("{}-wal", env.path().display())) {
            bytes.extend(w);
        }
        bytes
    };
    for secret in [key.as_bytes(), b"sk-example0000example0000abcd".as_slice()] {
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret),
            "{:?} on disk",
            String::from_utf8_lossy(secret)
        );
    }
}
