//! Parsing a hot `session` verb against a command tree that holds only that
//! verb (BENCHMARKS.md, "Whole-process CLI").
//!
//! Building clap's whole tree (every command's arguments, ≈ 1 M
//! instructions with its parse and drop) was the largest cost a one-command
//! process has beyond SQLite's own work. When the command line names one of
//! the verbs in [`VERBS`], it is first parsed against a tree of the root's
//! global flags, `session` and that verb alone, built from the same derived
//! `Args` as the full tree. Only a successful parse is used: help, version,
//! and every error (so every message clap prints) come from the full tree,
//! which parses the same line again. A successful narrow parse is the full
//! tree's: the narrow tree is the full one's path to the verb with the
//! siblings left out, and a sibling can only turn a token into another
//! command, which the narrow tree refuses instead (the tests hold the two
//! trees' arguments and settings equal, and compare parses).

use super::session::{
    CheckpointArgs, CompleteArgs, CreateArgs, EventArgs, IdArg, ReasonArgs, TransitionArgs,
};
use super::{Cli, GlobalArgs};
use clap::{ArgGroup, Args, Command, FromArgMatches};
use std::ffi::OsString;

/// Adds a derived `Args` struct's arguments to a command.
type Augment = fn(Command) -> Command;

/// The `session` verbs parsed narrowly: each name with its derived `Args`.
pub(super) const VERBS: &[(&str, Augment)] = &[
    ("checkpoint", CheckpointArgs::augment_args),
    ("show", IdArg::augment_args),
    ("create", CreateArgs::augment_args),
    ("start", TransitionArgs::augment_args),
    ("pause", TransitionArgs::augment_args),
    ("resume", TransitionArgs::augment_args),
    ("complete", CompleteArgs::augment_args),
    ("fail", ReasonArgs::augment_args),
    ("cancel", ReasonArgs::augment_args),
    ("event", EventArgs::augment_args),
];

/// The root global flags that take a value as the next argument.
const VALUE_FLAGS: &[&str] = &["--db", "--busy-timeout-ms"];

/// The first two words of the command line that are not flags (nor a
/// global flag's value), or `None` at a `--`.
fn command_words(args: &[OsString]) -> Option<(&OsString, &OsString)> {
    let mut words = Vec::with_capacity(2);
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let bytes = a.as_encoded_bytes();
        if bytes == b"--" {
            return None;
        }
        if bytes.starts_with(b"-") {
            if VALUE_FLAGS.iter().any(|f| f.as_bytes() == bytes) {
                it.next();
            }
            continue;
        }
        words.push(a);
        if words.len() == 2 {
            return Some((words[0], words[1]));
        }
    }
    None
}

/// The tree for `session VERB` alone: the root's settings and global
/// flags as `Cli` derives them, `session` as its variant derives it.
pub(super) fn tree(verb: &'static str, augment: Augment) -> Command {
    let leaf = augment(Command::new(verb));
    let session = Command::new("session")
        .subcommand_required(true)
        .arg_required_else_help(true)
        .subcommand(leaf);
    GlobalArgs::augment_args(
        Command::new("logbook")
            .version(env!("CARGO_PKG_VERSION"))
            .propagate_version(true)
            .max_term_width(100)
            .group(ArgGroup::new("Cli").multiple(true)),
    )
    .subcommand_required(true)
    .arg_required_else_help(true)
    .subcommand(session)
}

