//! uRDMA as an application holds it, with completion and ordering parity — what §5 sketches for
//! the software path and the paper does not build: "a secondary queue pair for unload events
//! and generating the offload-expected notifications in the original completion queue".
//!
//! [`UnloadQp`] sits beside the application's QP. Each send work request goes through the
//! decision module (`super::decision`): a WRITE it unloads travels as a WRITE WITH IMMEDIATE on
//! a secondary QP into the target's staging buffer (`super::unload`); everything else goes on
//! the application's QP unchanged. The application polls through [`UnloadQp::poll`], which
//! gives it:
//! * **completion parity**: an unloaded WRITE completes only when the target's CPU has placed
//!   it, with the status the offload path would give — success, or remote access error when
//!   the target's uMTT refused it (its verdict comes back with the credits). Unloaded WRITEs
//!   complete in post order, signalled or not as posted (an error always completes); the
//!   secondary QP's own completions never reach the application;
//! * **ordering parity**: a request on one path is not started while the other path has work
//!   outstanding ([`VerbsError::QueueFull`] until it drains; poll and post again). So a READ
//!   sees every WRITE posted before it, and completions come in post order, as on one QP.
//!   Runs of requests on the same path still pipeline; each switch of path costs a round trip
//!   and the target CPU's copy (§5: "ordering parity would likely incur a performance
//!   penalty").
//!
//! Left out: a refused unloaded WRITE reports the offload path's status but does not move the
//! QP to the error state as the offload path's NAK does (later requests still run); unloaded
//! WRITEs gathered from more than one SGE.

use std::collections::VecDeque;

use super::decision::Decider;
use super::unload::{UnloadInitiator, MAX_SLOT_BYTES, SLOT_HEADER};
use super::*;

/// Which path a posted request took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    Offload,
    Unload,
}

/// An application's QP with uRDMA's unload path beside it, completions and ordering kept.
pub struct UnloadQp {
    /// The application's QP number (its completions name it).
    qpn: u32,
    side: Qp,
    side_cq: Cq,
    initiator: UnloadInitiator,
    pub decider: Decider,
    /// Unloaded WRITEs not reported yet: (sent index, wr_id, signalled), oldest first.
    unloaded: VecDeque<(u64, u64, bool)>,
    /// Offloaded requests not completed yet: (wr_id, signalled), oldest first.
    offloaded: VecDeque<(u64, bool)>,
    /// The path of the requests outstanding (either deque non-empty).
    path: Option<Path>,
    /// An error on the secondary QP (its WRITE WITH IMMEDIATE failed): reported once, then
    /// every unloaded WRITE outstanding is flushed.
    side_error: Option<WcStatus>,
}

impl UnloadQp {
    /// The layer for the application's QP `app` (RTS), its unload events on `side` (an RC QP
    /// connected to the target's staging QP, completing into `side_cq`), towards the staging
    /// buffer `initiator` leads to, deciding with `decider`.
    pub fn new(
        app: &Qp,
        side: Qp,
        side_cq: Cq,
        initiator: UnloadInitiator,
        decider: Decider,
    ) -> Self {
        UnloadQp {
            qpn: app.qp_num(),
            side,
            side_cq,
            initiator,
            decider,
            unloaded: VecDeque::new(),
            offloaded: VecDeque::new(),
            path: None,
            side_error: None,
        }
    }

