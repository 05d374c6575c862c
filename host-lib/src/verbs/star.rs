//! StaR connections on the verbs API (`docs/nic-interface.md` §16; Pan et al., APNet '19): which
//! end keeps a connection's state is chosen when it is set up.
//!
//! * The **server** (stateless side) serves through a [`StarPort`] and makes a [`StarQp`] per
//!   connection. That QP lives in the driver: its WQEs go to the client as WQEPs and come back as
//!   completions on the CQs it names. Its [`StarOffer`] — its QP number, CQs and regions — goes
//!   to the client with the usual connection data.
//! * The **client** (stateful side) connects an ordinary [`Qp`] with
//!   [`Context::connect_star_client`]. The call holds the server's regions and installs the
//!   connection's entries in the function's egress security module. That takes the manager
//!   function: the trusted driver in the model StaR §3.2 draws.
//!
//! Regions the server registers later go to the client as packets ([`StarQp::share_region`],
//! [`StarQp::withdraw_region`]); the client's context applies them in
//! [`Context::star_progress`].
//!
//! Completions look as for RC ([`Cq::poll`]): a StaR QP's completion that arrives twice (the
//! client sent it again) is dropped by its element sequence number.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use fld_abi::nic::*;
use fld_abi::wire::roce::star::StarKind;
use fld_abi::wire::roce::star::StarRegionOp;
use fld_abi::wire::roce::{flow_source_port, RoceAddress, DEFAULT_PKEY};
use fld_driver::rdma::MemoryRegion;
use fld_driver::star::{StarRegion, StarServer, StarServerQp, StarUpdates};

use super::*;

/// The numbers a server's driver gives its StaR QPs: above every QP number a NIC has, so a
/// completion's `qn` never names both.
pub const STAR_QPN_BASE: u32 = 0x80_0000;

/// How long the server's driver waits for a WQEP's EA before sending it again, ns.
pub const WQEP_TIMEOUT_NS: u64 = 10_000_000;

/// Which end of a new connection keeps its state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConnectionMode {
    /// Plain RC: both NICs hold the connection's context.
    #[default]
    Stateful,
    /// StaR: the server's NIC holds nothing, its client carries the state.
    Stateless,
    /// StaR §3.3's auto adaptation, decided by the server per connection: stateful while its
    /// NIC's QP-context cache has room for one more connected QP, stateless beyond.
    Auto,
}

/// What a StaR server hands its client at setup, beside the RC connection data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StarOffer {
    pub qpn: u32,
    pub send_cqn: u32,
    pub recv_cqn: u32,
    pub regions: Vec<StarRegion>,
}

/// The last line of an offer's text.
pub const OFFER_END: &str = "OFFERED";

impl StarOffer {
    /// The offer as text lines, for a setup exchange over a byte stream (`rc-bw`,
    /// `rc-pingpong`): `STAR <qpn> <send_cqn> <recv_cqn>`, one `REGION <key> <addr> <length>
    /// <access> <log_page_size> <page,page,...>` per region, then `OFFERED`. Numbers in hex but
    /// the page size's log.
    pub fn to_text(&self) -> String {
        let mut t = format!(
            "STAR {:x} {:x} {:x}\n",
            self.qpn, self.send_cqn, self.recv_cqn
        );
        for r in &self.regions {
            let pages: Vec<String> = r.pages.iter().map(|p| format!("{p:x}")).collect();
            t += &format!(
                "REGION {:x} {:x} {:x} {:x} {} {}\n",
                r.key,
                r.addr,
                r.length,
                r.access,
                r.log_page_size,
                pages.join(",")
            );
        }
        t + OFFER_END + "\n"
    }

