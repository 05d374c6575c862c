//! The card (the Innova-2 of paper §6, Figure 6): one PCIe switch with the soft NIC's host
//! functions and the FPGA's FLD function behind it, plus the runner that advances the model.

use std::sync::Arc;

use crate::fabric::{Fabric, FabricConfig};
use crate::fld::memory_model::MemoryParams;
use crate::fld::FldFunction;
use crate::nic::{Nic, NicConfig};

/// Build-time configuration of the whole card.
#[derive(Clone, Debug)]
pub struct CardConfig {
    pub fabric: FabricConfig,
    pub nic: NicConfig,
    /// FLD's structures are sized from these analysis parameters (Table 2a by default).
    pub fld: MemoryParams,
}

impl Default for CardConfig {
    fn default() -> Self {
        CardConfig {
            fabric: FabricConfig::default(),
            nic: NicConfig::default(),
            fld: MemoryParams::table_2a(),
        }
    }
}

/// The emulated card.
pub struct Card {
    pub fabric: Arc<Fabric>,
    pub nic: Arc<Nic>,
    pub fld: Arc<FldFunction>,
}

impl Card {
    pub fn new(config: CardConfig) -> Arc<Card> {
        let fabric = Fabric::new(config.fabric);
        let nic = Nic::new(&fabric, config.nic);
        let fld = FldFunction::new(&fabric, crate::fld::memory_model::geometry(&config.fld));
        Arc::new(Card { fabric, nic, fld })
    }

    /// A conventional reset of the whole card (PCIe Base §6.6.1): every function and the NIC's
    /// card-wide state at power-on, the host-memory maps gone; the accelerator stays plugged
    /// in and the wire, tap and clock outside the card stay connected. Costs what the state in
    /// use costs to clear, not what the card costs to build: the fuzz targets reset one card
    /// for every input.
    pub fn conventional_reset(&self) {
        // The NIC's card-wide state first: the functions' resets that follow then find no
        // objects left to take apart one by one.
        self.nic.conventional_reset();
        self.fabric.conventional_reset();
    }

    /// The clock the card's timers, meters and timestamps read (see [`crate::clock`]).
    pub fn set_clock(&self, clock: Arc<dyn crate::clock::Clock>) {
        self.nic.set_clock_source(clock);
    }

    /// One step of every engine; returns the work done (0 when the card is idle).
    pub fn poll(&self) -> usize {
        self.nic.poll() + self.fld.poll()
    }

    /// Returns once no engine step that began before the call is still running. After a change
    /// of the DMA map ([`crate::fabric::Fabric::unmap_host`]) this is the IOTLB invalidation's
    /// completion: steps that began earlier finish with the old map, and every later one uses the
    /// new map, so once this returns nothing reaches the memory that was unmapped.
    pub fn wait_for_dma_in_flight(&self) {
        self.nic.wait_for_pass();
        self.fld.wait_for_pass();
    }

    /// Steps until nothing moves (bounded, so a misbehaving configuration cannot hang a test).
    pub fn run_until_idle(&self) -> usize {
        let mut total = 0;
        for _ in 0..1_000_000 {
            let n = self.poll();
            if n == 0 {
                break;
            }
            total += n;
        }
        total
    }
}
