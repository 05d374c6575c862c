//! The card's self-test over a transport that reaches a separately running card: vfio-user
//! sockets on the host (in CI, against `fldemu serve`) or vfio-pci inside a guest whose QEMU
//! attaches the card (`cargo xtask test-guest`). The same checks run on both, through the same
//! driver and host-library code:
//!
//! * CPU echo and FLD-E echo, every byte verified;
//! * MSI-X through eventfds, and DMA isolation (a gather entry at an IOVA the driver never
//!   mapped gives an error CQE and delivers nothing);
//! * a function reset in the middle of traffic, then a new bring-up that moves traffic;
//! * garbage written to every BAR register, then a new bring-up that moves traffic;
//! * RDMA through the verbs API between the two NIC functions (their RoCE frames cross the
//!   eSwitch): SEND with immediate, WRITE, READ and fetch-and-add, every byte checked.

use std::any::Any;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fld_abi::nic::{
    syndrome, BAR_CONTROL, BAR_CONTROL_SIZE, BAR_DOORBELL, BAR_DOORBELL_SIZE, CQE_REQ_ERR,
    NIC_DEVICE_ID, PCI_VENDOR_ID, TABLE_KIND_NIC_RX,
};
use fld_abi::pci::OFF_PCIE_DEVCTL;
use fld_driver::nic::{
    CompletionQueue, EventQueue, FlowRule, NicDriver, RecvQueue, RqLayout, RuleFate, SendQueue,
    SendWqe, TableMiss,
};
use fld_driver::{DmaBuffer, DriverError, PciDevice};
use fld_host::apps::{
    echo_step, fld_safe_window, open_echo_pair, open_fld_echo, run_echo, EchoConfig, FldEchoPorts,
    Sizes,
};
use fld_host::RxMode;

/// How the driver reaches the card.
#[derive(Clone, Debug)]
pub enum Transport {
    /// `fldemu serve`'s sockets in this directory (nic0.sock, nic1.sock, fld.sock).
    VfioUser(PathBuf),
    /// The functions found in sysfs by vendor and device ID, through vfio-pci.
    Vfio,
}

/// The card's functions as one transport reaches them.
pub struct OpenCard {
    pub nic: [Arc<dyn PciDevice>; 2],
    pub fld: Arc<dyn PciDevice>,
    /// The transport's connections and DMA memory; dropping it closes the functions.
    pub transport: Box<dyn Any>,
}

impl Transport {
    /// Opens both NIC functions and FLD with `dma_bytes` of DMA memory.
    pub fn open(&self, dma_bytes: usize) -> Result<OpenCard, DriverError> {
        fn three<D: PciDevice + 'static>(
            get: impl Fn(usize) -> Option<Arc<D>>,
        ) -> Result<[Arc<dyn PciDevice>; 3], DriverError> {
            let one = |i| -> Result<Arc<dyn PciDevice>, DriverError> {
                Ok(get(i).ok_or(DriverError::InvalidArgument("missing function"))?)
            };
            Ok([one(0)?, one(1)?, one(2)?])
        }
        let (devices, transport): (_, Box<dyn Any>) = match self {
            Transport::VfioUser(dir) => {
                let host = fld_driver::vfio_user::VfioUserHost::connect(
                    dir,
                    &["nic0.sock", "nic1.sock", "fld.sock"],
                    dma_bytes,
                )?;
                (three(|i| host.device(i))?, Box::new(host))
            }
            Transport::Vfio => {
                use fld_driver::vfio::{find_functions, VfioHost};
                let nics = find_functions(PCI_VENDOR_ID, NIC_DEVICE_ID);
                let flds = find_functions(PCI_VENDOR_ID, fld_abi::fld::FLD_DEVICE_ID);
                if nics.len() < 2 || flds.is_empty() {
                    return Err(DriverError::Transport(format!(
                        "need two NIC functions and an FLD function; found NIC {nics:?}, FLD {flds:?}"
                    )));
                }
                let bdfs = [nics[0].clone(), nics[1].clone(), flds[0].clone()];
                let host = VfioHost::open(&bdfs, dma_bytes)?;
                (three(|i| host.device(i))?, Box::new(host))
            }
        };
        let [nic0, nic1, fld] = devices;
        Ok(OpenCard {
            nic: [nic0, nic1],
            fld,
            transport,
        })
    }
}

/// DMA memory each self-test asks for: pinned guest memory in a guest, so kept small.
const TEST_DMA_BYTES: usize = 48 << 20;

