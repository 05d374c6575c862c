//! PCI configuration space of one function (PCI Local Bus 3.0 §6, PCIe Base 4.0 §7): a type-0
//! header, 64-bit memory BARs with the usual size probing, a PCI Express capability (so the
//! payload/read-request sizes and function-level reset are visible to the guest) and an MSI-X
//! capability. Every register has a write mask; read-only bits never change whatever the guest
//! writes. Left out: INTx (the functions interrupt only through MSI-X), AER, power management.

use bitflags::bitflags;

use fld_abi::pci::{
    msix_bir_register, CAP_ID_MSIX, CAP_ID_PCIE, DEVCAP_FLR, DEVCTL_INITIATE_FLR, OFF_CAP_PTR,
    OFF_CLASS, OFF_DEVICE, OFF_HEADER_TYPE, OFF_MSIX_CONTROL, OFF_MSIX_PBA, OFF_MSIX_TABLE,
    OFF_PCIE_DEVCAP as PCIE_DEVCAP, OFF_PCIE_DEVCTL as PCIE_DEVCTL, OFF_REVISION, OFF_STATUS,
    OFF_SUBSYS, OFF_SUBSYS_VENDOR, OFF_VENDOR, STATUS_CAP_LIST,
};
pub use fld_abi::pci::{
    CMD_BUS_MASTER, CMD_INTX_DISABLE, CMD_MEMORY, CONFIG_SPACE_SIZE, MSIX_CTRL_ENABLE,
    MSIX_CTRL_FUNCTION_MASK, OFF_BAR0, OFF_COMMAND, OFF_MSIX_CAP, OFF_PCIE_CAP,
};

/// Identity registers of a function.
#[derive(Clone, Copy, Debug)]
pub struct Identity {
    pub vendor_id: u16,
    pub device_id: u16,
    pub class_code: u32,
    pub revision: u8,
    pub subsystem_id: u16,
}

/// A 64-bit memory BAR occupying the pair (`index`, `index + 1`).
#[derive(Clone, Copy, Debug)]
pub struct BarSpec {
    pub index: u8,
    /// Power of two, at least 4 KiB.
    pub size: u64,
    pub prefetchable: bool,
}

/// Where the MSI-X table and PBA live.
#[derive(Clone, Copy, Debug)]
pub struct MsixSpec {
    pub vectors: u16,
    pub table_bar: u8,
    pub table_offset: u32,
    pub pba_bar: u8,
    pub pba_offset: u32,
}

bitflags! {
    /// What a configuration write changed, for the owner to act on.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
    pub struct ConfigChange: u8 {
        const BAR_ADDRESS = 1 << 0;
        const COMMAND = 1 << 1;
        const MSIX_CONTROL = 1 << 2;
        /// The guest asked for a function-level reset (PCIe Base §6.6.2).
        const FLR = 1 << 3;
        const DEVICE_CONTROL = 1 << 4;
    }
}

/// Configuration space with per-byte write masks.
#[derive(Clone)]
pub struct ConfigSpace {
    bytes: Box<[u8; CONFIG_SPACE_SIZE]>,
    wmask: Box<[u8; CONFIG_SPACE_SIZE]>,
    bars: Vec<BarSpec>,
    msix: Option<MsixSpec>,
    /// Power-on contents, restored by reset.
    initial: Box<[u8; CONFIG_SPACE_SIZE]>,
}

