//! The PCIe switch of the card (the Innova-2 embeds one between the host, the NIC and the FPGA;
//! paper §6, Figure 6). Every memory request a function issues is routed by address: to another
//! function's BAR first (peer-to-peer, as a switch decodes its downstream ports before forwarding
//! upstream), then to host memory the host mapped for DMA, otherwise it fails and the issuing
//! device turns the failure into its own defined error response.
//!
//! The fabric counts TLPs, header bytes and payload bytes per function and direction. Splitting
//! follows PCIe Base §2.2: writes are cut at Max_Payload_Size-aligned boundaries, read requests at
//! Max_Read_Request_Size-aligned boundaries, completions at Max_Payload_Size-aligned boundaries,
//! and every TLP costs a fixed header/framing overhead (default 24 B: 4 B framing + sequence,
//! 16 B header with 64-bit address, 4 B LCRC). The paper's performance model (Figure 7a) is
//! computed from these counters. Left out: flow-control credits, ordering, ECRC, ACS.

mod counters;
mod dirty;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock};

pub use counters::{TlpCounters, TlpStats};
pub use dirty::{DirtyPages, DIRTY_PAGE_SIZE};
use vm_memory::{GuestMemoryRegion, GuestRegionMmap};

use crate::pcie::{ConfigChange, FunctionId, InterruptSink, MsiMessage, PciFunction};

/// Link parameters the fabric accounts with.
#[derive(Clone, Copy, Debug)]
pub struct FabricConfig {
    /// Max_Payload_Size in bytes.
    pub mps: u32,
    /// Max_Read_Request_Size in bytes.
    pub mrrs: u32,
    /// Header, framing and LCRC bytes charged per TLP.
    pub tlp_overhead: u32,
}

impl Default for FabricConfig {
    fn default() -> Self {
        FabricConfig {
            mps: 256,
            mrrs: 512,
            tlp_overhead: 24,
        }
    }
}

/// Requester ID of accesses the host CPU issues (MMIO), and counters of the root port.
pub const HOST: FunctionId = FunctionId::MAX;

/// A request the fabric could not route, or that the requester may not issue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DmaError {
    #[error("no BAR and no DMA mapping covers {addr:#x}+{len}")]
    Unmapped { addr: u64, len: usize },
    #[error("bus mastering is disabled for the requester")]
    BusMasterDisabled,
    /// A request for a BAR behind the requester's own switch port: a switch never routes a
    /// request back out of the port it came in on (PCIe Base §6.12, no hairpin), so a function
    /// cannot reach its own BARs or its sibling functions' through the switch — an Unsupported
    /// Request.
    #[error("{addr:#x} is behind the requester's own switch port")]
    SamePort { addr: u64 },
}

/// Why a host mapping was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    #[error("mapping is empty or extends past its backing memory")]
    OutOfBacking,
    #[error("no such function")]
    NoSuchFunction,
}

/// A region of host memory the host made reachable for DMA at bus address `iova`.
#[derive(Clone)]
pub struct HostRegion {
    pub iova: u64,
    pub len: u64,
    pub memory: Arc<GuestRegionMmap>,
    /// Offset of `iova` inside `memory`.
    pub offset: u64,
}

impl HostRegion {
    /// Copies between host memory at `off` bytes into this mapping and `buf`. The caller has
    /// checked that `[off, off + len)` lies inside the mapping, and `map_host` checked that the
    /// mapping lies inside its backing memory.
    fn copy(&self, off: u64, len: usize, to_host: Option<&[u8]>, from_host: Option<&mut [u8]>) {
        debug_assert!(off + len as u64 <= self.len);
        // SAFETY: in bounds of a live mapping (the Arc keeps it mapped); device DMA and CPU
        // accesses to the same bytes may race exactly as they do on real hardware, and no Rust
        // reference to guest memory is created.
        unsafe {
            let p = self.memory.as_ptr().add((self.offset + off) as usize);
            if let Some(src) = to_host {
                std::ptr::copy_nonoverlapping(src.as_ptr(), p, len);
            }
            if let Some(dst) = from_host {
                std::ptr::copy_nonoverlapping(p, dst.as_mut_ptr(), len);
            }
        }
    }
}

#[derive(Clone)]
struct BarWindow {
    start: u64,
    end: u64,
    function: FunctionId,
    bar: u8,
    /// The function itself, so a peer-to-peer access reaches it without the function table's
    /// lock.
    target: Arc<dyn PciFunction>,
}

impl BarWindow {
    /// Whether the `len` bytes at `addr` lie inside the window.
    fn holds(&self, addr: u64, len: u64) -> bool {
        addr >= self.start && addr.checked_add(len).is_some_and(|e| e <= self.end)
    }
}

/// An immutable routing snapshot: engines take one per batch, so the data path never locks.
/// Host memory is mapped per requester, as an IOMMU gives every function its own I/O address
/// space (and vfio-user gives every function its own DMA map).
#[derive(Clone, Default)]
struct Routes {
    bars: Vec<BarWindow>,
    /// Lowest and highest address any BAR decodes: most DMA goes to host memory outside it.
    bar_span: (u64, u64),
    host: Vec<Vec<HostRegion>>,
    bus_master: Vec<bool>,
    /// Downstream port of each function.
    ports: Vec<u16>,
    /// Each function's link counters (so counting a request takes no lock).
    counters: Vec<Arc<TlpCounters>>,
}

impl Routes {
    fn bar_at(&self, addr: u64, len: u64) -> Option<usize> {
        if addr >= self.bar_span.1 || addr.saturating_add(len) <= self.bar_span.0 {
            return None;
        }
        self.bars.iter().position(|w| w.holds(addr, len))
    }

    fn space(&self, requester: FunctionId) -> &[HostRegion] {
        self.host
            .get(requester as usize)
            .map_or(&[], |v| v.as_slice())
    }
}

