//! README.md's first screen: the two commands, one paragraph of what
//! logbook is, then the tour; the storage notes live in docs/storage.md,
//! which the README points to.

use std::fs;

fn doc(path: &str) -> String {
    fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

#[test]
fn readme_first_screen_is_the_commands_a_paragraph_and_the_tour() {
    let readme = doc("README.md");
    let body = readme
        .strip_prefix("# logbook\n\n")
        .expect("README starts with its title");
    let tour = body
        .find("\n## ")
        .expect("a section after the first screen");
    assert!(
        body[tour..].starts_with("\n## A short tour\n"),
        "the first section is the tour"
    );
    let blocks: Vec<&str> = body[..tour].trim_end().split("\n\n").collect();
    assert_eq!(
        blocks.len(),
        3,
        "two commands and one paragraph: {blocks:#?}"
    );
    assert!(
        blocks[0].starts_with("```sh\ncargo run --release -q -- session create ")
            && blocks[0].ends_with("session list\n```"),
        "{}",
        blocks[0]
    );
    assert_eq!(blocks[1], "```sh\ncargo test\n```");
    assert!(blocks[2].starts_with("logbook is "), "{}", blocks[2]);
    for note in ["file:", ":memory:", "--read-only", "-wal", "0700"] {
        assert!(
            !blocks[2].contains(note),
            "a storage note (`{note}`) on the first screen"
        );
    }
}

#[test]
fn the_storage_notes_live_in_docs_with_a_pointer_from_the_readme() {
    let storage = doc("docs/storage.md");
    for note in [
        "`file:`",
        "`:memory:`",
        "`--read-only`",
        "`-wal`/`-shm`",
        "mode 0700",
        "`doctor` and `verify` refuse a missing file",
        "PRAGMA wal_checkpoint(TRUNCATE)",
    ] {
        assert!(storage.contains(note), "docs/storage.md lacks `{note}`");
    }
    let readme = doc("README.md");
    assert_eq!(
        readme.matches("[docs/storage.md](docs/storage.md)").count(),
        1,
        "README points to docs/storage.md once"
    );
    // The notes are not repeated there.
    assert!(!readme.contains("a mounted image, a CD"));
    assert!(!readme.contains("never a SQLite URI: a `--db`"));
}
