//! Output routing: the `--json` envelope or human text on stdout; errors per
//! `exit.rs`. A closed stdout (broken pipe) ends the command quietly.
//!
//! The envelope (docs/design.md, "CLI") is the library's [`logbook::Envelope`], printed
//! compact on one line: success `{"ok":true,"data":…}` (with `"replayed"`
//! after `data` for an idempotent replay); failure
//! `{"ok":false,"error":{"code":…,"message":…,"retryable":…,"details":{…}}}`.

use logbook::{Envelope, Replayed, Written};
use serde::Serialize;
use std::io::{ErrorKind, Write};

/// Where and how a command prints.
#[derive(Debug, Clone, Copy)]
pub struct Printer {
    /// `--json` was given.
    pub json: bool,
}

impl Printer {
    pub fn new(json: bool) -> Self {
        Printer { json }
    }

    /// Prints `data` as the success envelope, or `human(data)` as text.
    pub fn success<T: Serialize>(&self, data: &T, human: impl FnOnce(&T) -> String) {
        self.print(&Envelope::success(data), || human(data));
    }

    /// Prints a mutation's result: as [`Printer::success`], and for an
    /// idempotent replay the envelope's `replayed` member (docs/design.md, "CLI") or, as
    /// text, one line saying so after the value.
    pub fn written<T: Serialize>(&self, w: &Written<T>, human: impl FnOnce(&T) -> String) {
        self.print(&Envelope::written(w), || {
            let mut text = human(&w.value);
            if let Some(r) = w.replayed {
                text.push_str(&replayed_line(r));
            }
            text
        });
    }

    /// Prints `envelope` under `--json`, else the text `human` renders.
    fn print<T: Serialize>(&self, envelope: &Envelope<'_, T>, human: impl FnOnce() -> String) {
        if self.json {
            match envelope.to_json() {
                Ok(mut s) => {
                    s.push('\n');
                    write_stdout(s.as_bytes());
                }
                Err(e) => write_stderr(&format!("error[INTERNAL]: cannot serialize output: {e}\n")),
            }
        } else {
            write_stdout(human().as_bytes());
        }
    }
}

/// The human line of a replay: what the first attempt left, and that
/// nothing was applied again.
fn replayed_line(r: Replayed) -> String {
    let rev = r
        .rev
        .map_or_else(|| "an unrecorded rev".to_owned(), |v| format!("rev {v}"));
    format!(
        "replayed   an earlier call with this idempotency key already applied this (event seq {}, {rev}); nothing was applied again\n",
        r.seq
    )
}

/// Whether a write to stdout failed for a reason other than a closed pipe
/// (e.g. a full disk behind `> file`); the command then exits 1.
static OUTPUT_FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Writes to stdout. A broken pipe or closed stdout is not an error for the
/// command (the write it reports on has already committed); any other write
/// failure is reported on stderr and makes the command exit 1.
pub fn write_stdout(bytes: &[u8]) {
    // A closed pipe ends nothing here: the command has already done its work.
    let _ = write_stdout_open(bytes);
}

/// Writes to stdout for a stream (`events --follow`): `false` once the
/// reader has gone (broken pipe), so the stream can end with exit 0; other
/// failures are reported as [`write_stdout`] does, and also end it.
pub fn write_stdout_open(bytes: &[u8]) -> bool {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => true,
        Err(e) if e.kind() == ErrorKind::BrokenPipe => false,
        Err(e) => {
            OUTPUT_FAILED.store(true, std::sync::atomic::Ordering::SeqCst);
            write_stderr(&format!("error[INTERNAL]: cannot write the output: {e}\n"));
            false
        }
    }
}

/// Whether stdout is a pipe or socket whose reader has gone, checked
/// without writing (`poll` reports POLLERR/POLLHUP on it): an idle follower
/// notices a closed pipe without waiting for the next event.
pub fn stdout_closed() -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let out = std::io::stdout();
    let mut fds = [PollFd::new(out.as_fd(), PollFlags::empty())];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(n) if n > 0 => fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLERR | PollFlags::POLLHUP)),
        _ => false,
    }
}

/// Whether [`write_stdout`] failed (other than a closed pipe).
pub fn output_failed() -> bool {
    OUTPUT_FAILED.load(std::sync::atomic::Ordering::SeqCst)
}

/// Writes to stderr, ignoring failures (there is nowhere else to report).
pub fn write_stderr(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
}