/// Removes `[iova, iova + len)` from a host map, keeping the parts of larger mappings outside it.
fn remove_range(space: &mut BTreeMap<u64, HostRegion>, iova: u64, len: u64) {
    let end = iova.saturating_add(len);
    // The mapping starting below `iova` may reach into the range; all others start inside it.
    let first = space
        .range(..iova)
        .next_back()
        .filter(|(_, r)| r.iova + r.len > iova)
        .map(|(k, _)| *k)
        .unwrap_or(iova);
    let hit: Vec<u64> = space.range(first..end).map(|(k, _)| *k).collect();
    for k in hit {
        let r = space.remove(&k).expect("present");
        let r_end = r.iova + r.len;
        if r.iova < iova {
            space.insert(
                r.iova,
                HostRegion {
                    len: iova - r.iova,
                    ..r.clone()
                },
            );
        }
        if r_end > end {
            space.insert(
                end,
                HostRegion {
                    iova: end,
                    len: r_end - end,
                    offset: r.offset + (end - r.iova),
                    memory: r.memory,
                },
            );
        }
    }
}

/// Index of the mapping containing `addr` in a sorted, non-overlapping map.
fn region_index(space: &[HostRegion], addr: u64) -> Option<usize> {
    let i = space.partition_point(|r| r.iova <= addr);
    let r = space.get(i.checked_sub(1)?)?;
    (addr - r.iova < r.len).then_some(i - 1)
}

/// The switch: functions, host-memory map, counters and the interrupt path.
pub struct Fabric {
    config: FabricConfig,
    /// log2 of MPS and MRRS (both powers of two), so splitting is shifts, not divisions.
    mps_shift: u32,
    mrrs_shift: u32,
    functions: RwLock<Vec<Arc<dyn PciFunction>>>,
    /// The downstream port of each function (the functions of one multi-function device share
    /// one).
    ports: RwLock<Vec<u16>>,
    routes: RwLock<Arc<Routes>>,
    /// The authoritative host-memory map of every requester, keyed by IOVA. Edits are O(log n)
    /// (a vIOMMU maps every 4 KiB page on its own: tens of thousands of maps); the routing
    /// snapshot is rebuilt from it lazily, by the first DMA after a change.
    host_maps: Mutex<Vec<BTreeMap<u64, HostRegion>>>,
    /// Set by changes not yet in `routes` (host maps, BAR addresses, decode, resets): routes
    /// are rebuilt by the first access after any number of them.
    routes_stale: AtomicBool,
    counters: RwLock<Vec<Arc<TlpCounters>>>,
    host_counters: Arc<TlpCounters>,
    generation: AtomicU64,
    /// Told apart from every other fabric of the process (a later one may take this address).
    uid: u64,
    /// The pages device writes reached, once a runner asked for them
    /// ([`Fabric::track_dirty_pages`]).
    dirty: std::sync::OnceLock<Arc<DirtyPages>>,
}

/// A hierarchy's state at one point ([`Fabric::snapshot`]).
#[derive(Clone)]
pub struct FabricSnapshot {
    functions: Vec<Option<crate::pcie::PciSnapshot>>,
    host_maps: Vec<BTreeMap<u64, HostRegion>>,
    counters: Vec<[u64; counters::CELLS]>,
    host_counters: [u64; counters::CELLS],
}

/// The next fabric's [`Fabric::uid`].
static NEXT_FABRIC: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The routes of the fabric this thread's CPU accesses went to last, by its uid, kept
    /// between accesses and renewed when its generation moves, as an engine keeps its own: a
    /// CPU access takes no lock and touches no reference count another core shares. A fabric
    /// dropped on this thread takes its routes from here; one dropped elsewhere leaves them
    /// until this thread's next access to another fabric, or its end.
    static CPU_ROUTES: RefCell<(u64, Option<RouteSnapshot>)> = const { RefCell::new((u64::MAX, None)) };
}

impl Drop for Fabric {
    /// Takes this thread's kept routes of this fabric with it: they hold its functions, and
    /// what those own (a wire's socket, a TAP device) must close when the fabric goes.
    fn drop(&mut self) {
        let kept = CPU_ROUTES
            .try_with(|slot| {
                let mut slot = slot.try_borrow_mut().ok()?;
                (slot.0 == self.uid).then(|| std::mem::replace(&mut *slot, (u64::MAX, None)))
            })
            .ok()
            .flatten();
        // Dropped after the slot is given back: a function's own drop may access a fabric.
        drop(kept);
    }
}

impl Fabric {
    /// # Panics
    /// If MPS or MRRS is not a power of two between 128 and 4096 (PCIe Base §7.5.3.4).
    pub fn new(config: FabricConfig) -> Arc<Self> {
        for v in [config.mps, config.mrrs] {
            assert!(
                v.is_power_of_two() && (128..=4096).contains(&v),
                "MPS/MRRS must be a power of two in 128..=4096"
            );
        }
        Arc::new(Fabric {
            mps_shift: config.mps.trailing_zeros(),
            mrrs_shift: config.mrrs.trailing_zeros(),
            config,
            functions: RwLock::new(Vec::new()),
            ports: RwLock::new(Vec::new()),
            routes: RwLock::new(Arc::new(Routes::default())),
            host_maps: Mutex::new(Vec::new()),
            routes_stale: AtomicBool::new(false),
            counters: RwLock::new(Vec::new()),
            host_counters: Arc::new(TlpCounters::default()),
            generation: AtomicU64::new(0),
            uid: NEXT_FABRIC.fetch_add(1, Ordering::Relaxed),
            dirty: std::sync::OnceLock::new(),
        })
    }

    /// From now on, logs the pages of `[base, base + len)` (bus addresses) that device writes
    /// reach ([`DirtyPages`]). Once per fabric: a second call returns the log of the first.
    pub fn track_dirty_pages(&self, base: u64, len: u64) -> Arc<DirtyPages> {
        self.dirty
            .get_or_init(|| Arc::new(DirtyPages::new(base, len)))
            .clone()
    }

    pub fn config(&self) -> FabricConfig {
        self.config
    }

