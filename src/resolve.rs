//! Reference resolution (docs/design.md, "Resolution"; Phelix's `resolved` block).
//!
//! `show` reports, for each id a session references, whether it is
//! `present`, `missing`, `unavailable` (its resolver failed or timed out) or
//! `unknown` (no resolver for its kind). Session references resolve inside
//! the database. External kinds — `plan`, `operation`, `deployment` —
//! resolve by running a command configured per kind in a TOML file:
//! `$LOGBOOK_CONFIG`, else `logbook.toml` beside the database.
//!
//! Because the file makes logbook run programs, it is used only when no
//! other user can change it (ssh's `StrictModes`): it must be a regular
//! file owned by the effective user (or root) and not writable by group or
//! others. Any other file is refused before it is read, with
//! INVALID_ARGUMENT naming it ([`Resolvers::load`]), and no resolver runs.
//! An id that begins with `-` is never passed to a resolver (it would be
//! read as an option): it is `unavailable`.
//!
//! ```toml
//! [resolvers.plan]
//! command = ["phelix", "plan", "show", "--", "{id}"]   # argv; no shell
//! timeout_ms = 2000                                     # default 5000
//! missing_exit = 3                                      # default 3
//! ```
//!
//! The command runs directly (never through a shell), with the referenced
//! id as one argument of its own wherever an element is exactly `{id}`;
//! stdin, stdout and stderr are closed. Exit 0 means present,
//! `missing_exit` means missing; any other exit, a signal, a command that
//! cannot start, or one still running at `timeout_ms` (its whole process
//! group is then killed) means unavailable. Up to [`MAX_PARALLEL`]
//! resolvers run at once, and all of them together stop at the longest
//! configured timeout (at least [`MIN_TOTAL_MS`]): what is still running or
//! waiting then is unavailable too.

use crate::error::{Error, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Most resolver processes running at once.
pub const MAX_PARALLEL: usize = 8;
/// Default resolver timeout, ms.
pub const DEFAULT_TIMEOUT_MS: u64 = 5_000;
/// Largest resolver timeout, ms.
pub const MAX_TIMEOUT_MS: u64 = 60_000;
/// The least time all of one `show`'s resolvers together may take, ms; the
/// bound is the longest configured timeout when that is longer.
pub const MIN_TOTAL_MS: u64 = 10_000;
/// Default exit code that means "missing".
pub const DEFAULT_MISSING_EXIT: i32 = 3;
/// The kinds a resolver may be configured for.
pub const EXTERNAL_KINDS: [&str; 3] = ["plan", "operation", "deployment"];
/// The placeholder replaced by the referenced id.
pub const ID_PLACEHOLDER: &str = "{id}";
/// Permission bits that make a configuration file untrusted: writable by
/// group or others.
pub const UNTRUSTED_MODE_BITS: u32 = 0o022;

/// How a reference resolved (`show`; docs/design.md, "Resolution").
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ResolvedState {
    /// It exists.
    Present,
    /// It does not exist.
    Missing,
    /// A session that a purge removed: its tombstone remains (docs/design.md, "Retention").
    Purged,
    /// The resolver failed, could not start, or timed out.
    Unavailable,
    /// No resolver is configured for its kind.
    Unknown,
}

/// One kind's resolver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolver {
    /// argv: program, then arguments; elements equal to `{id}` are replaced.
    pub command: Vec<String>,
    /// Kill and report `unavailable` after this many ms.
    pub timeout_ms: u64,
    /// The exit code that means `missing`.
    pub missing_exit: i32,
}

/// The resolvers of a configuration file, by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolvers {
    /// Kind → resolver.
    pub by_kind: BTreeMap<String, Resolver>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    resolvers: BTreeMap<String, FileResolver>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileResolver {
    command: Vec<String>,
    timeout_ms: Option<u64>,
    missing_exit: Option<i32>,
}