impl ConfigSpace {
    pub fn new(id: Identity, bars: &[BarSpec], msix: Option<MsixSpec>) -> Self {
        let mut cs = ConfigSpace {
            bytes: Box::new([0; CONFIG_SPACE_SIZE]),
            wmask: Box::new([0; CONFIG_SPACE_SIZE]),
            bars: bars.to_vec(),
            msix,
            initial: Box::new([0; CONFIG_SPACE_SIZE]),
        };
        cs.put16(OFF_VENDOR, id.vendor_id);
        cs.put16(OFF_DEVICE, id.device_id);
        cs.put16(OFF_STATUS, STATUS_CAP_LIST);
        cs.bytes[OFF_REVISION] = id.revision;
        cs.bytes[OFF_CLASS] = id.class_code as u8;
        cs.bytes[OFF_CLASS + 1] = (id.class_code >> 8) as u8;
        cs.bytes[OFF_CLASS + 2] = (id.class_code >> 16) as u8;
        cs.bytes[OFF_HEADER_TYPE] = 0;
        cs.put16(OFF_SUBSYS_VENDOR, id.vendor_id);
        cs.put16(OFF_SUBSYS, id.subsystem_id);
        cs.mask16(OFF_COMMAND, CMD_MEMORY | CMD_BUS_MASTER | CMD_INTX_DISABLE);

        for bar in bars {
            assert!(
                bar.size.is_power_of_two()
                    && bar.size >= 4096
                    && bar.index < 5
                    && bar.index % 2 == 0
            );
            let off = OFF_BAR0 + 4 * bar.index as usize;
            let type_bits = 0b0100 | if bar.prefetchable { 0b1000 } else { 0 };
            cs.put32(off, type_bits);
            let mask = !(bar.size - 1);
            cs.mask32(off, (mask as u32) & !0xf);
            cs.mask32(off + 4, (mask >> 32) as u32);
        }

        cs.bytes[OFF_CAP_PTR] = OFF_PCIE_CAP as u8;
        // PCI Express capability, version 2, endpoint.
        cs.bytes[OFF_PCIE_CAP] = CAP_ID_PCIE;
        cs.bytes[OFF_PCIE_CAP + 1] = if msix.is_some() {
            OFF_MSIX_CAP as u8
        } else {
            0
        };
        cs.put16(OFF_PCIE_CAP + 2, 0x0002);
        // Max payload size supported: 256 B (encoding 1); FLR capable.
        cs.put32(PCIE_DEVCAP, 0x1 | DEVCAP_FLR);
        // Device control: MPS 256 B (bits 5..8 = 1), MRRS 512 B (bits 12..15 = 2).
        cs.put16(PCIE_DEVCTL, (1 << 5) | (2 << 12));
        cs.mask16(PCIE_DEVCTL, 0x7fff | DEVCTL_INITIATE_FLR);
        // Link: 8 GT/s (Gen3), x8 — the Innova-2's NIC and FPGA links (paper §6).
        cs.put32(OFF_PCIE_CAP + 12, 0x3 | (8 << 4));
        cs.put16(OFF_PCIE_CAP + 18, 0x3 | (8 << 4));

        if let Some(m) = msix {
            assert!(m.vectors >= 1 && m.vectors <= 2048);
            cs.bytes[OFF_MSIX_CAP] = CAP_ID_MSIX;
            cs.bytes[OFF_MSIX_CAP + 1] = 0;
            cs.put16(OFF_MSIX_CONTROL, m.vectors - 1);
            cs.mask16(OFF_MSIX_CONTROL, MSIX_CTRL_ENABLE | MSIX_CTRL_FUNCTION_MASK);
            cs.put32(
                OFF_MSIX_TABLE,
                msix_bir_register(m.table_bar, m.table_offset),
            );
            cs.put32(OFF_MSIX_PBA, msix_bir_register(m.pba_bar, m.pba_offset));
        }
        *cs.initial = *cs.bytes;
        cs
    }