    /// Plugs a function into the next downstream port and returns its ID. `make` receives the ID
    /// so the function can name itself as requester.
    pub fn attach<F: PciFunction + 'static>(
        &self,
        make: impl FnOnce(FunctionId) -> Arc<F>,
    ) -> Arc<F> {
        self.attach_at(None, make)
    }

    /// As [`Fabric::attach`], behind the port of function `sibling` (another function of the
    /// same device) when given.
    pub fn attach_at<F: PciFunction + 'static>(
        &self,
        sibling: Option<FunctionId>,
        make: impl FnOnce(FunctionId) -> Arc<F>,
    ) -> Arc<F> {
        let mut fns = self.functions.write().unwrap_or_else(|e| e.into_inner());
        let id = fns.len() as FunctionId;
        {
            let mut ports = self.ports.write().unwrap_or_else(|e| e.into_inner());
            let next = ports.iter().max().map_or(0, |p| p + 1);
            let port = sibling
                .and_then(|s| ports.get(s as usize).copied())
                .unwrap_or(next);
            ports.push(port);
        }
        let f = make(id);
        assert_eq!(f.pci().id, id, "function must use the ID it was given");
        fns.push(f.clone());
        self.counters
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::new(TlpCounters::default()));
        drop(fns);
        self.rebuild_routes();
        f
    }

    pub fn function(&self, id: FunctionId) -> Option<Arc<dyn PciFunction>> {
        self.functions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id as usize)
            .cloned()
    }

    pub fn function_count(&self) -> usize {
        self.functions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Routes every function's MSI-X messages to `sink`.
    pub fn set_interrupt_sink(&self, sink: Arc<dyn InterruptSink>) {
        let counted: Arc<dyn InterruptSink> = Arc::new(CountingSink {
            inner: sink,
            counters: self
                .counters
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        });
        for f in self
            .functions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            f.pci().set_interrupt_sink(counted.clone());
        }
    }

    /// Publishes a new routing snapshot: BAR windows and bus mastering from the functions'
    /// configuration, host memory from `host_maps`.
    fn rebuild_routes(&self) {
        let fns = self.functions.read().unwrap_or_else(|e| e.into_inner());
        let mut routes = self.routes.write().unwrap_or_else(|e| e.into_inner());
        let maps = self.host_maps.lock().unwrap_or_else(|e| e.into_inner());
        self.routes_stale.store(false, Ordering::Relaxed);
        let mut next = Routes {
            host: maps.iter().map(|m| m.values().cloned().collect()).collect(),
            ports: self.ports.read().unwrap_or_else(|e| e.into_inner()).clone(),
            counters: self
                .counters
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            ..Routes::default()
        };
        drop(maps);
        next.host.resize(fns.len(), Vec::new());
        for f in fns.iter() {
            let cfg = f.pci().config();
            next.bus_master.push(cfg.bus_master());
            if !cfg.memory_enabled() {
                continue;
            }
            for spec in cfg.bars() {
                if let Some(start) = cfg.bar_address(spec.index).filter(|a| *a != 0) {
                    // A BAR left at the top of the address space (software sizing it with
                    // decode on writes all ones) decodes up to the last byte.
                    next.bars.push(BarWindow {
                        start,
                        end: start.saturating_add(spec.size),
                        function: f.pci().id,
                        bar: spec.index,
                        target: f.clone(),
                    });
                }
            }
        }
        next.bar_span = next.bars.iter().fold((u64::MAX, 0), |(lo, hi), w| {
            (lo.min(w.start), hi.max(w.end))
        });
        *routes = Arc::new(next);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Edits the host map of `requester`; the next DMA sees the change (ports taken before it
    /// are stale from now on).
    fn edit_host_map(
        &self,
        requester: FunctionId,
        edit: impl FnOnce(&mut BTreeMap<u64, HostRegion>),
    ) {
        let mut maps = self.host_maps.lock().unwrap_or_else(|e| e.into_inner());
        if maps.len() <= requester as usize {
            maps.resize(requester as usize + 1, BTreeMap::new());
        }
        edit(&mut maps[requester as usize]);
        drop(maps);
        self.routes_changed();
    }

    /// Marks the routes out of date: the next access or DMA port that routes rebuilds them,
    /// once for any number of changes before it (a driver enumerating a card assigns a dozen
    /// BARs and maps, each of which rebuilt every function's windows).
    fn routes_changed(&self) {
        self.routes_stale.store(true, Ordering::Release);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Makes host memory reachable for DMA by `requester` at `iova`, replacing any overlapping
    /// mapping. A mapping that continues a neighbour (next IOVA, next offset in the same memory)
    /// merges with it, so page-by-page maps of contiguous memory stay one region. Fails if the
    /// region does not lie inside its backing memory.
    pub fn map_host(&self, requester: FunctionId, region: HostRegion) -> Result<(), MapError> {
        let backing = region.memory.len();
        if region.len == 0
            || region
                .offset
                .checked_add(region.len)
                .is_none_or(|e| e > backing)
            || region.iova.checked_add(region.len).is_none()
        {
            return Err(MapError::OutOfBacking);
        }
        if requester as usize >= self.function_count() {
            return Err(MapError::NoSuchFunction);
        }
        self.edit_host_map(requester, |space| {
            remove_range(space, region.iova, region.len);
            let mut region = region;
            let continues = |a: &HostRegion, b: &HostRegion| {
                a.iova + a.len == b.iova
                    && a.offset + a.len == b.offset
                    && Arc::ptr_eq(&a.memory, &b.memory)
            };
            let prev_key = space
                .range(..region.iova)
                .next_back()
                .filter(|(_, prev)| continues(prev, &region))
                .map(|(k, _)| *k);
            if let Some(k) = prev_key {
                let prev = space.remove(&k).expect("present");
                region = HostRegion {
                    iova: prev.iova,
                    len: prev.len + region.len,
                    offset: prev.offset,
                    memory: prev.memory,
                };
            }
            let end = region.iova + region.len;
            if space.get(&end).is_some_and(|next| continues(&region, next)) {
                let next = space.remove(&end).expect("present");
                region.len += next.len;
            }
            space.insert(region.iova, region);
        });
        Ok(())
    }

    /// Removes every mapping of `requester` overlapping `[iova, iova + len)`. Engines that
    /// started a batch before the call finish it with the old map; the next batch sees the new one.
    pub fn unmap_host(&self, requester: FunctionId, iova: u64, len: u64) {
        if requester as usize >= self.function_count() {
            return;
        }
        self.edit_host_map(requester, |space| remove_range(space, iova, len));
    }

    /// Number of host mappings of `requester`.
    pub fn host_mapping_count(&self, requester: FunctionId) -> usize {
        self.host_maps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(requester as usize)
            .map_or(0, |m| m.len())
    }

    /// Bumps whenever routes change.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Brings an engine's kept routing snapshot up to date: taken again only when the routes
    /// changed, so an engine pass takes no lock and touches no shared reference count (each of
    /// which would move a cache line between the cores when applications run on another).
    pub fn refresh_routes(&self, kept: &mut Option<RouteSnapshot>) {
        // A change marks the routes stale before it moves the generation: a snapshot of the
        // generation read first, with nothing stale after it, is current.
        let generation = self.generation();
        if self.routes_stale.load(Ordering::Acquire)
            || kept.as_ref().is_none_or(|k| k.generation != generation)
        {
            self.renew_routes(kept);
        }
    }

    #[cold]
    #[inline(never)]
    fn renew_routes(&self, kept: &mut Option<RouteSnapshot>) {
        if self.routes_stale.load(Ordering::Acquire) {
            self.rebuild_routes();
        }
        // The generation first: the routes read after it are at least that new.
        let generation = self.generation();
        *kept = Some(RouteSnapshot {
            generation,
            routes: self.current_routes(),
        });
    }

    /// A DMA port of `requester` that routes by the kept snapshot `routes`.
    pub fn dma_in<'a>(&'a self, requester: FunctionId, routes: &'a RouteSnapshot) -> DmaPort<'a> {
        self.port(requester, RoutesRef::Kept(&routes.routes))
    }

    fn current_routes(&self) -> Arc<Routes> {
        if self.routes_stale.load(Ordering::Acquire) {
            self.rebuild_routes();
        }
        self.routes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Counts on function `f`'s link, through `routes` (no lock) when they know it. Always
    /// inlined: behind the shared counting of CPU stores the compiler kept it out of line, 17
    /// instructions more per 64 B RDMA WRITE.
    #[inline(always)]
    fn count_on(&self, routes: &Routes, f: FunctionId, count: impl FnOnce(&TlpCounters)) {
        match routes.counters.get(f as usize) {
            Some(c) => count(c),
            None => count(&self.counters_of(f)),
        }
    }

    fn counters_of(&self, id: FunctionId) -> Arc<TlpCounters> {
        if id == HOST {
            return self.host_counters.clone();
        }
        self.counters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id as usize)
            .cloned()
            .unwrap_or_else(|| self.host_counters.clone())
    }

    /// TLP statistics of a function ([`HOST`] for the root port).
    pub fn stats(&self, id: FunctionId) -> TlpStats {
        self.counters_of(id)
            .snapshot(u64::from(self.config.tlp_overhead))
    }

    /// Read operations function `id` issued (each DMA read once, however many TLPs it took).
    pub fn read_operations(&self, id: FunctionId) -> u64 {
        self.counters_of(id).read_operations()
    }

    /// Peer-to-peer reads function `id` completed: reads other functions sent to its BARs
    /// (each once, however many TLPs it took).
    pub fn reads_served(&self, id: FunctionId) -> u64 {
        self.counters_of(id).reads_served()
    }

    /// Resets all counters to zero.
    pub fn clear_stats(&self) {
        self.host_counters.clear();
        for c in self
            .counters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            c.clear();
        }
    }

    // --- configuration cycles -------------------------------------------------------------

    pub fn config_read(&self, id: FunctionId, offset: u64, data: &mut [u8]) {
        match self.function(id) {
            Some(f) => f.pci().config_read(offset, data),
            None => data.fill(0xff),
        }
    }

    pub fn config_write(&self, id: FunctionId, offset: u64, data: &[u8]) {
        let Some(f) = self.function(id) else { return };
        let change = f.pci().config_write(offset, data);
        if change.contains(ConfigChange::FLR) {
            return self.reset_function(id);
        }
        if change.intersects(ConfigChange::BAR_ADDRESS | ConfigChange::COMMAND) {
            self.routes_changed();
        }
    }

    /// Function-level reset (PCIe Base §6.6.2): the function's own state and its configuration
    /// space (BARs, decode, bus mastering, MSI-X) return to power-on; routing follows.
    pub fn reset_function(&self, id: FunctionId) {
        if let Some(f) = self.function(id) {
            f.reset();
            f.pci().reset();
            self.routes_changed();
        }
    }

    /// The hierarchy's state as it is — every function's configuration space and MSI-X table,
    /// every requester's host-memory map, the TLP counters — to return to
    /// ([`Fabric::restore`]). What each function's device holds beyond that is the device's
    /// own to keep (a fuzz target returns a whole card to the point it brought it up to).
    pub fn snapshot(&self) -> FabricSnapshot {
        let functions = (0..self.function_count() as FunctionId)
            .map(|id| self.function(id).map(|f| f.pci().snapshot()))
            .collect();
        let counters = self.counters.read().unwrap_or_else(|e| e.into_inner());
        FabricSnapshot {
            functions,
            host_maps: self
                .host_maps
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            counters: counters.iter().map(|c| c.cells()).collect(),
            host_counters: self.host_counters.cells(),
        }
    }

    /// Returns the hierarchy to `s`, taken of this fabric by [`Fabric::snapshot`]; the routes
    /// are rebuilt by the next access.
    pub fn restore(&self, s: &FabricSnapshot) {
        for (id, pci) in s.functions.iter().enumerate() {
            if let (Some(f), Some(pci)) = (self.function(id as FunctionId), pci) {
                f.pci().restore(pci);
            }
        }
        self.host_maps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone_from(&s.host_maps);
        let counters = self.counters.read().unwrap_or_else(|e| e.into_inner());
        for (c, cells) in counters.iter().zip(&s.counters) {
            c.set_cells(cells);
        }
        self.host_counters.set_cells(&s.host_counters);
        self.routes_changed();
    }

    /// Conventional reset of the hierarchy (PCIe Base §6.6.1, a cold or warm reset): every
    /// function is reset as by an FLR (its state, configuration space and MSI-X table at
    /// power-on), every requester's host-memory map is gone (as the IOMMU's are after a machine
    /// reset) and the TLP counters start from zero. A device's card-wide state that outlives
    /// an FLR is reset by the device itself ([`crate::nic::Nic::conventional_reset`]).
    pub fn conventional_reset(&self) {
        for id in 0..self.function_count() as FunctionId {
            if let Some(f) = self.function(id) {
                f.reset();
                f.pci().reset();
            }
            self.unmap_host(id, 0, u64::MAX);
        }
        self.clear_stats();
        self.routes_changed();
    }

    /// Firmware-style BAR assignment, then memory decode and bus mastering stay as they are.
    pub fn assign_bar(&self, id: FunctionId, bar: u8, addr: u64) {
        if let Some(f) = self.function(id) {
            f.pci().config().set_bar_address(bar, addr);
            self.routes_changed();
        }
    }

    // --- host MMIO ------------------------------------------------------------------------

    /// A CPU store to bus address `addr`; false if no BAR decodes it (the store is dropped, as
    /// an unsupported request would be).
    pub fn mmio_write(&self, addr: u64, data: &[u8]) -> bool {
        self.with_cpu_routes(|routes| self.mmio_write_by(routes, addr, data))
    }

    /// CPU stores to `base + offset` for each `(offset, data)` of `writes`, in order, each
    /// after the one before it as fenced stores are (a driver's WQE-by-MMIO sequence and its
    /// doorbell). The same TLPs as one [`Fabric::mmio_write`] each, counted the same; the
    /// routes are looked up once, and a run of stores that stays in one BAR is counted as one
    /// sum and handed to its function in one call ([`PciFunction::bar_write_run`]).
    pub fn mmio_write_all(&self, base: u64, writes: &[(u64, &[u8])]) {
        self.with_cpu_routes(|routes| {
            let mut rest = writes;
            while let Some(&(offset, data)) = rest.first() {
                let addr = base.wrapping_add(offset);
                let Some(w) = routes
                    .bar_at(addr, data.len() as u64)
                    .map(|i| &routes.bars[i])
                else {
                    rest = &rest[1..];
                    continue;
                };
                let (mut tlps, mut bytes) = (0, 0);
                let run = rest
                    .iter()
                    .take_while(|&&(offset, data)| {
                        let (addr, len) = (base.wrapping_add(offset), data.len() as u64);
                        let held = w.holds(addr, len);
                        if held {
                            tlps += tlp_count_shift(addr, len, self.mps_shift);
                            bytes += len;
                        }
                        held
                    })
                    .count();
                self.count_cpu_writes(routes, w.function, tlps, bytes);
                w.target
                    .bar_write_run(w.bar, base.wrapping_sub(w.start), &rest[..run]);
                rest = &rest[run..];
            }
        });
    }

    /// A CPU load from `addr`; all-ones when nothing decodes it (master abort).
    pub fn mmio_read(&self, addr: u64, data: &mut [u8]) -> bool {
        self.with_cpu_routes(|routes| self.mmio_read_by(routes, addr, data))
    }

    /// Runs a CPU access with the routes this thread keeps for this fabric ([`CPU_ROUTES`]),
    /// or, for an access made while one is running on this thread (a BAR handler's own), with
    /// a snapshot of its own.
    #[inline]
    fn with_cpu_routes<R>(&self, access: impl FnOnce(&Routes) -> R) -> R {
        let mut access = Some(access);
        let kept = CPU_ROUTES
            .try_with(|slot| {
                let mut slot = slot.try_borrow_mut().ok()?;
                if slot.0 != self.uid {
                    *slot = (self.uid, None);
                }
                self.refresh_routes(&mut slot.1);
                let routes = &slot.1.as_ref()?.routes;
                Some(access.take()?(routes))
            })
            .ok()
            .flatten();
        match (kept, access) {
            (Some(r), _) => r,
            (None, Some(access)) => access(&self.current_routes()),
            (None, None) => unreachable!("an access that ran returned its result"),
        }
    }

    fn mmio_write_by(&self, routes: &Routes, addr: u64, data: &[u8]) -> bool {
        let Some(w) = routes
            .bar_at(addr, data.len() as u64)
            .map(|i| &routes.bars[i])
        else {
            return false;
        };
        let len = data.len() as u64;
        let tlps = tlp_count_shift(addr, len, self.mps_shift);
        self.count_cpu_writes(routes, w.function, tlps, len);
        w.target.bar_write(w.bar, addr - w.start, data);
        true
    }

    /// CPU stores' TLPs and payload bytes, upstream of the root port and downstream on the
    /// function's link.
    #[inline]
    fn count_cpu_writes(&self, routes: &Routes, function: FunctionId, tlps: u64, bytes: u64) {
        self.host_counters.add_up(tlps, bytes);
        self.count_on(routes, function, |c| c.add_down(tlps, bytes));
    }

    fn mmio_read_by(&self, routes: &Routes, addr: u64, data: &mut [u8]) -> bool {
        let Some(w) = routes
            .bar_at(addr, data.len() as u64)
            .map(|i| &routes.bars[i])
        else {
            data.fill(0xff);
            return false;
        };
        let cpls = tlp_count(addr, data.len() as u64, self.config.mps as u64);
        self.host_counters.add_up(1, 0);
        self.host_counters.add_down(cpls, data.len() as u64);
        let count = |c: &TlpCounters| {
            c.add_down(1, 0);
            c.add_up(cpls, data.len() as u64);
        };
        self.count_on(routes, w.function, count);
        w.target.bar_read(w.bar, addr - w.start, data);
        true
    }

    // --- device-issued requests -----------------------------------------------------------

    /// A DMA port for `requester`: a routing snapshot plus local counters, flushed on drop.
    /// Engines take one per batch of work.
    pub fn dma(&self, requester: FunctionId) -> DmaPort<'_> {
        self.port(requester, RoutesRef::Own(self.current_routes()))
    }

    fn port<'a>(&'a self, requester: FunctionId, routes: RoutesRef<'a>) -> DmaPort<'a> {
        DmaPort {
            fabric: self,
            requester,
            routes,
            tally: Tally::default(),
            hit_start: 0,
            hit_end: 0,
            write_hit_end: 0,
            hit_ptr: std::ptr::null_mut(),
            peer_hit: (0, 0, 0),
        }
    }
}

