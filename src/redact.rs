//! The secret redactor (docs/design.md, "Redaction").
//!
//! Every free-text value and every string inside a JSON value passes through
//! [`redact`] before it is persisted. Each rule replaces the secret part of a
//! match with `[REDACTED]` and keeps the harmless prefix (`Bearer `,
//! `password=`, `https://user:`), so the text still reads. Redaction is
//! idempotent: `[REDACTED]` matches no rule's secret part. Caps are checked on
//! the input as given; redaction runs after.
//!
//! The rule table is self-testing: each rule carries samples that must match
//! and samples that must not (ordinary ids such as `ses_…`, git hashes, UUIDs).

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use regex::{Captures, Regex};
use serde_json::Value;
use std::borrow::Cow;
use std::sync::OnceLock;

/// The replacement text.
pub const REDACTED: &str = "[REDACTED]";

struct Rule {
    #[cfg_attr(not(test), allow(dead_code))]
    name: &'static str,
    /// Lowercase literals, one of which every match contains: the rule's
    /// regex is compiled and run only when the text holds one (ASCII case
    /// aside), so ordinary text costs one scan for every rule's triggers at
    /// once ([`triggered`]) and no regex at all.
    triggers: &'static [&'static str],
    pattern: &'static str,
    /// Capture group to keep in front of `[REDACTED]` (0 = none).
    keep: usize,
    /// Capture group to keep after `[REDACTED]` (0 = none).
    keep_after: usize,
    #[cfg_attr(not(test), allow(dead_code))]
    must_match: &'static [&'static str],
    #[cfg_attr(not(test), allow(dead_code))]
    must_not_match: &'static [&'static str],
}