/// One named check.
pub struct Check {
    pub name: &'static str,
    pub run: fn(&Transport) -> Result<(), String>,
}

/// Every check, in the order they run.
pub const CHECKS: &[Check] = &[
    Check {
        name: "cpu_echo_byte_exact",
        run: cpu_echo_byte_exact,
    },
    Check {
        name: "flde_echo_byte_exact",
        run: flde_echo_byte_exact,
    },
    Check {
        name: "msix_eventfd_and_dma_isolation",
        run: msix_eventfd_and_dma_isolation,
    },
    Check {
        name: "wqe_by_mmio_through_the_mapped_doorbell_bar",
        run: wqe_by_mmio_through_the_mapped_doorbell_bar,
    },
    Check {
        name: "reset_mid_traffic_then_traffic",
        run: reset_mid_traffic_then_traffic,
    },
    Check {
        name: "garbage_in_every_bar_then_traffic",
        run: garbage_in_every_bar_then_traffic,
    },
    Check {
        name: "rdma_verbs_between_functions",
        run: rdma_verbs_between_functions,
    },
];

fn err<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> String {
    move |e| format!("{what}: {e}")
}

fn expect(cond: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(what())
    }
}

/// Striding receive queues as the demo uses them.
const STRIDING: RxMode = RxMode::Striding {
    log_stride_size: 8,
    log_strides: 6,
};

/// CPU echo of `packets` frames of the given sizes; every byte must come back.
fn cpu_echo(card: &OpenCard, packets: u64, sizes: Vec<usize>) -> Result<(), String> {
    let max = sizes.iter().copied().max().unwrap_or(64);
    let (mut client, mut server) =
        open_echo_pair(card.nic[0].clone(), card.nic[1].clone(), STRIDING, max, 512)
            .map_err(err("bring-up"))?;
    let cfg = EchoConfig {
        packets,
        sizes: Sizes::Cycle(sizes),
        window: 64,
        ..Default::default()
    };
    let mac = server.mac();
    let mut scratch = Vec::new();
    let rep = run_echo(&mut client, mac, &cfg, || {
        echo_step(&mut server, &mut scratch, 32)
    });
    expect(
        (rep.packets_received, rep.mismatches, rep.checksum_flags_bad) == (packets, 0, 0),
        || {
            format!(
                "received {} of {packets}, {} mismatches, {} bad checksum flags",
                rep.packets_received, rep.mismatches, rep.checksum_flags_bad
            )
        },
    )
}

fn cpu_echo_byte_exact(t: &Transport) -> Result<(), String> {
    let card = t.open(TEST_DMA_BYTES).map_err(err("open"))?;
    cpu_echo(&card, 3000, vec![60, 64, 500, 1514])
}

fn flde_echo_byte_exact(t: &Transport) -> Result<(), String> {
    let card = t.open(TEST_DMA_BYTES).map_err(err("open"))?;
    let ports = FldEchoPorts {
        tx_queues: 1,
        client_rx_queues: 1,
        max_frame: 1514,
        mbufs: 512,
    };
    let (flde, mut client) = open_fld_echo(
        card.nic[0].clone(),
        card.nic[1].clone(),
        card.fld.clone(),
        ports,
    )
    .map_err(err("FLD-E bring-up"))?;
    let packets = 3000;
    let cfg = EchoConfig {
        packets,
        sizes: Sizes::Cycle(vec![60, 128, 1000, 1514]),
        window: fld_safe_window(&flde, 1514).min(64),
        ..Default::default()
    };
    let rep = run_echo(&mut client, flde.mac(), &cfg, || 0);
    expect(
        (rep.packets_received, rep.mismatches) == (packets, 0),
        || {
            format!(
                "received {} of {packets} from the accelerator, {} mismatches",
                rep.packets_received, rep.mismatches
            )
        },
    )
}

/// A NIC port brought up with one raw queue set: a send queue whose completions raise events on
/// MSI-X vector 0, and a regular receive queue of eight 2 KiB buffers that every frame for the
/// function lands in, whose completions raise events on vector 1.
pub struct RawPort {
    pub nic: NicDriver,
    /// Events of the send CQ (vector 0).
    pub eq: EventQueue,
    /// Events of the receive CQ (vector [`RX_VECTOR`]).
    pub rx_eq: EventQueue,
    pub cq: CompletionQueue,
    pub sq: SendQueue,
    pub rq_cq: CompletionQueue,
    pub rq: RecvQueue,
    pub buf: DmaBuffer,
}