    fn put16(&mut self, off: usize, v: u16) {
        self.bytes[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }
    fn put32(&mut self, off: usize, v: u32) {
        self.bytes[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }
    fn mask16(&mut self, off: usize, m: u16) {
        self.wmask[off..off + 2].copy_from_slice(&m.to_le_bytes());
    }
    fn mask32(&mut self, off: usize, m: u32) {
        self.wmask[off..off + 4].copy_from_slice(&m.to_le_bytes());
    }
    fn get16(&self, off: usize) -> u16 {
        u16::from_le_bytes([self.bytes[off], self.bytes[off + 1]])
    }
    fn get32(&self, off: usize) -> u32 {
        u32::from_le_bytes(self.bytes[off..off + 4].try_into().unwrap_or([0; 4]))
    }

    /// Reads `data.len()` bytes at `offset`; bytes beyond the 4 KiB space read as all-ones.
    pub fn read(&self, offset: u64, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            let o = offset.saturating_add(i as u64);
            *b = if o < CONFIG_SPACE_SIZE as u64 {
                self.bytes[o as usize]
            } else {
                0xff
            };
        }
    }

    /// Applies a write through the write masks and reports what changed.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> ConfigChange {
        let mut change = ConfigChange::empty();
        for (i, &b) in data.iter().enumerate() {
            let o = offset.saturating_add(i as u64);
            if o >= CONFIG_SPACE_SIZE as u64 {
                break;
            }
            let o = o as usize;
            let m = self.wmask[o];
            let old = self.bytes[o];
            let new = (old & !m) | (b & m);
            if o == PCIE_DEVCTL + 1 && b & (DEVCTL_INITIATE_FLR >> 8) as u8 != 0 {
                change |= ConfigChange::FLR;
            }
            if new == old {
                continue;
            }
            self.bytes[o] = new;
            change |= match o {
                x if (OFF_BAR0..OFF_BAR0 + 24).contains(&x) => ConfigChange::BAR_ADDRESS,
                x if (OFF_COMMAND..OFF_COMMAND + 2).contains(&x) => ConfigChange::COMMAND,
                x if (OFF_MSIX_CONTROL..OFF_MSIX_CONTROL + 2).contains(&x) => {
                    ConfigChange::MSIX_CONTROL
                }
                x if (PCIE_DEVCTL..PCIE_DEVCTL + 2).contains(&x) => ConfigChange::DEVICE_CONTROL,
                _ => ConfigChange::empty(),
            };
        }
        // "Initiate FLR" always reads back as zero.
        let devctl = self.get16(PCIE_DEVCTL) & !DEVCTL_INITIATE_FLR;
        self.put16(PCIE_DEVCTL, devctl);
        change
    }

    /// Restores power-on contents (BAR addresses, command register, MSI-X control all cleared).
    pub fn reset(&mut self) {
        *self.bytes = *self.initial;
    }

    /// The contents `s` holds, `s` being a copy of this same space taken earlier (a snapshot's):
    /// only the bytes change in a function's life — its masks, BARs, MSI-X layout and power-on
    /// contents are fixed when it is made — so only they are copied, in place.
    pub fn restore(&mut self, s: &ConfigSpace) {
        debug_assert_eq!(self.bars.len(), s.bars.len(), "a copy of another space");
        *self.bytes = *s.bytes;
    }

    pub fn command(&self) -> u16 {
        self.get16(OFF_COMMAND)
    }
    pub fn memory_enabled(&self) -> bool {
        self.command() & CMD_MEMORY != 0
    }
    pub fn bus_master(&self) -> bool {
        self.command() & CMD_BUS_MASTER != 0
    }

    pub fn bars(&self) -> &[BarSpec] {
        &self.bars
    }

    /// The bus address programmed into BAR `index`, if that BAR exists.
    pub fn bar_address(&self, index: u8) -> Option<u64> {
        let spec = self.bars.iter().find(|b| b.index == index)?;
        let off = OFF_BAR0 + 4 * spec.index as usize;
        let lo = (self.get32(off) & !0xf) as u64;
        let hi = self.get32(off + 4) as u64;
        Some(((hi << 32) | lo) & !(spec.size - 1))
    }

    /// Firmware-style BAR assignment (what a BIOS or the in-process host does at enumeration).
    pub fn set_bar_address(&mut self, index: u8, addr: u64) {
        let off = (OFF_BAR0 + 4 * index as usize) as u64;
        self.write(off, &(addr as u32).to_le_bytes());
        self.write(off + 4, &((addr >> 32) as u32).to_le_bytes());
    }

    pub fn msix_spec(&self) -> Option<MsixSpec> {
        self.msix
    }
    pub fn msix_control(&self) -> u16 {
        if self.msix.is_some() {
            self.get16(OFF_MSIX_CONTROL)
        } else {
            0
        }
    }

