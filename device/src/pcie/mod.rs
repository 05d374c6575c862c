//! The PCIe layer of every emulated function: configuration space, BARs and MSI-X (paper §2.4).
//! A function is a [`PciFunction`]: the fabric reaches it for configuration cycles, for host MMIO
//! and for peer-to-peer accesses from other functions.

pub mod config;
pub mod msix;

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

pub use config::{BarSpec, ConfigChange, ConfigSpace, Identity, MsixSpec};
pub use msix::{MsiMessage, MsixTable};

/// Index of a function on the fabric.
pub type FunctionId = u16;

/// Where a function's MSI-X messages go (the host's interrupt controller, an eventfd per vector
/// behind vfio-user, a counter in tests).
pub trait InterruptSink: Send + Sync {
    fn deliver(&self, function: FunctionId, msg: MsiMessage);
}

/// One PCIe function as the fabric sees it. Every method takes `&self`: functions are reached
/// concurrently by the host and by peers, and keep their own locking.
pub trait PciFunction: Send + Sync {
    /// The configuration space and MSI-X state shared by all functions.
    fn pci(&self) -> &PciState;
    fn bar_read(&self, bar: u8, offset: u64, data: &mut [u8]);
    fn bar_write(&self, bar: u8, offset: u64, data: &[u8]);
    /// Stores each `(offset, data)` of `writes` at `base + offset` in `bar`, in order: a run
    /// of CPU stores the fabric routed to this one BAR (a WQE by MMIO, its seal and its
    /// doorbell), taken in one call.
    fn bar_write_run(&self, bar: u8, base: u64, writes: &[(u64, &[u8])]) {
        for &(offset, data) in writes {
            self.bar_write(bar, base.wrapping_add(offset), data);
        }
    }
    /// Function-level reset: the device model returns to its power-on state.
    fn reset(&self);
}

enum MsixArea {
    Table(u64),
    Pba(u64),
}

/// A function's configuration space and MSI-X state at one point ([`PciState::snapshot`]).
#[derive(Clone)]
pub struct PciSnapshot {
    config: ConfigSpace,
    msix: MsixTable,
    external_msix: bool,
}

/// Configuration space plus MSI-X table of one function, and where its interrupts go.
pub struct PciState {
    pub id: FunctionId,
    config: Mutex<ConfigSpace>,
    /// Where the MSI-X structures lie: fixed by the capability for the function's life, so a
    /// table write finds them without the configuration space's lock.
    msix_spec: Option<MsixSpec>,
    msix: Mutex<MsixTable>,
    /// The MSI-X Message Control word, mirrored from the configuration space under its lock
    /// whenever a write or a reset changes it, so an interrupt or a table write reads the enable
    /// and function-mask bits without that lock.
    msix_control: AtomicU16,
    sink: Mutex<Option<Arc<dyn InterruptSink>>>,
    /// The transport emulates the MSI-X table itself (QEMU does, behind vfio-user): every
    /// signal goes straight to the sink and the device's own table only stores what is written.
    external_msix: std::sync::atomic::AtomicBool,
}

