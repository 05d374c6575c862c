//! The vfio-user server's handling of decoded messages (`FunctionBackend`), without the socket:
//! what `vfio_user_msg` reaches through the protocol crate, at the rate of a function call
//! instead of a kernel round trip per message. Any sequence of region reads and writes (any
//! region, any offset, lengths up to a page and one past `max_data_xfer_size`), DMA maps of a memfd
//! (any window of it, past its end too, at any IOVA) and without a file, unmaps (single and
//! all), device resets, FLRs through the configuration space, and SET_IRQS with eventfds for
//! any vector range, with the card's engine running between them. Every message gets an answer
//! or an error, the card never touches memory the client did not map, and once the client is
//! gone the card, re-enumerated by a driver, echoes verified traffic through FLD.
#![no_main]

use std::fs::File;
use std::os::fd::{FromRawFd, IntoRawFd};

use fld_fuzz::{assert_fld_recovers, small_card, Input, Kept};
use fld_vfio_user_server::{
    DmaMapFlags, DmaUnmapFlags, FunctionBackend, ServerBackend, CONFIG_REGION, MAX_DATA_TRANSFER,
};
use libfuzzer_sys::fuzz_target;
use vmm_sys_util::eventfd::EventFd;

/// Bytes of the client's "guest RAM" file.
const RAM: u64 = 1 << 20;

/// What the client's side keeps between inputs: its RAM file, eventfds, a transfer buffer.
struct Client {
    ram: File,
    /// Eventfds, as the files SET_IRQS takes.
    eventfds: Vec<File>,
    buf: Vec<u8>,
}

impl Client {
    fn new() -> Client {
        // SAFETY: a NUL-terminated name; the descriptor returned is checked and owned here.
        let fd = unsafe { libc::memfd_create(c"fld-fuzz-ram".as_ptr(), libc::MFD_ALLOW_SEALING) };
        assert!(fd >= 0, "memfd_create");
        // SAFETY: `fd` is a new descriptor nothing else owns.
        let ram = unsafe { File::from_raw_fd(fd) };
        ram.set_len(RAM).expect("size the RAM file");
        Client {
            ram,
            eventfds: (0..4)
                .map(|_| {
                    let e = EventFd::new(libc::EFD_NONBLOCK).expect("an eventfd");
                    // SAFETY: the descriptor leaves the EventFd and is owned by the File alone.
                    unsafe { File::from_raw_fd(e.into_raw_fd()) }
                })
                .collect(),
            buf: vec![0; MAX_DATA_TRANSFER + 1],
        }
    }
}

/// A transfer length: mostly register-sized, sometimes up to a page, or one past the limit
/// (refused untouched). A whole megabyte takes the path of a page at 256 times the cost
/// (`vfio_user_msg` and the server's unit test cover the limit itself).
fn length(input: &mut Input) -> usize {
    match input.u8() % 16 {
        0 => MAX_DATA_TRANSFER + 1,
        1..=3 => usize::from(input.u16() % 4097),
        _ => usize::from(input.u8() % 65),
    }
}

/// An offset in a region: mostly within the first 4 MiB, sometimes anything.
fn offset(input: &mut Input, ctl: u8) -> u64 {
    if ctl & 0x40 != 0 {
        input.u64()
    } else {
        u64::from(input.u32() % (4 << 20))
    }
}

fuzz_target!(|data: &[u8]| {
    let mut h = small_card();
    let mut client = Kept::take(0, |_| {}, Client::new);
    let card = h.as_card().expect("a card");
    let mut input = Input::new(data);
    let functions = [h.nic_fid(0), h.nic_fid(1), card.fld.id()];
    let fid = input.pick(&functions);
    let mut backend = FunctionBackend::standalone(card.clone(), fid);
    let Client { ram, eventfds, buf } = &mut *client;
    for _ in 0..64 {
        if input.is_empty() {
            break;
        }
        let ctl = input.u8();
        let region = if ctl & 0x80 != 0 {
            input.u32()
        } else {
            input.pick(&[CONFIG_REGION, 0, 1, 2, 3, 4, 5])
        };
        match ctl % 8 {
            0 | 1 => {
                let (at, len) = (offset(&mut input, ctl), length(&mut input));
                let _ = backend.region_read(region, at, &mut buf[..len]);
            }
            2 | 3 => {
                let (at, len) = (offset(&mut input, ctl), length(&mut input));
                let bytes = input.bytes(len);
                buf[..bytes.len()].copy_from_slice(bytes);
                buf[bytes.len()..len].fill(0);
                let _ = backend.region_write(region, at, &buf[..len]);
            }
            4 => {
                // A window of the RAM file (past its end too) at an IOVA, or memory without a
                // file; sizes in pages, or anything.
                let file_offset = u64::from(input.u16()) << 8;
                let iova = if ctl & 0x20 != 0 {
                    input.u64()
                } else {
                    u64::from(input.u16()) << 12
                };
                let size = if ctl & 0x10 != 0 {
                    input.u64()
                } else {
                    u64::from(input.u8()) << 12
                };
                let fd = (ctl & 0x08 == 0).then(|| ram.try_clone().expect("dup the RAM file"));
                let flags = DmaMapFlags::from_bits_retain(u32::from(input.u8() & 3));
                let _ = backend.dma_map(flags, file_offset, iova, size, fd);
            }
            5 => {
                let flags = DmaUnmapFlags::from_bits_retain(u32::from(input.u8() & 6));
                let (iova, size) = if ctl & 0x20 != 0 {
                    (input.u64(), input.u64())
                } else {
                    (u64::from(input.u16()) << 12, u64::from(input.u8()) << 12)
                };
                let _ = backend.dma_unmap(flags, iova, size);
            }
            6 => {
                // SET_IRQS on any index with up to four eventfds, or a device reset.
                if ctl & 0x40 != 0 {
                    let _ = backend.reset();
                } else {
                    let (index, flags) = (input.u32() % 6, input.u32());
                    let (start, count) = (input.u32() % 80, input.u32() % 80);
                    let n = usize::from(input.u8() % 5);
                    let fds = eventfds[..n]
                        .iter()
                        .map(|f| f.try_clone().expect("dup an eventfd"))
                        .collect();
                    let _ = backend.set_irqs(index, flags, start, count, fds);
                }
            }
            _ => {
                for _ in 0..(ctl >> 4) {
                    card.poll();
                }
            }
        }
    }
    card.run_until_idle();
    backend.disconnect();
    assert_fld_recovers(&mut h);
});
