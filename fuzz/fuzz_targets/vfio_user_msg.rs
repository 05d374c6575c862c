//! The vfio-user server's message handling, over a socket with no path: after the version
//! handshake, any sequence of messages a client can send — DMA maps and unmaps (without file
//! descriptors), region and IRQ queries, SET_IRQS, region reads and writes anywhere in the
//! configuration space and every BAR, device resets, unknown commands, and headers whose sizes
//! lie — is answered or ends the connection; the server never hangs and never panics in this
//! project's code (the protocol crate itself trusts message sizes and may panic, which the server
//! turns into a dropped connection: such panics are tolerated here, all others abort). Afterwards
//! the card, re-enumerated by a driver, echoes verified traffic through FLD. The functions'
//! servers run on a thread of their own for the whole run and serve one client per input.
#![no_main]

use std::io::{ErrorKind, Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use fld_device::card::Card;
use fld_device::pcie::FunctionId;
use fld_fuzz::{assert_fld_recovers, small_card, Input, Kept};
use fld_vfio_user_server::FunctionServer;
use libfuzzer_sys::fuzz_target;

/// vfio-user commands (the protocol specification's numbering).
const DMA_MAP: u16 = 2;
const DMA_UNMAP: u16 = 3;
const DEVICE_GET_INFO: u16 = 4;
const DEVICE_GET_REGION_INFO: u16 = 5;
const GET_IRQ_INFO: u16 = 7;
const SET_IRQS: u16 = 8;
const REGION_READ: u16 = 9;
const REGION_WRITE: u16 = 10;
const DEVICE_RESET: u16 = 13;
const COMMANDS: [u16; 9] = [
    DMA_MAP,
    DMA_UNMAP,
    DEVICE_GET_INFO,
    DEVICE_GET_REGION_INFO,
    GET_IRQ_INFO,
    SET_IRQS,
    REGION_READ,
    REGION_WRITE,
    DEVICE_RESET,
];
/// The longest region write a script sends. A message the protocol crate refuses before
/// reading its body (a write to a region it does not know, a lying size) leaves the body to be
/// read as messages, sixteen bytes each, every one answered: a megabyte of a zero-padded write
/// behind it was 65,536 empty messages, an input that took as long as thousands of others and
/// found nothing the first few did not. The transfer limit itself is met by reads here, and by
/// writes in `vfio_user_backend`.
const LONG_WRITE: u32 = 16 << 10;
/// The most bytes a script sends in all (for the reason given at [`LONG_WRITE`]).
const SCRIPT_BUDGET: usize = 64 << 10;
/// Largest transfer a conforming client asks for (the server's max_data_xfer_size).
const MAX_XFER: u32 = 1 << 20;

fn message(out: &mut Vec<u8>, id: u16, command: u16, size: Option<u32>, body: &[u8]) {
    let size = size.unwrap_or(16 + body.len() as u32);
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&command.to_le_bytes());
    out.extend_from_slice(&size.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes()); // flags: a command
    out.extend_from_slice(&0u32.to_le_bytes()); // error
    out.extend_from_slice(body);
}

fn le32s(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Panics in the protocol crate end one connection (the server catches them); any other panic
/// is a finding.
fn tolerate_protocol_crate_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let fuzzer_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_protocol_crate = info
                .location()
                .is_some_and(|l| l.file().contains("vfio_user-"));
            if !in_protocol_crate {
                fuzzer_hook(info);
            }
        }));
    });
}

