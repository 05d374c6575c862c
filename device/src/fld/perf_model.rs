//! FLD's PCIe performance model (paper §8.1, Figure 7a): the bytes each packet costs on FLD's
//! PCIe link — data, descriptors, completions, doorbells, all as TLPs with their header
//! overhead — and the throughput bound that follows, next to the Ethernet line rate.
//!
//! The traffic is the FLD-E path of Figure 7a: every packet is received by the accelerator (the
//! NIC writes it and its CQE into FLD) and sent back (the NIC reads the generated WQE and the
//! data from FLD, and writes a completion per signalled batch). The NIC fetches generated WQEs
//! in bursts of up to eight (one read request, its completion split at the MPS), as it fetches
//! any send ring. FLD's own writes are doorbells:
//! the SQ producer once per batch, the two CQ consumer counters once per batch, the RQ producer
//! once per recycled multi-packet WQE.
//!
//! Link rates: PCIe Gen3 is 8 GT/s per lane with 128b/130b encoding (7.877 Gbit/s of TLP bytes
//! per lane and direction), Gen4 twice that. Left out: DLLP traffic (ACK/NAK, flow-control
//! updates) beyond the per-TLP overhead, and read-completion splitting at the 64-byte RCB.

use serde::Serialize;

use crate::fabric::{tlp_count, FabricConfig};

/// One line of Figure 7a: an Ethernet rate and the PCIe link FLD sits on.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct LinkConfig {
    pub name: &'static str,
    pub ethernet_gbps: f64,
    /// TLP bytes per second on FLD's link, per direction, in Gbit/s.
    pub pcie_gbps: f64,
}

/// Gen3: 8 GT/s × 128/130.
pub const GEN3_LANE_GBPS: f64 = 8.0 * 128.0 / 130.0;

/// The configurations of Figure 7a: 25 GbE (the remote experiments) and 50 GbE (local) on the
/// Innova-2's Gen3 x8 FPGA link, and 100 GbE on a Gen4 x8 link.
pub fn figure7a_links() -> [LinkConfig; 3] {
    [
        LinkConfig {
            name: "25GbE, PCIe Gen3 x8",
            ethernet_gbps: 25.0,
            pcie_gbps: 8.0 * GEN3_LANE_GBPS,
        },
        LinkConfig {
            name: "50GbE, PCIe Gen3 x8",
            ethernet_gbps: 50.0,
            pcie_gbps: 8.0 * GEN3_LANE_GBPS,
        },
        LinkConfig {
            name: "100GbE, PCIe Gen4 x8",
            ethernet_gbps: 100.0,
            pcie_gbps: 16.0 * GEN3_LANE_GBPS,
        },
    ]
}

/// Batching the FLD path uses.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Batching {
    /// Packets per signalled send completion (and per SQ/CQ doorbell batch).
    pub packets_per_completion: f64,
    /// Receive stride size and strides per multi-packet WQE.
    pub stride: u32,
    pub strides_per_wqe: u32,
    /// Send WQEs the NIC reads with one read request.
    pub wqes_per_fetch: u32,
}

impl Default for Batching {
    fn default() -> Self {
        Batching {
            packets_per_completion: 32.0,
            stride: 256,
            strides_per_wqe: 64,
            wqes_per_fetch: crate::nic::SEND_WQE_FETCH_BLOCKS,
        }
    }
}

/// Bytes per packet on FLD's link in each direction, headers included.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct PacketCost {
    /// Into FLD: packet data and CQEs the NIC writes, read requests of the NIC.
    pub to_fld: f64,
    /// Out of FLD: read completions (WQEs, data) and FLD's doorbell writes.
    pub from_fld: f64,
}

impl PacketCost {
    pub fn max(&self) -> f64 {
        self.to_fld.max(self.from_fld)
    }
}

