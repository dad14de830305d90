//! Processes killed mid-write: the file stays intact and every acknowledged
//! write is present (SPEC §1; CASES C30 for the library writer).

use crate::common::*;
use crate::helper::spawn_writer;

/// A small deterministic PRNG so kill times are varied but reproducible.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, max: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % max
    }
}

#[test]
fn library_writer_killed_mid_write_loses_no_acknowledged_event() {
    let env = TestEnv::new();
    let id = env.create("t");
    let mut rng = Lcg(42);
    let mut next = 0u64;
    let mut acked: Vec<(i64, String)> = Vec::new();
    for round in 0..40 {
        let mut child = spawn_writer(env.path(), &id, next, 0);
        // Collect the writer's acknowledgements on a thread; kill it a random
        // 0–50 ms after its first one, so the kill lands among writes rather
        // than during process start-up (which is slow on a loaded machine).
        let stdout = child.stdout.take().unwrap();
        let (first_tx, first_rx) = std::sync::mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            let mut out = String::new();
            let mut r = std::io::BufReader::new(stdout);
            let mut line = String::new();
            let mut told = false;
            while std::io::BufRead::read_line(&mut r, &mut line).unwrap_or(0) > 0 {
                out.push_str(&line);
                line.clear();
                if !told {
                    let _ = first_tx.send(());
                    told = true;
                }
            }
            out.push_str(&line);
            out
        });
        first_rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the writer never acknowledged a write");
        std::thread::sleep(std::time::Duration::from_millis(rng.next(50)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let out = reader.join().unwrap();
        for line in out.lines().filter(|l| !l.is_empty()) {
            let mut parts = line.split(' ');
            let (Some(seq), Some(step)) = (parts.next(), parts.next()) else {
                continue;
            };
            let Ok(seq) = seq.parse::<i64>() else {
                continue;
            };
            // A line cut by the kill has no complete step.
            if !step.starts_with('k') || step[1..].parse::<u64>().is_err() {
                continue;
            }
            acked.push((seq, step.to_owned()));
        }
        let c = env.sql();
        let ic: String = c
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ic, "ok", "round {round}");
        let rev = assert_rev_matches_events(&env, &id);
        for (seq, step) in &acked {
            let (s, note): (String, String) = c
                .query_row(
                    "SELECT json_extract(data, '$.step'), detail FROM events WHERE session_id = ?1 AND seq = ?2 AND type = 'checkpoint'",
                    rusqlite::params![id, seq],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap_or_else(|e| panic!("round {round}: acknowledged seq {seq} missing: {e}"));
            assert_eq!(&s, step);
            assert_eq!(note, format!("n{}", &step[1..]));
        }
        // Continue numbering after everything that may have landed.
        next = u64::try_from(rev).unwrap() + 1_000 * (round + 1);
    }
    assert!(
        acked.len() >= 40,
        "the writer acknowledged too few writes to test anything: {}",
        acked.len()
    );
    // A normal write still works, with no manual cleanup.
    let before = rev_and_events(&env, &id).0;
    let s = env
        .json(&["session", "checkpoint", &id, "--step", "after"])
        .data();
    assert_eq!(s["rev"], before + 1);
}
