//! fld-vfio-user-server: the card behind vfio-user sockets (what `fldemu serve` runs), one per
//! PCIe function, all sharing one fabric so NIC <-> FLD peer-to-peer traffic stays inside this
//! process. It depends on the device model only: it is a transport, not a driver.
//!
//! Each function's socket is served by its own thread: configuration space and BARs are trapped
//! regions forwarded to the function model; DMA maps arrive with file descriptors and become the
//! function's host mappings in the fabric (its own I/O address space, as under the guest's
//! IOMMU); SET_IRQS eventfds become the function's MSI-X vectors. The card itself advances on an
//! engine thread that polls the doorbells. A client that disconnects — cleanly or not — has its
//! mappings and eventfds dropped, and the socket serves the next client. A panic while handling
//! one client's message (the protocol crate trusts message sizes) ends that connection, not the
//! server.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fld_abi::pci::{OFF_BAR0, OFF_COMMAND, OFF_MSIX_CONTROL, OFF_PCIE_DEVCTL};
use fld_device::card::Card;
use fld_device::fabric::HostRegion;
use fld_device::pcie::{FunctionId, InterruptSink, MsiMessage, PciFunction};
use vfio_bindings::bindings::vfio::*;
pub use vfio_user::{DmaMapFlags, DmaUnmapFlags, ServerBackend};
use vfio_user::{IrqInfo, Server, ServerRegion, SparseArea};
use vm_memory::{FileOffset, GuestAddress, GuestRegionMmap, MmapRegion};

/// vfio-pci's region index of the configuration space (callers of [`FunctionBackend`] name it).
pub const CONFIG_REGION: u32 = VFIO_PCI_CONFIG_REGION_INDEX;
// vfio-pci's regions and interrupt indices per function, and MSI-X's index.
const NUM_REGIONS: u32 = 9;
const NUM_IRQS: u32 = 5;
const MSIX_IRQ: u32 = VFIO_PCI_MSIX_IRQ_INDEX;

/// MSI-X eventfds of every function, fed by the card's interrupt path.
#[derive(Default)]
pub struct EventfdSink {
    fds: Mutex<HashMap<(FunctionId, u16), File>>,
}

impl EventfdSink {
    fn set(&self, f: FunctionId, vector: u16, fd: Option<File>) {
        let mut fds = self.fds.lock().unwrap_or_else(|e| e.into_inner());
        match fd {
            Some(fd) => {
                fds.insert((f, vector), fd);
            }
            None => {
                fds.remove(&(f, vector));
            }
        }
    }

    fn clear(&self, f: FunctionId) {
        self.fds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(g, _), _| *g != f);
    }
}

impl InterruptSink for EventfdSink {
    fn deliver(&self, function: FunctionId, msg: MsiMessage) {
        if let Some(fd) = self
            .fds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(function, msg.vector))
        {
            let one = 1u64.to_ne_bytes();
            // SAFETY: writing 8 bytes from a valid buffer to an eventfd we own.
            let _ = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        }
    }
}

/// One function's side of a vfio-user connection: what each message reaches once the protocol
/// crate has decoded it ([`ServerBackend`]). Public so the message handling can be driven
/// without a socket (the `vfio_user_backend` fuzz target).
pub struct FunctionBackend {
    card: Arc<Card>,
    fid: FunctionId,
    irqs: Arc<EventfdSink>,
    /// One mapping per file the client's DMA maps refer to, by (device, inode).
    files: HashMap<(u64, u64), Arc<GuestRegionMmap>>,
}

impl FunctionBackend {
    /// Function `fid` of `card` for a new client: nothing mapped, MSI-X vectors in `irqs`.
    fn new(card: Arc<Card>, fid: FunctionId, irqs: Arc<EventfdSink>) -> Self {
        FunctionBackend {
            card,
            fid,
            irqs,
            files: HashMap::new(),
        }
    }

    /// Function `fid` of `card` served alone: the card's interrupts go to eventfds the client
    /// sets, and the function's MSI-X table is the client's to program.
    pub fn standalone(card: Arc<Card>, fid: FunctionId) -> Self {
        let irqs = Arc::new(EventfdSink::default());
        card.fabric.set_interrupt_sink(irqs.clone());
        if let Some(f) = card.fabric.function(fid) {
            f.pci().set_external_msix(true);
        }
        FunctionBackend::new(card, fid, irqs)
    }

