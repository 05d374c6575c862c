//! The burst interface applications run on: a port of the emulated NIC ([`EthDev`]), or the
//! software loopback the benchmark uses as its baseline ([`crate::apps::SoftPort`]). The echo
//! applications and the cryptodev client are written against it.

use std::sync::Arc;

use crate::ethdev::EthDev;
use crate::mempool::{Mbuf, Mempool};

/// A port that sends and receives bursts of mbufs.
pub trait BurstPort {
    fn mac(&self) -> [u8; 6];
    fn pool(&self) -> Option<Arc<Mempool>>;
    fn tx_burst(&mut self, q: u16, pkts: &mut Vec<Mbuf>) -> usize;
    fn rx_burst(&mut self, q: u16, out: &mut Vec<Mbuf>, max: usize) -> usize;
}

impl BurstPort for EthDev {
    fn mac(&self) -> [u8; 6] {
        EthDev::mac(self)
    }
    fn pool(&self) -> Option<Arc<Mempool>> {
        EthDev::pool(self)
    }
    fn tx_burst(&mut self, q: u16, pkts: &mut Vec<Mbuf>) -> usize {
        EthDev::tx_burst(self, q, pkts)
    }
    fn rx_burst(&mut self, q: u16, out: &mut Vec<Mbuf>, max: usize) -> usize {
        EthDev::rx_burst(self, q, out, max)
    }
}

impl<T: BurstPort> BurstPort for &mut T {
    fn mac(&self) -> [u8; 6] {
        (**self).mac()
    }
    fn pool(&self) -> Option<Arc<Mempool>> {
        (**self).pool()
    }
    fn tx_burst(&mut self, q: u16, pkts: &mut Vec<Mbuf>) -> usize {
        (**self).tx_burst(q, pkts)
    }
    fn rx_burst(&mut self, q: u16, out: &mut Vec<Mbuf>, max: usize) -> usize {
        (**self).rx_burst(q, out, max)
    }
}