impl RawPort {
    pub fn open(dev: Arc<dyn PciDevice>) -> Result<RawPort, DriverError> {
        let mut nic = NicDriver::probe(dev.clone())?;
        dev.enable_msix(2)?;
        let eq = nic.create_eq(4, 0)?;
        let rx_eq = nic.create_eq(4, RX_VECTOR)?;
        let cq = nic.create_cq(&eq, 4)?;
        let sq = nic.create_sq(&cq, 4, false)?;
        let rq_cq = nic.create_cq(&rx_eq, 4)?;
        let mut rq = nic.create_rq(&rq_cq, 3, RqLayout::Regular)?;
        let buf = dev.dma_alloc(8 * 2048)?;
        for i in 0..8 {
            rq.post(buf.iova() + i * 2048, 2048);
        }
        rq.ring_doorbell();
        let t = nic.create_flow_table(TABLE_KIND_NIC_RX, 0, TableMiss::Drop)?;
        nic.create_flow_entry(t, &FlowRule::any(RuleFate::Rq(rq.rqn)))?;
        nic.set_root(TABLE_KIND_NIC_RX, Some(t))?;
        Ok(RawPort {
            rq,
            nic,
            eq,
            rx_eq,
            cq,
            sq,
            rq_cq,
            buf,
        })
    }

    /// Sends `frame` from the start of this port's buffer: header inline, the rest gathered.
    pub fn send(&mut self, frame: &[u8], signal: bool) -> Result<(), String> {
        self.buf.write(0, frame);
        let gather = [(self.buf.iova() + 14, frame.len() as u32 - 14)];
        self.sq
            .post(&SendWqe {
                inline_header: &frame[..14],
                gather: &gather,
                cs_flags: 0,
                signal,
                ..Default::default()
            })
            .map_err(err("post"))?;
        self.sq.ring_doorbell();
        Ok(())
    }
}

/// The MSI-X vector of a [`RawPort`]'s receive events.
pub const RX_VECTOR: u16 = 1;

/// An Ethernet frame of `len` bytes with a counting payload (EtherType 0x88b5, local use).
pub fn test_frame(dst: [u8; 6], src: [u8; 6], len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    for (i, b) in f[14..].iter_mut().enumerate() {
        *b = i as u8;
    }
    f
}

/// Polls `f` for up to ten seconds.
pub fn wait_until(mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    false
}

fn msix_eventfd_and_dma_isolation(t: &Transport) -> Result<(), String> {
    let card = t.open(TEST_DMA_BYTES).map_err(err("open"))?;
    let mut p0 = RawPort::open(card.nic[0].clone()).map_err(err("port 0"))?;
    let mut p1 = RawPort::open(card.nic[1].clone()).map_err(err("port 1"))?;
    // MSI-X: arm port 1's receive CQ (vector 1) and port 0's send CQ (vector 0), send a frame
    // from port 0: each interrupt arrives on its own vector's eventfd, and only there.
    p1.rq_cq.arm();
    p0.cq.arm();
    let f = test_frame(p1.nic.mac(), p0.nic.mac(), 100);
    p0.send(&f, true)?;
    expect(
        wait_until(|| card.nic[1].take_interrupts(RX_VECTOR) >= 1),
        || "MSI-X vector 1 of port 1 did not fire through its eventfd".into(),
    )?;
    expect(wait_until(|| card.nic[0].take_interrupts(0) >= 1), || {
        "MSI-X vector 0 of port 0 (send completion) did not fire".into()
    })?;
    expect(
        card.nic[1].take_interrupts(0) == 0 && card.nic[0].take_interrupts(RX_VECTOR) == 0,
        || "an interrupt arrived on a vector nobody armed".into(),
    )?;
    let c = p1
        .rq_cq
        .poll()
        .ok_or("no receive CQE after the interrupt")?;
    expect(c.byte_count.get() == 100, || {
        format!("byte count {}", c.byte_count.get())
    })?;
    let mut got = vec![0u8; 100];
    p1.buf.read(0, &mut got);
    expect(got == f, || "received bytes differ".into())?;
    expect(
        p1.rx_eq.poll().map(|e| e.data.get()) == Some(p1.rq_cq.cqn),
        || "no completion event for the receive CQ".into(),
    )?;
    expect(wait_until(|| p0.cq.poll().is_some()), || {
        "no send completion".into()
    })?;
    // DMA isolation: a gather entry at an IOVA the driver never mapped.
    let before = p1
        .nic
        .query_vport(1)
        .map_err(err("query"))?
        .rx_packets
        .get();
    p0.sq
        .post(&SendWqe {
            inline_header: &f[..14],
            gather: &[(0x7000_0000, 86)],
            cs_flags: 0,
            signal: false,
            ..Default::default()
        })
        .map_err(err("post"))?;
    p0.sq.ring_doorbell();
    let mut cqe = None;
    expect(
        wait_until(|| {
            cqe = p0.cq.poll();
            cqe.is_some()
        }),
        || "no completion for the unmapped gather".into(),
    )?;
    let c = cqe.expect("polled");
    expect(
        (c.opcode(), c.syndrome) == (CQE_REQ_ERR, syndrome::DMA_ERROR),
        || {
            format!(
                "completion opcode {:#x} syndrome {:#x}, expected a DMA error",
                c.opcode(),
                c.syndrome
            )
        },
    )?;
    let after = p1
        .nic
        .query_vport(1)
        .map_err(err("query"))?
        .rx_packets
        .get();
    expect(after == before, || {
        format!("{} frames delivered from unmapped memory", after - before)
    })
}

