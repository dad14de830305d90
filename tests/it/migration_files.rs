//! The migration folders: SQLite's files in `migrations/sqlite/`, PostgreSQL's
//! in `migrations/postgres/`, the same versions and names in both, and
//! SQLite's checksums unchanged by the move (docs/design.md, "Backends"), so every database
//! created before it still opens.

use logbook::store::sqlite::migrate::{embedded, LATEST_VERSION};

/// refinery's checksums of SQLite's migrations, as the binary before the
/// move to `migrations/sqlite/` recorded them in `refinery_schema_history`.
/// A changed byte, name or version of any file changes its checksum, and
/// every existing database would then be refused as divergent.
const SQLITE_CHECKSUMS: [(i32, &str, u64); 12] = [
    (1, "core_ledger", 18_189_890_400_841_197_429),
    (2, "event_hash_chain", 9_781_989_799_670_822_668),
    (3, "runs_and_budgets", 8_709_129_878_422_253_659),
    (4, "workflow", 5_088_868_209_081_773_323),
    (5, "views", 10_473_755_610_179_046_381),
    (6, "replay_revisions", 10_842_295_927_407_290_803),
    (7, "retention", 1_375_550_021_766_245_563),
    (8, "retention_hardened", 15_910_152_492_154_598_931),
    (9, "one_statement_writes", 3_723_166_860_194_244_637),
    (10, "event_hash_inline", 16_170_935_213_383_131_782),
    (11, "snapshot_payload", 9_262_577_090_167_197_769),
    (12, "create_key_lock", 15_768_514_783_110_885_791),
];

fn folder(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(name)
}

/// The entries of a migration folder, in version order; panics on a subfolder
/// (refinery walks folders recursively, so a backend's folder nested in
/// the other's would mix their files).
fn files(name: &str) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(folder(name))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            assert!(
                e.file_type().unwrap().is_file(),
                "migrations/{name}/ holds a folder: refinery would embed its files too"
            );
            e.file_name().into_string().unwrap()
        })
        .collect();
    out.sort_by_key(|f| version_of(f));
    out
}

/// A migration file's version (`V10__x.sql` → 10), so that files sort as
/// refinery orders them (V10 after V9), not by name; 0 for another name.
pub(crate) fn version_of(file: &str) -> u32 {
    file.strip_prefix('V')
        .and_then(|rest| rest.split("__").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn sqlite_migrations_keep_the_checksums_of_existing_databases() {
    let have: Vec<(i32, String, u64)> = embedded()
        .iter()
        .map(|m| (m.version(), m.name().to_owned(), m.checksum()))
        .collect();
    let want: Vec<(i32, String, u64)> = SQLITE_CHECKSUMS
        .iter()
        .map(|(v, n, c)| (*v, (*n).to_owned(), *c))
        .collect();
    assert_eq!(have, want);
}

/// tests/fixtures/v2.db was written by a binary that embedded the files
/// from `migrations/`: its history's checksums are those of the moved
/// files, and it upgrades and opens.
#[test]
fn a_database_migrated_before_the_move_still_opens() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("old.db");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/v2.db"),
        &db,
    )
    .unwrap();
    let before: Vec<(i32, String, String)> = {
        let c = rusqlite::Connection::open(&db).unwrap();
        let mut st = c
            .prepare("SELECT version, name, checksum FROM refinery_schema_history ORDER BY version")
            .unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(
        before,
        SQLITE_CHECKSUMS[..2]
            .iter()
            .map(|(v, n, c)| (*v, (*n).to_owned(), c.to_string()))
            .collect::<Vec<_>>()
    );
    let l = logbook::Ledger::open(logbook::LedgerOptions::at(&db)).unwrap();
    drop(l);
    let c = rusqlite::Connection::open(&db).unwrap();
    let (n, max): (i64, i64) = c
        .query_row(
            "SELECT count(*), max(version) FROM refinery_schema_history",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((n, max), (LATEST_VERSION, LATEST_VERSION));
}

#[test]
fn migration_folders_are_flat_and_hold_only_migrations() {
    let top: Vec<String> = {
        let mut v: Vec<String> =
            std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
        v.sort();
        v
    };
    assert_eq!(top, ["postgres", "sqlite"]);
    let re = regex::Regex::new(r"^V([0-9]+)__[a-z0-9_]+\.sql$").unwrap();
    for name in ["sqlite", "postgres"] {
        for f in files(name) {
            assert!(re.is_match(&f), "misnamed migration migrations/{name}/{f}");
        }
    }
}

/// Both backends have the same versions under the same names, so
/// `LATEST_VERSION` is one number for both.
#[test]
fn postgres_migrations_have_sqlites_versions_and_names() {
    assert_eq!(files("postgres"), files("sqlite"));
    let pg: Vec<String> = logbook::store::postgres::migrate::embedded()
        .iter()
        .map(|m| format!("V{}__{}.sql", m.version(), m.name()))
        .collect();
    assert_eq!(pg, files("postgres"), "rebuild: a migration was added");
    assert_eq!(
        logbook::store::postgres::migrate::embedded()
            .last()
            .map(|m| i64::from(m.version())),
        Some(LATEST_VERSION)
    );
}

/// docs/schema.md's PostgreSQL section names what only PostgreSQL's schema
/// has: every function, trigger, index and column its migrations create
/// that SQLite's do not (the truncate triggers as `<table>_no_truncate`),
/// the advisory lock key, the SQLSTATE and the marker.
#[test]
fn schema_doc_covers_what_only_postgres_has() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/schema.md")).unwrap();
    let section = &doc[doc
        .find("\n## PostgreSQL")
        .expect("docs/schema.md: no PostgreSQL section")..];
    let sql = |list: Vec<refinery::Migration>| -> String {
        list.iter()
            .filter_map(|m| m.sql().map(str::to_owned))
            .collect()
    };
    let sqlite = sql(embedded());
    let pg = sql(logbook::store::postgres::migrate::embedded());
    let re = regex::Regex::new(
        r"CREATE (?:OR REPLACE )?(?:FUNCTION|TRIGGER|(?:UNIQUE )?INDEX) (\w+)|ADD COLUMN (\w+)",
    )
    .unwrap();
    let mut names: Vec<String> = re
        .captures_iter(&pg)
        .map(|c| c.get(1).or(c.get(2)).unwrap().as_str().to_owned())
        .filter(|n| !sqlite.contains(n.as_str()))
        .map(|n| {
            if n.ends_with("_no_truncate") {
                "<table>_no_truncate".into()
            } else {
                n
            }
        })
        .collect();
    names.dedup();
    assert!(names.len() >= 8, "{names:?}");
    for n in names {
        assert!(
            section.contains(&format!("`{n}")),
            "docs/schema.md's PostgreSQL section does not name `{n}`"
        );
    }
    use logbook::store::postgres::migrate::{
        INVARIANT_SQLSTATE, MIGRATION_LOCK_KEY, SCHEMA_MARKER,
    };
    assert!(section.contains(&MIGRATION_LOCK_KEY.to_string()));
    assert!(section.contains(&format!("`{INVARIANT_SQLSTATE}`")));
    // The marker, as the doc wraps it.
    let flat = section.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(SCHEMA_MARKER),
        "the marker comment is not in the doc"
    );
}