const RULES: &[Rule] = &[
    Rule {
        name: "private key PEM block",
        triggers: &["private key"],
        pattern: r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----(?s:.*?)(-----END[A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|\z)",
        keep: 0,
        keep_after: 0,
        must_match: &[
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA",
        ],
        must_not_match: &["-----BEGIN CERTIFICATE-----", "BEGIN PRIVATE"],
    },
    Rule {
        name: "Authorization: Bearer / Basic credentials",
        triggers: &["bearer", "basic"],
        pattern: r"(?i)(\bbearer\s+|\bauthorization\s*[:=]\s*basic\s+)[A-Za-z0-9\-._~+/]{8,}=*",
        keep: 1,
        keep_after: 0,
        must_match: &[
            "Authorization: Bearer abcdef0123456789",
            "authorization: bearer sk_live_0123456789",
            "Authorization: Basic dXNlcjpwYXNzd29yZA==",
        ],
        must_not_match: &["bearer of bad news", "Bearer [REDACTED]", "basic configuration"],
    },
    Rule {
        name: "JWT (signed or not)",
        triggers: &["eyj"],
        pattern: r"(?:\b|_)eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
        keep: 0,
        keep_after: 0,
        must_match: &[
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "eyJhbGciOiJub25lIn0.eyJzdWIiOiIxMjM0NTY3ODkwIn0.",
        ],
        must_not_match: &["eyJ.short.x", "a.b.c"],
    },
    Rule {
        name: "AWS access key id",
        triggers: &["akia", "asia", "abia", "acca", "aida", "aroa", "anpa"],
        pattern: r"(AKIA|ASIA|ABIA|ACCA|AIDA|AROA|ANPA)[0-9A-Z]{16}",
        keep: 0,
        keep_after: 0,
        must_match: &[
            "AKIAIOSFODNN7EXAMPLE",
            "key=ASIAY34FZKBOKMUTVV7A.",
            "KEY_AKIAIOSFODNN7EXAMPLE_x",
        ],
        must_not_match: &["AKIAshort", "akiaiosfodnn7example"],
    },
    Rule {
        name: "GitHub token",
        triggers: &["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"],
        pattern: r"(?:\b|_)(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})",
        keep: 0,
        keep_after: 0,
        must_match: &[
            "ghp_EXAMPLE0EXAMPLE0EXAMPLE0EXAMPLE00000",
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
        ],
        must_not_match: &["ghp_short", "github_pat_x"],
    },
    Rule {
        name: "GitLab token",
        triggers: &["glpat-", "gldt-", "glptt-", "glrt-"],
        pattern: r"(?:\b|_)gl(pat|dt|ptt|rt)-[A-Za-z0-9_-]{20,}",
        keep: 0,
        keep_after: 0,
        must_match: &["glpat-abcdefghij0123456789", "TOKEN_glpat-abcdefghij0123456789"],
        must_not_match: &["glpat-short"],
    },
    Rule {
        name: "Slack / Discord token or webhook",
        triggers: &["xox", "xapp-", "hooks.slack.com", "/api/webhooks/"],
        pattern: r"(?:\b|_)xox[abposre]-[A-Za-z0-9-]{10,}|(?:\b|_)xapp-[A-Za-z0-9-]{10,}|https://hooks\.slack\.com/services/[A-Za-z0-9/]+|https://(?:[a-z]+\.)?discord(?:app)?\.com/api/webhooks/[0-9]+/[A-Za-z0-9_-]+",
        keep: 0,
        keep_after: 0,
        must_match: &[
            "xoxb-1234567890-abcdefghij",
            "xapp-1-A0123456789-0123456789",
            "https://hooks.slack.com/services/T000/B000/XXXX",
            "https://discord.com/api/webhooks/123456/abcDEF_123",
        ],
        must_not_match: &["xoxb-1"],
    },
    Rule {
        name: "OpenAI / Anthropic / Stripe / npm / PyPI / Hugging Face / SendGrid key",
        triggers: &["sk-", "k_live_", "k_test_", "npm_", "pypi-", "hf_", "sg."],
        pattern: r"(?:\b|_)sk-(ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}|(?:\b|_)[sr]k_(live|test)_[A-Za-z0-9]{10,}|(?:\b|_)npm_[A-Za-z0-9]{30,}|(?:\b|_)pypi-[A-Za-z0-9_-]{16,}|(?:\b|_)hf_[A-Za-z0-9]{30,}|(?:\b|_)SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}",
        keep: 0,
        keep_after: 0,
        must_match: &[
            "sk-EXAMPLE0000EXAMPLE0000",
            "a_sk-EXAMPLE0000EXAMPLE0000",
            "sk-ant-api03-abcdefghijklmnopqrstuvwxyz",
            "sk-proj-abcdefghijklmnopqrstuvwx",
            "sk_live_0123456789abcdef",
            "npm_abcdefghijklmnopqrstuvwxyz0123456789",
            "pypi-AgEIcHlwaS5vcmcCJGE",
            "hf_abcdefghijklmnopqrstuvwxyz0123456",
            "SG.abcdefghijklmnop.abcdefghijklmnopqrst",
        ],
        must_not_match: &["sk-short", "task-runner-0123456789abcdefghij", "desk_live_x"],
    },
    Rule {
        name: "Google API key",
        triggers: &["aiza"],
        pattern: r"(?:\b|_)AIza[0-9A-Za-z_-]{35}",
        keep: 0,
        keep_after: 0,
        must_match: &["AIzaSyA0123456789abcdefghijklmnopqrstuv", "KEY_AIzaSyA0123456789abcdefghijklmnopqrstuv"],
        must_not_match: &["AIzaShort"],
    },
    Rule {
        name: "URL userinfo password",
        triggers: &["://"],
        pattern: r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*:)[^\s/]+(@)",
        keep: 1,
        keep_after: 2,
        must_match: &[
            "postgres://admin:hunter2@db.internal:5432/x",
            "https://u:p%40ss@example.com",
            "redis://:hunter2@cache:6379",
            "https://u:p@ss@h/x",
        ],
        must_not_match: &["https://example.com/a:b@c", "ssh://git@github.com/x"],
    },
    Rule {
        name: "secret assignment",
        triggers: &[
            "passw", "passphrase", "pwd", "pass", "secret", "token", "key", "auth", "credential",
        ],
        pattern: r#"(?i)(\b(?:[A-Za-z0-9_.-]*[_.-])?(?:password|passwd|passphrase|pwd|pass|secret|token|api[_-]?key|apikey|access[_-]?key|secret[_-]?key|private[_-]?key|account[_-]?key|auth|credentials?)\b["']?\s*[=:]\s*)("[^"]*"|'[^']*'|[^\s"'&,;:][^\s"'&,;]*)"#,
        keep: 1,
        keep_after: 0,
        must_match: &[
            "password=hunter2",
            "PASSWORD: hunter2",
            "api_key=abc123",
            "--token=abc",
            r#"{"secret": "s3cr3t"}"#,
            "db?user=a&password=x",
            "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI",
            "GITHUB_TOKEN=abc123",
            "DATABASE_PASSWORD=x",
            "DB_PASS=x",
            "'password': 'hunter two'",
            "x-api-key: abc",
            "AccountKey=abc123==",
        ],
        must_not_match: &[
            "input_tokens=5",
            "tokens: 1000",
            "max_tokens=100",
            "the password was rotated",
            "secretary=bob",
            "bypass=true",
            // A path separator, not an assignment (Rust, C++, Ruby).
            "fixed auth::login",
            "see Token::parse and password::hash",
        ],
    },
];