/// The model's per-packet cost of a `size`-byte frame (data at 64-byte aligned addresses, as
/// FLD's 256-byte chunks and strides are).
pub fn packet_cost(size: u32, fabric: &FabricConfig, b: &Batching) -> PacketCost {
    let oh = fabric.tlp_overhead as f64;
    let (mps, mrrs) = (fabric.mps as u64, fabric.mrrs as u64);
    let s = size as u64;
    let writes = |bytes: u64| tlp_count(0, bytes, mps) as f64 * oh + bytes as f64;
    let doorbell = oh + 4.0;
    let strides = s.div_ceil(b.stride as u64).max(1);
    let packets_per_wqe = (b.strides_per_wqe as u64 / strides).max(1) as f64;
    let fetch = u64::from(b.wqes_per_fetch.max(1));
    // Into FLD: the received packet, its CQE, a share of a WQE fetch's read request, the data
    // read requests, a share of the send completion.
    let to_fld = writes(s)
        + writes(64)
        + tlp_count(0, 64 * fetch, mrrs) as f64 * oh / fetch as f64
        + tlp_count(0, s, mrrs) as f64 * oh
        + writes(64) / b.packets_per_completion;
    // Out of FLD: a share of a WQE fetch's completions, the data read completions, a share of
    // the SQ and CQ doorbells, a share of the RQ doorbell.
    let from_fld = writes(64 * fetch) / fetch as f64
        + writes(s)
        + 3.0 * doorbell / b.packets_per_completion
        + doorbell / packets_per_wqe;
    PacketCost { to_fld, from_fld }
}

/// Throughput bounds of one size on one link.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Bound {
    pub size: u32,
    pub cost: PacketCost,
    /// Packets per second the Ethernet line allows (20 bytes of preamble and gap per frame).
    pub ethernet_mpps: f64,
    /// Packets per second FLD's PCIe link allows.
    pub pcie_mpps: f64,
    /// The expected rate: the lower of the two.
    pub expected_mpps: f64,
    /// Expected throughput as a fraction of Ethernet line rate.
    pub fraction_of_line_rate: f64,
}

pub fn bound(size: u32, link: &LinkConfig, fabric: &FabricConfig, b: &Batching) -> Bound {
    let cost = packet_cost(size, fabric, b);
    let ethernet_mpps = link.ethernet_gbps * 1e3 / ((size as f64 + 20.0) * 8.0);
    let pcie_mpps = link.pcie_gbps * 1e3 / (cost.max() * 8.0);
    let expected_mpps = ethernet_mpps.min(pcie_mpps);
    Bound {
        size,
        cost,
        ethernet_mpps,
        pcie_mpps,
        expected_mpps,
        fraction_of_line_rate: expected_mpps / ethernet_mpps,
    }
}

/// Wire bytes of a RoCEv2 packet beyond its payload: Ethernet (14), IPv4 (20), UDP (8), BTH
/// (12), ICRC (4), FCS (4), and 20 bytes of preamble and inter-frame gap.
pub const ROCE_PACKET_OVERHEAD: f64 = 82.0;
/// Wire bytes of a RoCEv2 ACK: the overhead above plus its 4-byte AETH.
pub const ROCE_ACK_BYTES: f64 = ROCE_PACKET_OVERHEAD + 4.0;

/// Figure 8a's upper bound for the disaggregated ZUC service: operations per second an
/// Ethernet link of `link_gbps` carries for requests of `data` bytes, each a SEND of the 64-byte
/// application header and the data segmented at `mtu`, answered by a SEND of the header and
/// (`response_data`) the processed data, one ACK per message each way. The busier direction
/// sets the bound. (PCIe does not bind at 25 GbE: see Figure 7a.)
pub fn zuc_rdma_ops_bound(data: u32, response_data: bool, link_gbps: f64, mtu: u32) -> f64 {
    let message = |bytes: f64| {
        let packets = (bytes / mtu as f64).ceil().max(1.0);
        bytes + packets * ROCE_PACKET_OVERHEAD
    };
    let header = fld_abi::wire::zuc::HEADER_LEN as f64;
    let request = message(header + data as f64) + ROCE_ACK_BYTES;
    let response = message(header + if response_data { data as f64 } else { 0.0 }) + ROCE_ACK_BYTES;
    link_gbps * 1e9 / 8.0 / request.max(response)
}

