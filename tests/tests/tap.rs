//! The uplink on a Linux TAP interface, with the host's own network stack as the peer: the
//! card resolves the host's address by ARP (the kernel answers with the interface's MAC), and
//! the kernel resolves the card's (the card's ARP responder answers, and the datagram the
//! kernel was holding reaches the card). Needs root and `/dev/net/tun` and iproute2's `ip`;
//! without them the test says so and passes without running.

use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use fld_device::wire::Faults;
use fld_host::verbs::Context;
use fld_qemu::testbed::card_on_link;

const TAP: &str = "fldtap7";
const HOST_IP: [u8; 4] = [10, 77, 0, 1];
const CARD_IP: [u8; 4] = [10, 77, 0, 2];

fn ip(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Why this machine cannot run the test, if it cannot.
fn missing() -> Option<String> {
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
    {
        return Some(format!("/dev/net/tun: {e}"));
    }
    ip(&["-V"]).err()
}

fn mac_text(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[test]
fn the_host_stack_and_the_card_resolve_each_other_over_a_tap_interface() {
    if let Some(why) = missing() {
        eprintln!("skipped: a TAP interface needs root, /dev/net/tun and iproute2 ({why})");
        return;
    }
    let card_ip = IpAddr::V4(Ipv4Addr::from(CARD_IP));
    let (dev, _keep) =
        card_on_link(&format!("tap:{TAP}"), card_ip, Faults::default(), None).unwrap();
    ip(&["link", "set", TAP, "up"]).unwrap();
    ip(&["addr", "replace", "10.77.0.1/24", "dev", TAP]).unwrap();
    let tap_mac = std::fs::read_to_string(format!("/sys/class/net/{TAP}/address")).unwrap();
    let mut ctx = Context::open(dev).unwrap();
    ctx.add_ip(card_ip).unwrap();

    // The card asks, the kernel answers with the interface's address.
    let host_mac = ctx.resolve(HOST_IP, Duration::from_secs(5)).unwrap();
    assert_eq!(mac_text(host_mac), tap_mac.trim());

    // The kernel asks (a datagram waits for the answer), the card answers.
    let card_mac = ctx.mac();
    let udp = UdpSocket::bind("10.77.0.1:0").unwrap();
    udp.send_to(b"hello card", "10.77.0.2:9").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let neighbour = loop {
        ctx.serve_neighbors().unwrap();
        let n = ip(&["neigh", "show", "10.77.0.2", "dev", TAP]).unwrap();
        if n.contains("lladdr") || Instant::now() > deadline {
            break n;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        neighbour.contains(&mac_text(card_mac)),
        "the kernel's neighbour entry: {neighbour:?}, the card's MAC {}",
        mac_text(card_mac)
    );
    let _ = ip(&["link", "del", TAP]);
}