    /// Posts `wrs` in order, each on the path the decision module picks (ibv_post_send). Stops
    /// at the first that cannot go now: [`VerbsError::QueueFull`] when the other path still
    /// has work outstanding or there is no room; the ones before it are posted.
    pub fn post_send(&mut self, ctx: &Context, app: &mut Qp, wrs: &[SendWr<'_>]) -> Result<()> {
        for wr in wrs {
            let unload = match (wr.opcode, wr.sg_list) {
                (WrOpcode::RdmaWrite { remote_addr, .. }, [sge]) => {
                    let len = sge.length as usize;
                    len <= MAX_SLOT_BYTES as usize - SLOT_HEADER
                        && self.decider.unload(remote_addr, len, wr.keep_offloaded)
                }
                _ => false,
            };
            let path = if unload { Path::Unload } else { Path::Offload };
            if self.path.is_some_and(|p| p != path) {
                return Err(VerbsError::QueueFull);
            }
            match (wr.opcode, unload) {
                (WrOpcode::RdmaWrite { remote_addr, rkey }, true) => {
                    let sge = wr.sg_list[0];
                    let mut data = [0u8; MAX_SLOT_BYTES as usize];
                    let data = &mut data[..sge.length as usize];
                    if !ctx.umtt().gather(sge.lkey, sge.addr, data) {
                        return Err(VerbsError::Invalid("an SGE outside its region"));
                    }
                    let n = self.initiator.sent();
                    self.initiator
                        .post(&mut self.side, wr.wr_id, remote_addr, rkey, data)?;
                    self.unloaded.push_back((n, wr.wr_id, wr.signaled));
                }
                _ => {
                    // Signalled always, so the layer knows when the offload path has drained;
                    // completions the application did not ask for are not shown to it.
                    let mut own = *wr;
                    own.signaled = true;
                    app.post_send(std::slice::from_ref(&own))?;
                    self.offloaded
                        .push_back((wr.wr_id, wr.signaled || app.sq_sig_all));
                }
            }
            self.path = Some(path);
        }
        Ok(())
    }

    /// Polls the application's CQ `cq` (ibv_poll_cq) with the unloaded WRITEs' completions
    /// among its own, in post order. Completions of other QPs on `cq` pass through.
    pub fn poll(&mut self, cq: &mut Cq, wc: &mut [Wc]) -> usize {
        let mut n = self.report_unloaded(wc);
        if n < wc.len() {
            let from = n;
            let got = cq.poll(&mut wc[from..]);
            for i in from..from + got {
                let w = wc[i];
                let shown = w.qp_num != self.qpn
                    || is_receive(&w)
                    || match self.offloaded.pop_front() {
                        // Every offloaded request is signalled: its completion is the next.
                        Some((_, signaled)) => signaled || w.status != WcStatus::Success,
                        None => true,
                    };
                if shown {
                    wc[n] = w;
                    n += 1;
                }
            }
        }
        if self.unloaded.is_empty() && self.offloaded.is_empty() {
            self.path = None;
        }
        n
    }

    /// Unloaded WRITEs the target has ruled on, as completions in `wc`.
    fn report_unloaded(&mut self, wc: &mut [Wc]) -> usize {
        let mut side = [Wc::EMPTY; 16];
        loop {
            let k = self.side_cq.poll(&mut side);
            if let Some(w) = side[..k].iter().find(|w| w.status != WcStatus::Success) {
                self.side_error.get_or_insert(w.status);
            }
            if k < side.len() {
                break;
            }
        }
        let credited = self.initiator.credited();
        let mut n = 0;
        while n < wc.len() {
            let Some(&(sent, wr_id, signaled)) = self.unloaded.front() else {
                break;
            };
            let status = match (sent < credited, self.side_error) {
                (true, _) => self
                    .initiator
                    .verdict(sent)
                    .map_or(WcStatus::Success, |r| r.status()),
                // The secondary QP failed: what was not credited will not be.
                (false, Some(_)) => WcStatus::WrFlushErr,
                (false, None) => break,
            };
            self.unloaded.pop_front();
            if signaled || status != WcStatus::Success {
                wc[n] = Wc {
                    wr_id,
                    status,
                    opcode: WcOpcode::RdmaWrite,
                    byte_len: 0,
                    imm_data: None,
                    qp_num: self.qpn,
                    solicited: false,
                };
                n += 1;
            }
        }
        n
    }

    /// Requests posted and not completed, on either path.
    pub fn outstanding(&self) -> usize {
        self.unloaded.len() + self.offloaded.len()
    }
}

/// Whether `w` completes a receive (not one of the QP's send work requests).
fn is_receive(w: &Wc) -> bool {
    matches!(
        w.opcode,
        WcOpcode::Recv | WcOpcode::RecvRdmaWithImm | WcOpcode::RecvRdmaStaged
    )
}
