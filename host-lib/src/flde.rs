//! FLD-E (paper §5.3): Ethernet queues of the accelerator. The host control plane binds FLD's
//! queues to a NIC vPort and steers flows to the accelerator with match-action rules; the
//! accelerator receives those packets with the rule's context tag and sends packets back through
//! FLD's transmit queues.

use std::sync::Arc;

use fld_device::nic::abi::TABLE_KIND_NIC_RX;
use fld_driver::fld::{bind, FldBinding, FldDriver, FldRxLayout};
use fld_driver::nic::{EventQueue, FlowRule, NicDriver, RuleFate, TableMiss};
use fld_driver::{DriverError, PciDevice};

use crate::ethdev::FlowHandle;
use crate::flow::{compile_pattern, FlowItem};

/// The accelerator's Ethernet port: a NIC vPort whose traffic FLD handles.
pub struct FldE {
    nic: NicDriver,
    _eq: EventQueue,
    fld: FldDriver,
    binding: FldBinding,
    root: u32,
}

impl FldE {
    /// Brings up the NIC function `nic_dev` and the FLD function `fld_dev`, binds `tx_queues`
    /// FLD transmit queues and FLD's shared receive queue to the NIC, and installs an empty
    /// receive table (traffic reaches the accelerator only through [`FldE::accelerate`]).
    pub fn open(
        nic_dev: Arc<dyn PciDevice>,
        fld_dev: Arc<dyn PciDevice>,
        tx_queues: u16,
    ) -> Result<Self, DriverError> {
        let mut nic = NicDriver::probe(nic_dev.clone())?;
        nic_dev.enable_msix(1)?;
        let eq = nic.create_eq(6, 0)?;
        let mut fld = FldDriver::probe(fld_dev)?;
        let binding = bind(&mut nic, &eq, &mut fld, tx_queues, FldRxLayout::default())?;
        let root = nic.create_flow_table(TABLE_KIND_NIC_RX, 0, TableMiss::Drop)?;
        nic.set_root(TABLE_KIND_NIC_RX, Some(root))?;
        Ok(FldE {
            nic,
            _eq: eq,
            fld,
            binding,
            root,
        })
    }

    pub fn mac(&self) -> [u8; 6] {
        self.nic.mac()
    }
    pub fn fld(&self) -> &FldDriver {
        &self.fld
    }
    pub fn binding(&self) -> &FldBinding {
        &self.binding
    }
    pub fn nic(&mut self) -> &mut NicDriver {
        &mut self.nic
    }

    /// Sends packets matching `pattern` to the accelerator tagged with `context` (the context ID
    /// the accelerator sees in its rx metadata).
    pub fn accelerate(
        &mut self,
        priority: u16,
        pattern: &[FlowItem],
        context: u32,
    ) -> Result<FlowHandle, DriverError> {
        let (mask, value) = compile_pattern(pattern);
        let rule = FlowRule {
            priority,
            mask,
            value,
            fate: RuleFate::Rq(self.binding.rq.rqn),
            flow_tag: Some(context),
            count: true,
        };
        self.nic
            .create_flow_entry(self.root, &rule)
            .map(FlowHandle::new)
    }

    /// Packets and bytes a rule sent to the accelerator.
    pub fn query(&mut self, h: FlowHandle) -> Result<(u64, u64), DriverError> {
        self.nic.query_flow_entry(h.id())
    }
}
