use std::sync::{Arc, Mutex};

use vm_memory::{Bytes, GuestAddress, GuestRegionMmap, MemoryRegionAddress};

use super::*;
use crate::pcie::{BarSpec, ConfigSpace, Identity, PciState};

/// A function whose BAR0 is plain memory: a peer for P2P tests.
struct RamFunction {
    pci: PciState,
    ram: Mutex<Vec<u8>>,
}

impl PciFunction for RamFunction {
    fn pci(&self) -> &PciState {
        &self.pci
    }
    fn bar_read(&self, _bar: u8, offset: u64, data: &mut [u8]) {
        let ram = self.ram.lock().unwrap();
        data.copy_from_slice(&ram[offset as usize..offset as usize + data.len()]);
    }
    fn bar_write(&self, _bar: u8, offset: u64, data: &[u8]) {
        self.ram.lock().unwrap()[offset as usize..offset as usize + data.len()]
            .copy_from_slice(data);
    }
    fn reset(&self) {
        self.ram.lock().unwrap().fill(0);
    }
}

fn ram_function(fabric: &Fabric) -> Arc<RamFunction> {
    fabric.attach(|id| {
        let cs = ConfigSpace::new(
            Identity {
                vendor_id: 0xfff0,
                device_id: 0xffff,
                class_code: 0x050000,
                revision: 0,
                subsystem_id: 0,
            },
            &[BarSpec {
                index: 0,
                size: 0x10000,
                prefetchable: false,
            }],
            None,
        );
        Arc::new(RamFunction {
            pci: PciState::new(id, cs),
            ram: Mutex::new(vec![0; 0x10000]),
        })
    })
}

fn enable(fabric: &Fabric, id: FunctionId) {
    fabric.config_write(
        id,
        4,
        &(crate::pcie::config::CMD_MEMORY | crate::pcie::config::CMD_BUS_MASTER).to_le_bytes(),
    );
}

fn host_memory(len: usize) -> Arc<GuestRegionMmap> {
    Arc::new(GuestRegionMmap::from_range(GuestAddress(0), len, None).unwrap())
}

#[test]
fn tlp_count_follows_boundaries() {
    assert_eq!(tlp_count(0, 0, 256), 0);
    assert_eq!(tlp_count(0, 256, 256), 1);
    assert_eq!(tlp_count(0, 257, 256), 2);
    assert_eq!(tlp_count(255, 2, 256), 2);
    assert_eq!(tlp_count(0x1000, 1500, 256), 6);
    assert_eq!(tlp_count(0x1010, 1500, 256), 6);
    assert_eq!(tlp_count(0x10f0, 1500, 256), 7);
}

#[test]
fn dma_to_host_memory_is_counted_by_the_formula() {
    let fabric = Fabric::new(FabricConfig::default());
    let dev = ram_function(&fabric);
    let id = dev.pci.id;
    enable(&fabric, id);
    let mem = host_memory(0x10000);
    fabric
        .map_host(
            id,
            HostRegion {
                iova: 0x1_0000_0000,
                len: 0x10000,
                memory: mem.clone(),
                offset: 0,
            },
        )
        .unwrap();

    let data: Vec<u8> = (0..1500u32).map(|i| (i * 7) as u8).collect();
    {
        let mut dma = fabric.dma(id);
        dma.write(0x1_0000_0010, &data).unwrap();
        let mut back = vec![0; 1500];
        dma.read(0x1_0000_0010, &mut back).unwrap();
        assert_eq!(back, data);
    }
    let mut seen = vec![0u8; 1500];
    mem.read_slice(&mut seen, MemoryRegionAddress(0x10))
        .unwrap();
    assert_eq!(seen, data);

    // Write: 6 MemWr TLPs (256-byte MPS blocks 0x000..0x600). Read: 3 requests (512-byte
    // MRRS blocks), 6 completions.
    let s = fabric.stats(id);
    let oh = 24;
    assert_eq!(s.up_tlps, 6 + 3);
    assert_eq!(s.up_header_bytes, (6 + 3) * oh);
    assert_eq!(s.up_payload_bytes, 1500);
    assert_eq!(s.down_tlps, 6);
    assert_eq!(s.down_header_bytes, 6 * oh);
    assert_eq!(s.down_payload_bytes, 1500);
    let h = fabric.stats(HOST);
    assert_eq!(h.down_tlps, 9);
    assert_eq!(h.up_tlps, 6);
}