    /// An offer from its text ([`Self::to_text`]'s lines, `OFFERED` optional); the first line
    /// that does not parse, as the error.
    pub fn from_text(text: &str) -> std::result::Result<StarOffer, String> {
        let hex32 = |s: Option<&str>| s.and_then(|s| u32::from_str_radix(s, 16).ok());
        let hex64 = |s: Option<&str>| s.and_then(|s| u64::from_str_radix(s, 16).ok());
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
        let first = lines.next().unwrap_or_default();
        let mut f = first.split_whitespace();
        let (Some("STAR"), Some(qpn), Some(send_cqn), Some(recv_cqn)) =
            (f.next(), hex32(f.next()), hex32(f.next()), hex32(f.next()))
        else {
            return Err(first.to_string());
        };
        let mut offer = StarOffer {
            qpn,
            send_cqn,
            recv_cqn,
            regions: Vec::new(),
        };
        for line in lines.take_while(|l| *l != OFFER_END) {
            let mut f = line.split_whitespace();
            let region = (|| {
                (f.next()? == "REGION").then_some(())?;
                let (key, addr, length, access) = (
                    hex32(f.next())?,
                    hex64(f.next())?,
                    hex64(f.next())?,
                    hex32(f.next())?,
                );
                let log_page_size = f.next()?.parse().ok()?;
                let pages = f
                    .next()?
                    .split(',')
                    .map(|p| u64::from_str_radix(p, 16).ok())
                    .collect::<Option<Vec<u64>>>()?;
                Some(StarRegion {
                    key,
                    addr,
                    length,
                    access,
                    log_page_size,
                    pages,
                })
            })();
            offer.regions.push(region.ok_or_else(|| line.to_string())?);
        }
        Ok(offer)
    }
}

/// A function serving StaR connections: its WQEP send queue, its control CQ, its QPs.
pub struct StarPort {
    server: StarServer,
    qps: HashMap<u32, Arc<Mutex<Option<StarServerQp>>>>,
    next_qpn: u32,
}

impl StarPort {
    /// The server driver's own work: EAs taken off the control CQ, WQEPs unacknowledged for
    /// [`WQEP_TIMEOUT_NS`] sent again. Returns the work done.
    pub fn progress(&mut self, now: u64) -> Result<usize> {
        let mut work = 0;
        while let Some((qpn, seq)) = self.server.poll_ea() {
            if let Some(qp) = self.qps.get(&qpn) {
                if let Some(q) = lock(qp).as_mut() {
                    q.element_acked(seq);
                }
            }
            work += 1;
        }
        for qp in self.qps.values() {
            if let Some(q) = lock(qp).as_mut() {
                if q.unacked() > 0 {
                    work += q.resend_due(&mut self.server, now, WQEP_TIMEOUT_NS)?;
                }
            }
        }
        Ok(work)
    }
}