/// `args` parsed against the narrow tree of the verb they name, or `None`
/// when they name no verb of [`VERBS`] or that parse fails (the caller then
/// parses with the full tree).
pub(super) fn parse(args: &[OsString]) -> Option<Cli> {
    let (group, verb) = command_words(args)?;
    if group != "session" {
        return None;
    }
    let (name, augment) = VERBS.iter().find(|(name, _)| verb == *name)?;
    let mut cmd = tree(name, *augment);
    let mut matches = cmd.try_get_matches_from_mut(args).ok()?;
    // Freed at exit: dropping the tree is work a one-command process needs
    // not do.
    std::mem::forget(cmd);
    Cli::from_arg_matches_mut(&mut matches).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    /// Every argument of a built command, by what decides how it parses
    /// (its help text aside: help always comes from the full tree).
    fn described(c: &Command) -> Vec<String> {
        c.get_arguments()
            .map(|a| {
                format!(
                    "{:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
                    a.get_id(),
                    a.get_action(),
                    a.get_long(),
                    a.get_short(),
                    a.get_all_aliases(),
                    a.get_all_short_aliases(),
                    a.get_num_args(),
                    a.get_value_parser(),
                    a.get_default_values(),
                    a.get_index(),
                    a.get_value_delimiter(),
                    a.get_value_terminator(),
                    a.get_value_names(),
                    (
                        a.is_required_set(),
                        a.is_global_set(),
                        a.is_allow_hyphen_values_set(),
                        a.is_allow_negative_numbers_set(),
                        a.is_last_set(),
                        a.is_trailing_var_arg_set(),
                        a.is_exclusive_set(),
                        a.is_require_equals_set(),
                        a.is_ignore_case_set(),
                    ),
                )
            })
            .collect()
    }

    /// The settings of a command that decide how a line parses.
    fn settings(c: &Command) -> String {
        format!(
            "{} {:?} {} {} {} {} {} {:?} {:?}",
            c.get_name(),
            c.get_version(),
            c.is_subcommand_required_set(),
            c.is_arg_required_else_help_set(),
            c.is_allow_external_subcommands_set(),
            c.is_args_conflicts_with_subcommands_set(),
            c.is_subcommand_precedence_over_arg_set(),
            c.get_all_aliases().collect::<Vec<_>>(),
            c.get_groups().map(|g| format!("{g:?}")).collect::<Vec<_>>(),
        )
    }

    #[test]
    fn each_narrow_tree_is_the_full_trees_path_to_its_verb() {
        let mut full = Cli::command();
        full.build();
        for (verb, augment) in VERBS {
            let mut narrow = tree(verb, *augment);
            narrow.build();
            let (Some(fs), Some(ns)) = (
                full.find_subcommand("session"),
                narrow.find_subcommand("session"),
            ) else {
                panic!("no session command");
            };
            let (Some(fv), Some(nv)) = (fs.find_subcommand(verb), ns.find_subcommand(verb)) else {
                panic!("no session {verb}");
            };
            for (f, n) in [(&full, &narrow), (fs, ns), (fv, nv)] {
                assert_eq!(settings(f), settings(n), "session {verb}");
                assert_eq!(described(f), described(n), "session {verb}");
            }
            assert_eq!(fv.get_subcommands().count(), 0, "session {verb}");
        }
        // Every verb of the table exists once under `session`.
        let names: Vec<&str> = VERBS.iter().map(|(n, _)| *n).collect();
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
    }

    #[test]
    fn a_narrow_parse_equals_the_full_one_and_never_succeeds_alone() {
        let id = "ses_0123456789abcdef";
        let lines: &[&[&str]] = &[
            &["session", "checkpoint", id, "--step", "s", "--note", "n"],
            &["--db", "x.db", "session", "checkpoint", id, "--step=s"],
            &["session", "--json", "checkpoint", id, "--note", "-5"],
            &["session", "checkpoint", "--db", "y", id, "--if-rev", "3"],
            &["session", "checkpoint", id, "--plan", "p", "--plan", "q"],
            &["session", "checkpoint", id, "--idempotency-key", "k"],
            &["session", "checkpoint", id, "--note", "--step"],
            &["session", "checkpoint", id, "--help"],
            &["session", "checkpoint", id, "-V"],
            &["session", "checkpoint", id, "--version"],
            &["session", "checkpoint"],
            &["session", "checkpoint", id, "extra"],
            &["session", "checkpoint", id, "--if-rev", "x"],
            &["session", "checkpoint", "--", id],
            &["session", "show", id],
            &["session", "show", id, "--json", "--read-only"],
            &["--busy-timeout-ms", "10", "session", "show", id],
            &["--busy-timeout-ms", "-1", "session", "show", id],
            &["--db", "session", "session", "show", id],
            &["session", "show"],
            &["session", "show", "-h"],
            &[
                "session", "create", "--title", "t", "--app", "a", "--tag", "x",
            ],
            &["session", "create", "--title", "t", "--pending"],
            &["session", "start", id, "--reason", "r"],
            &["session", "pause", id, "--note", "n"],
            &["session", "resume", id],
            &["session", "complete", id, "--result", "ok"],
            &["session", "complete", id],
            &["session", "fail", id, "--reason", "r"],
            &["session", "cancel", id, "--reason", "r"],
            &["session", "event", id, "--type", "x.y", "--data", "{}"],
            &["session", "list"],
            &["session"],
            &["show", "session", id],
            &["help", "session", "show"],
            &[],
        ];
        let mut narrowed = 0;
        for line in lines {
            let args: Vec<OsString> = std::iter::once("logbook")
                .chain(line.iter().copied())
                .map(OsString::from)
                .collect();
            let full = Cli::try_parse_from(&args);
            if let Some(narrow) = parse(&args) {
                narrowed += 1;
                let full = full.unwrap_or_else(|e| panic!("{line:?}: narrow ok, full {e}"));
                assert_eq!(format!("{narrow:?}"), format!("{full:?}"), "{line:?}");
            }
        }
        assert!(narrowed >= 15, "{narrowed}");
    }
}
