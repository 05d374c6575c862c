//! fld-host: what applications link. It provides the DPDK-like API for CPU applications on a
//! vPort — a DMA-able [`mempool::Mempool`] of [`mempool::Mbuf`]s, an [`ethdev::EthDev`] with
//! `tx_burst`/`rx_burst`, rte_flow-shaped [`flow`] rules and port statistics — the FLD-E
//! control plane ([`flde`]), a cryptodev-shaped client ([`cryptodev`]), a verbs API for RDMA
//! in rdma-core's shape ([`verbs`]) and the example applications the demos run ([`apps`]). It reaches the card through the driver only, over any
//! of its transports, and depends on the driver and the formats: building a card in-process is
//! the testbed's business (`fld-qemu`).

pub mod apps;
pub mod cryptodev;
pub mod ethdev;
pub mod flde;
pub mod fldr;
pub mod flow;
pub mod guard;
pub mod mempool;
pub mod port;
pub mod verbs;

pub use ethdev::{EthDev, EthStats, PortConfig, RxMode};
pub use flow::{FlowAction, FlowAttr, FlowItem};
pub use mempool::{Mbuf, Mempool};
pub use port::BurstPort;

/// Counters by name, in the order a source reports them (a port's, a QP's, FLD's).
pub type NamedCounters = Vec<(&'static str, u64)>;