impl StarPort {
    /// When the earliest unacknowledged WQEP falls due to be sent again (ns), if any: the
    /// driver's timer.
    pub fn next_deadline(&self) -> Option<u64> {
        self.qps
            .values()
            .filter_map(|q| lock(q).as_ref().and_then(|q| q.oldest_unacked()))
            .min()
            .map(|t| t + WQEP_TIMEOUT_NS)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The server QP behind a [`StarQp`], once connected.
fn connected(qp: &mut Option<StarServerQp>) -> Result<&mut StarServerQp> {
    qp.as_mut()
        .ok_or(VerbsError::Invalid("the StaR QP is not connected"))
}

/// A StaR connection's QP at the server, in host software.
pub struct StarQp {
    qp: Arc<Mutex<Option<StarServerQp>>>,
    qpn: u32,
    ids: Arc<WrIds>,
    cap: QpCap,
    offer: StarOffer,
}

impl StarQp {
    pub fn qp_num(&self) -> u32 {
        self.qpn
    }

    /// What the client needs to connect.
    pub fn offer(&self) -> &StarOffer {
        &self.offer
    }

    /// Posts send work requests: each becomes a WQEP to the client now. Inline data is not
    /// taken (the client fetches the data by GDs).
    pub fn post_send(&mut self, port: &mut StarPort, wrs: &[SendWr<'_>], now: u64) -> Result<()> {
        let mut guard = lock(&self.qp);
        let q = connected(&mut guard)?;
        for wr in wrs {
            if wr.sg_list.len() > self.cap.max_send_sge as usize {
                return Err(VerbsError::Invalid("more SGEs than the QP takes"));
            }
            let done = self.ids.send_done.load(Ordering::Acquire);
            if q.sq_posted().wrapping_sub(done) & 0xffff >= self.cap.max_send_wr {
                return Err(VerbsError::QueueFull);
            }
            let wqe = super::rdma_wqe(wr, WqeData::Gather(wr.sg_list), false);
            let index = q.post_send(&mut port.server, &wqe, now)?;
            let slot = index as usize % self.ids.send.len();
            self.ids.send[slot].store(wr.wr_id, Ordering::Relaxed);
            self.ids.send_blocks[slot].store(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Hands the client a region registered after the connection was made (StaR §3.1: later
    /// registrations are sent to the client as packets). The client may name it once its
    /// driver applied the update ([`Context::star_progress`]).
    pub fn share_region(&mut self, port: &mut StarPort, mr: &Mr, now: u64) -> Result<()> {
        self.region_update(port, StarRegionOp::Register, mr, now)
    }

    /// Takes a region back from the client: from the update's acknowledgement on
    /// ([`Self::updates_pending`] is 0) the client's NIC refuses it and its security module
    /// lets no RDP or GD into its pages, so the memory may be deregistered and reused.
    pub fn withdraw_region(&mut self, port: &mut StarPort, mr: &Mr, now: u64) -> Result<()> {
        self.region_update(port, StarRegionOp::Deregister, mr, now)
    }

    fn region_update(
        &mut self,
        port: &mut StarPort,
        op: StarRegionOp,
        mr: &Mr,
        now: u64,
    ) -> Result<()> {
        let mut guard = lock(&self.qp);
        let q = connected(&mut guard)?;
        q.post_region_update(&mut port.server, op, &mr.region.star_region(), now)?;
        Ok(())
    }

    /// Elements (WQEs, region updates) the client has not acknowledged yet.
    pub fn updates_pending(&self) -> usize {
        lock(&self.qp).as_ref().map_or(0, |q| q.unacked())
    }

    /// Posts receive work requests: each becomes a WQEP to the client now.
    pub fn post_recv(
        &mut self,
        port: &mut StarPort,
        wrs: &[(u64, &[Sge])],
        now: u64,
    ) -> Result<()> {
        let mut guard = lock(&self.qp);
        let q = connected(&mut guard)?;
        for (wr_id, sges) in wrs {
            if sges.len() > self.cap.max_recv_sge as usize {
                return Err(VerbsError::Invalid("more SGEs than the QP takes"));
            }
            let c = q.post_recv(&mut port.server, sges, now)?;
            self.ids.recv[c as usize % self.ids.recv.len()].store(*wr_id, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// The server's regions a client took at setup, by (PD, server key). Its context holds them
/// (one per PD and key, shared by the connections to that server) and applies the server's
/// later updates to them ([`Context::star_progress`]).
pub struct StarHeld {
    pub regions: Vec<(u32, u32)>,
}

/// What a context set up for StaR once for all its connections.
#[derive(Default)]
pub(super) struct StarState {
    /// (PD, server key) → the server's GID and the region held.
    held: HashMap<(u32, u32), ([u8; 16], MemoryRegion)>,
    /// The security module's entries this context installed, and their ids.
    allowed: HashMap<GuardKey, u32>,
    /// Client: where the NIC hands over the servers' region updates, and each connection's
    /// PD and server by client QP number.
    updates: Option<StarUpdates>,
    connections: HashMap<u32, (u32, [u8; 16])>,
}

/// A security module entry as a context keeps it: kinds, the server's GID, the bus range
/// (start, end) and the CQ.
type GuardKey = (u8, [u8; 16], u64, u64, u32);

/// The security module's kinds a server region's entries allow: RDPs and GDs.
fn data_kinds() -> u8 {
    star_guard_kind(StarKind::Rdp.opcode()) | star_guard_kind(StarKind::Gd.opcode())
}

impl Context {
    /// Adds a security module entry for this function unless it is there already.
    fn star_allow(
        &mut self,
        kinds: u8,
        dst: [u8; 16],
        range: std::ops::Range<u64>,
        cqn: u32,
    ) -> Result<()> {
        let at = (kinds, dst, range.start, range.end, cqn);
        if !self.star.allowed.contains_key(&at) {
            let f = self.nic.vport();
            let id = self.nic.star_guard_add(f, kinds, dst, range, cqn)?;
            self.star.allowed.insert(at, id);
        }
        Ok(())
    }

    /// Client: ends the StaR connections of `pd`'s QPs (destroy them first or after; they can
    /// reach the servers no more). The servers' regions held in `pd` are deregistered, and the
    /// security module's entries for a server no other connection of this context reaches are
    /// removed, so nothing of the connection outlives it. Call it before deallocating the PD.
    pub fn star_release(&mut self, pd: &Pd) -> Result<()> {
        self.star.connections.retain(|_, (p, _)| *p != pd.handle);
        let mine: Vec<(u32, u32)> = self
            .star
            .held
            .keys()
            .filter(|(p, _)| *p == pd.handle)
            .copied()
            .collect();
        for k in mine {
            if let Some((_, mr)) = self.star.held.remove(&k) {
                self.nic.deregister_mr(mr)?;
            }
        }
        let wqep = star_guard_kind(StarKind::Wqep.opcode());
        let still: std::collections::HashSet<[u8; 16]> =
            self.star.connections.values().map(|(_, s)| *s).collect();
        let gone: Vec<(GuardKey, u32)> = self
            .star
            .allowed
            .iter()
            // A client's entries (a server's own, for its WQEPs, stay).
            .filter(|(k, _)| k.0 & wqep == 0 && !still.contains(&k.1))
            .map(|(k, id)| (*k, *id))
            .collect();
        let f = self.nic.vport();
        for (k, id) in gone {
            self.star.allowed.remove(&k);
            self.nic.star_guard_del(f, id)?;
        }
        Ok(())
    }
}

impl Context {
    /// Server: whether the next connection is served statelessly under `mode`. `Auto` compares
    /// the QPs that hold a connection on this NIC now (every function's, every client's) with
    /// the contexts its cache keeps on chip: a connection that would push a context out of the
    /// cache goes stateless instead (StaR §3.3; `docs/nic-interface.md` §16.7). Connections
    /// already made keep their mode.
    pub fn serve_statelessly(&mut self, mode: ConnectionMode) -> Result<bool> {
        Ok(match mode {
            ConnectionMode::Stateful => false,
            ConnectionMode::Stateless => true,
            ConnectionMode::Auto => {
                let on_chip = u64::from(self.nic.caps().qp_context_cache.get());
                let connected = self.nic.query_rdma_counters()?.qp_contexts_connected.get();
                connected >= on_chip
            }
        })
    }

    /// Makes this function a StaR server: a control CQ and a send queue for its WQEPs (both of
    /// `entries`), and the NIC told to serve.
    pub fn star_port(&mut self, entries: u32) -> Result<StarPort> {
        let log = entries.max(4).next_power_of_two().trailing_zeros() as u8;
        let control = self.nic.create_cq(&self.eq, log)?;
        self.nic.set_star_server(true, Some(&control))?;
        let sq_cq = self.nic.create_cq(&self.eq, log)?;
        let sq = self.nic.create_sq(&sq_cq, log.min(MAX_LOG_SQ), false)?;
        Ok(StarPort {
            server: StarServer::new(&mut self.nic, sq, sq_cq, control)?,
            qps: HashMap::new(),
            next_qpn: STAR_QPN_BASE,
        })
    }

    /// A server-side StaR QP completing into `send_cq` and `recv_cq`, offering `regions` to its
    /// client.
    pub fn create_star_qp(
        &mut self,
        port: &mut StarPort,
        send_cq: &Cq,
        recv_cq: &Cq,
        cap: QpCap,
        regions: &[&Mr],
    ) -> Result<StarQp> {
        let qpn = port.next_qpn;
        port.next_qpn += 1;
        let ids = WrIds::new(
            cap.max_send_wr.max(1) as usize,
            cap.max_recv_wr.max(1) as usize,
        );
        let next = Arc::new(AtomicU32::new(0));
        for cq in [send_cq, recv_cq] {
            let mut a = lock(&cq.attached);
            if !a.iter().any(|x| x.qpn == qpn) {
                a.push(Attached {
                    qpn,
                    ids: ids.clone(),
                    srq: None,
                    star_next: Some(next.clone()),
                });
            }
        }
        let qp = Arc::new(Mutex::new(None));
        port.qps.insert(qpn, qp.clone());
        Ok(StarQp {
            qp,
            qpn,
            ids,
            cap,
            offer: StarOffer {
                qpn,
                send_cqn: send_cq.cqn(),
                recv_cqn: recv_cq.cqn(),
                regions: regions.iter().map(|m| m.region.star_region()).collect(),
            },
        })
    }

    /// The server's QP sends to the client QP `client_qpn` at the address `c` names (its MAC
    /// given, not resolved). The function's security module is told to let its WQEPs out.
    pub fn connect_star_server(
        &mut self,
        qp: &StarQp,
        client_qpn: u32,
        c: &RcConnection,
    ) -> Result<()> {
        let src = self.query_gid(1, c.sgid_index as usize)?;
        if c.dmac == [0; 6] {
            return Err(VerbsError::Invalid("a StaR server needs its client's MAC"));
        }
        let addr = RoceAddress {
            src_mac: self.nic.mac(),
            dst_mac: c.dmac,
            src_gid: src,
            dst_gid: c.dgid,
            src_port: flow_source_port(qp.qpn, client_qpn),
            traffic_class: c.traffic_class,
            hop_limit: c.hop_limit,
            flow_label: c.flow_label,
        };
        let wqep = star_guard_kind(StarKind::Wqep.opcode());
        self.star_allow(wqep, c.dgid, 0..0, STAR_GUARD_ANY_CQ)?;
        *lock(&qp.qp) = Some(StarServerQp::new(qp.qpn, addr, client_qpn, DEFAULT_PKEY));
        Ok(())
    }

    /// Client: `qp` (in RESET) becomes the stateful end of the StaR connection `offer`
    /// describes and is connected to it (`c.dest_qpn` is taken from the offer). The server's
    /// regions are held in `pd` and its packets allowed through this function's security
    /// module (the manager function's right; others get NOT_PERMITTED).
    pub fn connect_star_client(
        &mut self,
        pd: &Pd,
        qp: &Qp,
        offer: &StarOffer,
        c: &RcConnection,
    ) -> Result<StarHeld> {
        let qpn = qp.qp.qpn;
        if self.star.updates.is_none() {
            let cq = self.nic.create_cq(&self.eq, 5)?;
            self.star.updates = Some(StarUpdates::new(&mut self.nic, cq)?);
        }
        let update_rqn = self.star.updates.as_ref().map(|u| u.rq.rqn);
        self.nic
            .set_star_peer(qpn, offer.send_cqn, offer.recv_cqn, update_rqn)?;
        self.star.connections.insert(qpn, (pd.handle, c.dgid));
        let mut regions = Vec::with_capacity(offer.regions.len());
        for r in &offer.regions {
            self.hold_server_region(pd.handle, c.dgid, r)?;
            regions.push((pd.handle, r.key));
        }
        let ea = star_guard_kind(StarKind::Ea.opcode());
        self.star_allow(ea, c.dgid, 0..0, STAR_GUARD_ANY_CQ)?;
        // The update RQ's memory-table updates come as WQEPs and are acknowledged by EAs.
        let cqep = star_guard_kind(StarKind::Cqep.opcode());
        for cqn in [offer.send_cqn, offer.recv_cqn] {
            self.star_allow(cqep, c.dgid, 0..0, cqn)?;
        }
        self.init_rc(qp, access::REMOTE)?;
        let conn = RcConnection {
            dest_qpn: offer.qpn,
            ..*c
        };
        self.connect_rc(qp, &conn)?;
        Ok(StarHeld { regions })
    }

    /// Holds the server `server`'s region `r` in PD `pd` (once per PD and key) and lets this
    /// function's RDPs and GDs into its pages.
    fn hold_server_region(&mut self, pd: u32, server: [u8; 16], r: &StarRegion) -> Result<()> {
        // A PD holds one region per server key: a client QP finds the server's memory by the
        // key alone, so two servers' regions with one key need two PDs.
        match self.star.held.get(&(pd, r.key)) {
            Some((s, _)) if *s == server => {}
            Some(_) => {
                return Err(VerbsError::Invalid(
                    "another StaR server's region has this key in the PD: use one PD per server",
                ))
            }
            None => {
                let h = self.nic.hold_star_region(pd, r)?;
                self.star.held.insert((pd, r.key), (server, h));
            }
        }
        for range in r.bus_ranges() {
            self.star_allow(data_kinds(), server, range, 0)?;
        }
        Ok(())
    }

    /// Client: applies the memory-table updates StaR servers sent since the last call (§16.6)
    /// and returns how many. A registered region is held and allowed from here on; a
    /// deregistered one the NIC already refuses, and its table goes here. Call it as often as
    /// the application expects servers' new regions to become usable.
    pub fn star_progress(&mut self) -> Result<usize> {
        self.nic.device().run_device();
        let mut n = 0;
        while let Some(u) = self.star.updates.as_mut().and_then(|s| s.poll()) {
            n += 1;
            let Some(&(pd, server)) = self.star.connections.get(&u.client_qpn) else {
                continue;
            };
            match u.op {
                StarRegionOp::Register => {
                    self.hold_server_region(pd, server, &u.region)?;
                }
                StarRegionOp::Deregister => {
                    // The NIC dropped the key and the module's entries when the update came.
                    for r in u.region.bus_ranges() {
                        self.star
                            .allowed
                            .remove(&(data_kinds(), server, r.start, r.end, 0));
                    }
                    if let Some((_, mr)) = self.star.held.remove(&(pd, u.region.key)) {
                        self.nic.deregister_mr(mr)?;
                    }
                }
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An offer crosses a text exchange whole; a damaged line is named.
    #[test]
    fn an_offer_reads_back_from_its_text() {
        let offer = StarOffer {
            qpn: STAR_QPN_BASE + 3,
            send_cqn: 7,
            recv_cqn: 8,
            regions: vec![StarRegion {
                key: 0x1234_5601,
                addr: 0x7f00_0000_1000,
                length: 8193,
                access: 0xf,
                log_page_size: 12,
                pages: vec![0x8000_0000, 0x8000_3000, 0x8000_1000],
            }],
        };
        let text = offer.to_text();
        assert_eq!(
            text,
            "STAR 800003 7 8\nREGION 12345601 7f0000001000 2001 f 12 80000000,80003000,80001000\nOFFERED\n"
        );
        assert_eq!(StarOffer::from_text(&text), Ok(offer));
        assert_eq!(
            StarOffer::from_text("STAR 1 2 3\nREGION 1 2 3\nOFFERED\n"),
            Err("REGION 1 2 3".to_string())
        );
        assert_eq!(StarOffer::from_text("HELLO"), Err("HELLO".to_string()));
    }
}
