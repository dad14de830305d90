//! `logbook session budget …` and `logbook session usage …` (docs/design.md, "Budgets").

use super::output::Printer;
use super::session::MutationArgs;
use super::{open, GlobalArgs};
use clap::Args;
use logbook::clock::format_ms;
use logbook::{Budget, OnExceed, RecordUsage, Result, SetBudget, Written};

/// Parses an integer flag; the library checks the range (0..=2^53−1), so a
/// negative value is reported as INVALID_ARGUMENT naming its field.
pub(super) fn parse_int(s: &str) -> std::result::Result<i64, String> {
    s.trim()
        .parse::<i64>()
        .map_err(|_| "expected an integer from 0 to 9007199254740991".to_owned())
}

fn parse_policy(s: &str) -> std::result::Result<OnExceed, String> {
    s.parse()
}

#[derive(Debug, Args)]
pub struct BudgetArgs {
    /// Session id
    id: String,
    /// Token limit: input + output tokens since the last reset
    #[arg(long, value_name = "N", value_parser = parse_int, allow_negative_numbers = true)]
    max_tokens: Option<i64>,
    /// API-call limit
    #[arg(long, value_name = "N", value_parser = parse_int, allow_negative_numbers = true)]
    max_api_calls: Option<i64>,
    /// Limit on reported duration (session usage --duration-ms), in ms
    #[arg(long, value_name = "MS", value_parser = parse_int, allow_negative_numbers = true)]
    max_duration_ms: Option<i64>,
    /// What the write that crosses a limit does: pause, fail or warn [default for a new budget: pause]
    #[arg(long, value_name = "POLICY", value_parser = parse_policy)]
    on_exceed: Option<OnExceed>,
    /// Print the budget, usage, what remains and whether it is exceeded (read-only)
    #[arg(long, conflicts_with_all = ["max_tokens", "max_api_calls", "max_duration_ms", "on_exceed", "reset"])]
    check: bool,
    /// Count usage from now on and clear the exceeded mark
    #[arg(long, conflicts_with_all = ["max_tokens", "max_api_calls", "max_duration_ms", "on_exceed"])]
    reset: bool,
    #[command(flatten)]
    m: MutationArgs,
}

#[derive(Debug, Args)]
pub struct UsageArgs {
    /// Session id
    id: String,
    /// Input tokens to add
    #[arg(long, value_name = "N", value_parser = parse_int, allow_negative_numbers = true)]
    input_tokens: Option<i64>,
    /// Output tokens to add
    #[arg(long, value_name = "N", value_parser = parse_int, allow_negative_numbers = true)]
    output_tokens: Option<i64>,
    /// API calls to add
    #[arg(long, value_name = "N", value_parser = parse_int, allow_negative_numbers = true)]
    api_calls: Option<i64>,
    /// Duration to add, in ms
    #[arg(long, value_name = "MS", value_parser = parse_int, allow_negative_numbers = true)]
    duration_ms: Option<i64>,
    #[command(flatten)]
    m: MutationArgs,
}

pub fn budget(a: &BudgetArgs, g: &GlobalArgs, out: &Printer) -> Result<()> {
    let setting = a.max_tokens.is_some()
        || a.max_api_calls.is_some()
        || a.max_duration_ms.is_some()
        || a.on_exceed.is_some();
    let ledger = open(g)?;
    let b = if a.reset {
        ledger.reset_budget(&a.id, &a.m.to_mutation())?
    } else if setting {
        let req = SetBudget {
            max_tokens: a.max_tokens,
            max_api_calls: a.max_api_calls,
            max_duration_ms: a.max_duration_ms,
            on_exceed: a.on_exceed,
        };
        ledger.set_budget(&a.id, req, &a.m.to_mutation())?
    } else {
        Written::applied(ledger.check_budget(&a.id)?)
    };
    out.written(&b, render_budget);
    Ok(())
}

pub fn usage(a: &UsageArgs, g: &GlobalArgs, out: &Printer) -> Result<()> {
    let req = RecordUsage {
        input_tokens: a.input_tokens,
        output_tokens: a.output_tokens,
        api_calls: a.api_calls,
        duration_ms: a.duration_ms,
    };
    let s = open(g)?.record_usage(&a.id, req, &a.m.to_mutation())?;
    out.written(&s, super::render::session);
    Ok(())
}

fn render_budget(b: &Budget) -> String {
    let opt = |v: Option<i64>| v.map_or_else(|| "-".to_owned(), |n| n.to_string());
    let rows = vec![
        vec![
            "tokens".to_owned(),
            b.used.tokens.to_string(),
            opt(b.max_tokens),
            opt(b.remaining.tokens),
        ],
        vec![
            "api_calls".to_owned(),
            b.used.api_calls.to_string(),
            opt(b.max_api_calls),
            opt(b.remaining.api_calls),
        ],
        vec![
            "duration_ms".to_owned(),
            b.used.duration_ms.to_string(),
            opt(b.max_duration_ms),
            opt(b.remaining.duration_ms),
        ],
    ];
    let mut s = format!(
        "session    {}\nstatus     {}\nrev        {}\non_exceed  {}\nexceeded   {}",
        b.session_id,
        b.session_status,
        b.session_rev,
        b.on_exceed.map_or("-", OnExceed::as_str),
        if b.exceeded {
            b.exceeded_limits.join(", ")
        } else {
            "no".to_owned()
        },
    );
    if let Some(t) = b.exceeded_at_ms {
        s.push_str(&format!(" (crossed {})", format_ms(t)));
    }
    s.push_str("\n\n");
    s.push_str(&super::render::table(
        &["LIMIT", "USED", "MAX", "REMAINING"],
        &rows,
        &[1, 2, 3],
    ));
    s
}
