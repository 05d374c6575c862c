//! The card: one PCIe switch with the soft NIC's host functions behind it (the FLD function
//! joins in a later part), plus the runner that advances the model.

use std::sync::Arc;

use crate::fabric::{Fabric, FabricConfig};
use crate::nic::{Nic, NicConfig};

/// Build-time configuration of the whole card.
#[derive(Clone, Debug, Default)]
pub struct CardConfig {
    pub fabric: FabricConfig,
    pub nic: NicConfig,
}

/// The emulated card.
pub struct Card {
    pub fabric: Arc<Fabric>,
    pub nic: Arc<Nic>,
}

impl Card {
    pub fn new(config: CardConfig) -> Arc<Card> {
        let fabric = Fabric::new(config.fabric);
        let nic = Nic::new(&fabric, config.nic);
        Arc::new(Card { fabric, nic })
    }

    /// One step of every engine; returns the work done (0 when the card is idle).
    pub fn poll(&self) -> usize {
        self.nic.poll()
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
