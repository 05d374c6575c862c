//! The cost parameters of a simulated run, each with its default and where the default comes
//! from (`docs/simulation.md` has the same table). A scenario's `[defaults.*]` tables and each
//! host's, link's and switch's own keys override them key by key.

use fld_device::nic;
use serde::{Deserialize, Serialize};

/// A cable between two ports, both directions alike.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LinkParams {
    /// Line rate, Gbit/s. Default 100: the ConnectX-4 testbed and simulation of StaR (§4,
    /// Fig. 1).
    pub gbps: f64,
    /// One-way propagation delay, ns. Default 1000: LEFT's simulation ("link latency is set to
    /// 1 us", §4.1). A few metres of direct cable are ~10 ns.
    pub propagation_ns: u64,
    /// Bytes each frame occupies on the line beyond the frame the NIC builds (which has no FCS):
    /// preamble and start delimiter 8, FCS 4, minimum inter-frame gap 12 (IEEE 802.3 §4.4.2).
    pub overhead_bytes: u32,
    /// Probability that a frame is lost (seeded, independent per frame).
    pub loss: f64,
}

impl Default for LinkParams {
    fn default() -> Self {
        LinkParams {
            gbps: 100.0,
            propagation_ns: 1000,
            overhead_bytes: 24,
            loss: 0.0,
        }
    }
}

/// The PCIe link between a card and its host.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PcieParams {
    /// From a DMA read request to its data, ns. Default 546: the median latency of a 64-byte
    /// DMA read from host memory in pcie-bench's published measurements (Neugebauer et al.,
    /// SIGCOMM '18, data set `pcie-bench/data`: an NFP-6000 on Gen3 x8 in Xeon E5-2620 v3 and
    /// E5-2630 v4 servers, host-warm cache, local socket, `LAT_DMA_RD`, 546 ns for 8 and 64
    /// bytes). StaR's scenarios set StaR's own 1,000 ns.
    pub read_latency_ns: u64,
    /// A posted write (the CPU's doorbell and WQE-by-MMIO stores to the card, the card's DMA
    /// write to host memory) until it lands, ns. Default 273: one direction of the read's round
    /// trip. pcie-bench's write-then-read of the same address (`LAT_DMA_WRRD`, 773 ns for 64
    /// bytes) spends 227 ns more than the read alone, which agrees within 20 %.
    pub write_latency_ns: u64,
    /// Usable rate per direction, Gbit/s, charged on the fabric's TLP bytes (headers
    /// included). Default 126: Gen3 x16 (8 GT/s x 16 lanes x 128/130), the slot of a 100G
    /// ConnectX-4/5.
    pub gbps: f64,
}

impl Default for PcieParams {
    fn default() -> Self {
        PcieParams {
            read_latency_ns: 546,
            write_latency_ns: 273,
            gbps: 126.0,
        }
    }
}

/// FLD (FlexDriver §5) on the card's FPGA: its PCIe link to the card's switch and its
/// pipeline. The NIC reaches it peer to peer through that switch (§4, Figure 6), so every
/// descriptor, completion and packet byte of an FLD queue crosses this link, never the host's.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FldParams {
    /// FLD's clock, MHz. Default 250: FLD's row of Table 5 (Clk. 250).
    pub clock_mhz: u64,
    /// Bytes FLD's datapath moves per cycle. Default 64 (512 bits): the narrowest power-of-two
    /// AXI-stream width that carries the 100 Gbit/s FLD's interfaces run at (§6) at 250 MHz
    /// (256 bits give 64 Gbit/s).
    pub datapath_bytes: u64,
    /// Cycles a packet spends in each of FLD's pipelines beyond its data beats: on receive the
    /// CQE's decompression, the buffer read and the stream to the accelerator (§5.2); on
    /// transmit the descriptor, the translation-table insertions and the doorbell (§5.1).
    /// Default 16 (assumed: a few pipeline stages of table lookups and arbitration; the paper
    /// gives no per-stage figure).
    pub stage_cycles: u64,
    /// Cycles from a NIC read request arriving at FLD to its completion leaving: the ring
    /// translation and WQE generation (§5.3, `fld::tx`) or the data translation and buffer
    /// read. Default 16 (assumed, as `stage_cycles`).
    pub response_cycles: u64,
    /// Usable rate of FLD's PCIe link per direction, Gbit/s of TLP bytes (headers included).
    /// Default 63.0: Gen3 x8 (8 GT/s x 8 lanes x 128/130), the Innova-2's FPGA link (§6, "a
    /// PCIe Gen. 3 x8 link each"; "limited to 50 Gbps" of data after TLP overheads).
    pub pcie_gbps: f64,
    /// A NIC read of FLD's BAR, request to data, without FLD's own response cycles: the
    /// card's switch both ways and the FPGA's PCIe core, ns. Default 324: **fitted** to Table
    /// 6's FLD-E median (2.6 us round trip, `qemu/scenarios/flexdriver-table6.toml`), the one
    /// constant fitted for FLD (`docs/simulation.md`, "FLD in virtual time").
    pub read_latency_ns: u64,
    /// A posted write between the NIC and FLD until it lands, ns. Default: one direction
    /// of the read's round trip (162), as the host link's write latency is derived from its
    /// read.
    pub write_latency_ns: u64,
}