/// Counts the one 4-byte posted write that carries an MSI-X message.
struct CountingSink {
    inner: Arc<dyn InterruptSink>,
    counters: Vec<Arc<TlpCounters>>,
}

impl InterruptSink for CountingSink {
    fn deliver(&self, function: FunctionId, msg: MsiMessage) {
        if let Some(c) = self.counters.get(function as usize) {
            c.add_up(1, 4);
        }
        self.inner.deliver(function, msg);
    }
}

/// Number of TLPs for `len` bytes at `addr` when TLPs may not cross `boundary`-aligned addresses.
pub fn tlp_count(addr: u64, len: u64, boundary: u64) -> u64 {
    tlp_count_shift(addr, len, boundary.trailing_zeros())
}

/// [`tlp_count`] for a power-of-two boundary given as its log2.
#[inline]
fn tlp_count_shift(addr: u64, len: u64, shift: u32) -> u64 {
    if len == 0 {
        return 0;
    }
    let last = addr.saturating_add(len - 1);
    (last >> shift) - (addr >> shift) + 1
}

#[derive(Default, Clone, Copy)]
struct Tally {
    /// Requester side.
    req: TlpStats,
    /// Read operations the requester issued.
    read_operations: u64,
    /// Host side (root port) for requests that went to host memory.
    host: TlpStats,
    /// The peer function the port reached last and what its link saw (the NIC reaches FLD's
    /// BAR several times a packet): added to its counters when the port reaches another peer
    /// or ends, as the requester's and the host's are when it ends.
    peer: Option<PeerTally>,
}