/// The request data sizes of Figure 8a.
pub const FIGURE8A_SIZES: [u32; 7] = [64, 256, 512, 1024, 2048, 4096, 8192];

/// The frame sizes of Figure 7a.
pub const FIGURE7A_SIZES: [u32; 7] = [64, 128, 256, 512, 1024, 1500, 4096];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_of_a_512_byte_packet_is_counted_tlp_by_tlp() {
        let c = packet_cost(512, &FabricConfig::default(), &Batching::default());
        // In: 2 data TLPs (560 B) + CQE (88) + an eighth of the 8-WQE read request (24) + data
        // read request (24) + 88/32 of a send completion.
        assert!((c.to_fld - (560.0 + 88.0 + 24.0 / 8.0 + 24.0 + 88.0 / 32.0)).abs() < 1e-9);
        // Out: an eighth of the 512-byte WQE completion (2 TLPs, 560 B) + data completions
        // (560) + 3 doorbells/32 + 1 doorbell per 32 packets (2 strides each, 64 per WQE).
        let wqe = 560.0 / 8.0;
        assert!((c.from_fld - (wqe + 560.0 + 3.0 * 28.0 / 32.0 + 28.0 / 32.0)).abs() < 1e-9);
    }

    #[test]
    fn the_zuc_bound_counts_roce_and_application_headers() {
        // 1024 data bytes: the request is 1088 bytes in two packets at a 1 KiB MTU, so 1088 +
        // 2 x 82 + an 86-byte ACK = 1338 bytes per operation on 25 Gbit/s.
        let ops = zuc_rdma_ops_bound(1024, true, 25.0, 1024);
        assert!((ops - 25e9 / 8.0 / 1338.0).abs() < 1.0, "{ops}");
        // MACs answer with the header alone: the request direction binds.
        assert_eq!(
            zuc_rdma_ops_bound(1024, false, 25.0, 1024),
            zuc_rdma_ops_bound(1024, true, 25.0, 1024)
        );
        // Data share of the wire grows with the request: 64 B requests move under 30% data.
        let data = |d: u32| zuc_rdma_ops_bound(d, true, 25.0, 1024) * d as f64 * 8.0 / 25e9;
        assert!(
            data(64) < 0.3 && data(8192) > 0.9,
            "{} {}",
            data(64),
            data(8192)
        );
    }

    #[test]
    fn figure_7a_claims_hold() {
        let fabric = FabricConfig::default();
        let b = Batching::default();
        let [l25, l50, l100] = figure7a_links();
        // 25 Gbit/s: line rate at every size, as in the paper. (With one WQE read per packet
        // 64-byte packets stopped at 93%: 226.75 bytes into FLD per packet.)
        for s in FIGURE7A_SIZES {
            assert!(
                bound(s, &l25, &fabric, &b).fraction_of_line_rate > 0.999,
                "{s}"
            );
        }
        // 205.75 bytes into FLD per 64-byte packet: 63.0 Gbit/s / (205.75 x 8) = 38.3 Mpps.
        let cost = bound(64, &l25, &fabric, &b).cost;
        assert!((cost.to_fld - 205.75).abs() < 1e-9, "{cost:?}");
        // 50 and 100 Gbit/s: at least 95% of line rate from 512-byte packets on.
        for l in [l50, l100] {
            assert!(bound(512, &l, &fabric, &b).fraction_of_line_rate >= 0.95);
            assert!(
                bound(64, &l, &fabric, &b).fraction_of_line_rate < 0.95,
                "small packets are PCIe-bound"
            );
        }
    }
}