impl Default for FldParams {
    fn default() -> Self {
        FldParams {
            clock_mhz: 250,
            datapath_bytes: 64,
            stage_cycles: 16,
            response_cycles: 16,
            pcie_gbps: 63.0,
            read_latency_ns: 324,
            write_latency_ns: 162,
        }
    }
}

impl FldParams {
    /// Picoseconds of `cycles` FLD clock cycles.
    pub fn cycles_ps(&self, cycles: u64) -> u64 {
        cycles * 1_000_000 / self.clock_mhz.max(1)
    }

    /// Data beats `bytes` take on FLD's datapath.
    pub fn beats_of(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.datapath_bytes.max(1))
    }
}

/// The ZUC look-aside accelerator behind FLD (FlexDriver §7): `units` ZUC modules behind a load
/// balancer, each producing `bits_per_cycle` of keystream a cycle after `init_cycles` per
/// request, at `clock_mhz`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ZucParams {
    /// Default 200: the ZUC row of Table 5 (Clk. 200).
    pub clock_mhz: f64,
    /// Default 8: "The ZUC accelerator comprises 8 ZUC modules" (§7).
    pub units: u64,
    /// Default 32: ZUC's keystream is one 32-bit word per clock in its working stage (3GPP's
    /// ZUC specification, §3.6).
    pub bits_per_cycle: u64,
    /// Cycles a request spends in its module beyond its keystream. Default 44: derived from
    /// §7's one figure for a module, "4.76 Gbps for 512 B messages" at 200 MHz — 860 ns, 172
    /// cycles, of which the 4096 bits' keystream takes 128 (ZUC's 32 initialisation rounds plus
    /// the module's pipeline are the rest).
    pub init_cycles: u64,
}

impl Default for ZucParams {
    fn default() -> Self {
        ZucParams {
            clock_mhz: 200.0,
            units: 8,
            bits_per_cycle: 32,
            init_cycles: 44,
        }
    }
}

impl ZucParams {
    /// Picoseconds the modules take for `requests` requests of `bits` in all: the work spread
    /// over the modules (the balancer keeps them even), and at least one request's own time.
    pub fn busy_ps(&self, requests: u64, bits: u64) -> u64 {
        if requests == 0 {
            return 0;
        }
        let per_bit = |b: u64| b.div_ceil(self.bits_per_cycle.max(1));
        let total = requests * self.init_cycles + per_bit(bits);
        let one = self.init_cycles + per_bit(bits / requests);
        let cycles = total.div_ceil(self.units.max(1)).max(one);
        (cycles as f64 * 1e6 / self.clock_mhz).ceil() as u64
    }
}

