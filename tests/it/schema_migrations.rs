//! The schema's documentation and history: docs/schema.md names every
//! object and every column in its table's section, the migrations folder
//! matches the embedded list, a fresh database migrates with one history
//! row per version and logbook's header, a first open under another
//! connection's lock is STORE_BUSY and writes nothing (CASES C25), and every
//! connection gets logbook's pragmas.

use crate::common::*;
use logbook::{Ledger, LedgerOptions};
use std::fs;
use std::time::{Duration, Instant};

/// docs/schema.md documents every table, column, index and trigger.
#[test]
fn schema_doc_matches_the_database() {
    let env = TestEnv::new();
    env.create("t");
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/schema.md")).unwrap();
    let c = env.sql();
    let mut st = c
        .prepare("SELECT type, name, tbl_name FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%' ORDER BY name")
        .unwrap();
    let objects: Vec<(String, String, String)> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(objects.len() > 10);
    for (kind, name, _) in &objects {
        assert!(
            doc.contains(&format!("`{name}`")),
            "docs/schema.md does not mention {kind} `{name}`"
        );
        if kind == "table" {
            // Each column in its own table's section (`### `name``, up to
            // the next heading), not merely somewhere in the file.
            let section = table_section(&doc, name)
                .unwrap_or_else(|| panic!("docs/schema.md has no section `### `{name}``"));
            let mut cols = c.prepare("SELECT name FROM pragma_table_info(?1)").unwrap();
            let names: Vec<String> = cols
                .query_map([name], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            for col in names {
                assert!(
                    section.contains(&format!("`{col}`")),
                    "docs/schema.md's section of {name} does not document {name}.{col}"
                );
            }
        }
    }
}

#[test]
fn migrations_folder_matches_the_embedded_list() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite");
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let re = regex::Regex::new(r"^V([0-9]+)__[a-z0-9_]+\.sql$").unwrap();
    // In version order, as refinery applies them (V10 after V9).
    files.sort_by_key(|f| crate::migration_files::version_of(f));
    // Versions increase strictly; a gap is allowed while feature branches
    // add theirs in parallel (this branch has V4 without V3).
    let mut last = 0;
    for f in &files {
        let caps = re
            .captures(f)
            .unwrap_or_else(|| panic!("misnamed migration {f}: use V<N>__snake_case.sql"));
        let v = caps[1].parse::<usize>().unwrap();
        assert!(v > last, "migration versions must increase");
        last = v;
    }
    let embedded: Vec<String> = logbook::store::sqlite::migrate::embedded()
        .iter()
        .map(|m| format!("V{}__{}.sql", m.version(), m.name()))
        .collect();
    assert_eq!(embedded, files, "rebuild: a migration was added");
}