    /// The memory behind a DMA map of `size` bytes at `offset` in `fd`, and the map's offset in
    /// it. Every map of one file (a guest's RAM arrives as one memfd, page by page, each map with
    /// its own descriptor) shares one mapping of the whole file: the server keeps one descriptor
    /// and one mmap per file instead of one per page, and the fabric merges contiguous pages.
    fn memory_for(
        &mut self,
        fd: File,
        offset: u64,
        size: u64,
    ) -> Result<(Arc<GuestRegionMmap>, u64), std::io::Error> {
        let meta = fd.metadata()?;
        let end = offset
            .checked_add(size)
            .ok_or_else(|| invalid("map size"))?;
        if meta.file_type().is_file() {
            // Pages past a file's end are no memory: the device's first access there would kill
            // the server (SIGBUS), where the client must get an error.
            if end > meta.len() {
                return Err(invalid("DMA map past the end of its file"));
            }
            use std::os::unix::fs::MetadataExt;
            let key = (meta.dev(), meta.ino());
            if let Some(m) = self.files.get(&key) {
                return Ok((m.clone(), offset));
            }
            seal_against_shrinking(&fd)?;
            let mmap = MmapRegion::from_file(FileOffset::new(fd, 0), meta.len() as usize)
                .map_err(|e| invalid(&format!("mmap: {e}")))?;
            let region = Arc::new(
                GuestRegionMmap::new(mmap, GuestAddress(0)).ok_or_else(|| invalid("bad region"))?,
            );
            self.files.insert(key, region.clone());
            return Ok((region, offset));
        }
        // Not a regular file (a device's memory): map just the window.
        let mmap = MmapRegion::from_file(FileOffset::new(fd, offset), size as usize)
            .map_err(|e| invalid(&format!("mmap: {e}")))?;
        let region =
            GuestRegionMmap::new(mmap, GuestAddress(0)).ok_or_else(|| invalid("bad region"))?;
        Ok((Arc::new(region), 0))
    }

    /// Drops every DMA map: the function's I/O address space belongs to this client alone.
    fn unmap_all(&mut self) {
        self.card.fabric.unmap_host(self.fid, 0, u64::MAX);
        self.card.wait_for_dma_in_flight();
        self.files.clear();
    }

    /// The client has gone: its DMA maps and eventfds go with it.
    pub fn disconnect(&mut self) {
        self.unmap_all();
        self.irqs.clear(self.fid);
    }
}

/// A file the device's memory lives in must not shrink while it is mapped: the pages past a
/// shrunk file's end are no memory, and the device's next access there would kill the server
/// with SIGBUS, where the client must get an error. A memfd already sealed against shrinking
/// (QEMU's `memory-backend-memfd` seals guest RAM so, `seal=on` being its default) is taken as
/// it is; a memfd that can still take seals is sealed here; any other file is refused, failing
/// closed, since nothing the server can do stops its owner from truncating it.
fn seal_against_shrinking(file: &File) -> Result<(), std::io::Error> {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor this function borrows; no memory is passed.
    let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
    if seals >= 0 && seals & libc::F_SEAL_SHRINK != 0 {
        return Ok(());
    }
    // SAFETY: as above; F_ADD_SEALS takes an integer argument.
    if seals >= 0
        && seals & libc::F_SEAL_SEAL == 0
        && unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) } == 0
    {
        return Ok(());
    }
    Err(invalid(
        "DMA map of a file that can shrink: guest RAM must be a memfd sealed against \
         shrinking, or one the server may seal (QEMU: memory-backend-memfd with seal=on, the \
         default)",
    ))
}

fn invalid(msg: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, msg.to_string())
}

impl FunctionBackend {
    /// Whether a client's access of `len` bytes at `offset` lies inside the region it names.
    /// Outside, it is answered as a bus answers an access to nothing — reads all ones, writes
    /// dropped — and never reaches a BAR handler (the fuzz target found a read at an offset
    /// near 2^64 overflowing inside FLD's register file).
    fn inside(&self, region: u32, offset: u64, len: usize) -> bool {
        let size = if region == CONFIG_REGION {
            4096
        } else {
            self.card
                .fabric
                .function(self.fid)
                .and_then(|f| {
                    let cfg = f.pci().config();
                    cfg.bars()
                        .iter()
                        .find(|b| u32::from(b.index) == region)
                        .map(|b| b.size)
                })
                .unwrap_or(0)
        };
        offset
            .checked_add(len as u64)
            .is_some_and(|end| end <= size)
    }
}