#[test]
fn peer_to_peer_is_routed_before_host_memory() {
    let fabric = Fabric::new(FabricConfig::default());
    let a = ram_function(&fabric);
    let b = ram_function(&fabric);
    enable(&fabric, a.pci.id);
    enable(&fabric, b.pci.id);
    // Host memory mapped at the same address as b's BAR: the switch must pick the BAR.
    let mem = host_memory(0x10000);
    fabric
        .map_host(
            a.pci.id,
            HostRegion {
                iova: 0x9000_0000,
                len: 0x10000,
                memory: mem.clone(),
                offset: 0,
            },
        )
        .unwrap();
    fabric.assign_bar(b.pci.id, 0, 0x9000_0000);
    {
        let mut dma = fabric.dma(a.pci.id);
        dma.write(0x9000_0100, b"peer").unwrap();
    }
    assert_eq!(&b.ram.lock().unwrap()[0x100..0x104], b"peer");
    let mut host = [0u8; 4];
    mem.read_slice(&mut host, MemoryRegionAddress(0x100))
        .unwrap();
    assert_eq!(host, [0; 4]);
    let sb = fabric.stats(b.pci.id);
    assert_eq!((sb.down_tlps, sb.down_payload_bytes), (1, 4));
    assert_eq!(fabric.stats(HOST).total_tlps(), 0);
}

#[test]
fn unmapped_disabled_and_foreign_accesses_fail_without_touching_memory() {
    let fabric = Fabric::new(FabricConfig::default());
    let a = ram_function(&fabric);
    let b = ram_function(&fabric);
    let mem = host_memory(0x2000);
    fabric
        .map_host(
            a.pci.id,
            HostRegion {
                iova: 0x4000,
                len: 0x2000,
                memory: mem.clone(),
                offset: 0,
            },
        )
        .unwrap();
    // Bus mastering off.
    assert_eq!(
        fabric.dma(a.pci.id).write(0x4000, &[1]),
        Err(DmaError::BusMasterDisabled)
    );
    enable(&fabric, a.pci.id);
    enable(&fabric, b.pci.id);
    let mut dma = fabric.dma(a.pci.id);
    // Straddling the end of the mapping.
    assert!(dma.write(0x5fff, &[1, 2]).is_err());
    assert!(dma.write(u64::MAX, &[1, 2]).is_err());
    drop(dma);
    // b has no mapping of its own: a's map is not b's.
    assert!(fabric.dma(b.pci.id).write(0x4000, &[1]).is_err());
    let mut all = vec![0u8; 0x2000];
    mem.read_slice(&mut all, MemoryRegionAddress(0)).unwrap();
    assert!(all.iter().all(|&x| x == 0));
    // After unmap the address is gone.
    fabric.unmap_host(a.pci.id, 0x4000, 0x1000);
    assert!(fabric.dma(a.pci.id).read(0x4000, &mut [0]).is_err());
    assert!(fabric.dma(a.pci.id).read(0x5000, &mut [0]).is_ok());
    // A mapping that does not fit its backing is refused.
    assert_eq!(
        fabric.map_host(
            a.pci.id,
            HostRegion {
                iova: 0,
                len: 0x3000,
                memory: mem,
                offset: 0
            }
        ),
        Err(MapError::OutOfBacking)
    );
}

#[test]
fn requests_may_span_adjacent_page_mappings() {
    let fabric = Fabric::new(FabricConfig::default());
    let a = ram_function(&fabric);
    enable(&fabric, a.pci.id);
    let mem = host_memory(0x4000);
    // Pages mapped one by one, out of order, as a vIOMMU does.
    for page in [2u64, 0, 1, 3] {
        fabric
            .map_host(
                a.pci.id,
                HostRegion {
                    iova: 0x10000 + page * 0x1000,
                    len: 0x1000,
                    memory: mem.clone(),
                    offset: page * 0x1000,
                },
            )
            .unwrap();
    }
    // Contiguous pages of one memory object merge into one mapping.
    assert_eq!(fabric.host_mapping_count(a.pci.id), 1);
    let data: Vec<u8> = (0..0x2000u32).map(|i| i as u8 ^ 0x5a).collect();
    let mut dma = fabric.dma(a.pci.id);
    dma.write(0x10800, &data).unwrap();
    let mut back = vec![0; 0x2000];
    dma.read(0x10800, &mut back).unwrap();
    assert_eq!(back, data);
}

