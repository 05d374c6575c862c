//! A verbs API in the shape of rdma-core's libibverbs, over the soft NIC's RoCEv2 transport:
//! open a device, query its port and GID table (RoCEv2 GIDs from the port's IP addresses),
//! protection domains, memory regions, completion queues with completion channels, RC queue
//! pairs (create, modify through the IBA state machine, query), shared receive queues, and the
//! data path — `post_send`, `post_recv`, `post_srq_recv`, `poll_cq`, `req_notify_cq`.
//!
//! Control calls go through [`Context`] (`&mut`: one command mailbox per function); the data
//! path works on the objects themselves and never takes a lock. It runs over every transport
//! the driver has (in-process, vfio-user, vfio-pci in a guest).
//!
//! The device's IPv4 addresses are answered for ARP by [`neighbor`], which also resolves a
//! peer's MAC address — what a host stack does for a RoCE NIC.
//!
//! Left out: UD and XRC QPs, memory windows, the extended verbs (ibv_wr_*, CQ ex), address
//! handles beyond the QP's address vector, multicast.

mod completion;
pub mod decision;
pub mod exchange;
mod memory;
pub mod neighbor;
mod queue_pair;
pub mod star;
pub mod unload;
pub mod urdma;

pub use completion::*;
pub use memory::*;
pub use queue_pair::*;

use std::sync::{Arc, Mutex};

use fld_abi::nic::*;
use fld_abi::wire::roce::{gid_is_ipv4, ipv4_gid};
use fld_driver::nic::{EventQueue, NicDriver};
use fld_driver::rdma::QpCaps;
use fld_driver::{DriverError, PciDevice};

pub use fld_abi::nic::{access, qp_attr, QpAttr, QpState, Sge};

/// A 16-byte GID. RoCEv2 GIDs are IPv6 addresses, IPv4 ones mapped (`::ffff:a.b.c.d`).
pub type Gid = [u8; 16];

/// The MSI-X vector completion events arrive on.
const EVENT_VECTOR: u16 = 0;

/// ibv_port_attr, as much of it as RoCE uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortAttr {
    /// Always active: the uplink is up.
    pub active: bool,
    /// Path-MTU codes (1 = 256 … 5 = 4096).
    pub max_mtu: u8,
    pub active_mtu: u8,
    pub gid_tbl_len: u16,
    pub pkey_tbl_len: u16,
    /// RoCE has no LIDs.
    pub lid: u16,
    pub link_layer_ethernet: bool,
}

/// Errors of the verbs, in errno's spirit.
#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// The send or receive queue is full (ENOMEM of ibv_post_*).
    #[error("work queue full")]
    QueueFull,
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("timed out")]
    Timeout,
}

type Result<T> = std::result::Result<T, VerbsError>;

/// An open device (ibv_context): one NIC function.
pub struct Context {
    nic: NicDriver,
    eq: EventQueue,
    gids: [Option<Gid>; ROCE_ADDRESS_ENTRIES as usize],
    neighbors: neighbor::Neighbors,
    /// StaR: the servers' regions this function holds, by (PD, server key), and the security
    /// module entries it installed — each once, however many connections need it.
    star: star::StarState,
    /// uRDMA: every region registered here, for the unload path's checks (`unload`).
    umtt: unload::UMtt,
}

impl Context {
    /// Opens NIC function `dev` (ibv_open_device): probes it and creates the event queue its
    /// completion channels use.
    pub fn open(dev: Arc<dyn PciDevice>) -> Result<Self> {
        let mut nic = NicDriver::probe(dev.clone())?;
        dev.enable_msix(1)?;
        let eq = nic.create_eq(10, EVENT_VECTOR)?;
        Ok(Context {
            nic,
            eq,
            gids: [None; ROCE_ADDRESS_ENTRIES as usize],
            neighbors: neighbor::Neighbors::default(),
            star: Default::default(),
            umtt: Default::default(),
        })
    }

    pub fn driver(&mut self) -> &mut NicDriver {
        &mut self.nic
    }

    pub fn mac(&self) -> [u8; 6] {
        self.nic.mac()
    }

    /// Whether the card reorders packets of out-of-order QPs ([`QpInitAttr::out_of_order`]):
    /// QUERY_CAPS names a reorder unit.
    pub fn reorders(&self) -> bool {
        self.nic.caps().receiver != fld_abi::nic::receiver::GO_BACK_N
    }

