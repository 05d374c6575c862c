//! The in-process transport: the card lives in this process, host memory is an anonymous mapping
//! registered with the fabric, BAR accesses are fabric MMIO cycles (so they are counted like real
//! TLPs), and interrupts are counters. [`PciDevice::run_device`] steps the card, which makes tests
//! deterministic: nothing moves unless the driver or application lets it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fld_abi::pci::{
    msix_bir_offset, CMD_BUS_MASTER, CMD_MEMORY, MSIX_CTRL_ENABLE, MSIX_CTRL_TABLE_SIZE,
    MSIX_ENTRY_ADDR_HI, MSIX_ENTRY_ADDR_LO, MSIX_ENTRY_DATA, MSIX_ENTRY_SIZE,
    MSIX_ENTRY_VECTOR_CTRL, OFF_COMMAND, OFF_MSIX_CAP, OFF_MSIX_CONTROL,
};
use fld_device::card::Card;
use fld_device::fabric::HostRegion;
use fld_device::pcie::{FunctionId, InterruptSink, MsiMessage};
use vm_memory::{GuestAddress, GuestMemoryRegion, GuestRegionMmap, MemoryRegionAddress};

use crate::dma::DmaArea;
use crate::{DmaBuffer, DriverError, PciDevice};

/// Bus address of host memory as the functions see it.
pub const HOST_IOVA_BASE: u64 = 0x1_0000_0000;
/// Where enumeration places BARs: above host memory, as a 64-bit prefetchable window.
pub const MMIO_BASE: u64 = 0x40_0000_0000;
/// MSI doorbell address range of an x86 host (the value is not interpreted here).
const MSI_ADDRESS: u64 = 0xfee0_0000;

#[derive(Default)]
struct InterruptCounters {
    counts: Mutex<HashMap<(FunctionId, u16), u64>>,
}

impl InterruptSink for InterruptCounters {
    fn deliver(&self, function: FunctionId, msg: MsiMessage) {
        *self
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((function, msg.vector))
            .or_default() += 1;
    }
}

/// The host side of an in-process card: memory, enumeration, interrupts.
pub struct InProcessHost {
    card: Arc<Card>,
    /// Host memory, mapped for DMA by every function.
    memory: Arc<DmaArea>,
    irqs: Arc<InterruptCounters>,
    /// Set when a runner outside the driver decides when the card runs (the virtual-time
    /// runner): waiting applications then leave the card alone.
    stepped_by_runner: std::sync::atomic::AtomicBool,
    /// Each function's BAR addresses, by function and BAR index (a plain table: every register
    /// access looks its BAR up).
    bars: Vec<[Option<u64>; 6]>,
}

impl InProcessHost {
    /// Creates `memory_bytes` of host memory, maps it for DMA by every function, and enumerates
    /// the card: BARs assigned, memory decode on (bus mastering is the driver's to enable).
    pub fn new(card: Arc<Card>, memory_bytes: usize) -> Result<Arc<Self>, DriverError> {
        let region = GuestRegionMmap::from_range(GuestAddress(0), memory_bytes, None)
            .map_err(|e| DriverError::Transport(format!("host memory: {e}")))?;
        let region = Arc::new(region);
        let fabric = &card.fabric;
        let mut bars = vec![[None; 6]; fabric.function_count()];
        let mut next_bar = MMIO_BASE;
        for fid in 0..fabric.function_count() as FunctionId {
            fabric
                .map_host(
                    fid,
                    HostRegion {
                        iova: HOST_IOVA_BASE,
                        len: memory_bytes as u64,
                        memory: region.clone(),
                        offset: 0,
                    },
                )
                .map_err(|e| DriverError::Transport(e.to_string()))?;
            let f = fabric
                .function(fid)
                .ok_or_else(|| DriverError::Transport("function vanished".into()))?;
            let specs = f.pci().config().bars().to_vec();
            for spec in specs {
                next_bar = next_bar.next_multiple_of(spec.size);
                fabric.assign_bar(fid, spec.index, next_bar);
                if let Some(slot) = bars[fid as usize].get_mut(usize::from(spec.index)) {
                    *slot = Some(next_bar);
                }
                next_bar += spec.size;
            }
            fabric.config_write(fid, OFF_COMMAND as u64, &CMD_MEMORY.to_le_bytes());
        }
        let ptr = region
            .get_host_address(MemoryRegionAddress(0))
            .map_err(|e| DriverError::Transport(e.to_string()))?;
        // SAFETY: the region is mapped for as long as the area holds it, and every function
        // reaches it at HOST_IOVA_BASE.
        let memory = unsafe { DmaArea::new(HOST_IOVA_BASE, ptr, memory_bytes, region) };
        let irqs = Arc::new(InterruptCounters::default());
        fabric.set_interrupt_sink(irqs.clone());
        // The host runs in real time, and so does its card, until a runner pins its time.
        card.set_clock(Arc::new(fld_device::clock::WallClock::default()));
        Ok(Arc::new(InProcessHost {
            card,
            memory,
            irqs,
            stepped_by_runner: Default::default(),
            bars,
        }))
    }

