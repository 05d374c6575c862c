//! Protection domains and memory regions (IBA §10.6): a key names a region of one function and
//! one PD; an access checks the key, the PD, the rights and the range, then translates the
//! region's virtual addresses page by page through its MTT, which lives in host memory: a
//! translation the on-chip cache ([`super::cache`]) holds costs nothing, a miss reads the entry
//! by DMA (a PCIe read the fabric counts). As on an RNIC, software changes a registered
//! region's MTT only through the NIC (deregistering invalidates its cached entries).
//!
//! Left out: memory windows, fast-register and invalidate, on-demand paging, zero-based regions.

use fld_abi::nic::{access, mkey_index, MTT_ENTRY_SIZE, RESERVED_LKEY};

use super::cache::LruCache;
use crate::fabric::DmaPort;

/// The translation cache: (function, bus address of the MTT entry) → the page's bus address.
pub(crate) type MttCache = LruCache<(u16, u64), u64>;
/// The cache as the transport holds it: translations happen while other parts of the RDMA
/// state are borrowed (the frame being filled), and the engine is single-threaded.
pub(crate) type SharedMttCache = std::cell::RefCell<MttCache>;
use crate::nic::queues::{Owned, Referenced, Slab};

#[derive(Clone)]
pub(crate) struct ProtectionDomain {
    pub owner: u16,
    /// Regions, QPs and SRQs in the domain.
    pub refs: u32,
}

#[derive(Clone)]
pub(crate) struct MemoryRegion {
    pub owner: u16,
    pub pd: u32,
    pub key: u32,
    pub access: u32,
    pub start: u64,
    pub length: u64,
    pub mtt_addr: u64,
    pub log_page_size: u8,
    /// In-flight operations holding the region (none yet: operations resolve keys per packet).
    pub refs: u32,
    /// A StaR server's region its client holds (`MR_FLAG_STAR_PEER`): the server's key. Never
    /// accessed by DMA: its MTT names the server's bus addresses.
    pub peer_key: Option<u32>,
}

impl Owned for ProtectionDomain {
    fn owner(&self) -> u16 {
        self.owner
    }
}
impl Owned for MemoryRegion {
    fn owner(&self) -> u16 {
        self.owner
    }
}
impl Referenced for ProtectionDomain {
    fn refs_mut(&mut self) -> &mut u32 {
        &mut self.refs
    }
}
impl Referenced for MemoryRegion {
    fn refs_mut(&mut self) -> &mut u32 {
        &mut self.refs
    }
}

/// Why an access was refused. Local accesses turn these into completion errors, remote ones into
/// NAKs (IBA §9.7.5.1.3, §10.6.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AccessError {
    /// No region has the key (index unknown, or the key's variant byte differs), or it belongs
    /// to another function.
    BadKey,
    /// The region is in another protection domain than the QP.
    WrongPd,
    /// The region does not grant the right the operation needs.
    NoRight,
    /// The range leaves the region.
    OutOfBounds,
    /// The MTT or a page it names is not reachable by DMA.
    Dma,
}

/// A checked access to `[va, va + len)`: either a region and its translation, or (lkey 0) bus
/// addresses of the function itself, as a kernel consumer's reserved lkey gives.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Target {
    Region {
        owner: u16,
        start: u64,
        mtt_addr: u64,
        log_page_size: u8,
    },
    Bus,
}

/// Resolves `key` for an access of `len` bytes at `va` by a QP of `owner` in `pd` needing
/// `right` (0 for a local read, which every region allows). `local` accesses may use the
/// reserved lkey.
#[allow(clippy::too_many_arguments)]
pub(crate) fn check(
    mrs: &Slab<MemoryRegion>,
    owner: u16,
    pd: u32,
    key: u32,
    va: u64,
    len: u64,
    right: u32,
    local: bool,
) -> Result<Target, AccessError> {
    if local && key == RESERVED_LKEY {
        return Ok(Target::Bus);
    }
    // Region `i` has a key of index `i + 1` (index 0 is no region).
    let mr = mkey_index(key)
        .checked_sub(1)
        .and_then(|i| mrs.get(i))
        .filter(|m| m.key == key && m.owner == owner && m.peer_key.is_none())
        .ok_or(AccessError::BadKey)?;
    region_access(mr, pd, va, len, right)
}