/// WQE by MMIO (`docs/nic-interface.md` §4.1) through the doorbell BAR as the guest maps it:
/// lone WQEs posted with their 64-byte chunks and seal are taken from the buffer (the SQ's
/// `on_chip` counter) and give the same frames as WQEs the card fetches; stale contents left in
/// the buffer never stand in for a later WQE.
fn wqe_by_mmio_through_the_mapped_doorbell_bar(t: &Transport) -> Result<(), String> {
    const FRAMES: usize = 6;
    let card = t.open(TEST_DMA_BYTES).map_err(err("open"))?;
    let mut p0 = RawPort::open(card.nic[0].clone()).map_err(err("port 0"))?;
    let mut p1 = RawPort::open(card.nic[1].clone()).map_err(err("port 1"))?;
    let sqn = p0.sq.sqn;
    let mut round = |p0: &mut RawPort, first: usize| -> Result<(), String> {
        for i in first..first + FRAMES {
            let f = test_frame(p1.nic.mac(), p0.nic.mac(), 64 + 16 * i);
            p0.send(&f, true)?;
            let mut got = None;
            expect(
                wait_until(|| {
                    got = p1.rq_cq.poll();
                    got.is_some()
                }),
                || format!("frame {i} not received"),
            )?;
            let c = got.expect("polled");
            let slot = u64::from(c.wqe_counter.get()) % 8;
            let mut bytes = vec![0u8; c.byte_count.get() as usize];
            p1.buf.read(slot as usize * 2048, &mut bytes);
            expect(bytes == f, || format!("frame {i} arrived changed"))?;
            p1.rq.post(p1.buf.iova() + slot * 2048, 2048);
            p1.rq.ring_doorbell();
            expect(wait_until(|| p0.cq.poll().is_some()), || {
                format!("no send completion for frame {i}")
            })?;
        }
        Ok(())
    };
    let on_chip = |p0: &mut RawPort| -> Result<u64, String> {
        Ok(p0.nic.query_sq(sqn).map_err(err("query_sq"))?.on_chip.get())
    };
    round(&mut p0, 0)?;
    let by_mmio = on_chip(&mut p0)?;
    expect(by_mmio == FRAMES as u64, || {
        format!("{by_mmio} of {FRAMES} lone WQEs taken from the buffer")
    })?;
    // The same posts fetched by DMA: the buffer keeps the last WQE's seal, which names an older
    // WQE and is left alone.
    p0.sq.set_wqe_by_mmio(false);
    round(&mut p0, FRAMES)?;
    let after = on_chip(&mut p0)?;
    expect(after == by_mmio, || {
        format!(
            "{} fetched WQEs counted as taken from the buffer",
            after - by_mmio
        )
    })
}

/// Initiates a function-level reset through PCIe Device Control.
fn function_level_reset(dev: &dyn PciDevice) {
    let devctl = OFF_PCIE_DEVCTL as u64;
    let v = dev.config_read16(devctl);
    dev.config_write16(devctl, v | 0x8000);
}

