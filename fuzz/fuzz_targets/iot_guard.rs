//! The IoT service behind the fail-closed guard (`docs/nic-interface.md` §9.7), against any
//! attack the input describes — tenants and a stranger, valid and invalid tokens, fragments of
//! any sizes in any order with duplicates, overlaps and missing pieces, bytes after the UDP
//! datagram, lying length fields — played through the whole in-process card: the host receives
//! every clean valid request exactly once and nothing else of the service. The card, brought up
//! once per fragment policy, is kept across inputs; each attack starts from fresh accelerator
//! models on an idle card.
#![no_main]

use fld_fuzz::{Input, Kept};
use fld_host::guard::FragmentPolicy;
use fld_qemu::testbed::iot_attack::{Attack, Lie, Request, Token};
use fld_qemu::testbed::replay::Replayer;
use libfuzzer_sys::fuzz_target;

fn request(input: &mut Input<'_>) -> Request {
    let token = match input.u8() % 8 {
        0 => Token::OtherTenantsKey,
        1 => Token::Expired,
        2 => Token::Unsigned,
        3 => {
            let n = usize::from(input.u8() % 64);
            Token::Garbage(input.bytes(n).to_vec())
        }
        _ => Token::Valid,
    };
    let lie = match input.u8() % 12 {
        0 => Some(Lie::UdpLengthPastPayload(input.u16().max(1))),
        1 => Some(Lie::UdpLengthBelowHeader(input.u8())),
        2 => Some(Lie::IpLengthPastFrame(input.u16().max(1))),
        3 => Some(Lie::IhlBelowFive(input.u8())),
        _ => None,
    };
    let optional = |input: &mut Input<'_>| input.u8().is_multiple_of(4).then(|| input.u8());
    let trailing = usize::from(input.u8() % 24);
    let pieces = usize::from(input.u8() % 6);
    Request {
        sender: input.u8() % 4,
        token,
        padding: input.u16(),
        trailing: input.bytes(trailing).to_vec(),
        lie,
        fragments: input.bytes(pieces).to_vec(),
        duplicate: optional(input),
        missing: optional(input),
        overlap: optional(input).map(|k| (k, input.u16())),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let fragments = if input.u8().is_multiple_of(5) {
        FragmentPolicy::Refuse
    } else {
        FragmentPolicy::Reassemble
    };
    let order_seed = input.u64();
    let mut requests = Vec::new();
    while !input.is_empty() && requests.len() < 12 {
        requests.push(request(&mut input));
    }
    let attack = Attack {
        requests,
        order_seed,
        fragments,
    };
    let mut card = Kept::take(
        fragments as u32,
        |_| {},
        || Replayer::new(&attack.config()).expect("a card for the attack"),
    );
    if let Err(e) = attack.run_on(&mut card) {
        panic!("{e}\n{attack:?}");
    }
});