#[derive(Clone, Copy)]
struct PeerTally {
    function: FunctionId,
    link: TlpStats,
    /// Reads the peer served.
    reads_served: u64,
}

/// The routes an engine keeps between passes ([`Fabric::refresh_routes`]).
pub struct RouteSnapshot {
    generation: u64,
    routes: Arc<Routes>,
}

/// The routes a port uses: its own reference, or an engine's kept snapshot.
enum RoutesRef<'a> {
    Own(Arc<Routes>),
    Kept(&'a Routes),
}

impl std::ops::Deref for RoutesRef<'_> {
    type Target = Routes;
    #[inline(always)]
    fn deref(&self) -> &Routes {
        match self {
            RoutesRef::Own(r) => r,
            RoutesRef::Kept(r) => r,
        }
    }
}

/// Issues memory requests on behalf of one function for the duration of a batch.
pub struct DmaPort<'a> {
    fabric: &'a Fabric,
    requester: FunctionId,
    routes: RoutesRef<'a>,
    tally: Tally,
    /// The host mapping last used, when no BAR overlaps it: `[hit_start, hit_end)` starts at
    /// host pointer `hit_ptr`. Requests inside it skip routing (the common case: rings and
    /// buffers in one large mapping). Valid while `routes` is held.
    hit_start: u64,
    hit_end: u64,
    /// Where the cached mapping ends for writes: `hit_end`, or `hit_start` while the fabric
    /// keeps a dirty-page log ([`DmaPort::fast_write`]).
    write_hit_end: u64,
    hit_ptr: *mut u8,
    /// `[start, end)` of the peer BAR window last reached and its index in `routes.bars`: the
    /// same window again (NIC to FLD, every packet) skips routing. Valid while `routes` is held.
    peer_hit: (u64, u64, usize),
}