/// The NIC pipeline.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NicParams {
    /// Processing time per packet sent or received — how often the pipeline takes a packet
    /// (its throughput), ns. Default 40: LEFT's per-packet budget of a 200 Gbit/s RNIC ("all
    /// operations should converge within 40 ns", §2.2).
    pub packet_ns: u64,
    /// How long a packet takes through the NIC one way — from its WQE to the wire, or from the
    /// wire to its data landing on PCIe: the pipeline's depth, the MAC, the PHY and SerDes, ns.
    /// Default 219: the one parameter fitted, to two hardware points at once (uRDMA's 16 B
    /// WRITE, 1.3 us one way, and FlexDriver Table 6's CPU echo, 2.34 us round trip;
    /// `docs/simulation.md`, "Calibration").
    pub latency_ns: u64,
    /// QP contexts the on-chip cache holds. Default 300: StaR ("RNIC on-chip memory can store
    /// up to 300 connections' states", §4, from its Fig. 1).
    pub qp_cache_entries: usize,
    /// Memory translations the on-chip cache holds. Default 4096 (assumed; no seed paper states
    /// the size — uRDMA's hint policy keeps the top 4096 regions, §4).
    pub mtt_cache_entries: usize,
    /// Dependent PCIe reads a translation miss stalls for: 1, the MTT entry, is the mechanism
    /// the papers describe (uRDMA §2). A NIC whose translation is a walk (a memory-key context,
    /// then the MTT, each in host memory behind the NIC's own tables) pays more; uRDMA Figure
    /// 3's scenario shows what ConnectX-5's measured cost implies in a second panel.
    pub mtt_miss_reads: u32,
    /// Bytes a QP-context miss reads from host memory. Default 256 (a ConnectX QPC is a few
    /// hundred bytes; StaR §3.1 sizes the parts of a connection's state in tens of bytes).
    pub qp_context_bytes: u32,
    /// How the RC responder treats a packet ahead of the PSN it expects: "gbn" (IBA's
    /// go-back-N, the default) or a reorder unit — "irn", "melo+", "left-", "left", "ideal"
    /// (LEFT §4.2; single-packet WRITEs are reordered, other messages go back N).
    pub receiver: String,
    /// The bandwidth-delay product, in packets, the reorder unit is sized for. Default 512.
    pub reorder_bdp: u32,
    /// The time per received packet a bitmap operation overlaps before it stalls the pipeline,
    /// ns. Default 40: LEFT §2.2, "all operations should converge within 40 ns (when receiving a
    /// 1 KB packet at a 200 Gbps bandwidth)".
    pub reorder_budget_ns: u32,
    /// Packets one QP sends per engine visit before the next QP's turn. Default 64; 1
    /// interleaves the QPs packet by packet, as a scheduler arbitrating per packet does.
    pub qp_budget: usize,
    /// WQEs one Ethernet send queue may process per engine visit before the next queue's
    /// turn. Default 256 (the card's own default); a ConnectX arbitrates between send queues
    /// at a much finer grain, which lets a looped echo (FLD-E local) pipeline.
    pub sq_budget: u32,
}

impl Default for NicParams {
    /// The cache sizes are the card's own defaults (`fld_device::nic`), with their sources.
    fn default() -> Self {
        NicParams {
            packet_ns: 40,
            latency_ns: 219,
            qp_cache_entries: nic::DEFAULT_QP_CACHE_ENTRIES,
            mtt_cache_entries: nic::DEFAULT_MTT_CACHE_ENTRIES,
            mtt_miss_reads: 1,
            qp_context_bytes: nic::DEFAULT_QP_CONTEXT_BYTES,
            receiver: "gbn".into(),
            reorder_bdp: 512,
            reorder_budget_ns: 40,
            qp_budget: 64,
            sq_budget: 256,
        }
    }
}

