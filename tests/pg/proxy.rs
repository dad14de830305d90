//! A TCP proxy between logbook and the test server that can cut a
//! connection at a chosen point of the protocol: right after it forwarded a
//! client's `COMMIT` (so the server commits and its reply is lost), or at
//! once (a server or proxy closing an idle connection).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A running proxy; connections end when it drops.
pub struct Proxy {
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    /// Cut the next connection that sends a `COMMIT`, after forwarding it.
    cut_after_commit: AtomicBool,
    /// Cut the next connection that sends a burst holding these bytes,
    /// after forwarding it.
    cut_after_bytes: Mutex<Option<Vec<u8>>>,
    /// After the next burst holding these bytes, relay the server's whole
    /// reply, then send the client a FATAL "terminating connection" error
    /// and close: a backend terminated just after it answered.
    fatal_after_bytes: Mutex<Option<Vec<u8>>>,
    /// A reply is being relayed that the FATAL is to follow.
    fatal_armed: AtomicBool,
    /// COMMITs cut so far.
    cut: AtomicUsize,
    /// Reads from clients forwarded to the server so far (each a burst of
    /// protocol messages the client sent at once).
    bursts: AtomicUsize,
    /// Open sockets (client side, server side), to cut them all.
    open: Mutex<Vec<(TcpStream, TcpStream)>>,
    /// New connections are closed at once (the server unreachable).
    refuse: AtomicBool,
    /// New connections wait this long (ms) before they reach the server.
    delay_ms: AtomicU64,
    stop: AtomicBool,
}

impl Proxy {
    /// Starts a proxy in front of `127.0.0.1:upstream_port`.
    pub fn start(upstream_port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State::default());
        let st = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if st.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                if st.refuse.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let delay = st.delay_ms.load(Ordering::SeqCst);
                if delay > 0 {
                    std::thread::sleep(Duration::from_millis(delay));
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream_port)) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                st.open
                    .lock()
                    .unwrap()
                    .push((client.try_clone().unwrap(), server.try_clone().unwrap()));
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let up = st.clone();
                std::thread::spawn(move || pump_up(client, server, &up));
                let down = st.clone();
                std::thread::spawn(move || pump(s2, c2, &down));
            }
        });
        Proxy { port, state }
    }

    /// The next `COMMIT` a client sends reaches the server, then both sides
    /// of that connection are closed before the server's reply is relayed.
    pub fn cut_after_next_commit(&self) {
        self.state.cut_after_commit.store(true, Ordering::SeqCst);
    }

    /// The next burst a client sends that holds `needle` (a statement's
    /// text, with no statement cache) reaches the server, then both sides
    /// of that connection are closed before the reply is relayed: a write
    /// sent as one statement whose reply is lost.
    pub fn cut_after_next(&self, needle: &[u8]) {
        *self.state.cut_after_bytes.lock().unwrap() = Some(needle.to_vec());
    }

    /// The next burst a client sends that holds `needle` reaches the server
    /// and its whole reply reaches the client, followed by a FATAL error
    /// (SQLSTATE 57P01, as `pg_terminate_backend` sends) and the end of the
    /// connection: a reply that arrived, then the notice of a terminated
    /// backend.
    pub fn fatal_after_next(&self, needle: &[u8]) {
        *self.state.fatal_after_bytes.lock().unwrap() = Some(needle.to_vec());
    }

    /// While `on`, new connections are closed as soon as they are made, as
    /// when the server cannot be reached (open ones carry on).
    pub fn refuse_new(&self, on: bool) {
        self.state.refuse.store(on, Ordering::SeqCst);
    }

    /// New connections wait `d` before they are relayed (a slow
    /// reconnect); zero relays them at once.
    pub fn delay_new(&self, d: Duration) {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        self.state.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// How many COMMITs were cut.
    pub fn commits_cut(&self) -> usize {
        self.state.cut.load(Ordering::SeqCst)
    }

    /// How many bursts of messages clients have sent so far (one per round
    /// trip of an idle client: a follower's probe is one).
    pub fn bursts(&self) -> usize {
        self.state.bursts.load(Ordering::SeqCst)
    }

    /// Closes every open connection now (both sides), as a server's
    /// `idle_session_timeout` or a proxy's idle timeout would.
    pub fn cut_all(&self) {
        for (c, s) in self.state.open.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        self.cut_all();
        // Wake the accept loop so it sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Server to client: copy until either side closes.
fn pump(mut from: TcpStream, mut to: TcpStream, st: &State) {
    let mut buf = [0u8; 16384];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
                // ReadyForQuery ends the reply.
                let ready = buf[..n].windows(5).any(|w| w == b"Z\0\0\0\x05");
                if ready && st.fatal_armed.swap(false, Ordering::SeqCst) {
                    let _ = to.write_all(&fatal_57p01());
                    st.cut.fetch_add(1, Ordering::SeqCst);
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

/// An ErrorResponse as a backend sends when `pg_terminate_backend` ends it.
fn fatal_57p01() -> Vec<u8> {
    let mut body = Vec::new();
    for (k, v) in [
        (b'S', "FATAL"),
        (b'V', "FATAL"),
        (b'C', "57P01"),
        (b'M', "terminating connection due to administrator command"),
    ] {
        body.push(k);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut msg = vec![b'E'];
    msg.extend_from_slice(&(u32::try_from(body.len() + 4).unwrap()).to_be_bytes());
    msg.extend_from_slice(&body);
    msg
}

/// Client to server, watching for a simple-query `COMMIT` ('Q' message).
fn pump_up(mut from: TcpStream, mut to: TcpStream, st: &State) {
    let mut buf = [0u8; 16384];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        st.bursts.fetch_add(1, Ordering::SeqCst);
        // A simple-protocol Query message: 'Q', length 11, "COMMIT\0",
        // wherever it stands in the chunk (the driver may send the Close of
        // a statement in front of it).
        let is_commit = chunk.windows(12).any(|w| w == b"Q\0\0\0\x0bCOMMIT\0");
        let holds_needle = {
            let mut needle = st.cut_after_bytes.lock().unwrap();
            let hit = needle
                .as_deref()
                .is_some_and(|n| chunk.windows(n.len()).any(|w| w == n));
            if hit {
                *needle = None;
            }
            hit
        };
        {
            let mut fatal = st.fatal_after_bytes.lock().unwrap();
            if fatal
                .as_deref()
                .is_some_and(|n| chunk.windows(n.len()).any(|w| w == n))
            {
                *fatal = None;
                st.fatal_armed.store(true, Ordering::SeqCst);
            }
        }
        if holds_needle || (is_commit && st.cut_after_commit.swap(false, Ordering::SeqCst)) {
            // The client's side goes first, so no reply can reach it; then
            // the server gets the COMMIT, applies it, and loses the client.
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.write_all(chunk);
            std::thread::sleep(Duration::from_millis(300));
            st.cut.fetch_add(1, Ordering::SeqCst);
            break;
        }
        if to.write_all(chunk).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}