    /// Hands the stepping of the card to a runner: [`PciDevice::run_device`] does nothing from
    /// now on, so the card advances only when the runner polls it.
    pub fn step_by_runner(&self) {
        self.stepped_by_runner
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn card(&self) -> &Arc<Card> {
        &self.card
    }

    /// Runs the card's engine on a thread of its own, as the vfio-user server does, until the
    /// returned guard is dropped: applications then meet the card only through its rings and
    /// doorbells, as they would a real one, and [`PciDevice::run_device`] does nothing. The
    /// thread has a core to itself: it spins while the card is idle.
    pub fn spawn_engine_thread(self: &Arc<Self>) -> std::io::Result<EngineThread> {
        self.spawn_stepper(true, None)
    }

    /// Keeps the card going on a thread of its own, napping `nap` whenever a pass finds nothing
    /// to do, while applications go on stepping it too: a NIC acknowledges and retransmits
    /// whether or not its application is calling it.
    pub fn spawn_background_stepper(
        self: &Arc<Self>,
        nap: std::time::Duration,
    ) -> std::io::Result<EngineThread> {
        self.spawn_stepper(false, Some(nap))
    }

    fn spawn_stepper(
        self: &Arc<Self>,
        take_over: bool,
        nap: Option<std::time::Duration>,
    ) -> std::io::Result<EngineThread> {
        use std::sync::atomic::{AtomicBool, Ordering};
        if take_over {
            self.stepped_by_runner.store(true, Ordering::Relaxed);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, card) = (stop.clone(), self.card.clone());
        let thread = std::thread::Builder::new()
            .name("card-engine".into())
            .spawn(move || {
                let mut idle = 0u32;
                while !flag.load(Ordering::Relaxed) {
                    if card.poll() != 0 {
                        idle = 0;
                        continue;
                    }
                    match nap {
                        Some(d) => std::thread::sleep(d),
                        None => {
                            // Spin, and only after a long quiet spell let another thread in.
                            idle += 1;
                            if idle.is_multiple_of(1024) {
                                std::thread::yield_now();
                            } else {
                                std::hint::spin_loop();
                            }
                        }
                    }
                }
            });
        match thread {
            Ok(t) => Ok(EngineThread {
                host: self.clone(),
                took_over: take_over,
                stop,
                thread: Some(t),
            }),
            Err(e) => {
                if take_over {
                    self.stepped_by_runner.store(false, Ordering::Relaxed);
                }
                Err(e)
            }
        }
    }

    /// The driver's handle on function `fid`.
    pub fn device(self: &Arc<Self>, fid: FunctionId) -> Arc<InProcessDevice> {
        Arc::new(InProcessDevice {
            host: self.clone(),
            fid,
        })
    }

    /// Bytes of host memory handed out and not given back.
    pub fn allocated(&self) -> usize {
        self.memory.in_use()
    }
}

/// A thread stepping the card ([`InProcessHost::spawn_engine_thread`],
/// [`InProcessHost::spawn_background_stepper`]); dropping it stops the thread and gives the
/// stepping back to the applications if it had taken it.
pub struct EngineThread {
    host: Arc<InProcessHost>,
    /// The applications stopped stepping the card while this thread ran.
    took_over: bool,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for EngineThread {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering;
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if self.took_over {
            self.host.stepped_by_runner.store(false, Ordering::Relaxed);
        }
    }
}

/// One function of an in-process card.
pub struct InProcessDevice {
    host: Arc<InProcessHost>,
    fid: FunctionId,
}

impl InProcessDevice {
    pub fn function_id(&self) -> FunctionId {
        self.fid
    }
    pub fn host(&self) -> &Arc<InProcessHost> {
        &self.host
    }
    fn bar_base(&self, bar: u8) -> Option<u64> {
        *self
            .host
            .bars
            .get(self.fid as usize)?
            .get(usize::from(bar))?
    }
}

impl PciDevice for InProcessDevice {
    fn config_read(&self, offset: u64, data: &mut [u8]) {
        self.host.card.fabric.config_read(self.fid, offset, data)
    }
    fn config_write(&self, offset: u64, data: &[u8]) {
        self.host.card.fabric.config_write(self.fid, offset, data)
    }
    fn bar_read(&self, bar: u8, offset: u64, data: &mut [u8]) {
        match self.bar_base(bar) {
            Some(base) => {
                self.host.card.fabric.mmio_read(base + offset, data);
            }
            None => data.fill(0xff),
        }
    }
    fn bar_write(&self, bar: u8, offset: u64, data: &[u8]) {
        if let Some(base) = self.bar_base(bar) {
            self.host.card.fabric.mmio_write(base + offset, data);
        }
    }
    fn bar_write_all(&self, bar: u8, writes: &[(u64, &[u8])]) {
        if let Some(base) = self.bar_base(bar) {
            self.host.card.fabric.mmio_write_all(base, writes);
        }
    }
    fn dma_alloc(&self, len: usize) -> Result<DmaBuffer, DriverError> {
        self.host.memory.alloc(len)
    }
    fn enable_msix(&self, vectors: u16) -> Result<(), DriverError> {
        let mut cap = [0u8; 12];
        self.config_read(OFF_MSIX_CAP as u64, &mut cap);
        let control = u16::from_le_bytes([cap[2], cap[3]]);
        let table_size = (control & MSIX_CTRL_TABLE_SIZE) + 1;
        if vectors > table_size {
            return Err(DriverError::InvalidArgument(
                "more MSI-X vectors than the table holds",
            ));
        }
        let table = u32::from_le_bytes([cap[4], cap[5], cap[6], cap[7]]);
        let (bir, off) = msix_bir_offset(table);
        for v in 0..vectors as u64 {
            let e = off + v * MSIX_ENTRY_SIZE;
            self.write32(bir, e + MSIX_ENTRY_ADDR_LO, MSI_ADDRESS as u32);
            self.write32(bir, e + MSIX_ENTRY_ADDR_HI, 0);
            self.write32(bir, e + MSIX_ENTRY_DATA, v as u32);
            self.write32(bir, e + MSIX_ENTRY_VECTOR_CTRL, 0);
        }
        let ctl = control | MSIX_CTRL_ENABLE;
        self.config_write(OFF_MSIX_CONTROL as u64, &ctl.to_le_bytes());
        Ok(())
    }
    fn take_interrupts(&self, vector: u16) -> u64 {
        self.host
            .irqs
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(self.fid, vector))
            .unwrap_or(0)
    }
    fn run_device(&self) {
        if !self
            .host
            .stepped_by_runner
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            self.host.card.poll();
        }
    }
}

/// Convenience for tests and tools: enable memory decode and bus mastering.
pub fn enable_bus_master(dev: &dyn PciDevice) {
    let cmd = dev.config_read16(OFF_COMMAND as u64) | CMD_MEMORY | CMD_BUS_MASTER;
    dev.config_write16(OFF_COMMAND as u64, cmd);
}
