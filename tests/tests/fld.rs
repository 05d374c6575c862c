//! The FLD module end to end: the NIC drives FLD's windows by peer-to-peer PCIe, the echo
//! accelerator returns every packet, and FLD's structures behave as §5.2 describes.

use fld_device::fld::abi::{MemoryItem, Stat};
use fld_host::apps::{EchoConfig, FldEchoSetup, Sizes};

#[test]
fn flde_echo_returns_every_byte() {
    let mut s = FldEchoSetup::new(1514).unwrap();
    let cfg = EchoConfig {
        packets: 2000,
        sizes: Sizes::Cycle(vec![60, 64, 300, 1514]),
        window: 64,
        ..Default::default()
    };
    let rep = s.run_echo(&cfg);
    let fld = &s.card.fld;
    eprintln!(
        "rx {} tx {} drops {} badwin {} unknown {} nocredit {} completions {}",
        fld.stat(Stat::RxPackets),
        fld.stat(Stat::TxPackets),
        fld.stat(Stat::RxAcceleratorDrops),
        fld.stat(Stat::BadWindowAccesses),
        fld.stat(Stat::UnknownCqes),
        fld.stat(Stat::TxNoCredit),
        fld.stat(Stat::TxCompletions)
    );
    assert_eq!(
        (rep.packets_received, rep.mismatches, rep.checksum_flags_bad),
        (2000, 0, 0)
    );
    assert_eq!(fld.stat(Stat::BadWindowAccesses), 0);
    let _ = MemoryItem::Total;
}
