//! FLD-E (paper §5.3): Ethernet queues of the accelerator. The host control plane binds FLD's
//! queues to a NIC vPort and steers flows to the accelerator with match-action rules; the
//! accelerator receives those packets with the rule's context tag and sends packets back through
//! FLD's transmit queues.

use std::sync::Arc;

use fld_abi::fld::{accelerate_tag, MAX_RESUME_TABLE};
use fld_abi::nic::TABLE_KIND_NIC_RX;
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
    tenants: Vec<Tenant>,
}

/// Priorities below this are reserved for the control plane's own rules.
pub const TENANT_MIN_PRIORITY: u16 = 1000;

#[derive(Clone, Copy, Debug)]
struct Tenant {
    context: u16,
    owns: FlowItem,
    /// NIC meter limiting the tenant's traffic into the accelerator.
    meter: Option<u32>,
}

/// A tenant registered with [`FldE::register_tenant`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TenantId(usize);

/// Why the control plane refused a tenant's rule.
#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    #[error("context ID {0} already belongs to a tenant")]
    ContextInUse(u16),
    #[error("no such tenant")]
    UnknownTenant,
    #[error("tenant with context {tenant} tried to set context {claimed}")]
    ForeignContext { tenant: u16, claimed: u32 },
    #[error("the rule does not match only the tenant's own traffic")]
    NotConfined,
    #[error("priority {0} is reserved for the control plane")]
    Priority(u16),
    #[error(transparent)]
    Device(DriverError),
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
            tenants: Vec::new(),
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
    /// the accelerator sees in its rx metadata). With `resume_at`, the accelerator's returned
    /// packet re-enters the NIC's steering at that flow table (this function's receive table, or
    /// an eSwitch table on the manager function) instead of the eSwitch root: the `accelerate`
    /// action of paper §5.3. This is the trusted control plane's call; tenants go through
    /// [`FldE::tenant_accelerate`].
    pub fn accelerate(
        &mut self,
        priority: u16,
        pattern: &[FlowItem],
        context: u16,
        resume_at: Option<u32>,
    ) -> Result<FlowHandle, DriverError> {
        self.install(priority, pattern, context, resume_at, None)
    }

    fn install(
        &mut self,
        priority: u16,
        pattern: &[FlowItem],
        context: u16,
        resume_at: Option<u32>,
        meter: Option<u32>,
    ) -> Result<FlowHandle, DriverError> {
        let resume = match resume_at {
            None => None,
            Some(t) if t < MAX_RESUME_TABLE as u32 => Some(t as u8),
            Some(_) => {
                return Err(DriverError::InvalidArgument(
                    "resume tables must be numbered below 127 (FLD descriptor field)",
                ))
            }
        };
        let (mask, value) = compile_pattern(pattern);
        let rule = FlowRule {
            priority,
            mask,
            value,
            fate: RuleFate::Rq(self.binding.rq.rqn),
            flow_tag: Some(accelerate_tag(context, resume)),
            count: true,
            vxlan_decap: false,
            vxlan_encap: None,
            meter,
        };
        self.nic
            .create_flow_entry(self.root, &rule)
            .map(FlowHandle::new)
    }

    /// Registers a tenant: the control plane, not the tenant, picks its context ID, and the
    /// tenant's rules must be confined to traffic matching `owns` (e.g. its IPv4 address).
    pub fn register_tenant(
        &mut self,
        context: u16,
        owns: FlowItem,
    ) -> Result<TenantId, TenantError> {
        if self.tenants.iter().any(|t| t.context == context) {
            return Err(TenantError::ContextInUse(context));
        }
        self.tenants.push(Tenant {
            context,
            owns,
            meter: None,
        });
        Ok(TenantId(self.tenants.len() - 1))
    }

    /// Limits a tenant's traffic into the accelerator to `rate_bytes_per_s` with bursts of
    /// `burst_bytes` (a NIC meter on each of the tenant's rules installed afterwards): the
    /// isolation of the paper's IoT experiment. Excess packets are dropped by the NIC and counted
    /// in the meter.
    pub fn shape_tenant(
        &mut self,
        tenant: TenantId,
        rate_bytes_per_s: u64,
        burst_bytes: u32,
    ) -> Result<u32, TenantError> {
        if tenant.0 >= self.tenants.len() {
            return Err(TenantError::UnknownTenant);
        }
        let m = self
            .nic
            .create_meter(rate_bytes_per_s, burst_bytes)
            .map_err(TenantError::Device)?;
        self.tenants[tenant.0].meter = Some(m);
        Ok(m)
    }

    /// An untrusted tenant's `accelerate` rule (paper §5.4). The control plane validates it:
    /// the tenant may not claim another tenant's context ID, its pattern must contain the
    /// tenant's own match, and its priority may not preempt the control plane's rules
    /// (below [`TENANT_MIN_PRIORITY`]).
    pub fn tenant_accelerate(
        &mut self,
        tenant: TenantId,
        priority: u16,
        pattern: &[FlowItem],
        claimed_context: Option<u32>,
        resume_at: Option<u32>,
    ) -> Result<FlowHandle, TenantError> {
        let t = self
            .tenants
            .get(tenant.0)
            .copied()
            .ok_or(TenantError::UnknownTenant)?;
        if let Some(c) = claimed_context.filter(|c| *c != t.context as u32) {
            return Err(TenantError::ForeignContext {
                tenant: t.context,
                claimed: c,
            });
        }
        if !pattern.contains(&t.owns) {
            return Err(TenantError::NotConfined);
        }
        if priority < TENANT_MIN_PRIORITY {
            return Err(TenantError::Priority(priority));
        }
        self.install(priority, pattern, t.context, resume_at, t.meter)
            .map_err(TenantError::Device)
    }

    /// Packets and bytes a rule sent to the accelerator.
    pub fn query(&mut self, h: FlowHandle) -> Result<(u64, u64), DriverError> {
        self.nic.query_flow_entry(h.id())
    }
}
