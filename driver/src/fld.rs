//! Driver of the FLD function and the FLD-E control plane (paper §5.3): it creates the NIC
//! queues FLD drives — completion queues whose rings are FLD's CQ windows, send queues whose rings
//! are FLD's Tx-ring window, a striding receive queue whose WQEs stay in host memory and point
//! into FLD's Rx-buffer window — and hands their numbers and the NIC's doorbell address to FLD.

use std::sync::Arc;

use fld_abi::fld::{self as fabi, FldGeometry};
use fld_abi::nic as nabi;
use fld_abi::pci::{CMD_BUS_MASTER, CMD_MEMORY, OFF_COMMAND, PCI_VENDOR_ID};

use crate::nic::{EventQueue, NicDriver, RecvQueue, RqLayout};
use crate::{DriverError, PciDevice};

/// Driver state of the FLD function.
pub struct FldDriver {
    dev: Arc<dyn PciDevice>,
    geo: FldGeometry,
}

impl FldDriver {
    /// Checks identity, enables the function, resets it and reads its geometry.
    pub fn probe(dev: Arc<dyn PciDevice>) -> Result<Self, DriverError> {
        let vendor = dev.config_read16(0);
        let device = dev.config_read16(2);
        if vendor != PCI_VENDOR_ID || device != fabi::FLD_DEVICE_ID {
            return Err(DriverError::WrongDevice { vendor, device });
        }
        let cmd = dev.config_read16(OFF_COMMAND as u64) | CMD_MEMORY | CMD_BUS_MASTER;
        dev.config_write16(OFF_COMMAND as u64, cmd);
        dev.write32(fabi::BAR_CONTROL, fabi::reg::RESET, fabi::RESET_MAGIC);
        let status = dev.read32(fabi::BAR_CONTROL, fabi::reg::STATUS);
        if status & fabi::STATUS_READY == 0 {
            return Err(DriverError::NotReady(status));
        }
        let geo = FldGeometry::from_registers(|o| dev.read32(fabi::BAR_CONTROL, o));
        Ok(FldDriver { dev, geo })
    }

    pub fn geometry(&self) -> &FldGeometry {
        &self.geo
    }
    pub fn device(&self) -> &Arc<dyn PciDevice> {
        &self.dev
    }

    fn write(&self, offset: u64, v: u32) {
        self.dev.write32(fabi::BAR_CONTROL, offset, v)
    }

    /// Binds Tx queue `q` to NIC queue pair `qpn` as an FLD-R queue (§5.3), or, with `None`,
    /// unbinds it. FLD keeps a queue with packets in flight as it is; the result says whether
    /// the binding took.
    pub fn bind_rdma_queue(&self, q: u32, qpn: Option<u32>) -> bool {
        let v = qpn.map_or(0, |n| n | fabi::TXQ_ENABLE | fabi::TXQ_RDMA);
        let at = fabi::reg::TXQ_BASE + 16 * q as u64;
        self.write(at, v);
        self.dev.read32(fabi::BAR_CONTROL, at) & !fabi::TXQ_ERROR == v
    }

    /// Tells FLD that Tx queue `q`'s queue pair failed (the NIC's event): FLD refuses the
    /// accelerator's sends on it until it is bound again.
    pub fn mark_failed(&self, q: u32) {
        self.write(fabi::reg::TXQ_BASE + 16 * q as u64, fabi::TXQ_ERROR);
    }

    /// The control word of Tx queue `q`: its NIC number and the `TXQ_*` flags.
    pub fn queue_word(&self, q: u32) -> u32 {
        self.dev
            .read32(fabi::BAR_CONTROL, fabi::reg::TXQ_BASE + 16 * q as u64)
    }

    /// The address of FLD's Tx-ring window for queue `q` on the bus.
    pub fn tx_ring_address(&self, q: u32) -> u64 {
        self.dev.bar_bus_address(fabi::BAR_NIC)
            + self.geo.tx_ring_base()
            + q as u64 * self.geo.tx_ring_bytes()
    }

    /// Credits of Tx queue `q` as FLD reports them in BAR0: (packets, bytes, in flight).
    pub fn credits(&self, q: u32) -> (u32, u32, u32) {
        let base = fabi::reg::TXQ_BASE + 16 * q as u64;
        (
            self.dev.read32(fabi::BAR_CONTROL, base + 4),
            self.dev.read32(fabi::BAR_CONTROL, base + 8),
            self.dev.read32(fabi::BAR_CONTROL, base + 12),
        )
    }

    /// A 64-bit statistics counter.
    pub fn stat(&self, s: fabi::Stat) -> u64 {
        self.read64(fabi::reg::STATS_BASE + 8 * s as u64)
    }

    /// Every statistic by name (what `--stats` prints).
    pub fn named_stats(&self) -> Vec<(&'static str, u64)> {
        fabi::Stat::ALL
            .iter()
            .map(|&(s, name)| (name, self.stat(s)))
            .collect()
    }

    /// Bytes of on-chip memory per structure, as FLD reports them.
    pub fn memory_report(&self) -> [u64; fabi::MEMORY_ITEMS] {
        let mut m = [0; fabi::MEMORY_ITEMS];
        for (i, v) in m.iter_mut().enumerate() {
            *v = self.read64(fabi::reg::MEMORY_BASE + 8 * i as u64);
        }
        m
    }

    fn read64(&self, offset: u64) -> u64 {
        let lo = self.dev.read32(fabi::BAR_CONTROL, offset) as u64;
        let hi = self.dev.read32(fabi::BAR_CONTROL, offset + 4) as u64;
        (hi << 32) | lo
    }
}