/// Names of JSON object keys whose values are always redacted, whole: the
/// names of the assignment rule (`password`, `db_password`, `GITHUB_TOKEN`,
/// `x-api-key`, …) and the headers that carry credentials.
const SECRET_KEY: &str = r"(?i)^(?:[A-Za-z0-9_.-]*[_.-])?(?:password|passwd|passphrase|pwd|pass|secret|token|api[_-]?key|apikey|access[_-]?key|secret[_-]?key|private[_-]?key|account[_-]?key|auth|credentials?|authorization|cookie)$";

const RULES_LEN: usize = RULES.len();

/// Each rule's regex, compiled on first need (a CLI call that redacts only
/// ordinary text compiles none).
static RULE_RES: [OnceLock<Option<Regex>>; RULES_LEN] = [const { OnceLock::new() }; RULES_LEN];

fn rule_regex(i: usize) -> Option<&'static Regex> {
    let rule = RULES.get(i)?;
    RULE_RES
        .get(i)?
        .get_or_init(|| Regex::new(rule.pattern).ok())
        .as_ref()
}

fn secret_key() -> &'static Option<Regex> {
    static K: OnceLock<Option<Regex>> = OnceLock::new();
    K.get_or_init(|| Regex::new(SECRET_KEY).ok())
}

/// Most passes [`redact`] makes over one text. A pass that changes nothing
/// ends the loop; in practice the second pass already finds nothing.
const MAX_PASSES: usize = 8;

/// Returns `text` with every secret replaced by `[REDACTED]`.
///
/// Borrowed when nothing matched (the common case), so it costs no copy.
/// Redaction repeats until a pass finds nothing, so its result is a fixed
/// point: one redaction can expose another (a secret glued to the end of an
/// AWS key id, say, gains its word boundary once the key id before it is
/// replaced), and redacting the output again never changes it.
pub fn redact(text: &str) -> Cow<'_, str> {
    let Some(mut out) = redact_pass(text) else {
        return Cow::Borrowed(text);
    };
    for _ in 1..MAX_PASSES {
        match redact_pass(&out) {
            Some(next) => out = next,
            None => break,
        }
    }
    Cow::Owned(out)
}