/// Resolves a StaR server's `peer_key` for a client of `owner` in `pd` (its region held by
/// `index`, see [`crate::nic::rdma::Rdma::peer_region`]): the translation names the server's bus
/// addresses, for RDPs and GDs, never for this NIC's DMA.
pub(crate) fn check_peer(
    mrs: &Slab<MemoryRegion>,
    index: Option<u32>,
    pd: u32,
    va: u64,
    len: u64,
    right: u32,
) -> Result<Target, AccessError> {
    let mr = index
        .and_then(|i| mrs.get(i))
        .filter(|m| m.peer_key.is_some())
        .ok_or(AccessError::BadKey)?;
    region_access(mr, pd, va, len, right)
}

/// The PD, rights and range checks every key resolution makes.
fn region_access(
    mr: &MemoryRegion,
    pd: u32,
    va: u64,
    len: u64,
    right: u32,
) -> Result<Target, AccessError> {
    if mr.pd != pd {
        return Err(AccessError::WrongPd);
    }
    if mr.access & right != right {
        return Err(AccessError::NoRight);
    }
    // A zero-length access names no memory; only the key's ownership is checked (IBA 9.7.4.1.4
    // lets a zero-length RDMA carry any address).
    if len > 0 {
        let end = va.checked_add(len).ok_or(AccessError::OutOfBounds)?;
        if va < mr.start || end > mr.start + mr.length {
            return Err(AccessError::OutOfBounds);
        }
    }
    Ok(Target::Region {
        owner: mr.owner,
        start: mr.start,
        mtt_addr: mr.mtt_addr,
        log_page_size: mr.log_page_size,
    })
}

/// Drops the cached translations of `function`'s MTT entries in `[mtt_addr, mtt_addr + pages)`
/// (a region deregistered), or of all its entries with `None` (a function reset).
pub(crate) fn invalidate(cache: &mut MttCache, function: u16, mtt: Option<(u64, u64)>) {
    cache.invalidate(|&(f, entry)| {
        f == function
            && mtt.is_none_or(|(addr, pages)| {
                (addr..addr.saturating_add(pages * MTT_ENTRY_SIZE as u64)).contains(&entry)
            })
    });
}

/// The right a local buffer needs: LOCAL_WRITE when the NIC writes it.
pub(crate) const fn local_right(nic_writes: bool) -> u32 {
    if nic_writes {
        access::LOCAL_WRITE
    } else {
        0
    }
}