/// Receive layout of FLD's shared striding RQ.
#[derive(Clone, Copy, Debug)]
pub struct FldRxLayout {
    pub log_stride_size: u8,
    pub log_strides: u8,
}

impl Default for FldRxLayout {
    /// 256-byte strides, 64 per WQE: 16 KiB buffers, one maximum packet each.
    fn default() -> Self {
        FldRxLayout {
            log_stride_size: 8,
            log_strides: 6,
        }
    }
}

/// The NIC resources bound to FLD.
pub struct FldBinding {
    pub tx_cqn: u32,
    pub rx_cqn: u32,
    /// NIC SQ number of each FLD Tx queue.
    pub sqns: Vec<u32>,
    pub rq: RecvQueue,
    pub rx_wqes: u32,
}

impl FldBinding {
    /// Packets of at most `packet_bytes` that may be in flight to FLD's shared receive queue
    /// (FLD sized as `geo`) without overrunning it. Two bounds: the
    /// buffer (every striding WQE but the open one, times the packets a WQE holds) and the Rx
    /// CQ, which takes a CQE per packet and a filler per WQE until FLD consumes them. The NIC
    /// answers a full CQ as it does a missing WQE, with an out-of-buffer drop; when FLD steps
    /// between every two NIC passes the CQ never holds more than a pass's packets, but FLD and
    /// the NIC run at their own paces (two chips, or two threads).
    pub fn rx_packets_in_flight(&self, geo: &FldGeometry, packet_bytes: usize) -> usize {
        // The layout the RQ was created with (`bind` makes it striding).
        let per_wqe = match self.rq.layout {
            RqLayout::Striding {
                log_stride_size,
                log_strides,
            } => {
                let strides_per_packet = packet_bytes.div_ceil(1 << log_stride_size).max(1);
                ((1usize << log_strides) / strides_per_packet).max(1)
            }
            RqLayout::Regular => 1,
        };
        let wqes = self.rx_wqes as usize;
        let buffer_bound = wqes.saturating_sub(1).max(1) * per_wqe;
        let cq_bound = (1usize << geo.log_rx_cq).saturating_sub(wqes).max(1);
        buffer_bound.min(cq_bound)
    }
}

/// Creates the NIC queues for FLD on `nic`'s function and programs FLD to drive them.
pub fn bind(
    nic: &mut NicDriver,
    eq: &EventQueue,
    fld: &mut FldDriver,
    tx_queues: u16,
    rx: FldRxLayout,
) -> Result<FldBinding, DriverError> {
    let g = fld.geo;
    if tx_queues as u32 > g.tx_queues {
        return Err(DriverError::InvalidArgument("more Tx queues than FLD has"));
    }
    let bar2 = fld.dev.bar_bus_address(fabi::BAR_NIC);
    if bar2 == 0 {
        return Err(DriverError::Transport("FLD BAR2 is not assigned".into()));
    }
    log::debug!("FLD's NIC-facing windows (BAR2) at bus address {bar2:#x}");
    let tx_cqn = nic.create_cq_at(eq, g.log_tx_cq, bar2 + g.tx_cq_base())?;
    let rx_cqn = nic.create_cq_at(eq, g.log_rx_cq, bar2 + g.rx_cq_base())?;
    let mut sqns = Vec::new();
    for q in 0..tx_queues as u64 {
        sqns.push(nic.create_sq_at(
            tx_cqn,
            g.log_tx_ring,
            bar2 + g.tx_ring_base() + q * g.tx_ring_bytes(),
        )?);
    }
    // As many striding WQEs as the Rx buffer holds (a power of two, at least two).
    let wqe_bytes = 1u64 << (rx.log_stride_size + rx.log_strides);
    let window = g.tx_cq_base() - g.rx_buffer_base();
    let want = (g.rx_buffer as u64)
        .div_ceil(wqe_bytes)
        .next_power_of_two()
        .max(2);
    if want * wqe_bytes > window {
        return Err(DriverError::InvalidArgument(
            "Rx layout does not fit FLD's Rx-buffer window",
        ));
    }
    let log_wqes = want.trailing_zeros() as u8;
    let mut rq = nic.create_rq_on(
        rx_cqn,
        log_wqes,
        RqLayout::Striding {
            log_stride_size: rx.log_stride_size,
            log_strides: rx.log_strides,
        },
    )?;
    for k in 0..want {
        rq.post(bar2 + g.rx_buffer_base() + k * wqe_bytes, wqe_bytes as u32);
    }
    rq.ring_doorbell();
    let nic_db = nic.device().bar_bus_address(nabi::BAR_DOORBELL);
    fld.write(fabi::reg::NIC_DOORBELL_LO, nic_db as u32);
    fld.write(fabi::reg::NIC_DOORBELL_HI, (nic_db >> 32) as u32);
    fld.write(fabi::reg::TX_CQN, tx_cqn);
    fld.write(fabi::reg::RX_CQN, rx_cqn);
    fld.write(fabi::reg::RX_RQN, rq.rqn);
    fld.write(fabi::reg::RX_LOG_STRIDE, rx.log_stride_size as u32);
    fld.write(fabi::reg::RX_LOG_STRIDES, rx.log_strides as u32);
    fld.write(fabi::reg::RX_LOG_WQES, log_wqes as u32);
    fld.write(fabi::reg::RX_ENABLE, 1);
    for (q, sqn) in sqns.iter().enumerate() {
        fld.write(fabi::reg::TXQ_BASE + 16 * q as u64, sqn | fabi::TXQ_ENABLE);
    }
    Ok(FldBinding {
        tx_cqn,
        rx_cqn,
        sqns,
        rq,
        rx_wqes: want as u32,
    })
}