#[test]
fn host_mmio_reaches_bars_and_unclaimed_reads_return_all_ones() {
    let fabric = Fabric::new(FabricConfig::default());
    let a = ram_function(&fabric);
    fabric.assign_bar(a.pci.id, 0, 0xe000_0000);
    // Memory decode off: the BAR does not claim.
    assert!(!fabric.mmio_write(0xe000_0000, &[7]));
    enable(&fabric, a.pci.id);
    assert!(fabric.mmio_write(0xe000_0008, &[7, 8]));
    let mut b = [0u8; 2];
    assert!(fabric.mmio_read(0xe000_0008, &mut b));
    assert_eq!(b, [7, 8]);
    assert!(!fabric.mmio_read(0xd000_0000, &mut b));
    assert_eq!(b, [0xff, 0xff]);
}

#[test]
fn requests_span_pages_of_different_memory_and_unmaps_split_merged_maps() {
    let fabric = Fabric::new(FabricConfig::default());
    let a = ram_function(&fabric);
    enable(&fabric, a.pci.id);
    // Four pages, each its own memory object (as a vIOMMU maps scattered guest pages): no merge.
    let pages: Vec<_> = (0..4).map(|_| host_memory(0x1000)).collect();
    for (i, mem) in pages.iter().enumerate().rev() {
        fabric
            .map_host(
                a.pci.id,
                HostRegion {
                    iova: 0x20000 + i as u64 * 0x1000,
                    len: 0x1000,
                    memory: mem.clone(),
                    offset: 0,
                },
            )
            .unwrap();
    }
    assert_eq!(fabric.host_mapping_count(a.pci.id), 4);
    let data: Vec<u8> = (0..0x3000u32).map(|i| (i * 7) as u8).collect();
    fabric.dma(a.pci.id).write(0x20800, &data).unwrap();
    let mut back = vec![0; 0x3000];
    fabric.dma(a.pci.id).read(0x20800, &mut back).unwrap();
    assert_eq!(back, data);
    // The second page's memory holds bytes 0x800..0x1800 of the write.
    let mut page1 = vec![0; 0x1000];
    pages[1]
        .read_slice(&mut page1, MemoryRegionAddress(0))
        .unwrap();
    assert_eq!(page1, data[0x800..0x1800]);

    // One 16 KiB memory mapped page by page merges; unmapping its middle splits it again and
    // the hole is a DMA error while both sides stay reachable.
    let mem = host_memory(0x4000);
    for page in 0..4u64 {
        fabric
            .map_host(
                a.pci.id,
                HostRegion {
                    iova: 0x40000 + page * 0x1000,
                    len: 0x1000,
                    memory: mem.clone(),
                    offset: page * 0x1000,
                },
            )
            .unwrap();
    }
    assert_eq!(fabric.host_mapping_count(a.pci.id), 5);
    fabric.unmap_host(a.pci.id, 0x41000, 0x2000);
    assert_eq!(fabric.host_mapping_count(a.pci.id), 6);
    let mut dma = fabric.dma(a.pci.id);
    assert!(dma.write(0x40ff0, &[1; 16]).is_ok());
    assert!(dma.write(0x43000, &[2; 16]).is_ok());
    assert!(dma.write(0x41000, &[3; 4]).is_err());
    assert!(dma.write(0x40ff8, &[4; 16]).is_err(), "runs into the hole");
    drop(dma);
    let mut b = [0u8; 16];
    mem.read_slice(&mut b, MemoryRegionAddress(0x3000)).unwrap();
    assert_eq!(b, [2; 16]);
}

#[test]
fn a_bar_sized_with_decode_on_sits_at_the_top_and_routes_nothing_below() {
    let fabric = Fabric::new(FabricConfig::default());
    let a = ram_function(&fabric);
    let b = ram_function(&fabric);
    enable(&fabric, a.pci.id);
    enable(&fabric, b.pci.id);
    // Software sizes b's 64-bit BAR without turning decode off: all ones in both halves.
    fabric.config_write(b.pci.id, 0x10, &[0xff; 8]);
    let top = b.pci.config().bar_address(0).unwrap();
    assert_eq!(top, 0u64.wrapping_sub(0x10000), "address = size mask");
    let mem = host_memory(0x1000);
    fabric
        .map_host(
            a.pci.id,
            HostRegion {
                iova: 0x8000,
                len: 0x1000,
                memory: mem,
                offset: 0,
            },
        )
        .unwrap();
    let mut dma = fabric.dma(a.pci.id);
    assert!(
        dma.write(0x8000, &[7; 64]).is_ok(),
        "host memory still routes"
    );
    assert!(
        dma.write(top + 0x100, &[9; 4]).is_ok(),
        "the BAR decodes at the top"
    );
    drop(dma);
    let mut word = [0u8; 4];
    b.bar_read(0, 0x100, &mut word);
    assert_eq!(word, [9; 4]);
}