enum Target {
    Host(usize),
    /// Index of the window in `routes.bars`.
    Peer(usize),
}

impl DmaPort<'_> {
    fn route(&mut self, addr: u64, len: usize) -> Result<Target, DmaError> {
        if !self
            .routes
            .bus_master
            .get(self.requester as usize)
            .copied()
            .unwrap_or(false)
        {
            return Err(DmaError::BusMasterDisabled);
        }
        let end = addr
            .checked_add(len as u64)
            .ok_or(DmaError::Unmapped { addr, len })?;
        if let Some(i) = self.routes.bar_at(addr, len as u64) {
            let w = &self.routes.bars[i];
            let port = |f: FunctionId| self.routes.ports.get(f as usize).copied();
            if port(w.function) == port(self.requester) {
                return Err(DmaError::SamePort { addr });
            }
            self.peer_hit = (w.start, w.end, i);
            return Ok(Target::Peer(i));
        }
        let fits = |r: &HostRegion| addr >= r.iova && end <= r.iova + r.len;
        let space = self.routes.space(self.requester);
        let hit = match region_index(space, addr) {
            Some(i) if fits(&space[i]) => i,
            // A request spanning two adjacent mappings (thousands of 4 KiB maps under a vIOMMU).
            Some(_) if self.spans_mappings(addr, end) => return Ok(Target::Host(usize::MAX)),
            _ => return Err(DmaError::Unmapped { addr, len }),
        };
        let r = &space[hit];
        let (lo, hi) = self.routes.bar_span;
        if r.iova + r.len <= lo || r.iova >= hi {
            // SAFETY: map_host checked offset + len against the backing memory.
            self.hit_ptr = unsafe { r.memory.as_ptr().add(r.offset as usize) };
            self.hit_start = r.iova;
            self.hit_end = r.iova + r.len;
            self.write_hit_end = match self.fabric.dirty.get() {
                Some(_) => r.iova,
                None => self.hit_end,
            };
        }
        Ok(Target::Host(hit))
    }

    fn spans_mappings(&self, mut addr: u64, end: u64) -> bool {
        let space = self.routes.space(self.requester);
        while addr < end {
            match region_index(space, addr) {
                Some(i) => addr = space[i].iova + space[i].len,
                None => return false,
            }
        }
        true
    }

    /// Visits the host mappings covering `[addr, addr + len)` in order.
    fn each_host_piece(
        &self,
        addr: u64,
        len: usize,
        mut f: impl FnMut(&HostRegion, u64, std::ops::Range<usize>),
    ) {
        let mut done = 0usize;
        let space = self.routes.space(self.requester);
        while done < len {
            let a = addr + done as u64;
            let Some(i) = region_index(space, a) else {
                return;
            };
            let r = &space[i];
            let n = ((r.iova + r.len - a) as usize).min(len - done);
            f(r, a - r.iova, done..done + n);
            done += n;
        }
    }

    fn count_write(&mut self, addr: u64, len: u64, peer: Option<FunctionId>) {
        let n = tlp_count_shift(addr, len, self.fabric.mps_shift);
        self.count_write_tlps(n, len, peer);
    }

    /// Counts `n` posted-write TLPs carrying `len` bytes in all.
    fn count_write_tlps(&mut self, n: u64, len: u64, peer: Option<FunctionId>) {
        self.tally.req.up(n, len);
        match peer {
            Some(p) => self.peer_tally(p).link.down(n, len),
            None => self.tally.host.down(n, len),
        }
    }

    /// The tally of peer `p`, the last one's added to its counters first if it was another.
    #[inline]
    fn peer_tally(&mut self, p: FunctionId) -> &mut PeerTally {
        if self.tally.peer.is_some_and(|t| t.function != p) {
            self.flush_peer();
        }
        self.tally.peer.get_or_insert(PeerTally {
            function: p,
            link: TlpStats::default(),
            reads_served: 0,
        })
    }

    fn flush_peer(&mut self) {
        if let Some(t) = self.tally.peer.take() {
            self.link_counters(t.function, |c| c.add_tally(&t.link, 0, t.reads_served));
        }
    }

    fn count_read(&mut self, addr: u64, len: u64, peer: Option<FunctionId>) {
        self.tally.read_operations += 1;
        let f = self.fabric;
        let reqs = tlp_count_shift(addr, len, f.mrrs_shift);
        let cpls = tlp_count_shift(addr, len, f.mps_shift);
        self.tally.req.up(reqs, 0);
        self.tally.req.down(cpls, len);
        match peer {
            Some(p) => {
                let t = self.peer_tally(p);
                t.link.down(reqs, 0);
                t.link.up(cpls, len);
                t.reads_served += 1;
            }
            None => {
                self.tally.host.down(reqs, 0);
                self.tally.host.up(cpls, len);
            }
        }
    }

    /// Counts on function `f`'s link.
    #[inline]
    fn link_counters(&self, f: FunctionId, count: impl FnOnce(&TlpCounters)) {
        self.fabric.count_on(&self.routes, f, count);
    }

    /// Host pointer for `[addr, addr + len)` when it lies in the cached mapping.
    #[inline]
    fn fast(&self, addr: u64, len: usize) -> Option<*mut u8> {
        let end = addr.checked_add(len as u64)?;
        if addr >= self.hit_start && end <= self.hit_end && !self.hit_ptr.is_null() {
            // SAFETY: inside the cached mapping, which `routes` keeps alive.
            Some(unsafe { self.hit_ptr.add((addr - self.hit_start) as usize) })
        } else {
            None
        }
    }

    /// [`DmaPort::fast`] for a write: none while the fabric keeps a dirty-page log, so every
    /// write takes the routed path, which logs it, and the cached path costs no test for it.
    /// A body of its own: one shared with `fast`, the window's end a parameter, cost the 64 B
    /// CPU echo 10 instructions per packet (its reads compiled worse).
    #[inline]
    fn fast_write(&self, addr: u64, len: usize) -> Option<*mut u8> {
        let end = addr.checked_add(len as u64)?;
        if addr >= self.hit_start && end <= self.write_hit_end && !self.hit_ptr.is_null() {
            // SAFETY: as in `fast`: `write_hit_end` is at most `hit_end`.
            Some(unsafe { self.hit_ptr.add((addr - self.hit_start) as usize) })
        } else {
            None
        }
    }

    /// The window of the peer BAR last reached, if `[addr, addr + len)` lies in it.
    #[inline]
    fn fast_peer(&self, addr: u64, len: usize) -> Option<usize> {
        let (start, end, i) = self.peer_hit;
        let e = addr.checked_add(len as u64)?;
        (addr >= start && e <= end && end > start).then_some(i)
    }

    /// Memory read of `buf.len()` bytes at bus address `addr`. On error nothing was read.
    pub fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        if let Some(p) = self.fast(addr, buf.len()) {
            self.count_read(addr, buf.len() as u64, None);
            // SAFETY: `fast` checked the range; device and CPU may race on guest memory as on
            // real hardware, and no reference to it is formed.
            unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), buf.len()) };
            return Ok(());
        }
        let target = match self.fast_peer(addr, buf.len()) {
            Some(i) => Target::Peer(i),
            None => self.route(addr, buf.len())?,
        };
        match target {
            Target::Peer(i) => {
                let function = self.routes.bars[i].function;
                self.count_read(addr, buf.len() as u64, Some(function));
                let w = &self.routes.bars[i];
                w.target.bar_read(w.bar, addr - w.start, buf);
            }
            Target::Host(usize::MAX) => {
                self.count_read(addr, buf.len() as u64, None);
                self.each_host_piece(addr, buf.len(), |r, off, range| {
                    let n = range.len();
                    r.copy(off, n, None, Some(&mut buf[range]));
                });
            }
            Target::Host(i) => {
                self.count_read(addr, buf.len() as u64, None);
                let r = &self.routes.space(self.requester)[i];
                r.copy(addr - r.iova, buf.len(), None, Some(buf));
            }
        }
        Ok(())
    }

    /// Posted memory write of `data` at bus address `addr`. On error nothing was written.
    pub fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), DmaError> {
        if let Some(p) = self.fast_write(addr, data.len()) {
            self.count_write(addr, data.len() as u64, None);
            // SAFETY: as in `read`.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
            return Ok(());
        }
        let target = match self.fast_peer(addr, data.len()) {
            Some(i) => Target::Peer(i),
            None => self.route(addr, data.len())?,
        };
        match target {
            Target::Peer(i) => {
                let function = self.routes.bars[i].function;
                self.count_write(addr, data.len() as u64, Some(function));
                let w = &self.routes.bars[i];
                w.target.bar_write(w.bar, addr - w.start, data);
            }
            Target::Host(usize::MAX) => {
                self.count_write(addr, data.len() as u64, None);
                self.host_written(addr, data.len());
                self.each_host_piece(addr, data.len(), |r, off, range| {
                    let n = range.len();
                    r.copy(off, n, Some(&data[range]), None);
                });
            }
            Target::Host(i) => {
                self.count_write(addr, data.len() as u64, None);
                self.host_written(addr, data.len());
                let r = &self.routes.space(self.requester)[i];
                r.copy(addr - r.iova, data.len(), Some(data), None);
            }
        }
        Ok(())
    }

    /// `data` as consecutive posted writes of `record` bytes each from `addr` (a run of CQEs):
    /// counted exactly as that many separate writes, moved with one routing. A record that
    /// cannot be delivered fails the rest of the run from it on; the records before it were
    /// written.
    ///
    /// In host memory each record's last byte lands after the rest of it, and records land in
    /// order: a host that polls a record's last byte (a CQE's or EQE's owner bit) and reads the
    /// record after it sees the record whole, as it sees a 64-byte write the NIC makes in one
    /// TLP. One copy of the run would not do: a `memcpy` may store its tail before its middle
    /// (glibc's 32-byte-vector copies store a 512-byte run's last vectors first), and a host
    /// polling on another core then takes a CQE whose owner bit is new and whose body is old.
    pub fn write_records(&mut self, addr: u64, data: &[u8], record: usize) -> Result<(), DmaError> {
        let record = record.max(1);
        if self.fast_write(addr, data.len()).is_none() && self.fast_peer(addr, data.len()).is_none()
        {
            // Routing the run once fills the caches below when it lies in one host mapping or
            // one peer window; otherwise the records go one by one.
            let _ = self.route(addr, data.len());
        }
        if let Some(p) = self.fast_write(addr, data.len()) {
            self.count_records(addr, data.len(), record, None);
            for (k, r) in data.chunks(record).enumerate() {
                let Some((&last, body)) = r.split_last() else {
                    continue;
                };
                // SAFETY: as in `write`: `[p, p + data.len())` lies in the cached mapping, and
                // record `k` in it. The last byte is stored atomically with release ordering,
                // after the body, so no store of the body may pass it.
                unsafe {
                    let at = p.add(k * record);
                    std::ptr::copy_nonoverlapping(body.as_ptr(), at, body.len());
                    AtomicU8::from_ptr(at.add(body.len())).store(last, Ordering::Release);
                }
            }
            return Ok(());
        }
        if let Some(i) = self.fast_peer(addr, data.len()) {
            let function = self.routes.bars[i].function;
            self.count_records(addr, data.len(), record, Some(function));
            let w = &self.routes.bars[i];
            w.target.bar_write(w.bar, addr - w.start, data);
            return Ok(());
        }
        for (k, r) in data.chunks(record).enumerate() {
            self.write(addr + (k * record) as u64, r)?;
        }
        Ok(())
    }

    /// Notes a write to host memory in the fabric's dirty-page log, if it keeps one.
    #[inline(always)]
    fn host_written(&self, addr: u64, len: usize) {
        if let Some(log) = self.fabric.dirty.get() {
            log.mark(addr, len);
        }
    }

    /// Counts `len` bytes from `addr` as posted writes of `record` bytes each: one TLP per
    /// record when records are aligned powers of two no larger than MPS, else record by record.
    #[inline]
    fn count_records(&mut self, addr: u64, len: usize, record: usize, peer: Option<FunctionId>) {
        let one_tlp_each = record.is_power_of_two()
            && record as u64 <= 1 << self.fabric.mps_shift
            && addr.is_multiple_of(record as u64)
            && len.is_multiple_of(record);
        if one_tlp_each {
            self.count_write_tlps((len / record) as u64, len as u64, peer);
            return;
        }
        let mut at = 0;
        while at < len {
            let n = record.min(len - at);
            self.count_write(addr + at as u64, n as u64, peer);
            at += n;
        }
    }

    /// Counts a read of `len` bytes from the device's private context memory in the host (the
    /// interconnect context memory of a ConnectX-class NIC, which this model keeps on the
    /// device): the TLPs and the round trip a fetch of an evicted context costs, with no data
    /// moved. Aligned to `len` as a context slot is.
    pub fn account_context_read(&mut self, len: u64) {
        let at = len.next_power_of_two();
        self.count_read(at, len, None);
    }

    /// Counts a write of `len` bytes to the device's private memory in the host (a reorder
    /// buffer slot, say), kept on the device like the context memory: the TLPs, no data.
    pub fn account_context_write(&mut self, len: u64) {
        let at = len.next_power_of_two();
        self.count_write(at, len, None);
    }

    /// Whether `[addr, addr + len)` is reachable, without accessing it.
    pub fn probe(&mut self, addr: u64, len: usize) -> bool {
        self.route(addr, len).is_ok()
    }

    /// True when the routes changed since this port was taken (unmap, BAR move, bus master off).
    pub fn stale(&self, generation: u64) -> bool {
        self.fabric.generation() != generation
    }
}

impl Drop for DmaPort<'_> {
    fn drop(&mut self) {
        self.flush_peer();
        let (req, reads) = (self.tally.req, self.tally.read_operations);
        self.link_counters(self.requester, |c| c.add_tally(&req, reads, 0));
        self.fabric.host_counters.add(&self.tally.host);
    }
}

#[cfg(test)]
mod tests;