impl Target {
    /// Calls `f(bus_address, offset_in_access, chunk_len)` for each page-contiguous piece of
    /// `[va, va + len)`, translating each page through the cache or, on a miss, its MTT entry
    /// read by DMA.
    fn for_each_chunk(
        &self,
        dma: &mut DmaPort<'_>,
        cache: &SharedMttCache,
        va: u64,
        len: usize,
        mut f: impl FnMut(&mut DmaPort<'_>, u64, usize, usize) -> Result<(), AccessError>,
    ) -> Result<(), AccessError> {
        match *self {
            Target::Bus => f(dma, va, 0, len),
            Target::Region {
                owner,
                start,
                mtt_addr,
                log_page_size,
            } => {
                let page = 1u64 << log_page_size;
                let first_page = start >> log_page_size;
                let mut done = 0usize;
                while done < len {
                    let at = va + done as u64;
                    let index = (at >> log_page_size) - first_page;
                    let entry_addr = mtt_addr + index * MTT_ENTRY_SIZE as u64;
                    let cached = cache.borrow_mut().lookup(&(owner, entry_addr));
                    let base = match cached {
                        Some(b) => b,
                        None => {
                            let mut entry = [0u8; MTT_ENTRY_SIZE];
                            dma.read(entry_addr, &mut entry)
                                .map_err(|_| AccessError::Dma)?;
                            // Entries are page aligned; low bits are ignored as a page table's
                            // are.
                            let b = u64::from_le_bytes(entry) & !(page - 1);
                            cache.borrow_mut().insert((owner, entry_addr), b);
                            b
                        }
                    };
                    let in_page = at & (page - 1);
                    let n = ((page - in_page) as usize).min(len - done);
                    f(dma, base + in_page, done, n)?;
                    done += n;
                }
                Ok(())
            }
        }
    }

    /// Whether every page of `[va, va + len)` has its translation on chip (a bus target
    /// needs none).
    pub fn translated(&self, cache: &SharedMttCache, va: u64, len: usize) -> bool {
        let Some((owner, _, entries)) = self.entries(va, len) else {
            return true;
        };
        let cache = cache.borrow();
        entries.into_iter().all(|e| cache.contains(&(owner, e)))
    }

    /// A region's owner, page size and the bus addresses of the MTT entries of the pages
    /// `[va, va + len)` touches; `None` for a bus target.
    fn entries(&self, va: u64, len: usize) -> Option<(u16, u8, impl IntoIterator<Item = u64>)> {
        let Target::Region {
            owner,
            start,
            mtt_addr,
            log_page_size,
        } = *self
        else {
            return None;
        };
        let first = (va >> log_page_size) - (start >> log_page_size);
        let last = ((va + len.max(1) as u64 - 1) >> log_page_size) - (start >> log_page_size);
        let entries = (first..=last).map(move |i| mtt_addr + i * MTT_ENTRY_SIZE as u64);
        Some((owner, log_page_size, entries))
    }

    /// Reads in the background the translations of `[va, va + len)` the cache lacks, so later
    /// accesses hit (a staged WRITE's pages: `crate::nic::rdma::staging`). A page whose entry
    /// cannot be read is left out.
    pub fn fill(&self, dma: &mut DmaPort<'_>, cache: &SharedMttCache, va: u64, len: usize) {
        let Some((owner, log_page_size, entries)) = self.entries(va, len) else {
            return;
        };
        for entry_addr in entries {
            if cache.borrow().contains(&(owner, entry_addr)) {
                continue;
            }
            let mut entry = [0u8; MTT_ENTRY_SIZE];
            if dma.read(entry_addr, &mut entry).is_ok() {
                let page = u64::from_le_bytes(entry) & !((1u64 << log_page_size) - 1);
                cache.borrow_mut().fill((owner, entry_addr), page);
            }
        }
    }

    /// The bus address of `va` and how many bytes from it are contiguous, at most `max`: the
    /// piece of `[va, va + max)` that one RDP or GD may name.
    pub fn contiguous(
        &self,
        dma: &mut DmaPort<'_>,
        cache: &SharedMttCache,
        va: u64,
        max: usize,
    ) -> Result<(u64, usize), AccessError> {
        let mut first = None;
        self.for_each_chunk(dma, cache, va, max, |_, bus, _, n| {
            first.get_or_insert((bus, n));
            // Stop after the first piece: only it is needed.
            Err(AccessError::OutOfBounds)
        })
        .ok();
        first.ok_or(AccessError::Dma)
    }

    /// Reads `out.len()` bytes at `va`.
    pub fn read(
        &self,
        dma: &mut DmaPort<'_>,
        cache: &SharedMttCache,
        va: u64,
        out: &mut [u8],
    ) -> Result<(), AccessError> {
        let len = out.len();
        self.for_each_chunk(dma, cache, va, len, |dma, bus, off, n| {
            dma.read(bus, &mut out[off..off + n])
                .map_err(|_| AccessError::Dma)
        })
    }

    /// Writes `data` at `va`.
    pub fn write(
        &self,
        dma: &mut DmaPort<'_>,
        cache: &SharedMttCache,
        va: u64,
        data: &[u8],
    ) -> Result<(), AccessError> {
        self.for_each_chunk(dma, cache, va, data.len(), |dma, bus, off, n| {
            dma.write(bus, &data[off..off + n])
                .map_err(|_| AccessError::Dma)
        })
    }
}