impl PciState {
    pub fn new(id: FunctionId, config: ConfigSpace) -> Self {
        let msix_spec = config.msix_spec();
        let vectors = msix_spec.map_or(0, |m| m.vectors);
        PciState {
            id,
            msix_spec,
            msix_control: AtomicU16::new(config.msix_control()),
            config: Mutex::new(config),
            msix: Mutex::new(MsixTable::new(vectors)),
            sink: Mutex::new(None),
            external_msix: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The configuration space, locked. Writes go through [`PciState::config_write`], which keeps
    /// the MSI-X control mirror.
    pub fn config(&self) -> std::sync::MutexGuard<'_, ConfigSpace> {
        self.config.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn msix(&self) -> std::sync::MutexGuard<'_, MsixTable> {
        self.msix.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_interrupt_sink(&self, sink: Arc<dyn InterruptSink>) {
        *self.sink.lock().unwrap_or_else(|e| e.into_inner()) = Some(sink);
    }

    fn msix_flags(&self) -> (bool, bool) {
        let ctl = self.msix_control.load(Ordering::Acquire);
        (
            ctl & config::MSIX_CTRL_ENABLE != 0,
            ctl & config::MSIX_CTRL_FUNCTION_MASK != 0,
        )
    }

    fn send(&self, msgs: impl IntoIterator<Item = MsiMessage>) {
        let mut msgs = msgs.into_iter().peekable();
        if msgs.peek().is_none() {
            return;
        }
        let sink = self.sink.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(sink) = sink {
            for m in msgs {
                sink.deliver(self.id, m);
            }
        }
    }

    /// Hands vector masking to the transport (see the field's doc).
    pub fn set_external_msix(&self, external: bool) {
        self.external_msix
            .store(external, std::sync::atomic::Ordering::Relaxed);
    }

    /// The device raises `vector`.
    pub fn signal(&self, vector: u16) {
        if self
            .external_msix
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            self.send([MsiMessage {
                vector,
                address: 0,
                data: 0,
            }]);
            return;
        }
        let (enabled, fmask) = self.msix_flags();
        let msg = self.msix().signal(vector, enabled, fmask);
        self.send(msg);
    }

    /// Configuration write; pending MSI-X vectors fire if the write enabled or unmasked MSI-X.
    pub fn config_write(&self, offset: u64, data: &[u8]) -> ConfigChange {
        let change = {
            let mut config = self.config();
            let change = config.write(offset, data);
            if change.contains(ConfigChange::MSIX_CONTROL) {
                self.msix_control
                    .store(config.msix_control(), Ordering::Release);
            }
            change
        };
        if change.contains(ConfigChange::MSIX_CONTROL) {
            let (enabled, fmask) = self.msix_flags();
            let msgs = self.msix().deliver_pending(enabled, fmask);
            self.send(msgs);
        }
        change
    }

    pub fn config_read(&self, offset: u64, data: &mut [u8]) {
        self.config().read(offset, data)
    }

    /// Which MSI-X structure, if any, a BAR offset falls in, and the offset inside it.
    fn msix_area(&self, bar: u8, offset: u64) -> Option<MsixArea> {
        let spec = self.msix_spec?;
        let inside = |b: u8, start: u32, len: u64| {
            bar == b && offset >= start as u64 && offset < start as u64 + len
        };
        if inside(spec.table_bar, spec.table_offset, spec.vectors as u64 * 16) {
            Some(MsixArea::Table(offset - spec.table_offset as u64))
        } else if inside(
            spec.pba_bar,
            spec.pba_offset,
            (spec.vectors as u64).div_ceil(64) * 8,
        ) {
            Some(MsixArea::Pba(offset - spec.pba_offset as u64))
        } else {
            None
        }
    }

    /// Serves a BAR read that falls in the MSI-X table or PBA; returns false if it does not.
    pub fn msix_read(&self, bar: u8, offset: u64, data: &mut [u8]) -> bool {
        match self.msix_area(bar, offset) {
            Some(MsixArea::Table(o)) => self.msix().table_read(o, data),
            Some(MsixArea::Pba(o)) => self.msix().pba_read(o, data),
            None => return false,
        }
        true
    }

    /// Serves a BAR write to the MSI-X table (the PBA is read-only); returns false if the
    /// offset is in neither structure.
    pub fn msix_write(&self, bar: u8, offset: u64, data: &[u8]) -> bool {
        match self.msix_area(bar, offset) {
            Some(MsixArea::Table(o)) => {
                let (enabled, fmask) = self.msix_flags();
                let msgs = self.msix().table_write(o, data, enabled, fmask);
                self.send(msgs);
                true
            }
            Some(MsixArea::Pba(_)) => true,
            None => false,
        }
    }

    /// The configuration space and MSI-X table as they are, to return to
    /// ([`PciState::restore`]).
    pub fn snapshot(&self) -> PciSnapshot {
        PciSnapshot {
            config: self.config().clone(),
            msix: self.msix().clone(),
            external_msix: self.external_msix.load(Ordering::Relaxed),
        }
    }

    /// Returns the configuration space and MSI-X table to `s`. Nothing fires: a vector pending
    /// in `s` is pending again.
    pub fn restore(&self, s: &PciSnapshot) {
        {
            let mut config = self.config();
            config.restore(&s.config);
            self.msix_control
                .store(config.msix_control(), Ordering::Release);
        }
        self.msix().clone_from(&s.msix);
        self.external_msix.store(s.external_msix, Ordering::Relaxed);
    }

    /// Power-on state of the configuration space and MSI-X table.
    pub fn reset(&self) {
        {
            let mut config = self.config();
            config.reset();
            self.msix_control
                .store(config.msix_control(), Ordering::Release);
        }
        self.msix().reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fld_abi::pci::OFF_MSIX_CONTROL;

    #[derive(Default)]
    struct Sink(Mutex<Vec<MsiMessage>>);

    impl InterruptSink for Sink {
        fn deliver(&self, _function: FunctionId, msg: MsiMessage) {
            self.0.lock().unwrap().push(msg);
        }
    }

    fn control(pci: &PciState, bits: u16) {
        pci.config_write(OFF_MSIX_CONTROL as u64, &bits.to_le_bytes());
    }

    /// The enable and function-mask bits an interrupt reads are the configuration space's, after
    /// every write of the control word and after a reset.
    #[test]
    fn interrupts_follow_the_msix_control_word_through_writes_and_resets() {
        let spec = MsixSpec {
            vectors: 2,
            table_bar: 1,
            table_offset: 0,
            pba_bar: 1,
            pba_offset: 0x800,
        };
        let identity = Identity {
            vendor_id: 0xfff0,
            device_id: 0xffff,
            class_code: 0x020000,
            revision: 0,
            subsystem_id: 0,
        };
        let pci = PciState::new(7, ConfigSpace::new(identity, &[], Some(spec)));
        let sink = Arc::new(Sink::default());
        pci.set_interrupt_sink(sink.clone());
        let delivered = || std::mem::take(&mut *sink.0.lock().unwrap());
        let program = || {
            pci.msix_write(1, 0, &0xfee0_0000u32.to_le_bytes());
            pci.msix_write(1, 8, &0x30u32.to_le_bytes());
            pci.msix_write(1, 12, &0u32.to_le_bytes());
        };
        program();
        // Disabled: held pending, delivered when enabled.
        pci.signal(0);
        assert!(delivered().is_empty());
        control(&pci, config::MSIX_CTRL_ENABLE);
        assert_eq!(
            delivered().iter().map(|m| m.data).collect::<Vec<_>>(),
            [0x30]
        );
        // Function mask: held until the mask is written off.
        control(
            &pci,
            config::MSIX_CTRL_ENABLE | config::MSIX_CTRL_FUNCTION_MASK,
        );
        pci.signal(0);
        assert!(delivered().is_empty());
        control(&pci, config::MSIX_CTRL_ENABLE);
        assert_eq!(delivered().len(), 1);
        pci.signal(0);
        assert_eq!(delivered().len(), 1);
        // A reset disables MSI-X again: an unmasked vector's signal is held.
        pci.reset();
        program();
        pci.signal(0);
        assert!(delivered().is_empty());
    }
}