fn reset_mid_traffic_then_traffic(t: &Transport) -> Result<(), String> {
    {
        let card = t.open(TEST_DMA_BYTES).map_err(err("open"))?;
        let mut p0 = RawPort::open(card.nic[0].clone()).map_err(err("port 0"))?;
        let p1 = RawPort::open(card.nic[1].clone()).map_err(err("port 1"))?;
        let f = test_frame(p1.nic.mac(), p0.nic.mac(), 1000);
        // Fill the send queue and reset both functions while the NIC works through it.
        for _ in 0..15 {
            p0.buf.write(0, &f);
            p0.sq
                .post(&SendWqe {
                    inline_header: &f[..14],
                    gather: &[(p0.buf.iova() + 14, 986)],
                    cs_flags: 0,
                    signal: true,
                    ..Default::default()
                })
                .map_err(err("post"))?;
        }
        p0.sq.ring_doorbell();
        function_level_reset(card.nic[0].as_ref());
        function_level_reset(card.nic[1].as_ref());
        // The functions must come back from the reset ready for a new driver.
        let probed = NicDriver::probe(card.nic[0].clone()).map_err(err("probe after reset"))?;
        drop(probed);
    }
    let card = t.open(TEST_DMA_BYTES).map_err(err("reopen"))?;
    cpu_echo(&card, 1000, vec![64, 1514])
}

fn garbage_in_every_bar_then_traffic(t: &Transport) -> Result<(), String> {
    {
        let card = t.open(TEST_DMA_BYTES).map_err(err("open"))?;
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut garbage = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u32
        };
        for dev in &card.nic {
            for off in (0..BAR_CONTROL_SIZE).step_by(4) {
                dev.write32(BAR_CONTROL, off, garbage());
            }
            for off in (0..BAR_DOORBELL_SIZE).step_by(4) {
                dev.write32(BAR_DOORBELL, off, garbage());
            }
        }
        for off in (0..fld_abi::fld::BAR_CONTROL_SIZE).step_by(4) {
            card.fld.write32(fld_abi::fld::BAR_CONTROL, off, garbage());
        }
        // The driver goes away without cleaning up.
    }
    let card = t.open(TEST_DMA_BYTES).map_err(err("reopen"))?;
    cpu_echo(&card, 1000, vec![60, 1514])?;
    drop(card);
    flde_echo_byte_exact(t)
}

/// One RC QP per NIC function through the verbs API, connected to each other.
struct VerbsEnd {
    ctx: fld_host::verbs::Context,
    cq: fld_host::verbs::Cq,
    qp: fld_host::verbs::Qp,
    mr: fld_host::verbs::Mr,
    _pd: fld_host::verbs::Pd,
}

fn verbs_end(dev: Arc<dyn PciDevice>, ip: [u8; 4]) -> Result<VerbsEnd, String> {
    use fld_host::verbs::*;
    let mut ctx = Context::open(dev).map_err(err("open"))?;
    ctx.add_ip(std::net::Ipv4Addr::from(ip).into())
        .map_err(err("GID"))?;
    let pd = ctx.alloc_pd().map_err(err("PD"))?;
    let mr = ctx.reg_mr(&pd, 1 << 20, access::ALL).map_err(err("MR"))?;
    let cq = ctx.create_cq(64, None).map_err(err("CQ"))?;
    let qp = ctx
        .create_qp(
            &pd,
            &QpInitAttr {
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: QpCap::default(),
                sq_sig_all: true,
                out_of_order: false,
            },
        )
        .map_err(err("QP"))?;
    Ok(VerbsEnd {
        ctx,
        cq,
        qp,
        mr,
        _pd: pd,
    })
}

fn verbs_connect(e: &mut VerbsEnd, peer_qpn: u32, peer_ip: [u8; 4]) -> Result<(), String> {
    use fld_host::verbs::*;
    e.ctx.init_rc(&e.qp, access::REMOTE).map_err(err("INIT"))?;
    let c = RcConnection {
        rq_psn: 0x42,
        sq_psn: 0x42,
        max_rd_atomic: 1,
        max_dest_rd_atomic: 1,
        ..RcConnection::new(peer_qpn, fld_abi::wire::roce::ipv4_gid(peer_ip))
    };
    e.ctx.connect_rc(&e.qp, &c).map_err(err("RTR/RTS"))
}

/// The next `n` completions of `e`'s CQ.
fn verbs_wait(e: &mut VerbsEnd, n: usize) -> Result<Vec<fld_host::verbs::Wc>, String> {
    let mut out = Vec::new();
    let mut wc = [fld_host::verbs::Wc::EMPTY; 8];
    let ok = wait_until(|| {
        let k = e.cq.poll(&mut wc);
        out.extend_from_slice(&wc[..k]);
        out.len() >= n
    });
    expect(ok, || format!("{} of {n} completions", out.len()))?;
    Ok(out)
}