/// Writes `script` to the server and reads its replies, both at once (a client that wrote
/// everything before reading would block against a server blocked on a full socket: a 1 MiB
/// region read fills it), without blocking: the server's thread never has a sleeping reader to
/// wake per reply, which cost more than the rest of an input together. `start` is called once
/// the first part of the script is in the socket, so that the server finds it there rather than
/// sleeping until it arrives. Ends when the server closes the connection; panics if it neither
/// answers nor closes for ten seconds.
fn exchange(mut client: UnixStream, mut script: &[u8], start: impl FnOnce()) {
    client.set_nonblocking(true).expect("a non-blocking client");
    let mut start = Some(start);
    let mut replies = [0u8; 1 << 16];
    let mut quiet_since = Instant::now();
    loop {
        let mut moved = false;
        if !script.is_empty() {
            match client.write(script) {
                Ok(n) => {
                    script = &script[n..];
                    moved = true;
                    if script.is_empty() {
                        let _ = client.shutdown(std::net::Shutdown::Write);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                // The server closed its end with requests unread.
                Err(_) => script = &[],
            }
        }
        if let Some(start) = start.take() {
            start();
        }
        match client.read(&mut replies) {
            Ok(0) => return,
            Ok(_) => moved = true,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            // A reset: the server ended the connection with requests unread.
            Err(_) => return,
        }
        if moved {
            quiet_since = Instant::now();
        } else {
            assert!(
                quiet_since.elapsed() < Duration::from_secs(10),
                "the server hung"
            );
            std::hint::spin_loop();
        }
    }
}

/// A server per function of a card, as `fldemu serve` has, all served by one thread that
/// serves one client after another: an input connects, names the function it connected to, and
/// waits until its client is served. Kept with the host (a thread and a listener per input cost
/// more than most inputs).
///
/// The thread waits for the next input by polling, and sleeps only after a millisecond without
/// one: a server asleep in `accept` had to be woken by the scheduler for every input, which
/// cost more than a short script.
struct Servers {
    card: Arc<Card>,
    addrs: Vec<(FunctionId, SocketAddr)>,
    shared: Arc<Dispatch>,
    thread: std::thread::Thread,
}

/// What the client and the serving thread share.
#[derive(Default)]
struct Dispatch {
    /// 0 while no client waits; else 1 + the index of the function its client connected to.
    wanted: AtomicUsize,
    /// Clients served so far.
    served: AtomicU64,
    /// The thread is parked (or about to be) and must be unparked for the next client.
    parked: AtomicBool,
    stop: AtomicBool,
}

/// How long the serving thread polls for the next input before it parks.
const POLL_FOR_NEXT: Duration = Duration::from_millis(1);

impl Dispatch {
    /// The next function to serve, or None once told to stop.
    fn next(&self) -> Option<usize> {
        let mut since = Instant::now();
        loop {
            if self.stop.load(Ordering::Acquire) {
                return None;
            }
            if self.wanted.load(Ordering::Acquire) != 0 {
                return Some(self.wanted.swap(0, Ordering::AcqRel) - 1);
            }
            if since.elapsed() < POLL_FOR_NEXT {
                std::hint::spin_loop();
                continue;
            }
            // Parked only if no client came between the flag and the look: a client that
            // comes after the flag sees it and unparks.
            self.parked.store(true, Ordering::SeqCst);
            if self.wanted.load(Ordering::SeqCst) == 0 && !self.stop.load(Ordering::SeqCst) {
                std::thread::park();
            }
            self.parked.store(false, Ordering::SeqCst);
            since = Instant::now();
        }
    }
}

impl Servers {
    fn new(card: Arc<Card>, functions: &[FunctionId]) -> Servers {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let (addrs, mut servers): (Vec<_>, Vec<_>) = functions
            .iter()
            .map(|&fid| {
                let name = format!(
                    "fldemu-fuzz-{}-{}",
                    std::process::id(),
                    NEXT.fetch_add(1, Ordering::Relaxed)
                );
                let addr =
                    SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract address");
                let listener = UnixListener::bind_addr(&addr).expect("listen");
                (
                    (fid, addr),
                    FunctionServer::new(card.clone(), fid, listener),
                )
            })
            .unzip();
        let shared = Arc::new(Dispatch::default());
        let dispatch = shared.clone();
        let thread = std::thread::spawn(move || {
            while let Some(at) = dispatch.next() {
                let _ = servers[at].serve_client();
                dispatch.served.fetch_add(1, Ordering::Release);
            }
        })
        .thread()
        .clone();
        Servers {
            card,
            addrs,
            shared,
            thread,
        }
    }

    /// Runs `script` as a client of `fid`'s server, until the server is done with it.
    fn serve(&self, fid: FunctionId, script: &[u8]) {
        let at = self
            .addrs
            .iter()
            .position(|(f, _)| *f == fid)
            .expect("a server per function");
        let before = self.shared.served.load(Ordering::Acquire);
        let client = UnixStream::connect_addr(&self.addrs[at].1).expect("connect");
        exchange(client, script, || {
            self.shared.wanted.store(at + 1, Ordering::SeqCst);
            if self.shared.parked.load(Ordering::SeqCst) {
                self.thread.unpark();
            }
        });
        // The server's side is done (its DMA maps and eventfds gone) before the card is
        // touched again.
        let since = Instant::now();
        while self.shared.served.load(Ordering::Acquire) == before {
            assert!(since.elapsed() < Duration::from_secs(10), "the server hung");
            std::hint::spin_loop();
        }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.thread.unpark();
    }
}

fuzz_target!(|data: &[u8]| {
    tolerate_protocol_crate_panics();
    let mut h = small_card();
    let card = h.as_card().expect("a card");
    let mut input = Input::new(data);
    let functions = [h.nic_fid(0), h.nic_fid(1), card.fld.id()];
    let fid = input.pick(&functions);
    let mut servers = Kept::take(0, |_| {}, || Servers::new(card.clone(), &functions));
    if !Arc::ptr_eq(&servers.card.fabric, &card.fabric) {
        // The host was built anew (FLD_FUZZ_FRESH=1): so are its servers.
        *servers = Servers::new(card.clone(), &functions);
    }
    let mut out = Vec::new();
    let caps = br#"{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576,"migration":{"pgsize":4096}}}"#;
    let mut version = vec![0, 0, 1, 0];
    version.extend_from_slice(caps);
    version.push(0);
    message(&mut out, 0, 1, None, &version);
    for id in 1..64u16 {
        if input.is_empty() || out.len() > SCRIPT_BUDGET {
            break;
        }
        let ctl = input.u8();
        let command = if ctl & 0x80 != 0 {
            input.u16()
        } else {
            input.pick(&COMMANDS)
        };
        let body = if ctl & 0x40 != 0 {
            let n = input.u8() as usize;
            input.bytes(n).to_vec()
        } else {
            match command {
                REGION_READ | REGION_WRITE => {
                    let long = match command {
                        REGION_READ => MAX_XFER + 1,
                        _ => LONG_WRITE,
                    };
                    let count = input.u32() % (if ctl & 0x20 != 0 { long + 1 } else { 65 });
                    let mut b = input.u64().to_le_bytes().to_vec();
                    b.extend_from_slice(&le32s(&[u32::from(input.u8() % 10), count]));
                    if command == REGION_WRITE {
                        let payload = input.bytes(count as usize);
                        b.extend_from_slice(payload);
                        b.resize(16 + count as usize, 0);
                    }
                    b
                }
                DMA_MAP => {
                    let mut b = le32s(&[32, input.u32()]);
                    for _ in 0..3 {
                        b.extend_from_slice(&input.u64().to_le_bytes());
                    }
                    b
                }
                DMA_UNMAP => {
                    let mut b = le32s(&[24, input.u32()]);
                    b.extend_from_slice(&input.u64().to_le_bytes());
                    b.extend_from_slice(&input.u64().to_le_bytes());
                    b
                }
                SET_IRQS => le32s(&[
                    20,
                    input.u32(),
                    input.u32() % 6,
                    input.u32() % 80,
                    input.u32() % 80,
                ]),
                GET_IRQ_INFO => le32s(&[16, 0, input.u32() % 6, 0]),
                DEVICE_GET_REGION_INFO => {
                    let mut b = le32s(&[32, 0, input.u32() % 10, 0]);
                    b.extend_from_slice(&[0; 16]);
                    b
                }
                DEVICE_GET_INFO => le32s(&[16, 0, 0, 0]),
                _ => Vec::new(),
            }
        };
        // Sometimes the header's size lies (bounded, as a conforming client's would be).
        let size = (ctl & 0x10 != 0).then(|| input.u32() % (MAX_XFER + 64));
        message(&mut out, id, command, size, &body);
    }
    servers.serve(fid, &out);
    assert_fld_recovers(&mut h);
});