    /// ibv_query_port (port 1, the only one).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        if port != 1 {
            return Err(VerbsError::Invalid("the device has port 1"));
        }
        Ok(PortAttr {
            active: true,
            max_mtu: 5,
            active_mtu: 5,
            gid_tbl_len: ROCE_ADDRESS_ENTRIES,
            pkey_tbl_len: PKEY_TABLE_ENTRIES,
            lid: 0,
            link_layer_ethernet: true,
        })
    }

    /// ibv_query_gid.
    pub fn query_gid(&self, port: u8, index: usize) -> Result<Gid> {
        self.query_port(port)?;
        self.gids
            .get(index)
            .copied()
            .flatten()
            .ok_or(VerbsError::Invalid("no GID at this index"))
    }

    /// The port's counters by name (`--stats`, `--json`): the RoCE receive path's totals and
    /// drops by reason — ICRC, unknown QP, P_Key, malformed, QP not ready, wrong source — under
    /// rxe's and mlx5's hw_counter names, then the Ethernet port's (its steering and buffer
    /// drops).
    pub fn port_counters(&mut self) -> Result<Vec<(&'static str, u64)>> {
        let rdma = self.nic.query_rdma_counters()?.named();
        let eth = self.nic.query_vport(self.nic.vport())?.named();
        Ok(rdma.into_iter().chain(eth).collect())
    }

    /// A QP's transport counters by name: retransmissions, timeouts, NAKs sent and received,
    /// duplicates, packets dropped without an answer (PSN out of window, …).
    pub fn qp_counters(&mut self, qp: &Qp) -> Result<Vec<(&'static str, u64)>> {
        Ok(self.query_qp_counters(qp)?.named().to_vec())
    }

    /// ibv_query_pkey: entry `index` of the port's P_Key table.
    pub fn query_pkey(&mut self, port: u8, index: u16) -> Result<u16> {
        self.query_port(port)?;
        Ok(self.nic.query_pkey(index)?)
    }

    /// Writes entry `index` of the port's P_Key table — on InfiniBand the subnet manager's
    /// job; on RoCE the port's owner's (IBA §10.9.2). A QP whose P_Key index names the entry
    /// sends with the new P_Key and takes only packets that match it (IBA §10.9.3).
    pub fn set_pkey(&mut self, index: u16, pkey: u16) -> Result<()> {
        Ok(self.nic.set_pkey(index, pkey)?)
    }

    /// Gives the port an IP address: its RoCEv2 GID takes the first free index (returned),
    /// and ARP requests for an IPv4 address are answered from now on.
    pub fn add_ip(&mut self, ip: std::net::IpAddr) -> Result<usize> {
        let gid = match ip {
            std::net::IpAddr::V4(v4) => ipv4_gid(v4.octets()),
            std::net::IpAddr::V6(v6) => v6.octets(),
        };
        let index = self
            .gids
            .iter()
            .position(Option::is_none)
            .ok_or(VerbsError::Invalid("the GID table is full"))?;
        let mac = self.nic.mac();
        self.nic.set_roce_address(index as u16, Some((gid, mac)))?;
        self.gids[index] = Some(gid);
        if let std::net::IpAddr::V4(v4) = ip {
            self.neighbors.add_own(v4.octets());
        }
        Ok(index)
    }

    pub fn alloc_pd(&mut self) -> Result<Pd> {
        Ok(Pd {
            handle: self.nic.create_pd()?,
        })
    }

    pub fn dealloc_pd(&mut self, pd: Pd) -> Result<()> {
        Ok(self.nic.destroy_pd(pd.handle)?)
    }

    /// Allocates `len` bytes of DMA-able memory and registers them with `access`.
    pub fn reg_mr(&mut self, pd: &Pd, len: usize, access: u32) -> Result<Mr> {
        let buf = self.nic.device().dma_alloc(len.max(1))?;
        let region = self.nic.register_mr(pd.handle, &buf, access)?;
        let mr = Mr { region, buf };
        self.umtt.register(pd.handle, &mr);
        Ok(mr)
    }

    /// Registers `len` bytes of virtual address space whose 4 KiB pages repeat a buffer of
    /// `backing` bytes (whole pages): the RNIC holds a translation per page, the host only
    /// `backing` bytes. What a working set of many regions needs (uRDMA §4: up to 2^20 regions
    /// of 4 KiB), where only the translations matter.
    pub fn reg_mr_repeating(
        &mut self,
        pd: &Pd,
        backing: usize,
        len: u64,
        access: u32,
    ) -> Result<Mr> {
        let buf = self.nic.device().dma_alloc(backing.max(1))?;
        let addr = buf.as_ptr() as u64;
        let region = self
            .nic
            .register_mr_repeating(pd.handle, &buf, addr, len, access)?;
        let mr = Mr { region, buf };
        self.umtt.register(pd.handle, &mr);
        Ok(mr)
    }

    pub fn dereg_mr(&mut self, mr: Mr) -> Result<()> {
        self.umtt.deregister(mr.rkey());
        Ok(self.nic.deregister_mr(mr.region)?)
    }

    /// uRDMA's map of this context's registrations (§3.1), which the unload path checks a
    /// WRITE against as the RNIC would.
    pub fn umtt(&self) -> &unload::UMtt {
        &self.umtt
    }

    pub fn create_comp_channel(&mut self) -> CompChannel {
        CompChannel { _private: () }
    }

    /// A CQ of at least `cqe` entries, raising events on `channel` when armed.
    pub fn create_cq(&mut self, cqe: u32, channel: Option<&CompChannel>) -> Result<Cq> {
        let log = cqe.max(2).next_power_of_two().trailing_zeros() as u8;
        let cq = self.nic.create_cq(&self.eq, log)?;
        Ok(Cq {
            cq,
            attached: Mutex::new(Vec::new()),
            dev: self.nic.device().clone(),
            channel: channel.is_some(),
            unreported: 0,
        })
    }

    pub fn destroy_cq(&mut self, cq: Cq) -> Result<()> {
        Ok(self.nic.destroy_completion_queue(cq.cq)?)
    }

    /// Waits for the next event on `channel` (ibv_get_cq_event): the number of the CQ it is
    /// for, within `timeout`.
    pub fn get_cq_event(
        &mut self,
        _channel: &CompChannel,
        timeout: std::time::Duration,
    ) -> Result<u32> {
        let start = std::time::Instant::now();
        loop {
            while let Some(e) = self.eq.poll() {
                if e.event_type == EQE_COMPLETION {
                    self.eq.arm();
                    return Ok(e.data.get());
                }
            }
            self.eq.arm();
            let dev = self.nic.device();
            dev.run_device();
            if dev.take_interrupts(EVENT_VECTOR) == 0 {
                if start.elapsed() > timeout {
                    return Err(VerbsError::Timeout);
                }
                std::thread::yield_now();
            }
        }
    }

    pub fn create_srq(&mut self, pd: &Pd, max_wr: u32, max_sge: u32) -> Result<Srq> {
        let log = max_wr.max(2).next_power_of_two().trailing_zeros() as u8;
        let srq = self.nic.create_srq(pd.handle, log, max_sge)?;
        let ids = WrIds::new(1, srq.size() as usize);
        Ok(Srq { srq, ids, max_sge })
    }

    pub fn destroy_srq(&mut self, srq: Srq) -> Result<()> {
        Ok(self.nic.destroy_srq(srq.srq)?)
    }

    /// An RC QP in RESET (ibv_create_qp).
    pub fn create_qp(&mut self, pd: &Pd, init: &QpInitAttr<'_>) -> Result<Qp> {
        let cap = init.cap;
        if cap.max_send_sge as usize > MAX_SEND_SGE
            || cap.max_inline_data as usize > MAX_INLINE_DATA
        {
            return Err(VerbsError::Invalid("beyond the device's send limits"));
        }
        // Each send WR takes up to one block per 4 segments: control, remote, atomic and the
        // gather entries (or the inline data).
        let per_wr = wqebbs(
            3 + (cap.max_send_sge as usize).max((cap.max_inline_data as usize + 4).div_ceil(16)),
        );
        let blocks = (cap.max_send_wr.max(1) * per_wr).next_power_of_two();
        let caps = QpCaps {
            log_sq_size: blocks.trailing_zeros() as u8,
            log_rq_size: cap.max_recv_wr.max(1).next_power_of_two().trailing_zeros() as u8,
            max_recv_sge: cap.max_recv_sge.max(1),
            signal_all: init.sq_sig_all,
            out_of_order: init.out_of_order,
        };
        let qp = self.nic.create_qp(
            pd.handle,
            &init.send_cq.cq,
            &init.recv_cq.cq,
            init.srq.map(|s| &s.srq),
            caps,
        )?;
        let ids = WrIds::new(blocks as usize, qp.recv_ring_size() as usize);
        for cq in [init.send_cq, init.recv_cq] {
            let mut a = cq.attached.lock().unwrap_or_else(|e| e.into_inner());
            if !a.iter().any(|x| x.qpn == qp.qpn) {
                a.push(Attached {
                    qpn: qp.qpn,
                    ids: ids.clone(),
                    srq: init.srq.map(|s| s.ids.clone()),
                    star_next: None,
                });
            }
        }
        Ok(Qp {
            qp,
            ids,
            cap,
            sq_sig_all: init.sq_sig_all,
            has_srq: init.srq.is_some(),
        })
    }

    /// ibv_modify_qp: `attr` fields named by `mask` ([`qp_attr`] bits). The address vector's
    /// destination MAC is found here when `mask` has AV and `attr.dmac` is zero: the peer's
    /// GID is resolved by ARP (IPv4) through this function's port.
    pub fn modify_qp(&mut self, qp: &Qp, attr: &QpAttr, mask: u32) -> Result<()> {
        self.modify_qpn(qp.qp.qpn, attr, mask)
    }

    /// [`Context::modify_qp`] for a QP of this function that software does not post to (an
    /// FLD-R queue pair: its rings are the accelerator's).
    pub fn modify_qpn(&mut self, qpn: u32, attr: &QpAttr, mask: u32) -> Result<()> {
        let mut a = *attr;
        if mask & qp_attr::AV != 0 && a.dmac == [0; 6] {
            if !gid_is_ipv4(&a.dgid) {
                return Err(VerbsError::Invalid("IPv6 neighbours need a MAC address"));
            }
            let ip = [a.dgid[12], a.dgid[13], a.dgid[14], a.dgid[15]];
            a.dmac = self.resolve(ip, std::time::Duration::from_secs(3))?;
        }
        Ok(self.nic.modify_qp(qpn, mask, &a)?)
    }

    /// RESET → INIT: the QP on port 1, P_Key index 0, granting `remote_access` ([`access`]
    /// REMOTE_* bits) to its peer — the attributes INIT requires (IBA 11.2.5, Table 91).
    pub fn init_rc(&mut self, qp: &Qp, remote_access: u32) -> Result<()> {
        self.init_rc_qpn(qp.qp.qpn, remote_access)
    }

    /// [`Context::init_rc`] in the partition of P_Key table entry `pkey_index`.
    pub fn init_rc_in_partition(
        &mut self,
        qp: &Qp,
        remote_access: u32,
        pkey_index: u16,
    ) -> Result<()> {
        self.init_qpn(qp.qp.qpn, remote_access, pkey_index)
    }

    /// [`Context::init_rc`] by QP number.
    pub fn init_rc_qpn(&mut self, qpn: u32, remote_access: u32) -> Result<()> {
        self.init_qpn(qpn, remote_access, 0)
    }

    fn init_qpn(&mut self, qpn: u32, remote_access: u32, pkey_index: u16) -> Result<()> {
        let mut a = QpAttr {
            qp_state: QpState::Init as u8,
            port: 1,
            ..Default::default()
        };
        a.pkey_index.set(pkey_index);
        a.access_flags.set(remote_access);
        self.modify_qpn(
            qpn,
            &a,
            qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS,
        )
    }

    /// INIT → RTR → RTS towards the peer `c` describes, with the attributes each transition
    /// requires (IBA Table 91): the path and receive side at RTR, the send side at RTS. A zero
    /// `c.dmac` is resolved by ARP ([`Context::modify_qp`]).
    pub fn connect_rc(&mut self, qp: &Qp, c: &RcConnection) -> Result<()> {
        self.connect_rc_qpn(qp.qp.qpn, c)
    }

    /// [`Context::connect_rc`] by QP number.
    pub fn connect_rc_qpn(&mut self, qpn: u32, c: &RcConnection) -> Result<()> {
        let mut a = QpAttr {
            qp_state: QpState::Rtr as u8,
            path_mtu: c.path_mtu,
            max_dest_rd_atomic: c.max_dest_rd_atomic,
            min_rnr_timer: c.min_rnr_timer,
            hop_limit: c.hop_limit,
            sgid_index: c.sgid_index,
            traffic_class: c.traffic_class,
            dgid: c.dgid,
            dmac: c.dmac,
            ..Default::default()
        };
        a.flow_label.set(c.flow_label);
        a.dest_qpn.set(c.dest_qpn);
        a.rq_psn.set(c.rq_psn);
        self.modify_qpn(
            qpn,
            &a,
            qp_attr::STATE
                | qp_attr::AV
                | qp_attr::PATH_MTU
                | qp_attr::DEST_QPN
                | qp_attr::RQ_PSN
                | qp_attr::MAX_DEST_RD_ATOMIC
                | qp_attr::MIN_RNR_TIMER,
        )?;
        a.qp_state = QpState::Rts as u8;
        a.timeout = c.timeout;
        a.retry_cnt = c.retry_cnt;
        a.rnr_retry = c.rnr_retry;
        a.max_rd_atomic = c.max_rd_atomic;
        a.sq_psn.set(c.sq_psn);
        self.modify_qpn(
            qpn,
            &a,
            qp_attr::STATE
                | qp_attr::TIMEOUT
                | qp_attr::RETRY_CNT
                | qp_attr::RNR_RETRY
                | qp_attr::SQ_PSN
                | qp_attr::MAX_QP_RD_ATOMIC,
        )
    }

    /// ibv_create_ah: `attr` with the MAC address of its GID's IPv4 address found by ARP (or
    /// taken from the neighbour entries); an IPv6 GID needs a static neighbour the caller put
    /// in the resulting `dmac` itself.
    pub fn create_ah(&mut self, attr: &AhAttr) -> Result<Ah> {
        if self.query_gid(1, usize::from(attr.sgid_index)).is_err() {
            return Err(VerbsError::Invalid("no such source GID"));
        }
        let dmac = if gid_is_ipv4(&attr.dgid) {
            let g = &attr.dgid;
            self.resolve(
                [g[12], g[13], g[14], g[15]],
                std::time::Duration::from_secs(3),
            )?
        } else {
            return Err(VerbsError::Invalid("IPv6 neighbours need a MAC address"));
        };
        Ok(Ah {
            dgid: attr.dgid,
            sgid_index: attr.sgid_index,
            hop_limit: attr.hop_limit,
            traffic_class: attr.traffic_class,
            flow_label: attr.flow_label,
            dmac,
        })
    }

    /// ibv_query_qp: the attributes and the state.
    pub fn query_qp(&mut self, qp: &Qp) -> Result<QpAttr> {
        Ok(self.nic.query_qp(qp.qp.qpn)?.attr)
    }

    /// The QP's transport counters (packets, retransmissions, NAKs, duplicates...), as the
    /// RDMA statistics a provider exports.
    pub fn query_qp_counters(&mut self, qp: &Qp) -> Result<QpCounters> {
        Ok(self.nic.query_qp(qp.qp.qpn)?.counters)
    }

    pub fn destroy_qp(&mut self, qp: Qp) -> Result<()> {
        Ok(self.nic.destroy_qp(qp.qp)?)
    }

    /// The MAC address of `ip`, by ARP through this port (cached).
    pub fn resolve(&mut self, ip: [u8; 4], timeout: std::time::Duration) -> Result<[u8; 6]> {
        self.neighbors
            .resolve(&mut self.nic, ip, timeout)
            .ok_or(VerbsError::Timeout)
    }

    /// Answers ARP requests for this port's addresses that arrived since the last call (a host
    /// stack does this all the time; a verbs application calls it while it waits).
    pub fn serve_neighbors(&mut self) -> Result<()> {
        Ok(self.neighbors.serve(&mut self.nic)?)
    }

    /// A neighbour's MAC address the application knows (a static neighbour entry).
    pub fn add_neighbor(&mut self, ip: [u8; 4], mac: [u8; 6]) {
        self.neighbors.learn(ip, mac);
    }
}