    /// Max payload size in bytes from Device Control.
    pub fn max_payload_size(&self) -> u32 {
        128 << ((self.get16(PCIE_DEVCTL) >> 5) & 7).min(5)
    }
    /// Max read request size in bytes from Device Control.
    pub fn max_read_request_size(&self) -> u32 {
        128 << ((self.get16(PCIE_DEVCTL) >> 12) & 7).min(5)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space() -> ConfigSpace {
        ConfigSpace::new(
            Identity {
                vendor_id: 0xfff0,
                device_id: 0xf100,
                class_code: 0x020000,
                revision: 1,
                subsystem_id: 7,
            },
            &[
                BarSpec {
                    index: 0,
                    size: 0x1000,
                    prefetchable: false,
                },
                BarSpec {
                    index: 2,
                    size: 0x10_0000,
                    prefetchable: true,
                },
            ],
            Some(MsixSpec {
                vectors: 64,
                table_bar: 4,
                table_offset: 0,
                pba_bar: 4,
                pba_offset: 0x800,
            }),
        )
    }

    fn read32(cs: &ConfigSpace, off: u64) -> u32 {
        let mut b = [0; 4];
        cs.read(off, &mut b);
        u32::from_le_bytes(b)
    }

    #[test]
    fn bar_size_probe_returns_the_size_mask() {
        let mut cs = space();
        cs.write(0x18, &[0xff; 4]);
        cs.write(0x1c, &[0xff; 4]);
        // 1 MiB, 64-bit, prefetchable.
        assert_eq!(read32(&cs, 0x18), 0xfff0_000c);
        assert_eq!(read32(&cs, 0x1c), 0xffff_ffff);
        cs.write(0x10, &[0xff; 4]);
        assert_eq!(read32(&cs, 0x10), 0xffff_f004);
        // A BAR that does not exist reads as zero and ignores writes.
        cs.write(0x20, &[0xff; 4]);
        assert_eq!(read32(&cs, 0x20), 0);
    }

    #[test]
    fn bar_address_round_trips_and_reports_change() {
        let mut cs = space();
        assert_eq!(
            cs.write(0x18, &0x2030_0000u32.to_le_bytes()),
            ConfigChange::BAR_ADDRESS
        );
        cs.write(0x1c, &0x1u32.to_le_bytes());
        assert_eq!(cs.bar_address(2), Some(0x1_2030_0000));
        assert_eq!(cs.bar_address(1), None);
    }

    #[test]
    fn read_only_registers_ignore_writes() {
        let mut cs = space();
        cs.write(0, &[0; 4]);
        assert_eq!(read32(&cs, 0), 0xf100_fff0);
        // Table size stays 63 while enable/mask bits are writable.
        cs.write(OFF_MSIX_CAP as u64 + 2, &0xffffu16.to_le_bytes());
        assert_eq!(cs.msix_control(), 0xc000 | 63);
        // Beyond the space: all ones, writes ignored.
        assert_eq!(read32(&cs, 4094), 0xffff_0000);
    }

    #[test]
    fn flr_is_reported_and_self_clears() {
        let mut cs = space();
        let ctl = cs.get16(PCIE_DEVCTL) | DEVCTL_INITIATE_FLR;
        let change = cs.write(PCIE_DEVCTL as u64, &ctl.to_le_bytes());
        assert!(change.contains(ConfigChange::FLR));
        assert_eq!(cs.get16(PCIE_DEVCTL) & DEVCTL_INITIATE_FLR, 0);
        assert_eq!(cs.max_payload_size(), 256);
        assert_eq!(cs.max_read_request_size(), 512);
    }

    #[test]
    fn capability_list_is_walkable() {
        let cs = space();
        let mut ptr = cs.bytes[OFF_CAP_PTR] as usize;
        let mut ids = vec![];
        while ptr != 0 {
            ids.push(cs.bytes[ptr]);
            ptr = cs.bytes[ptr + 1] as usize;
        }
        assert_eq!(ids, vec![CAP_ID_PCIE, CAP_ID_MSIX]);
    }
}
