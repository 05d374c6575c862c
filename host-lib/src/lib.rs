//! fld-host: what applications link. This part provides the DPDK-like API for CPU applications
//! on a vPort: a DMA-able [`mempool::Mempool`] of [`mempool::Mbuf`]s, an [`ethdev::EthDev`] with
//! `tx_burst`/`rx_burst`, rte_flow-shaped [`flow`] rules and port statistics.

pub mod apps;
pub mod cryptodev;
pub mod ethdev;
pub mod flde;
pub mod flow;
pub mod inline_apps;
pub mod mempool;
pub mod replay;

pub use ethdev::{EthDev, EthStats, PortConfig, RxMode};
pub use flow::{FlowAction, FlowAttr, FlowItem};
pub use mempool::{Mbuf, Mempool};