/// Every rule's triggers in one automaton, matching ASCII letters of
/// either case, with the rule of each pattern; `None` if it cannot be
/// built (then [`triggered`] scans for each trigger in turn).
fn trigger_automaton() -> Option<&'static (AhoCorasick, Vec<usize>)> {
    static A: OnceLock<Option<(AhoCorasick, Vec<usize>)>> = OnceLock::new();
    A.get_or_init(|| {
        let (mut pats, mut rule_of) = (Vec::new(), Vec::new());
        for (i, rule) in RULES.iter().enumerate() {
            for t in rule.triggers {
                pats.push(*t);
                rule_of.push(i);
            }
        }
        AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .build(&pats)
            .ok()
            .map(|ac| (ac, rule_of))
    })
    .as_ref()
}

/// Which rules `text` triggers: those with a trigger in `text`, ASCII
/// case aside. One pass over the text (overlapping matches, so a trigger
/// inside another's is seen too).
fn triggered(text: &str) -> [bool; RULES_LEN] {
    let mut hit = [false; RULES_LEN];
    match trigger_automaton() {
        Some((ac, rule_of)) => {
            for m in ac.find_overlapping_iter(text) {
                if let Some(h) = rule_of
                    .get(m.pattern().as_usize())
                    .and_then(|&r| hit.get_mut(r))
                {
                    *h = true;
                }
            }
        }
        None => {
            let lower = text.to_ascii_lowercase();
            for (h, rule) in hit.iter_mut().zip(RULES) {
                *h = rule.triggers.iter().any(|t| lower.contains(t));
            }
        }
    }
    hit
}

/// One pass of every rule over `text`; `None` when nothing matched.
fn redact_pass(text: &str) -> Option<String> {
    if text.is_empty() {
        return None;
    }
    let hit = triggered(text);
    if !hit.contains(&true) {
        return None;
    }
    let mut out: Cow<'_, str> = Cow::Borrowed(text);
    for (i, rule) in RULES.iter().enumerate() {
        if !hit[i] {
            continue;
        }
        let Some(re) = rule_regex(i) else { continue };
        if !re.is_match(&out) {
            continue;
        }
        let (keep, keep_after) = (&rule.keep, &rule.keep_after);
        let group = |c: &Captures<'_>, i: usize| -> String {
            if i > 0 {
                c.get(i).map_or(String::new(), |m| m.as_str().to_owned())
            } else {
                String::new()
            }
        };
        let replaced = re
            .replace_all(&out, |c: &Captures<'_>| {
                format!("{}{REDACTED}{}", group(c, *keep), group(c, *keep_after))
            })
            .into_owned();
        out = Cow::Owned(replaced);
    }
    match out {
        Cow::Owned(s) if s != text => Some(s),
        _ => None,
    }
}

/// Redacts an optional text value.
pub fn redact_opt(text: Option<&str>) -> Option<String> {
    text.map(|t| redact(t).into_owned())
}

/// Redacts every string inside a JSON value, in place, keys included. Any
/// value under a key that names a secret (`password`, `db_password`,
/// `GITHUB_TOKEN`, `x-api-key`, …) is replaced whole by `"[REDACTED]"`,
/// whatever its type.
pub fn redact_json(value: &mut Value) {
    match value {
        Value::String(s) => {
            if let Cow::Owned(r) = redact(s) {
                *s = r;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_json),
        Value::Object(map) => {
            let keys = secret_key();
            let old = std::mem::take(map);
            for (k, mut v) in old {
                let secret_name = keys.as_ref().is_some_and(|re| re.is_match(&k));
                let empty = v.is_null() || v.as_str().is_some_and(str::is_empty);
                if secret_name && !empty {
                    // Whatever it holds — string, number, list, object.
                    v = Value::String(REDACTED.to_owned());
                } else {
                    redact_json(&mut v);
                }
                // Keys are strings too; a redacted key that collides with
                // another gets a numbered suffix rather than replacing it.
                let mut key = redact(&k).into_owned();
                if key != k {
                    let base = key.clone();
                    let mut n = 2;
                    while map.contains_key(&key) {
                        key = format!("{base} ({n})");
                        n += 1;
                    }
                }
                map.insert(key, v);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests;