impl ServerBackend for FunctionBackend {
    fn region_read(
        &mut self,
        region: u32,
        offset: u64,
        data: &mut [u8],
    ) -> Result<(), std::io::Error> {
        oversized_transfer(data.len())?;
        if !self.inside(region, offset, data.len()) {
            data.fill(0xff);
            return Ok(());
        }
        match region {
            CONFIG_REGION => self.card.fabric.config_read(self.fid, offset, data),
            0..=5 => match self.card.fabric.function(self.fid) {
                Some(f) => f.bar_read(region as u8, offset, data),
                None => data.fill(0xff),
            },
            _ => data.fill(0xff),
        }
        Ok(())
    }

    fn region_write(
        &mut self,
        region: u32,
        offset: u64,
        data: &[u8],
    ) -> Result<(), std::io::Error> {
        oversized_transfer(data.len())?;
        if !self.inside(region, offset, data.len()) {
            return Ok(());
        }
        match region {
            CONFIG_REGION => {
                log::trace!(
                    "function {}: config write {offset:#x} {data:02x?}",
                    self.fid
                );
                // "Initiate FLR" in PCIe Device Control: reset as vfio-pci does, keeping the
                // configuration the client programmed (see `reset`).
                const FLR_BYTE: u64 = (OFF_PCIE_DEVCTL + 1) as u64;
                let flr_at = FLR_BYTE
                    .checked_sub(offset)
                    .filter(|i| *i < data.len() as u64)
                    .map(|i| i as usize);
                match flr_at {
                    Some(i) if data[i] & 0x80 != 0 => {
                        let mut without = data.to_vec();
                        without[i] &= !0x80;
                        self.card.fabric.config_write(self.fid, offset, &without);
                        log::info!("function {}: FLR", self.fid);
                        self.reset()?;
                    }
                    _ => self.card.fabric.config_write(self.fid, offset, data),
                }
            }
            0..=5 => {
                if let Some(f) = self.card.fabric.function(self.fid) {
                    f.bar_write(region as u8, offset, data)
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn dma_map(
        &mut self,
        _flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> Result<(), std::io::Error> {
        log::debug!(
            "function {}: DMA map {address:#x}+{size:#x} (fd offset {offset:#x}, fd {})",
            self.fid,
            fd.is_some()
        );
        let Some(fd) = fd else {
            // Memory the client cannot share, which the device cannot reach: QEMU's ROM and
            // firmware areas, and guest RAM without memory-backend-memfd,share=on.
            log::info!("function {}: DMA map {address:#x}+{size:#x} without a file descriptor is unreachable", self.fid);
            return Ok(());
        };
        let (memory, memory_offset) = self.memory_for(fd, offset, size)?;
        self.card
            .fabric
            .map_host(
                self.fid,
                HostRegion {
                    iova: address,
                    len: size,
                    memory,
                    offset: memory_offset,
                },
            )
            .map_err(|e| invalid(&e.to_string()))?;
        Ok(())
    }

    fn dma_unmap(
        &mut self,
        flags: DmaUnmapFlags,
        address: u64,
        size: u64,
    ) -> Result<(), std::io::Error> {
        log::debug!(
            "function {}: DMA unmap {address:#x}+{size:#x} flags {flags:?}",
            self.fid
        );
        // The reply says the memory is no longer accessed (vfio-user, VFIO_USER_DMA_UNMAP): an
        // engine step that began with the old map ends first.
        if flags.contains(DmaUnmapFlags::UNMAP_ALL) {
            self.unmap_all();
        } else {
            self.card.fabric.unmap_host(self.fid, address, size);
            self.card.wait_for_dma_in_flight();
        }
        Ok(())
    }

    /// VFIO_DEVICE_RESET as the kernel's vfio-pci performs it: the function is reset, and the
    /// configuration the client programmed (BAR addresses, command register, PCIe device
    /// control, MSI-X enable) is saved before and restored after, so the device stays where the
    /// guest placed it. Without the restore a guest's vfio-pci, which resets the function when
    /// it opens it, would find every BAR at zero and peer-to-peer addresses unroutable.
    fn reset(&mut self) -> Result<(), std::io::Error> {
        log::info!("function {}: reset", self.fid);
        let fabric = &self.card.fabric;
        let saved: Vec<(u64, Vec<u8>)> = [
            (OFF_BAR0, 24),
            (OFF_PCIE_DEVCTL, 2),
            (OFF_MSIX_CONTROL, 2),
            (OFF_COMMAND, 2),
        ]
        .iter()
        .map(|&(off, len)| {
            let mut v = vec![0; len];
            fabric.config_read(self.fid, off as u64, &mut v);
            (off as u64, v)
        })
        .collect();
        fabric.reset_function(self.fid);
        for (off, v) in saved {
            fabric.config_write(self.fid, off, &v);
        }
        Ok(())
    }

    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> Result<(), std::io::Error> {
        log::debug!("function {}: SET_IRQS index {index} flags {flags:#x} start {start} count {count}, {} fds", self.fid, fds.len());
        if index != MSIX_IRQ {
            return Ok(());
        }
        let vectors = self
            .card
            .fabric
            .function(self.fid)
            .and_then(|f| f.pci().config().msix_spec())
            .map_or(0, |m| m.vectors as u32);
        if start.checked_add(count).is_none_or(|e| e > vectors) {
            return Err(invalid("MSI-X vector range"));
        }
        if flags & VFIO_IRQ_SET_DATA_EVENTFD != 0 {
            let mut fds = fds.into_iter();
            for v in start..start + count {
                self.irqs.set(self.fid, v as u16, fds.next());
            }
        } else if flags & VFIO_IRQ_SET_DATA_NONE != 0 && count == 0 {
            self.irqs.clear(self.fid);
        }
        Ok(())
    }
}

/// Memory shared with clients for one BAR: the client maps it (QEMU straight into the guest) and
/// the device polls it, so stores into it need no message.
struct SharedBar {
    bar: u32,
    file: File,
}

/// Gives every NIC function's doorbell page shared memory (a memfd) and returns it per function.
fn share_doorbells(card: &Card) -> std::io::Result<HashMap<FunctionId, SharedBar>> {
    use fld_abi::nic::{BAR_DOORBELL, BAR_DOORBELL_SIZE};
    let mut shared = HashMap::new();
    for f in card.nic.functions() {
        // SAFETY: memfd_create with a valid name; the result is checked and owned by a File.
        let file = unsafe {
            let fd = libc::memfd_create(c"fldemu-doorbells".as_ptr(), libc::MFD_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            File::from_raw_fd(fd)
        };
        file.set_len(BAR_DOORBELL_SIZE)?;
        let mmap = MmapRegion::from_file(
            FileOffset::new(file.try_clone()?, 0),
            BAR_DOORBELL_SIZE as usize,
        )
        .map_err(|e| std::io::Error::other(format!("doorbell mmap: {e}")))?;
        let region = GuestRegionMmap::new(mmap, GuestAddress(0))
            .ok_or_else(|| invalid("doorbell region"))?;
        f.doorbells()
            .use_memory(Arc::new(region))
            .map_err(std::io::Error::other)?;
        shared.insert(
            f.pci().id,
            SharedBar {
                bar: BAR_DOORBELL as u32,
                file,
            },
        );
    }
    Ok(shared)
}

/// Regions and interrupts a function advertises. `shared` is the BAR whose whole area clients
/// may mmap (with the file to map); every other region is trapped.
fn describe(
    card: &Card,
    fid: FunctionId,
    shared: Option<&SharedBar>,
) -> (Vec<ServerRegion>, Vec<IrqInfo>) {
    let f = card.fabric.function(fid);
    let (bars, vectors) = f.map_or((vec![], 0), |f| {
        let cfg = f.pci().config();
        (
            cfg.bars().to_vec(),
            cfg.msix_spec().map_or(0, |m| m.vectors as u32),
        )
    });
    let regions = (0..NUM_REGIONS)
        .map(|index| {
            let (size, flags) = if index == CONFIG_REGION {
                (
                    4096,
                    VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE,
                )
            } else {
                bars.iter()
                    .find(|b| b.index as u32 == index)
                    .map_or((0, 0), |b| {
                        (
                            b.size,
                            VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE,
                        )
                    })
            };
            let mappable = shared.filter(|s| s.bar == index && size > 0);
            let region_info = vfio_region_info {
                argsz: std::mem::size_of::<vfio_region_info>() as u32,
                flags: flags | mappable.map_or(0, |_| VFIO_REGION_INFO_FLAG_MMAP),
                index,
                cap_offset: 0,
                size,
                offset: 0,
            };
            // The protocol crate hands the file over only with a sparse-mmap capability: one
            // area covering the BAR.
            ServerRegion {
                region_info,
                sparse_areas: mappable.map_or_else(Vec::new, |_| {
                    vec![SparseArea {
                        area: vfio_region_sparse_mmap_area { offset: 0, size },
                    }]
                }),
                mmap_fd: mappable.map(|s| s.file.as_raw_fd()),
            }
        })
        .collect();
    let irqs = (0..NUM_IRQS)
        .map(|index| {
            if index == MSIX_IRQ {
                IrqInfo {
                    index,
                    flags: VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_NORESIZE,
                    count: vectors,
                }
            } else {
                IrqInfo {
                    index,
                    flags: VFIO_IRQ_INFO_EVENTFD,
                    count: 0,
                }
            }
        })
        .collect();
    (regions, irqs)
}

/// Names of the sockets, in fabric order: `nic0.sock`, `nic1.sock`, ..., `fld.sock`.
pub fn socket_names(card: &Card) -> Vec<(FunctionId, String)> {
    let mut v = Vec::new();
    for i in 0.. {
        match card.nic.function_id(i) {
            Some(fid) => v.push((fid, format!("nic{i}.sock"))),
            None => break,
        }
    }
    v.push((card.fld.id(), "fld.sock".to_string()));
    v
}

/// Serves every function of `card` under `dir` until `stop` is set. Returns when all threads
/// have finished.
pub fn serve(card: Arc<Card>, dir: &Path, stop: Arc<AtomicBool>) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    // The guest runs in real time: so do the card's timers, meters and timestamps.
    card.set_clock(Arc::new(fld_device::clock::WallClock::default()));
    let irqs = Arc::new(EventfdSink::default());
    card.fabric.set_interrupt_sink(irqs.clone());
    // Lives until every server thread has ended: the servers hand its descriptors to clients.
    let shared_bars = share_doorbells(&card)?;
    let mut threads = Vec::new();
    for (fid, name) in socket_names(&card) {
        if let Some(f) = card.fabric.function(fid) {
            f.pci().set_external_msix(true);
        }
        let path = dir.join(&name);
        // A socket left by an earlier run that is gone: nobody listens on it any more.
        if path.exists() && std::os::unix::net::UnixStream::connect(&path).is_err() {
            std::fs::remove_file(&path)?;
        }
        let (regions, irq_info) = describe(&card, fid, shared_bars.get(&fid));
        let server = Server::new(&path, true, irq_info, regions)
            .map_err(|e| std::io::Error::other(format!("{}: {e}", path.display())))?;
        let (card, irqs, stop) = (card.clone(), irqs.clone(), stop.clone());
        threads.push(
            std::thread::Builder::new()
                .name(format!("vfio-user {name}"))
                .spawn(move || serve_function(server, card, fid, irqs, stop, path))?,
        );
    }
    let engine = {
        let (card, stop) = (card.clone(), stop.clone());
        std::thread::Builder::new()
            .name("engine".into())
            .spawn(move || run_engine(&card, &stop))?
    };
    for t in threads {
        let _ = t.join();
    }
    let _ = engine.join();
    drop(shared_bars);
    Ok(())
}

fn serve_function(
    server: Server,
    card: Arc<Card>,
    fid: FunctionId,
    irqs: Arc<EventfdSink>,
    stop: Arc<AtomicBool>,
    path: PathBuf,
) {
    let name = path.display().to_string();
    while !stop.load(Ordering::Relaxed) {
        let mut backend = FunctionBackend::new(card.clone(), fid, irqs.clone());
        log::info!("{name}: waiting for a client");
        match serve_client(&server, &mut backend) {
            Ok(()) => log::info!("{name}: client disconnected"),
            Err(e) => log::warn!("{name}: connection ended: {e}"),
        }
    }
}

/// The largest region access a client may ask for: the protocol's `max_data_xfer_size`, which
/// the server advertises as 1 MiB during version negotiation (vfio-user spec, "Version").
pub const MAX_DATA_TRANSFER: usize = 1 << 20;

/// A larger access breaks the protocol: the connection ends before the buffer the protocol
/// crate sized from the client's count is touched (its pages stay unbacked), so a hostile
/// count near 4 GiB costs address space, not memory.
fn oversized_transfer(len: usize) -> Result<(), std::io::Error> {
    if len > MAX_DATA_TRANSFER {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("region access of {len} bytes exceeds max_data_xfer_size"),
        ));
    }
    Ok(())
}

/// Serves one client until it disconnects or sends what cannot be handled; its DMA maps and
/// eventfds go with it. The protocol crate trusts message sizes and may panic on a malformed
/// message: that ends the connection, not the server.
fn serve_client(server: &Server, backend: &mut FunctionBackend) -> Result<(), String> {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.run(backend)));
    backend.disconnect();
    match result {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err("malformed message from the client; connection dropped".into()),
    }
}

/// One function served to one client at a time on a listener the caller made (a socket
/// without a path, say): what [`serve`] runs per socket, for tests and fuzz targets. Every BAR
/// is trapped; MSI-X vectors are the eventfds the client sets.
pub struct FunctionServer {
    server: Server,
    backend: FunctionBackend,
}

impl FunctionServer {
    pub fn new(card: Arc<Card>, fid: FunctionId, listener: UnixListener) -> Self {
        let (regions, irq_info) = describe(&card, fid, None);
        let server = Server::from_owned_fd(listener.into(), true, irq_info, regions);
        FunctionServer {
            server,
            backend: FunctionBackend::standalone(card, fid),
        }
    }