fn rdma_verbs_between_functions(t: &Transport) -> Result<(), String> {
    use fld_host::verbs::*;
    let card = t.open(TEST_DMA_BYTES).map_err(err("open"))?;
    let (ipa, ipb) = ([10, 9, 0, 1], [10, 9, 0, 2]);
    let mut a = verbs_end(card.nic[0].clone(), ipa)?;
    let mut b = verbs_end(card.nic[1].clone(), ipb)?;
    // Both functions are on this host: their addresses are known, no ARP needed.
    let (ma, mb) = (a.ctx.mac(), b.ctx.mac());
    a.ctx.add_neighbor(ipb, mb);
    b.ctx.add_neighbor(ipa, ma);
    let (qa, qb) = (a.qp.qp_num(), b.qp.qp_num());
    verbs_connect(&mut a, qb, ipb)?;
    verbs_connect(&mut b, qa, ipa)?;
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
    a.mr.write(0, &data);
    // SEND with immediate into B's posted buffer.
    let rs = [b.mr.sge(0, 8192)];
    b.qp.post_recv(&[(77, &rs[..])]).map_err(err("post_recv"))?;
    let s = [a.mr.sge(0, data.len())];
    a.qp.post_send(&[SendWr::new(1, WrOpcode::SendWithImm(0xfeed), &s)])
        .map_err(err("post_send"))?;
    let rx = verbs_wait(&mut b, 1)?;
    expect(
        rx[0].status == WcStatus::Success
            && rx[0].wr_id == 77
            && rx[0].byte_len == data.len() as u32
            && rx[0].imm_data == Some(0xfeed),
        || format!("receive completion {:?}", rx[0]),
    )?;
    let mut got = vec![0u8; data.len()];
    b.mr.read(0, &mut got);
    expect(got == data, || "SEND payload differs".into())?;
    // WRITE into B, READ it back into A elsewhere, then a fetch-and-add.
    b.mr.write(65536, &42u64.to_le_bytes());
    let w = [a.mr.sge(0, data.len())];
    let r = [a.mr.sge(16384, data.len())];
    let f = [a.mr.sge(32768, 8)];
    let remote = b.mr.addr() + 8192;
    let rkey = b.mr.rkey();
    a.qp.post_send(&[
        SendWr::new(
            2,
            WrOpcode::RdmaWrite {
                remote_addr: remote,
                rkey,
            },
            &w,
        ),
        SendWr::new(
            3,
            WrOpcode::RdmaRead {
                remote_addr: remote,
                rkey,
            },
            &r,
        ),
        SendWr::new(
            4,
            WrOpcode::AtomicFetchAndAdd {
                remote_addr: b.mr.addr() + 65536,
                rkey,
                add: 8,
            },
            &f,
        ),
    ])
    .map_err(err("post_send"))?;
    let tx = verbs_wait(&mut a, 4)?;
    let ids: Vec<(u64, WcStatus)> = tx.iter().map(|w| (w.wr_id, w.status)).collect();
    expect(
        ids == [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success),
            (4, WcStatus::Success),
        ],
        || format!("send completions {ids:?}"),
    )?;
    a.mr.read(16384, &mut got);
    expect(got == data, || "READ brought back other bytes".into())?;
    let mut v = [0u8; 8];
    a.mr.read(32768, &mut v);
    let mut now = [0u8; 8];
    b.mr.read(65536, &mut now);
    expect(
        u64::from_le_bytes(v) == 42 && u64::from_le_bytes(now) == 50,
        || "fetch-and-add".into(),
    )
}

/// Runs every check (or those whose name contains `filter`), printing one line per check as
/// `test NAME ... ok` or `test NAME ... FAILED: reason`. Returns the number of failures.
pub fn run(t: &Transport, filter: Option<&str>) -> usize {
    let mut failed = 0;
    for c in CHECKS
        .iter()
        .filter(|c| filter.is_none_or(|f| c.name.contains(f)))
    {
        let start = Instant::now();
        let outcome = (c.run)(t);
        let ms = start.elapsed().as_millis();
        match outcome {
            Ok(()) => println!("test {} ... ok ({ms} ms)", c.name),
            Err(why) => {
                failed += 1;
                println!("test {} ... FAILED ({ms} ms): {why}", c.name)
            }
        }
    }
    failed
}
