//! The NIC engine (`docs/nic-interface.md` §5-10), one block per module as the hardware pipeline
//! runs them: [`completions`] (consumer and arm doorbells, CQE and EQE writes, MSI-X),
//! [`transmit`] (send WQEs: gather by DMA, checksum insertion), [`switching`] (the eSwitch walk
//! from a vPort or the uplink to its destinations, VXLAN) and [`receive`] (scatter into regular or
//! striding RQs). One call to [`poll`] is one batch: DMA routing is snapshotted once, counters are
//! flushed once, nothing is allocated per packet.

mod completions;
mod receive;
mod roce;
mod switching;
#[cfg(test)]
pub(super) use switching::WALK_ALWAYS;
mod transmit;
mod wqe_mmio;

pub(crate) use completions::CqeRun;
pub use receive::RxPrefetchCounters;
pub(crate) use transmit::{TxBurst, WqePrefetch, FETCH_BLOCKS};
pub use wqe_mmio::WqeMmioCounters;

use super::{NicCore, Port, MAX_HOST_FUNCTIONS};
use crate::fabric::{DmaPort, Fabric, RouteSnapshot};

/// Per-poll context. DMA ports and the timestamp are taken on first use, so an idle poll costs
/// only the doorbell reads.
struct Ctx<'a> {
    fabric: &'a Fabric,
    routes: &'a RouteSnapshot,
    ports: &'a [Port],
    dma: [Option<DmaPort<'a>>; MAX_HOST_FUNCTIONS],
    now_ns: Option<u64>,
    clock: Option<std::sync::Arc<dyn crate::clock::Clock>>,
}

impl<'a> Ctx<'a> {
    /// The DMA port of host function `owner` (its requester ID and address space). Called
    /// several times per packet: the port already open is the inlined path, opening one is not.
    #[inline(always)]
    fn dma(&mut self, owner: u16) -> &mut DmaPort<'a> {
        let (fabric, routes, ports) = (self.fabric, self.routes, self.ports);
        self.dma[owner as usize].get_or_insert_with(|| open_dma(fabric, routes, ports, owner))
    }

    /// The doorbell word at `offset` of host function `owner`'s page (0 for an unknown owner).
    #[inline]
    fn doorbell(&self, owner: u16, offset: u64) -> u32 {
        self.ports
            .get(owner as usize)
            .map_or(0, |p| p.doorbells.load(offset))
    }

    /// The counter of the WQE `owner`'s WQE-by-MMIO buffer at `buffer` is sealed for, if any.
    #[inline]
    fn wqe_seal(&self, owner: u16, buffer: u64) -> Option<u32> {
        let seal = self.doorbell(owner, buffer + fld_abi::nic::db::WQE_SEAL_OFFSET);
        fld_abi::nic::db::seal_wqe(seal).map(|(index, _)| index)
    }

    /// The WQE at basic-block `counter` from `owner`'s WQE-by-MMIO buffer at `buffer`, if the
    /// buffer holds it whole (see [`wqe_mmio`]); counted in `stats`.
    fn wqe_from_buffer(
        &self,
        owner: u16,
        buffer: u64,
        (counter, pending): (u32, u32),
        out: &mut [u8],
        stats: &mut WqeMmioCounters,
    ) -> Option<u32> {
        let area = &self.ports.get(owner as usize)?.doorbells;
        match wqe_mmio::take_wqe(area, buffer, counter, pending, out) {
            wqe_mmio::WqeBuffer::Taken(blocks) => {
                stats.taken += 1;
                Some(blocks)
            }
            wqe_mmio::WqeBuffer::Rejected => {
                stats.rejected += 1;
                None
            }
            wqe_mmio::WqeBuffer::Absent => None,
        }
    }

    /// The NIC's time, read once per batch.
    #[inline]
    fn now(&mut self) -> u64 {
        let clock = &self.clock;
        *self
            .now_ns
            .get_or_insert_with(|| clock.as_ref().map_or(0, |c| c.now_ns()))
    }
}

#[cold]
#[inline(never)]
fn open_dma<'a>(
    fabric: &'a Fabric,
    routes: &'a RouteSnapshot,
    ports: &[Port],
    owner: u16,
) -> DmaPort<'a> {
    fabric.dma_in(ports[owner as usize].fid, routes)
}

pub(super) fn poll(
    core: &mut NicCore,
    fabric: &Fabric,
    ports: &[Port],
    kept: &mut Option<RouteSnapshot>,
) -> usize {
    // The routing snapshot stays with the engine between passes (taken again only when routes
    // change): a pass takes no lock and touches no reference count the applications share.
    fabric.refresh_routes(kept);
    let Some(routes) = kept.as_ref() else {
        return 0;
    };
    let mut ctx = Ctx {
        fabric,
        routes,
        ports,
        dma: std::array::from_fn(|_| None),
        now_ns: core.manual_clock,
        clock: core.clock.take(),
    };
    // The uplink sends what this pass transmits as one burst, when the pass's last
    // transmitting stage is done.
    core.wire.begin_burst();
    let mut work = completions::consumer_doorbells(core, &mut ctx);
    work += transmit::transmit(core, &mut ctx);
    work += roce::poll(core, &mut ctx);
    work += switching::uplink_receive(core, &mut ctx);
    core.wire.end_burst();
    // Last, so what the receives of this pass read is theirs, and what is read ahead waits for
    // frames to come.
    work += receive::prefetch(core, &mut ctx);
    completions::flush_cqes(core, &mut ctx);
    core.clock = ctx.clock.take();
    work
}
