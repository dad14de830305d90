//! Stopping long operations cleanly (docs/design.md, "Interruption").
//!
//! An [`Interrupt`] is a flag that an entry point triggers when a signal
//! arrives (the CLI does on SIGINT and SIGTERM) and that the library's long
//! operations — export, import and backup — poll between two sessions or
//! batches. A triggered operation stops there, removes its temp files, and
//! returns [`Error::Interrupted`], wrapped in [`Error::Incomplete`] with the
//! counts so far when it had done part of its work. The library installs
//! no signal handler itself: it never touches process-wide state.

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

/// A shared "stop" flag holding the number of the signal that set it.
///
/// Clones share the flag. The default is a flag nothing triggers.
#[derive(Debug, Clone, Default)]
pub struct Interrupt(Arc<AtomicI32>);

impl Interrupt {
    /// A flag not triggered yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `signal` (a positive signal number, e.g. 2 for SIGINT)
    /// arrived. The first signal is kept; later ones and 0 change nothing.
    /// Safe to call from any thread.
    pub fn trigger(&self, signal: i32) {
        if signal > 0 {
            let _ = self
                .0
                .compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
        }
    }

    /// The signal that triggered the flag, if any.
    pub fn signal(&self) -> Option<i32> {
        match self.0.load(Ordering::SeqCst) {
            0 => None,
            s => Some(s),
        }
    }

    /// `Err(Interrupted)` once triggered.
    ///
    /// # Errors
    /// INTERRUPTED, naming the signal.
    pub fn check(&self) -> Result<()> {
        match self.signal() {
            None => Ok(()),
            Some(signal) => Err(Error::Interrupted { signal }),
        }
    }

    /// `e`, or [`Error::Interrupted`] when the flag is set: an error that
    /// surfaces after a signal (a read the signal cut short) is reported as
    /// the interruption it is.
    pub(crate) fn or(&self, e: Error) -> Error {
        match self.signal() {
            Some(signal) => Error::Interrupted { signal },
            None => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn the_first_signal_is_kept_and_clones_share_the_flag() {
        let i = Interrupt::new();
        assert!(i.check().is_ok());
        let other = i.clone();
        other.trigger(0);
        assert_eq!(i.signal(), None);
        other.trigger(15);
        i.trigger(2);
        assert_eq!(i.signal(), Some(15));
        let e = i.check().unwrap_err();
        assert_eq!(e.code(), ErrorCode::Interrupted);
        assert_eq!(e.exit_code(), 143);
        assert_eq!(e.to_string(), "interrupted by SIGTERM");
        assert_eq!(e.details(), serde_json::json!({"signal": "SIGTERM"}));
    }
}
