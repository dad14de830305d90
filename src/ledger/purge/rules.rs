//! The rules a purge applies to each candidate beyond its filter: the
//! newest `keep_last` per app are kept, and so is every session with a live
//! descendant (docs/design.md, "Retention").

use crate::error::Result;
use crate::store::rows::{PurgeCandidate, PurgeScan};
use crate::store::Tx;
use std::collections::{HashMap, HashSet};

/// The keep-last rule and the live-descendant rule, over candidates.
pub(super) struct Rules {
    /// Per app, the newest-kept cutoff `(ended_at_ms, insert_seq)`: a
    /// session at or above it is kept. Apps with fewer than N sessions are
    /// kept whole (`keep_all`).
    cutoffs: Option<HashMap<Option<String>, (i64, i64)>>,
    live: HashSet<String>,
}

pub(super) enum Verdict {
    Purge,
    KeptNewest,
    KeptLive,
}

impl Rules {
    /// The live set read again (inside a batch's write transaction: a
    /// session forked since the plan keeps its parent).
    pub(super) fn refresh_live(&mut self, tx: &mut dyn Tx) -> Result<()> {
        self.live = tx.live_ancestors()?.into_iter().collect();
        Ok(())
    }

    pub(super) fn read(tx: &mut dyn Tx, scan: &PurgeScan, keep_last: Option<u64>) -> Result<Rules> {
        let cutoffs = match keep_last {
            Some(0) | None => None,
            Some(n) => {
                let n = i64::try_from(n).unwrap_or(i64::MAX);
                Some(
                    tx.keep_last_cutoffs(scan, n)?
                        .into_iter()
                        .map(|(app, at, seq)| (app, (at, seq)))
                        .collect(),
                )
            }
        };
        Ok(Rules {
            cutoffs,
            live: tx.live_ancestors()?.into_iter().collect(),
        })
    }

    pub(super) fn verdict(&self, c: &PurgeCandidate) -> Verdict {
        if self.live.contains(&c.session_id) {
            return Verdict::KeptLive;
        }
        if let Some(cut) = &self.cutoffs {
            // An app with no cutoff has at most N sessions: all kept.
            match cut.get(&c.app) {
                None => return Verdict::KeptNewest,
                Some(&k) if (c.ended_at_ms.unwrap_or(i64::MIN), c.insert_seq) >= k => {
                    return Verdict::KeptNewest
                }
                Some(_) => {}
            }
        }
        Verdict::Purge
    }
}