/// The host CPU running the application.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HostParams {
    /// CPU time to build and post one work request (WQE write, WQE-by-MMIO stores, doorbell),
    /// ns. Default 100, inside the bounds of Kalia et al., "Design Guidelines for High
    /// Performance RDMA Systems" (USENIX ATC '16): one core that finds a request and answers it
    /// with a WQE by MMIO serves 7.0 M requests/s, CPU-bound (§4.2, §5.2.1), 143 ns for the
    /// find, the handling and the post; batched it serves 16.6 M/s, NIC-bound (60 ns). So the
    /// MMIO post costs at least 83 ns and at most 143.
    pub post_ns: u64,
    /// CPU time of one look at memory or a CQ that finds something, ns. Default 50: the same
    /// measurement bounds the find and the handling together by 60 ns (the batched rate); the
    /// split between post and poll is ours (assumed).
    pub poll_ns: u64,
    /// CPU time the target spends on one unloaded WRITE once it has found its completion: the
    /// uMTT lookup, the copy from the staging slot to its destination (a TLB and cache miss on
    /// a cold page) and the receive reposted (uRDMA §3.1), ns. Default 912: fitted to uRDMA
    /// Figure 3's one-region unload point (3.4 us round trip; the model without it gives
    /// 2.488 us) — the one constant fitted for that figure.
    pub unload_ns: u64,
    /// Interruptions of the application's core by the operating system (timer ticks,
    /// softirqs, other threads), per second, arriving as a Poisson process (seeded). Default 0:
    /// none. FlexDriver's Table 6 names them as the cause of the CPU echo's tail ("no OS
    /// interference" is why FLD-E's 99.9th percentile is 2.5x better, §8.1.1); its scenario
    /// sets them on the host whose core runs the CPU echo.
    pub interference_hz: f64,
    /// How long each interruption keeps the core away from the application, ns. Default 0.
    pub interference_ns: u64,
}

impl Default for HostParams {
    fn default() -> Self {
        HostParams {
            post_ns: 100,
            poll_ns: 50,
            unload_ns: 912,
            interference_hz: 0.0,
            interference_ns: 0,
        }
    }
}

/// How a switch picks among several egress ports that lead to a destination equally short.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PathChoice {
    /// A hash of the flow's 5-tuple: one path per flow.
    Ecmp,
    /// A new random path when a flow pauses longer than the flowlet gap.
    Flowlet,
    /// Round robin per packet (packet spraying).
    Spray,
    /// A uniformly random port per packet (random packet spraying, Dixit et al., INFOCOM '13).
    Random,
    /// Per-packet adaptive routing, UGAL-L at the source's switch (Kim et al., ISCA '08, the
    /// dragonfly's routing): a packet takes the least-queued shortest path unless a path one hop
    /// longer is cheaper by queue × hops beyond `adaptive_threshold_bytes`. Idle, everything
    /// goes minimal and in order; as load grows, packets spill onto the longer paths and arrive
    /// out of order. Switches further along take the least-queued shortest path.
    Adaptive,
}

/// An output-queued switch.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SwitchParams {
    /// Bytes each egress queue holds; a frame that does not fit is dropped. Default 4 MiB
    /// (assumed; StaR §4 only asks for "large enough" queues).
    pub buffer_bytes: u64,
    /// A frame enqueued while the queue already holds at least this many bytes is marked
    /// Congestion Experienced if its sender set ECT (RFC 3168 §5). Default 100 KiB (assumed,
    /// a DCTCP-style K for 100 Gbit/s; no seed paper gives one).
    pub ecn_threshold_bytes: u64,
    /// From the frame's last bit in to its first bit out when the queue is empty, ns.
    /// Default 300 (assumed, a datacenter switch ASIC's port-to-port latency).
    pub forwarding_ns: u64,
    pub path: PathChoice,
    /// Idle time after which a flow may move to another path (flowlet switching), ns.
    /// Default 20,000: above the 2–20 us path-RTT differences LEFT cites (§2.2), so a flowlet
    /// switch does not reorder.
    pub flowlet_gap_ns: u64,
    /// Adaptive routing's bias towards the shortest paths (UGAL's threshold), bytes.
    /// Default 32,768 (assumed: 32 packets of 1 KB, a little under a BDP at 200 Gbit/s and
    /// 2 us).
    pub adaptive_threshold_bytes: u64,
}

impl Default for SwitchParams {
    fn default() -> Self {
        SwitchParams {
            buffer_bytes: 4 << 20,
            ecn_threshold_bytes: 100 << 10,
            forwarding_ns: 300,
            path: PathChoice::Ecmp,
            flowlet_gap_ns: 20_000,
            adaptive_threshold_bytes: 32 << 10,
        }
    }
}

/// Serialization time of `bytes` on a line of `gbps`, in picoseconds (rounded up).
pub fn serialization_ps(bytes: u64, gbps: f64) -> u64 {
    ((bytes * 8) as f64 * 1000.0 / gbps).ceil() as u64
}