    /// Accepts the next client and serves it until it disconnects.
    pub fn serve_client(&mut self) -> Result<(), String> {
        serve_client(&self.server, &mut self.backend)
    }
}

/// Advances the card. While nothing moves it backs off: it keeps polling for
/// [`SPIN_AFTER_WORK`], then sleeps 20 us at a time, and after about a second of idleness 1 ms
/// at a time, so an idle guest costs the host almost nothing and only the first doorbell after a
/// long pause waits up to a millisecond. The spell of polling is timed, not counted in passes:
/// a guest under TCG takes hundreds of microseconds between a completion and its next doorbell,
/// and an engine pass takes a microsecond or less, so a count of passes would put the engine to
/// sleep just before the doorbell it is waiting for.
fn run_engine(card: &Card, stop: &AtomicBool) {
    const SHORT_SLEEPS: u32 = 50_000;
    let mut last_work = Instant::now();
    let mut sleeps = 0u32;
    while !stop.load(Ordering::Relaxed) {
        if card.poll() > 0 {
            last_work = Instant::now();
            sleeps = 0;
            continue;
        }
        if last_work.elapsed() < SPIN_AFTER_WORK {
            std::hint::spin_loop();
        } else if sleeps < SHORT_SLEEPS {
            sleeps += 1;
            std::thread::sleep(Duration::from_micros(20));
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// How long the engine keeps polling after it last found work.
const SPIN_AFTER_WORK: Duration = Duration::from_millis(2);

#[cfg(test)]
mod tests {
    use super::*;
    use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

    fn backend() -> (FunctionBackend, Arc<EventfdSink>) {
        let card = Card::new(Default::default());
        let irqs = Arc::new(EventfdSink::default());
        card.fabric.set_interrupt_sink(irqs.clone());
        let fid = card.nic.function_id(0).expect("NIC function 0");
        (FunctionBackend::new(card, fid, irqs.clone()), irqs)
    }

    /// A region access larger than the advertised max_data_xfer_size ends the connection
    /// without the buffer being touched (the vfio_user_msg fuzz target asked for 3 GiB, and
    /// filling it with all ones exhausted memory); the largest allowed one is still answered.
    #[test]
    fn an_access_beyond_max_data_xfer_size_is_refused_untouched() {
        let (mut b, _) = backend();
        let mut big = vec![0u8; MAX_DATA_TRANSFER + 1];
        let e = b.region_read(CONFIG_REGION, 0, &mut big).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(
            big.iter().all(|&x| x == 0),
            "refused before any byte was written"
        );
        assert!(b.region_write(CONFIG_REGION, 0, &big).is_err());
        let mut max = vec![0u8; MAX_DATA_TRANSFER];
        b.region_read(CONFIG_REGION, 0, &mut max).unwrap();
        assert!(
            max.iter().all(|&x| x == 0xff),
            "outside the 4 KiB space: all ones"
        );
    }

    /// Region accesses outside the region read all ones and write nothing, and never reach a
    /// BAR handler (an offset near 2^64 overflowed inside FLD's register file: found by the
    /// vfio_user_msg fuzz target).
    #[test]
    fn accesses_beyond_a_region_read_ones_and_write_nothing() {
        let (mut b, _) = backend();
        b.fid = b.card.fld.id();
        let mut buf = [0u8; 8];
        for (region, offset) in [
            (0, u64::MAX - 3),
            (2, 1 << 40),
            (1, 0),
            (CONFIG_REGION, 4092),
        ] {
            buf.fill(0);
            b.region_read(region, offset, &mut buf).unwrap();
            assert_eq!(buf, [0xff; 8], "region {region} at {offset:#x}");
            b.region_write(region, offset, &[0x5a; 8]).unwrap();
        }
        b.region_read(CONFIG_REGION, 0, &mut buf).unwrap();
        assert_eq!(
            u16::from_le_bytes([buf[0], buf[1]]),
            fld_abi::pci::PCI_VENDOR_ID,
            "inside the region, the register"
        );
    }

    /// A descriptor for the same eventfd, as a message would carry it.
    fn file_of(e: &EventFd) -> File {
        // SAFETY: dup of a live descriptor; the File owns the copy.
        unsafe { File::from_raw_fd(libc::dup(e.as_raw_fd())) }
    }

    fn fire(irqs: &EventfdSink, fid: FunctionId, vector: u16) {
        irqs.deliver(
            fid,
            MsiMessage {
                vector,
                address: 0,
                data: 0,
            },
        );
    }

    /// A client that sends several vectors in one SET_IRQS (the protocol crate receives up to
    /// 16 descriptors per message, whatever it advertises) gets each eventfd on its own vector;
    /// a later message with fewer descriptors than vectors leaves the rest unsignalled.
    #[test]
    fn one_set_irqs_message_with_several_eventfds() {
        let (mut b, irqs) = backend();
        let fds: Vec<EventFd> = (0..4)
            .map(|_| EventFd::new(EFD_NONBLOCK).unwrap())
            .collect();
        let files: Vec<File> = fds.iter().map(file_of).collect();
        b.set_irqs(
            MSIX_IRQ,
            VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
            3,
            4,
            files,
        )
        .unwrap();
        for v in [5u16, 3, 6, 5] {
            fire(&irqs, b.fid, v);
        }
        let counts: Vec<u64> = fds.iter().map(|e| e.read().unwrap_or(0)).collect();
        assert_eq!(counts, [1, 0, 2, 1], "vectors 3, 4, 5, 6 in order");
        // Vectors 3..5 again, with one descriptor: 3 gets it, 4 loses its eventfd.
        let again = EventFd::new(EFD_NONBLOCK).unwrap();
        b.set_irqs(
            MSIX_IRQ,
            VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
            3,
            2,
            vec![file_of(&again)],
        )
        .unwrap();
        fire(&irqs, b.fid, 3);
        fire(&irqs, b.fid, 4);
        assert_eq!(again.read().unwrap(), 1);
        assert!(fds[1].read().is_err(), "vector 4 no longer signals");
        // A range past the function's vectors is refused.
        assert!(b
            .set_irqs(
                MSIX_IRQ,
                VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
                60,
                8,
                vec![],
            )
            .is_err());
    }

    /// A memfd of `len` bytes that can take seals, as QEMU makes guest RAM.
    fn memfd(len: u64) -> File {
        // SAFETY: a NUL-terminated name; the descriptor returned is checked and owned here.
        let fd = unsafe { libc::memfd_create(c"fld-test-ram".as_ptr(), libc::MFD_ALLOW_SEALING) };
        assert!(fd >= 0, "memfd_create");
        // SAFETY: `fd` is a new descriptor nothing else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(len).unwrap();
        file
    }

    /// A file that could shrink under a DMA map would let its owner turn the device's next
    /// access into SIGBUS. A memfd that can take seals is sealed against shrinking by its first
    /// map (its owner can no longer truncate it); one its owner sealed so is taken; a memfd that
    /// takes no seals, and a file that is no memfd, are refused and map nothing.
    #[test]
    fn only_memory_that_cannot_shrink_is_mapped() {
        let (mut b, _) = backend();
        let map = |b: &mut FunctionBackend, file: &File, iova: u64| {
            let fd = file.try_clone().unwrap();
            b.dma_map(DmaMapFlags::READ_WRITE, 0, iova, 0x1000, Some(fd))
        };
        let sealable = memfd(0x1000);
        assert!(map(&mut b, &sealable, 0x100_0000).is_ok());
        assert!(
            sealable.set_len(0).is_err(),
            "the map sealed it against shrinking"
        );
        let sealed = memfd(0x1000);
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on a descriptor the test owns, with an integer argument.
        assert_eq!(
            unsafe { libc::fcntl(sealed.as_raw_fd(), libc::F_ADD_SEALS, seals) },
            0
        );
        assert!(map(&mut b, &sealed, 0x200_0000).is_ok());
        // SAFETY: a NUL-terminated name; the descriptor returned is checked and owned here.
        let fd = unsafe { libc::memfd_create(c"fld-test-unsealable".as_ptr(), 0) };
        assert!(fd >= 0, "memfd_create");
        // SAFETY: `fd` is a new descriptor nothing else owns.
        let unsealable = unsafe { File::from_raw_fd(fd) };
        unsealable.set_len(0x1000).unwrap();
        let refused = map(&mut b, &unsealable, 0x300_0000).unwrap_err();
        assert!(refused.to_string().contains("can shrink"), "{refused}");
        let path = std::env::temp_dir().join(format!("fld-test-ram-{}", std::process::id()));
        let plain = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        plain.set_len(0x1000).unwrap();
        assert!(map(&mut b, &plain, 0x400_0000).is_err(), "not a memfd");
        assert_eq!(b.card.fabric.host_mapping_count(b.fid), 2);
    }

    /// A DMA map must lie inside its file: a page past a regular file's end is no memory, and
    /// the device's first access to it would kill the server (SIGBUS). Such a map was mapped as
    /// a window and is now refused, mapping nothing; maps inside the file are taken, and the
    /// device reads what the client wrote.
    #[test]
    fn a_dma_map_past_the_end_of_its_file_is_refused() {
        use std::os::unix::fs::FileExt;
        let (mut b, _) = backend();
        let ram = memfd(0x10000);
        ram.write_all_at(b"guest bytes", 0x8000).unwrap();
        let map = |b: &mut FunctionBackend, offset: u64, size: u64| {
            let fd = ram.try_clone().unwrap();
            b.dma_map(
                DmaMapFlags::READ_WRITE,
                offset,
                0x100_0000 + offset,
                size,
                Some(fd),
            )
        };
        assert!(
            map(&mut b, 0xf000, 0x2000).is_err(),
            "one page past the end"
        );
        assert!(map(&mut b, 0x10000, 0x1000).is_err(), "starting at the end");
        assert!(map(&mut b, 0xf000, u64::MAX).is_err(), "a size that wraps");
        assert_eq!(b.card.fabric.host_mapping_count(b.fid), 0);
        assert!(map(&mut b, 0x8000, 0x8000).is_ok(), "the file's last half");
        assert_eq!(b.card.fabric.host_mapping_count(b.fid), 1);
        // Bus master on, as the client's driver sets it, so the function may read.
        b.region_write(CONFIG_REGION, OFF_COMMAND as u64, &[0x06, 0])
            .unwrap();
        let mut seen = [0u8; 11];
        b.card
            .fabric
            .dma(b.fid)
            .read(0x100_8000, &mut seen)
            .unwrap();
        assert_eq!(&seen, b"guest bytes");
    }

    /// A function served on a listener the caller made: a client reads the configuration
    /// space, its connection ends, the server returns, and the client's DMA maps are gone.
    #[test]
    fn a_function_server_serves_one_client_on_the_callers_listener() {
        let card = Card::new(Default::default());
        let fid = card.nic.function_id(1).expect("NIC function 1");
        let dir = std::env::temp_dir().join(format!("fld-fs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nic1.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let mut server = FunctionServer::new(card.clone(), fid, listener);
        let serving = std::thread::spawn(move || server.serve_client());
        let mut client = vfio_user::Client::new(&path).unwrap();
        let mut id = [0u8; 4];
        client.region_read(CONFIG_REGION, 0, &mut id).unwrap();
        assert_eq!(id, [0xf0, 0xff, 0x00, 0xf1], "vendor 0xfff0, device 0xf100");
        client.shutdown().unwrap();
        drop(client);
        assert!(serving.join().unwrap().is_ok());
        assert_eq!(card.fabric.host_mapping_count(fid), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