/// Where the configuration lives for a database at `db` (`None`: on a
/// server): `$LOGBOOK_CONFIG` when set and non-empty, else `logbook.toml`
/// beside the database file; for a server, `$XDG_CONFIG_HOME/logbook/
/// logbook.toml` (else `$HOME/.config/logbook/logbook.toml`, else
/// `logbook.toml` in the current folder). Wherever it is, [`Resolvers::load`]
/// refuses a file another user can change.
pub fn config_path(db: Option<&Path>) -> PathBuf {
    if let Some(p) = std::env::var_os("LOGBOOK_CONFIG").filter(|v| !v.is_empty()) {
        return PathBuf::from(p);
    }
    let here = || PathBuf::from("logbook.toml");
    match db {
        Some(db) => db.parent().map_or_else(here, |d| d.join("logbook.toml")),
        None => {
            let var = |k| {
                std::env::var_os(k)
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
            };
            match (
                var("XDG_CONFIG_HOME").filter(|p| p.is_absolute()),
                var("HOME"),
            ) {
                (Some(x), _) => x.join("logbook").join("logbook.toml"),
                (None, Some(h)) => h.join(".config").join("logbook").join("logbook.toml"),
                (None, None) => here(),
            }
        }
    }
}

fn bad(path: &Path, reason: impl Into<String>) -> Error {
    Error::invalid("config", format!("{}: {}", path.display(), reason.into()))
}