#[test]
fn fresh_db_migrates_with_one_history_row_and_header() {
    let env = TestEnv::new();
    env.create("t");
    let c = env.sql();
    let (ver, app, hist, ic, fk): (i64, i64, i64, String, i64) = c
        .query_row(
            "SELECT (SELECT user_version FROM pragma_user_version), (SELECT application_id FROM pragma_application_id),
                    (SELECT count(*) FROM refinery_schema_history), (SELECT integrity_check FROM pragma_integrity_check),
                    (SELECT count(*) FROM pragma_foreign_key_check)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap();
    assert_eq!(
        (ver, app, hist, ic.as_str(), fk),
        (
            logbook::store::LATEST_VERSION,
            0x4C47_424B,
            logbook::store::LATEST_VERSION,
            "ok",
            0
        )
    );
    let mode: String = c
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

/// Ledger connections report WAL, the busy timeout and FULL sync (C01, C30).
#[test]
fn connection_pragmas() {
    let env = TestEnv::new();
    let l = env.ledger();
    assert_eq!(l.pragma("journal_mode").unwrap(), "wal");
    assert_eq!(l.pragma("synchronous").unwrap(), "2");
    assert_eq!(l.pragma("foreign_keys").unwrap(), "1");
    // The busy timeout is logbook's own handler, not SQLite's pragma: its
    // behaviour is tested in `contention::c01_every_ledger_connection_has_wal_and_a_busy_timeout`.
    // FULL: SQLite's own autocheckpoint, at 2,000 pages (docs/design.md, "WAL checkpoints").
    assert_eq!(l.pragma("wal_autocheckpoint").unwrap(), "2000");
    // A 16 MiB page cache (negative: KiB), so a checkpoint's read of the
    // session's previous event usually hits it.
    assert_eq!(l.pragma("cache_size").unwrap(), "-16384");
    assert_eq!(
        l.pragma("journal_size_limit").unwrap(),
        (64 * 1024 * 1024).to_string()
    );
    let l = Ledger::open(LedgerOptions {
        busy_timeout_ms: 1234,
        sync: logbook::SyncMode::Normal,
        ..LedgerOptions::at(env.path())
    })
    .unwrap();
    assert_eq!(l.pragma("synchronous").unwrap(), "1");
    // NORMAL: no autocheckpoint inside COMMIT; the helper thread's hook
    // replaces it (store::sqlite::checkpointer).
    assert_eq!(l.pragma("wal_autocheckpoint").unwrap(), "0");
}

fn doc(path: &str) -> String {
    fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// docs/schema.md's "Migrations" table lists exactly the embedded
/// migrations, version and name, and the newest is `LATEST_VERSION`.
#[test]
fn schema_doc_lists_every_embedded_migration() {
    let doc = doc("docs/schema.md");
    let start = doc
        .find("\n## Migrations\n")
        .expect("docs/schema.md has no `## Migrations` section");
    let section = &doc[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let row = regex::Regex::new(r"(?m)^\| V(\d+) \| `([a-z0-9_]+)` \|").unwrap();
    let listed: Vec<(i64, String)> = row
        .captures_iter(section)
        .map(|c| (c[1].parse().unwrap(), c[2].to_owned()))
        .collect();
    let embedded: Vec<(i64, String)> = logbook::store::sqlite::migrate::embedded()
        .iter()
        .map(|m| (i64::from(m.version()), m.name().to_owned()))
        .collect();
    assert_eq!(
        listed, embedded,
        "docs/schema.md's Migrations table differs from migrations/sqlite/"
    );
    assert_eq!(
        listed.last().map(|l| l.0),
        Some(logbook::store::LATEST_VERSION)
    );
}

/// What README.md and docs/schema.md say of the schema version and of
/// deletes agrees with the binary: a stated current version is
/// `LATEST_VERSION`, and since retention (V7) sessions are deleted by a
/// purge, so no doc says they never are.
#[test]
fn docs_state_the_schema_version_and_deletes_as_the_binary_has_them() {
    let latest = logbook::store::LATEST_VERSION;
    let schema = doc("docs/schema.md");
    let stated =
        regex::Regex::new(r"`PRAGMA user_version` is the newest applied migration: (\d+)").unwrap();
    for c in stated.captures_iter(&schema) {
        assert_eq!(
            c[1].parse::<i64>().unwrap(),
            latest,
            "docs/schema.md: {}",
            &c[0]
        );
    }
    let readme = doc("README.md");
    let layout = regex::Regex::new(r"`migrations/sqlite/`\s+\(V1[–-]V(\d+)").unwrap();
    for c in layout.captures_iter(&readme) {
        assert_eq!(c[1].parse::<i64>().unwrap(), latest, "README.md: {}", &c[0]);
    }
    let pg = regex::Regex::new(r"`migrations/postgres/` holds\s+V1[–-]V(\d+)").unwrap();
    for c in pg.captures_iter(&schema) {
        assert_eq!(
            c[1].parse::<i64>().unwrap(),
            latest,
            "docs/schema.md: {}",
            &c[0]
        );
    }
    for (name, text) in [("README.md", &readme), ("docs/schema.md", &schema)] {
        for stale in [
            "sessions are never deleted",
            "session data is never deleted",
            "events can never be\ndeleted",
        ] {
            assert!(
                !text.contains(stale),
                "{name} says `{stale}`, but a purge deletes them"
            );
        }
    }
}

/// The text of docs/schema.md's section on table or view `name`: from its
/// `### `name`` heading to the next heading.
fn table_section<'d>(doc: &'d str, name: &str) -> Option<&'d str> {
    let start = doc.find(&format!("### `{name}`"))?;
    let rest = &doc[start + 4..];
    let end = rest.find("\n#").map_or(rest.len(), |i| i + 1);
    Some(&rest[..end])
}

/// C25 (second pass, on an empty file until a second schema version
/// exists): while another connection holds an exclusive lock, the first
/// open fails with STORE_BUSY and writes nothing; after release it succeeds.
#[test]
fn c25_first_open_under_a_held_lock_is_store_busy_and_writes_nothing() {
    let env = TestEnv::new();
    fs::File::create(env.path()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let path = env.path().to_path_buf();
    let holder = std::thread::spawn(move || {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("BEGIN EXCLUSIVE").unwrap();
        tx.send(()).unwrap();
        std::thread::sleep(Duration::from_secs(3));
        c.execute_batch("COMMIT").unwrap();
    });
    rx.recv().unwrap();
    let t = Instant::now();
    let r = env.json(&[
        "--busy-timeout-ms",
        "500",
        "session",
        "create",
        "--title",
        "t",
        "--app",
        "a",
    ]);
    let waited = t.elapsed();
    let e = assert_error(&r, "STORE_BUSY", 4);
    assert_eq!(e["details"]["busy_timeout_ms"], 500);
    assert!(waited < Duration::from_millis(2500), "{waited:?}");
    holder.join().unwrap();

    // The holder's own empty BEGIN EXCLUSIVE / COMMIT writes SQLite's page 1
    // (a header with no schema): that is SQLite, not logbook. logbook must
    // have added nothing: no object, no version, not even the switch to WAL.
    let header = fs::read(env.path()).unwrap();
    assert!(header.len() <= 4096, "{} bytes", header.len());
    if header.len() >= 20 {
        assert_eq!(
            (header[18], header[19]),
            (1, 1),
            "switched to WAL while refused"
        );
    }
    assert!(!companion(env.path(), "-wal").exists());
    {
        let c = env.sql();
        let probe: (i64, i64, i64) = c
            .query_row(
                "SELECT (SELECT count(*) FROM sqlite_schema),
                        (SELECT user_version FROM pragma_user_version),
                        (SELECT application_id FROM pragma_application_id)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(probe, (0, 0, 0));
    }

    let d = env
        .json(&["session", "create", "--title", "t", "--app", "a"])
        .data();
    assert_eq!(d["rev"], 1);
    let c = env.sql();
    let hist: (i64, i64) = c
        .query_row(
            "SELECT count(*), max(version) FROM refinery_schema_history",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        hist,
        (
            logbook::store::LATEST_VERSION,
            logbook::store::LATEST_VERSION
        )
    );
    let ic: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ic, "ok");
    let jm: String = c
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(jm, "wal");
}