mod host_map_model {
    //! The host map (range map with merges and splits) against a page-by-page model: after any
    //! sequence of maps and unmaps, every page routes exactly where the model says, or nowhere.

    use super::*;
    use proptest::prelude::*;

    const PAGE: u64 = 0x1000;
    const PAGES: u64 = 24;
    const MEMORIES: usize = 3;
    /// Pages per memory object.
    const MEM_PAGES: u64 = 16;

    #[derive(Debug, Clone)]
    enum Op {
        /// Map `len` pages at IOVA page `at` to memory `mem` from its page `offset`.
        Map {
            at: u64,
            len: u64,
            mem: usize,
            offset: u64,
        },
        Unmap {
            at: u64,
            len: u64,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0..PAGES, 1..6u64, 0..MEMORIES, 0..MEM_PAGES).prop_map(|(at, len, mem, offset)| {
                Op::Map { at, len, mem, offset }
            }),
            1 => (0..PAGES, 1..8u64).prop_map(|(at, len)| Op::Unmap { at, len }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn routes_match_a_page_model(ops in proptest::collection::vec(op(), 1..40)) {
            let fabric = Fabric::new(FabricConfig::default());
            let f = ram_function(&fabric);
            enable(&fabric, f.pci.id);
            let mems: Vec<_> = (0..MEMORIES).map(|_| host_memory((MEM_PAGES * PAGE) as usize)).collect();
            // page -> (memory, page in that memory)
            let mut model: std::collections::BTreeMap<u64, (usize, u64)> = Default::default();
            for op in &ops {
                match *op {
                    Op::Map { at, len, mem, offset } => {
                        let len = len.min(MEM_PAGES - offset);
                        fabric.map_host(f.pci.id, HostRegion {
                            iova: at * PAGE,
                            len: len * PAGE,
                            memory: mems[mem].clone(),
                            offset: offset * PAGE,
                        }).unwrap();
                        for i in 0..len {
                            model.insert(at + i, (mem, offset + i));
                        }
                    }
                    Op::Unmap { at, len } => {
                        fabric.unmap_host(f.pci.id, at * PAGE, len * PAGE);
                        for i in 0..len {
                            model.remove(&(at + i));
                        }
                    }
                }
            }
            prop_assert!(fabric.host_mapping_count(f.pci.id) <= model.len());
            let mut dma = fabric.dma(f.pci.id);
            for page in 0..PAGES + 6 {
                let tag = [page as u8, 0xa5, (page >> 8) as u8, 0x5a];
                let ok = dma.write(page * PAGE + 8, &tag).is_ok();
                prop_assert_eq!(ok, model.contains_key(&page), "page {} routes", page);
                if let Some(&(mem, mpage)) = model.get(&page) {
                    let mut seen = [0u8; 4];
                    mems[mem].read_slice(&mut seen, MemoryRegionAddress(mpage * PAGE + 8)).unwrap();
                    prop_assert_eq!(seen, tag, "page {} lands in memory {} page {}", page, mem, mpage);
                }
            }
            // A request spanning two pages succeeds exactly when both are mapped.
            for page in 0..PAGES {
                let both = model.contains_key(&page) && model.contains_key(&(page + 1));
                prop_assert_eq!(dma.probe(page * PAGE + PAGE - 8, 16), both);
            }
        }
    }
}

/// A switch does not route a request back out of its ingress port: a function cannot reach
/// its own BAR or a sibling function's (the NIC's functions share a port), while a function
/// behind another port can. Found by the fld_bar fuzz target: FLD ringing a "NIC doorbell"
/// that was its own BAR re-entered FLD under its own lock and hung.
#[test]
fn requests_never_hairpin_back_out_of_their_own_port() {
    let fabric = Fabric::new(FabricConfig::default());
    let a = ram_function(&fabric);
    let sibling = fabric.attach_at(Some(a.pci.id), |id| {
        Arc::new(RamFunction {
            pci: PciState::new(id, a.pci.config().clone()),
            ram: Mutex::new(vec![0; 0x10000]),
        })
    });
    let other = ram_function(&fabric);
    for (f, base) in [
        (a.pci.id, 0x1000_0000),
        (sibling.pci.id, 0x2000_0000),
        (other.pci.id, 0x3000_0000),
    ] {
        fabric.assign_bar(f, 0, base);
        enable(&fabric, f);
    }
    let mut dma = fabric.dma(a.pci.id);
    assert_eq!(
        dma.write(0x1000_0000, &[1]),
        Err(DmaError::SamePort { addr: 0x1000_0000 })
    );
    assert_eq!(
        dma.write(0x2000_0010, &[2]),
        Err(DmaError::SamePort { addr: 0x2000_0010 })
    );
    assert_eq!(dma.write(0x3000_0020, &[3]), Ok(()));
    drop(dma);
    assert_eq!(other.ram.lock().unwrap()[0x20], 3);
    assert!(a.ram.lock().unwrap().iter().all(|b| *b == 0));
    assert!(sibling.ram.lock().unwrap().iter().all(|b| *b == 0));
}

mod record_runs {
    //! A run of records written in one access ([`DmaPort::write_records`], the NIC's CQE runs)
    //! lands and is counted exactly as the same records written one by one, to host memory and
    //! to a peer's BAR, at any alignment and record size.