impl Resolvers {
    /// Reads and checks the configuration at `path`; no file means no
    /// resolvers (every external reference is `unknown`).
    ///
    /// The file is opened first and checked on the open handle before a
    /// byte of it is read: it must be a regular file owned by the effective
    /// user or by root, and not writable by group or others
    /// ([`UNTRUSTED_MODE_BITS`]). Anyone who can change it could make
    /// logbook run a program of their choosing as whoever calls `show`.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (field `config`) for a file owned by another user,
    /// writable by group or others, not a regular file, that cannot be
    /// read or parsed, an unknown kind or key, an empty command, a command
    /// with no `{id}` element, or a timeout outside 1..=60000 ms.
    pub fn load(path: &Path) -> Result<Self> {
        use std::io::Read;
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        // O_NONBLOCK: a FIFO planted under the name must not hang `show`
        // in open(2); it is then refused as not a regular file.
        let mut f = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(bad(path, format!("cannot be read ({e})"))),
        };
        let meta = f
            .metadata()
            .map_err(|e| bad(path, format!("cannot be read ({e})")))?;
        if !meta.is_file() {
            return Err(bad(path, "is not a regular file"));
        }
        let me = nix::unistd::geteuid().as_raw();
        if meta.uid() != me && meta.uid() != 0 {
            return Err(bad(
                path,
                format!(
                    "is owned by uid {}, not by this user (uid {me}) or root: resolvers run programs, so logbook reads them only from a file no other user can change; remove it, or set LOGBOOK_CONFIG to a file you own",
                    meta.uid()
                ),
            ));
        }
        if meta.mode() & UNTRUSTED_MODE_BITS != 0 {
            return Err(bad(
                path,
                format!(
                    "is writable by group or others (mode {:04o}): resolvers run programs, so logbook reads them only from a file no other user can change; run `chmod go-w` on it",
                    meta.mode() & 0o7777
                ),
            ));
        }
        let mut text = String::new();
        f.read_to_string(&mut text)
            .map_err(|e| bad(path, format!("cannot be read ({e})")))?;
        let file: FileConfig = toml::from_str(&text).map_err(|e| {
            // toml's message quotes the offending text; report where only.
            let at = e
                .span()
                .map(|s| {
                    let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                    format!(" at line {line}")
                })
                .unwrap_or_default();
            bad(path, format!("is not valid logbook TOML{at}"))
        })?;
        let mut by_kind = BTreeMap::new();
        for (kind, r) in file.resolvers {
            if !EXTERNAL_KINDS.contains(&kind.as_str()) {
                return Err(bad(
                    path,
                    "resolvers may be configured for plan, operation and deployment only (sessions resolve inside the database)",
                ));
            }
            if r.command.is_empty() || r.command[0].is_empty() {
                return Err(bad(
                    path,
                    format!("resolvers.{kind}.command must name a program"),
                ));
            }
            if r.command[0] == ID_PLACEHOLDER || !r.command.iter().any(|a| a == ID_PLACEHOLDER) {
                return Err(bad(
                    path,
                    format!("resolvers.{kind}.command must pass the id as an argument of its own: an element that is exactly \"{{id}}\""),
                ));
            }
            let timeout_ms = r.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
            if !(1..=MAX_TIMEOUT_MS).contains(&timeout_ms) {
                return Err(bad(
                    path,
                    format!("resolvers.{kind}.timeout_ms must be from 1 to {MAX_TIMEOUT_MS}"),
                ));
            }
            by_kind.insert(
                kind,
                Resolver {
                    command: r.command,
                    timeout_ms,
                    missing_exit: r.missing_exit.unwrap_or(DEFAULT_MISSING_EXIT),
                },
            );
        }
        Ok(Resolvers { by_kind })
    }

    /// Resolves `(kind, id)` pairs, in order; up to [`MAX_PARALLEL`] at
    /// once. Kinds without a resolver are `unknown`.
    pub fn resolve(&self, refs: &[(&str, &str)]) -> Vec<ResolvedState> {
        let mut out = vec![ResolvedState::Unknown; refs.len()];
        let mut pending: Vec<usize> = (0..refs.len())
            .filter(|i| self.by_kind.contains_key(refs[*i].0))
            .rev()
            .collect();
        let mut running: Vec<(usize, Child, Instant, i32)> = Vec::new();
        // All of them together get no longer than the longest single timeout
        // (at least 10 s): many references to a hanging resolver must not
        // hold `show` for minutes. What has not finished by then is
        // `unavailable`.
        let longest = self
            .by_kind
            .values()
            .map(|r| r.timeout_ms)
            .max()
            .unwrap_or(0)
            .max(MIN_TOTAL_MS);
        let overall = Instant::now() + Duration::from_millis(longest);
        while !pending.is_empty() || !running.is_empty() {
            if Instant::now() >= overall {
                for (i, mut child, _, _) in running.drain(..) {
                    kill_group(&mut child);
                    out[i] = ResolvedState::Unavailable;
                }
                for i in pending.drain(..) {
                    out[i] = ResolvedState::Unavailable;
                }
                break;
            }
            while running.len() < MAX_PARALLEL {
                let Some(i) = pending.pop() else { break };
                let (kind, id) = refs[i];
                let Some(r) = self.by_kind.get(kind) else {
                    continue;
                };
                // It would reach the program as an option, not an id
                // (checkpoint refuses such ids; older or imported rows
                // may still hold one).
                if id.starts_with('-') {
                    out[i] = ResolvedState::Unavailable;
                    continue;
                }
                match spawn(r, id) {
                    Some(child) => running.push((
                        i,
                        child,
                        Instant::now() + Duration::from_millis(r.timeout_ms),
                        r.missing_exit,
                    )),
                    None => out[i] = ResolvedState::Unavailable,
                }
            }
            let mut k = 0;
            while k < running.len() {
                let (i, child, deadline, missing) = &mut running[k];
                let done = match child.try_wait() {
                    Ok(Some(status)) => Some(match status.code() {
                        Some(0) => ResolvedState::Present,
                        Some(c) if c == *missing => ResolvedState::Missing,
                        _ => ResolvedState::Unavailable,
                    }),
                    Ok(None) if Instant::now() >= *deadline => {
                        kill_group(child);
                        Some(ResolvedState::Unavailable)
                    }
                    Ok(None) => None,
                    Err(_) => {
                        kill_group(child);
                        Some(ResolvedState::Unavailable)
                    }
                };
                match done {
                    Some(state) => {
                        out[*i] = state;
                        running.swap_remove(k);
                    }
                    None => k += 1,
                }
            }
            if !running.is_empty() {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        out
    }
}

fn spawn(r: &Resolver, id: &str) -> Option<Child> {
    use std::os::unix::process::CommandExt;
    let (program, args) = r.command.split_first()?;
    let mut c = Command::new(program);
    for a in args {
        c.arg(if a == ID_PLACEHOLDER { id } else { a.as_str() });
    }
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own process group, so a timeout kills what it started too.
        .process_group(0);
    c.spawn().ok()
}

fn kill_group(child: &mut Child) {
    use nix::sys::signal::{killpg, Signal};
    use nix::unistd::Pid;
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}
