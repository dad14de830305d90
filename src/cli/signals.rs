//! SIGINT and SIGTERM during the long commands (`export`, `import`,
//! `backup`; docs/design.md, "Interruption").
//!
//! [`install`] blocks both signals in the main thread (and so in every
//! thread started after it) and starts one thread that waits for them with
//! `sigwait`: the first one triggers the [`Interrupt`] the ledger polls
//! between sessions and batches, and wakes any [`Wakeable`] stdin or stdout
//! blocked on a pipe, so the command stops, removes its temp files, prints
//! the counts so far and exits 128 + the signal (130, 143). No signal
//! handler runs (nothing unsafe): the waiting thread does the work. A
//! second signal is ignored; the first one is already being acted on.

use logbook::Interrupt;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

/// The signals a long command stops at.
const STOP: [Signal; 2] = [Signal::SIGINT, Signal::SIGTERM];

/// Writes to a pipe of at most this many bytes never block once `poll`
/// says it is writable (POSIX `PIPE_BUF`).
const PIPE_BUF: usize = 4096;

/// What [`install`] set up: the interrupt to hand to the ledger, and the
/// read end of the pipe the waiting thread writes to when a signal comes.
pub struct Signals {
    pub interrupt: Interrupt,
    wake: Option<Arc<OwnedFd>>,
}

/// Takes over SIGINT and SIGTERM for this process (see the module docs).
/// Must run before the command starts any other thread. If the pipe or
/// the thread cannot be made, the signals keep their default action (the
/// process ends at once, as before).
pub fn install() -> Signals {
    let interrupt = Interrupt::new();
    let mut set = SigSet::empty();
    for s in STOP {
        set.add(s);
    }
    let Ok((wake_read, wake_write)) = nix::unistd::pipe2(OFlag::O_CLOEXEC) else {
        return Signals {
            interrupt,
            wake: None,
        };
    };
    if set.thread_block().is_err() {
        return Signals {
            interrupt,
            wake: None,
        };
    }
    let flag = interrupt.clone();
    let waiter = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            while let Ok(sig) = set.wait() {
                flag.trigger(sig as i32);
                let _ = nix::unistd::write(&wake_write, b"!");
            }
        });
    if waiter.is_err() {
        let _ = set.thread_unblock();
        return Signals {
            interrupt,
            wake: None,
        };
    }
    Signals {
        interrupt,
        wake: Some(Arc::new(wake_read)),
    }
}

impl Signals {
    /// stdin, read without std's buffer and woken by a signal.
    pub fn stdin(&self) -> io::Result<Wakeable> {
        Wakeable::new(io::stdin().as_fd().try_clone_to_owned()?, self.wake.clone())
    }

    /// stdout, written without std's buffer and woken by a signal.
    pub fn stdout(&self) -> io::Result<Wakeable> {
        Wakeable::new(
            io::stdout().as_fd().try_clone_to_owned()?,
            self.wake.clone(),
        )
    }
}

/// A standard stream that waits in `poll` on both itself and the signal
/// pipe, so a signal ends a read or write that would otherwise block for
/// good (a stdin nobody writes to, a stdout pipe nobody reads).
pub struct Wakeable {
    file: File,
    wake: Option<Arc<OwnedFd>>,
}

impl Wakeable {
    fn new(fd: OwnedFd, wake: Option<Arc<OwnedFd>>) -> io::Result<Self> {
        Ok(Wakeable {
            file: File::from(fd),
            wake,
        })
    }

    /// Waits until the stream is ready for `events`; `Err` once a signal
    /// has come.
    fn ready(&self, events: PollFlags) -> io::Result<()> {
        let Some(wake) = &self.wake else {
            return Ok(());
        };
        loop {
            let mut fds = [
                PollFd::new(self.file.as_fd(), events),
                PollFd::new(wake.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
            if fds[1].revents().is_some_and(|r| !r.is_empty()) {
                return Err(io::Error::other("stopped by a signal"));
            }
            if fds[0].revents().is_some_and(|r| !r.is_empty()) {
                return Ok(());
            }
        }
    }
}

impl Read for Wakeable {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.ready(PollFlags::POLLIN)?;
        self.file.read(buf)
    }
}

impl Write for Wakeable {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.ready(PollFlags::POLLOUT)?;
        let n = buf.len().min(PIPE_BUF);
        self.file.write(&buf[..n])
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}