    use super::*;
    use proptest::prelude::*;

    /// A fabric with a requester mapping 64 KiB of host memory at `HOST_IOVA` and a peer whose
    /// BAR0 sits at `PEER_BAR`.
    fn setup() -> (
        Arc<Fabric>,
        FunctionId,
        Arc<RamFunction>,
        Arc<GuestRegionMmap>,
    ) {
        let fabric = Fabric::new(FabricConfig::default());
        let (dev, peer) = (ram_function(&fabric), ram_function(&fabric));
        let (id, pid) = (dev.pci.id, peer.pci.id);
        enable(&fabric, id);
        enable(&fabric, pid);
        let mem = host_memory(0x10000);
        let region = HostRegion {
            iova: HOST_IOVA,
            len: 0x10000,
            memory: mem.clone(),
            offset: 0,
        };
        fabric.map_host(id, region).unwrap();
        fabric.assign_bar(pid, 0, PEER_BAR);
        (fabric, id, peer, mem)
    }

    const HOST_IOVA: u64 = 0x1_0000_0000;
    const PEER_BAR: u64 = 0x9000_0000;

    proptest! {
        #[test]
        fn a_run_counts_as_its_records(
            to_peer: bool,
            offset in 0u64..0x8000,
            record in prop_oneof![Just(64usize), Just(128), Just(256), 1usize..300],
            count in 1usize..9,
        ) {
            let base = if to_peer { PEER_BAR } else { HOST_IOVA };
            let data: Vec<u8> = (0..record * count).map(|i| (i * 13 + 5) as u8).collect();
            let (run, one_by_one) = (setup(), setup());
            {
                let mut dma = run.0.dma(run.1);
                dma.write_records(base + offset, &data, record).unwrap();
            }
            {
                let mut dma = one_by_one.0.dma(one_by_one.1);
                for (k, r) in data.chunks(record).enumerate() {
                    dma.write(base + offset + (k * record) as u64, r).unwrap();
                }
            }
            for f in [run.1, run.2.pci.id, HOST] {
                prop_assert_eq!(run.0.stats(f), one_by_one.0.stats(f), "function {}", f);
            }
            let landed = |s: &(Arc<Fabric>, FunctionId, Arc<RamFunction>, Arc<GuestRegionMmap>)| {
                let mut got = vec![0u8; data.len()];
                if to_peer {
                    got.copy_from_slice(&s.2.ram.lock().unwrap()[offset as usize..][..data.len()]);
                } else {
                    s.3.read_slice(&mut got, MemoryRegionAddress(offset)).unwrap();
                }
                got
            };
            prop_assert_eq!(landed(&run), data.clone());
            prop_assert_eq!(landed(&one_by_one), data);
        }
    }

    /// A completion ring between two cores: the device writes runs of 64-byte records (up to
    /// eight, as the NIC's CQE runs) whose last byte holds an owner bit that flips every lap,
    /// and never overwrites a record the host has not consumed; the host polls each record's
    /// owner bit and then reads its body. Every body it reads must be the record the owner bit
    /// announced, never the lap before (which a single copy of the run let through on a
    /// machine whose `memcpy` stores a run's tail first).
    #[test]
    fn a_record_is_seen_whole_once_its_owner_bit_is() {
        use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
        const SLOTS: u64 = 8;
        const RECORDS: u64 = 100_000;
        let (fabric, id, _peer, mem) = setup();
        let consumed = Arc::new(AtomicU64::new(0));
        let owner_of = |n: u64| ((n / SLOTS + 1) & 1) as u8;
        let device = {
            let (fabric, consumed) = (fabric.clone(), consumed.clone());
            std::thread::spawn(move || {
                let mut run = [0u8; 64 * SLOTS as usize];
                let mut next = 0u64;
                while next < RECORDS {
                    let room = SLOTS - (next - consumed.load(Ordering::Acquire));
                    // A run stays inside the ring: it ends at the ring's last slot at most.
                    let n = room.min(SLOTS - next % SLOTS).min(RECORDS - next);
                    if n == 0 {
                        std::hint::spin_loop();
                        continue;
                    }
                    for k in 0..n {
                        let record = &mut run[(k * 64) as usize..][..64];
                        for word in record.chunks_exact_mut(4) {
                            word.copy_from_slice(&((next + k) as u32).to_le_bytes());
                        }
                        record[63] = owner_of(next + k);
                    }
                    let at = HOST_IOVA + (next % SLOTS) * 64;
                    let mut dma = fabric.dma(id);
                    dma.write_records(at, &run[..(n * 64) as usize], 64)
                        .unwrap();
                    next += n;
                }
            })
        };
        let ring = mem.as_ptr();
        for n in 0..RECORDS {
            let slot = ((n % SLOTS) * 64) as usize;
            // SAFETY: the ring's 512 bytes lie at the start of the 64 KiB mapping, which lives
            // as long as `mem`; the device thread writes them only through `write_records`.
            let owner = unsafe { AtomicU8::from_ptr(ring.add(slot + 63)) };
            while owner.load(Ordering::Acquire) & 1 != owner_of(n) {
                std::hint::spin_loop();
            }
            let mut body = [0u8; 60];
            // SAFETY: as above; the device does not write this record again until `consumed`
            // passes it.
            unsafe { std::ptr::copy_nonoverlapping(ring.add(slot), body.as_mut_ptr(), 60) };
            for word in body.chunks_exact(4) {
                let got = u32::from_le_bytes(word.try_into().unwrap());
                assert_eq!(got, n as u32, "record {n} read with an older body");
            }
            consumed.store(n + 1, Ordering::Release);
        }
        device.join().unwrap();
    }
}

/// A function whose BAR0 stores are CPU stores it passes on to `to` (a BAR handler that makes
/// an access of its own, on the accessing thread).
struct Forwarder {
    pci: PciState,
    fabric: std::sync::Weak<Fabric>,
    to: u64,
    /// A function whose BAR0 the handler moves to `to` before it passes the store on.
    relocate: Option<FunctionId>,
}

impl PciFunction for Forwarder {
    fn pci(&self) -> &PciState {
        &self.pci
    }
    fn bar_read(&self, _bar: u8, _offset: u64, data: &mut [u8]) {
        data.fill(0);
    }
    fn bar_write(&self, _bar: u8, offset: u64, data: &[u8]) {
        if let Some(f) = self.fabric.upgrade() {
            if let Some(id) = self.relocate {
                f.assign_bar(id, 0, self.to);
            }
            assert!(f.mmio_write(self.to + offset, data), "the passed-on store");
        }
    }
    fn reset(&self) {}
}

/// A fabric with one RAM function, its BAR0 at `bar`, decoding.
fn fabric_with_ram_at(bar: u64) -> (Arc<Fabric>, Arc<RamFunction>) {
    let fabric = Fabric::new(FabricConfig::default());
    let ram = ram_function(&fabric);
    fabric.assign_bar(ram.pci.id, 0, bar);
    enable(&fabric, ram.pci.id);
    (fabric, ram)
}

#[test]
fn cpu_accesses_reach_the_fabric_they_are_made_on() {
    // A thread keeps the routes of the fabric it accessed last; two fabrics with a BAR at the
    // same address, used in turn, and a third made after the first is dropped (it may take the
    // first's place in memory), each get their own stores.
    let bar = 0x8000_0000;
    let (a, ram_a) = fabric_with_ram_at(bar);
    let (b, ram_b) = fabric_with_ram_at(bar);
    for i in 0..4u8 {
        assert!(a.mmio_write(bar + u64::from(i), &[0xa0 + i]));
        assert!(b.mmio_write(bar + u64::from(i), &[0xb0 + i]));
    }
    assert_eq!(ram_a.ram.lock().unwrap()[..4], [0xa0, 0xa1, 0xa2, 0xa3]);
    assert_eq!(ram_b.ram.lock().unwrap()[..4], [0xb0, 0xb1, 0xb2, 0xb3]);
    drop(a);
    let (c, ram_c) = fabric_with_ram_at(bar);
    assert!(c.mmio_write(bar, &[0xc0]));
    let mut back = [0u8; 1];
    assert!(c.mmio_read(bar, &mut back));
    assert_eq!((back[0], ram_c.ram.lock().unwrap()[0]), (0xc0, 0xc0));
    assert_eq!(
        ram_a.ram.lock().unwrap()[0],
        0xa0,
        "the dropped fabric's function"
    );
}

#[test]
fn a_dropped_fabric_takes_its_functions_with_it() {
    // The thread's kept routes hold the functions; a fabric dropped on this thread must not
    // leave them (and what they own) alive behind it.
    let (fabric, ram) = fabric_with_ram_at(0x8000_0000);
    assert!(fabric.mmio_write(0x8000_0000, &[1]));
    let weak = Arc::downgrade(&ram);
    drop(ram);
    drop(fabric);
    assert!(weak.upgrade().is_none(), "a function outlived its fabric");
}

#[test]
fn a_cpu_access_follows_a_bar_moved_after_the_last_one() {
    let (fabric, ram) = fabric_with_ram_at(0x8000_0000);
    assert!(fabric.mmio_write(0x8000_0000, &[1]));
    fabric.assign_bar(ram.pci.id, 0, 0x9000_0000);
    assert!(
        !fabric.mmio_write(0x8000_0000, &[2]),
        "the old address decodes nothing"
    );
    assert!(fabric.mmio_write(0x9000_0000, &[3]));
    let mut back = [0u8; 1];
    assert!(!fabric.mmio_read(0x8000_0000, &mut back));
    assert_eq!(back, [0xff], "master abort");
    assert_eq!(ram.ram.lock().unwrap()[0], 3);
}

/// A function at 0xa000_0000 that passes every store on to `to`, moving `relocate` there first.
fn forwarder(fabric: &Arc<Fabric>, to: u64, relocate: Option<FunctionId>) -> Arc<Forwarder> {
    let weak = Arc::downgrade(fabric);
    let fwd = fabric.attach(|id| {
        let cs = ConfigSpace::new(
            Identity {
                vendor_id: 0xfff0,
                device_id: 0xfffe,
                class_code: 0x050000,
                revision: 0,
                subsystem_id: 0,
            },
            &[BarSpec {
                index: 0,
                size: 0x1000,
                prefetchable: false,
            }],
            None,
        );
        Arc::new(Forwarder {
            pci: PciState::new(id, cs),
            fabric: weak,
            to,
            relocate,
        })
    });
    fabric.assign_bar(fwd.pci.id, 0, 0xa000_0000);
    enable(fabric, fwd.pci.id);
    fwd
}

#[test]
fn a_bar_handler_may_make_cpu_accesses_of_its_own() {
    let (fabric, ram) = fabric_with_ram_at(0x8000_0000);
    let fwd = forwarder(&fabric, 0x8000_0000, None);
    assert!(fabric.mmio_write(0xa000_0010, &[7, 8]));
    assert_eq!(ram.ram.lock().unwrap()[0x10..0x12], [7, 8]);
    // Both stores were counted: the host sent two, and each function received one.
    assert_eq!(fabric.stats(HOST).up_tlps, 2);
    assert_eq!(fabric.stats(fwd.pci.id).down_tlps, 1);
    assert_eq!(fabric.stats(ram.pci.id).down_tlps, 1);
}

#[test]
fn a_bar_handler_that_moves_a_bar_reaches_it_at_its_new_address() {
    // The handler's own access runs while the outer access holds the thread's kept routes; the
    // move makes them stale, so the inner access must route afresh.
    let (fabric, ram) = fabric_with_ram_at(0x8000_0000);
    forwarder(&fabric, 0x9000_0000, Some(ram.pci.id));
    assert!(fabric.mmio_write(0xa000_0020, &[5, 6]));
    assert_eq!(ram.ram.lock().unwrap()[0x20..0x22], [5, 6]);
    assert!(
        !fabric.mmio_write(0x8000_0000, &[1]),
        "the old address decodes nothing"
    );
}

/// A run of stores through [`Fabric::mmio_write_all`] lands and is counted exactly as the same
/// stores one [`Fabric::mmio_write`] at a time: in order (a later store to the same bytes wins),
/// into whichever BAR decodes each (the run moves from one function to another and back), and
/// not at all where none does (an address no BAR decodes, a store running past a BAR's end).
#[test]
fn a_run_of_stores_is_the_same_stores_one_by_one() {
    let bases = [0xe000_0000u64, 0xe001_0000];
    let build = || {
        let fabric = Fabric::new(FabricConfig::default());
        let fs: Vec<_> = bases
            .iter()
            .map(|&base| {
                let f = ram_function(&fabric);
                fabric.assign_bar(f.pci.id, 0, base);
                enable(&fabric, f.pci.id);
                f
            })
            .collect();
        (fabric, fs)
    };
    let wqe: Vec<u8> = (0..64u8).collect();
    let writes: [(u64, &[u8]); 8] = [
        (0xc0, &[0; 4]),
        (0x00, &wqe),
        (0xc0, &[1, 2, 3, 0x80]),
        (0x1_0010, &[9; 8]),
        (0x0008, &[7; 4]),
        (0x2_0000, &[5; 4]),
        (0xfffe, &[6; 4]),
        (0x0c0, &[4, 3, 2, 0x81]),
    ];
    let (one_by_one, fs_one) = build();
    for &(offset, data) in &writes {
        one_by_one.mmio_write(bases[0] + offset, data);
    }
    let (run, fs_run) = build();
    run.mmio_write_all(bases[0], &writes);
    for (a, b) in fs_one.iter().zip(&fs_run) {
        assert!(
            *a.ram.lock().unwrap() == *b.ram.lock().unwrap(),
            "same bytes"
        );
        assert_eq!(one_by_one.stats(a.pci.id), run.stats(b.pci.id), "the link");
    }
    assert_eq!(one_by_one.stats(HOST), run.stats(HOST), "the root port");
    let ram = fs_run[0].ram.lock().unwrap();
    assert_eq!(ram[0xc0..0xc4], [4, 3, 2, 0x81], "the later store wins");
    assert_eq!(ram[8..12], [7; 4]);
    assert_eq!(ram[0xfffe..], [0, 0], "nothing past the BAR's end");
    assert_eq!(fs_run[1].ram.lock().unwrap()[0x10..0x18], [9; 8]);
    assert_eq!(run.stats(HOST).up_tlps, 6, "six stores decoded");
}

/// The dirty-page log sees every device write to host memory — the single-mapping path, a
/// write across mappings of different memory, a run of records — and nothing else: not reads,
/// not peer-to-peer writes, not the accounting of context memory that moves no data.
#[test]
fn the_dirty_page_log_holds_the_pages_device_writes_reached() {
    let fabric = Fabric::new(FabricConfig::default());
    let a = ram_function(&fabric);
    let b = ram_function(&fabric);
    enable(&fabric, a.pci.id);
    enable(&fabric, b.pci.id);
    let one = host_memory(0x8000);
    let scattered: Vec<_> = (0..2).map(|_| host_memory(0x1000)).collect();
    let maps = [
        (0x10000, 0x8000, one.clone()),
        (0x18000, 0x1000, scattered[0].clone()),
        (0x19000, 0x1000, scattered[1].clone()),
    ];
    for (iova, len, memory) in maps {
        let region = HostRegion {
            iova,
            len,
            memory,
            offset: 0,
        };
        fabric.map_host(a.pci.id, region).unwrap();
    }
    fabric.assign_bar(b.pci.id, 0, 0x9000_0000);
    let log = fabric.track_dirty_pages(0x10000, 0xa000);
    let mut dma = fabric.dma(a.pci.id);
    dma.write(0x10ffe, &[1; 4]).unwrap(); // pages 0 and 1, one mapping
    dma.write(0x17800, &[2; 0x1000]).unwrap(); // pages 7 and 8, across two mappings
    dma.write_records(0x13000, &[3; 256], 64).unwrap(); // page 3, a run of CQEs
    dma.read(0x15000, &mut [0; 64]).unwrap();
    dma.write(0x9000_0000, b"peer").unwrap();
    dma.account_context_write(64);
    drop(dma);
    let mut pages = Vec::new();
    assert!(
        log.take(|p| pages.push(p)),
        "no write outside the log's range"
    );
    assert_eq!(pages, [0, 1, 3, 7, 8]);
    assert!(
        Arc::ptr_eq(&log, &fabric.track_dirty_pages(0, 1)),
        "one log per fabric"
    );
}
