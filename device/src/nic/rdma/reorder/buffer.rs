//! The reorder buffer (LEFT §3.1 and Figure 2's data path: out-of-order packets "are first
//! DMAed to the corresponding connection's reordering buffer and then submitted to the
//! application after the out of order is restored").
//!
//! A request that arrives ahead of the expected PSN and does not say where its data goes — a
//! SEND (which receive WQE is not known until the messages before it are in), a WRITE past its
//! first packet or with immediate, a READ request, an atomic — is kept here by connection and
//! PSN while the bitmap records it. When the gap closes the responder executes it in PSN order
//! as if it had just arrived, so its opcode-sequence, length, key and receive-WQE checks and its
//! completion are IBA's, byte for byte. A single-packet WRITE carries its address and is placed
//! at once instead (no copy).
//!
//! In hardware the buffer is host memory; the model keeps the bytes on the device and the
//! runner charges the DMA write on the way in and the read on the way out (as it does the QP
//! context memory). Slots are reused: once the buffer has grown to the most packets it held at
//! once, keeping a packet allocates nothing.
//!
//! Left out: IRN's alternative, extra headers in every packet naming the receive WQE and
//! offset so a SEND is placed in the application's buffer directly — it changes the wire
//! format a go-back-N peer and a packet decoder read.

use std::collections::HashMap;

use fld_abi::wire::roce::{IbHeaders, IbPacket, OpcodeInfo};

use super::pool::Conn;

/// One kept packet: its transport headers and payload.
#[derive(Clone)]
pub struct Held {
    headers: IbHeaders,
    info: OpcodeInfo,
    len: usize,
    bytes: Box<[u8]>,
}

impl Held {
    /// The packet again, as the receive path parsed it.
    pub fn packet(&self) -> IbPacket<'_> {
        IbPacket {
            headers: self.headers,
            info: self.info,
            payload: &self.bytes[..self.len],
            icrc: 0,
        }
    }

    /// Bytes it takes in the buffer (headers and payload): what its DMA moves.
    pub fn wire_len(&self) -> usize {
        self.headers.len() + self.len
    }
}

/// The packets a NIC's reorder unit keeps, at most `capacity`.
#[derive(Clone)]
pub struct ReorderBuffer {
    held: HashMap<(Conn, u32), Held>,
    spare: Vec<Held>,
    capacity: usize,
    /// Payload bytes a slot holds (the largest path MTU).
    slot_bytes: usize,
}

/// Why a packet was not kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotKept {
    /// The connection's packet at that PSN is kept already.
    Duplicate,
    /// The buffer is full, or the payload is larger than a slot.
    NoRoom,
}

impl ReorderBuffer {
    pub fn new(capacity: usize, slot_bytes: usize) -> Self {
        ReorderBuffer {
            held: HashMap::new(),
            spare: Vec::new(),
            capacity,
            slot_bytes,
        }
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    pub fn holds(&self, conn: Conn, psn: u32) -> bool {
        self.held.contains_key(&(conn, psn))
    }

    /// Whether one more packet fits.
    pub fn has_room(&self) -> bool {
        self.held.len() < self.capacity
    }

    /// Whether `pkt` would be kept: there is room, and its payload fits a slot.
    pub fn fits(&self, pkt: &IbPacket<'_>) -> bool {
        self.has_room() && pkt.payload.len() <= self.slot_bytes
    }

    /// Keeps `pkt`, connection `conn`'s packet at its PSN.
    pub fn keep(&mut self, conn: Conn, pkt: &IbPacket<'_>) -> Result<(), NotKept> {
        let key = (conn, pkt.headers.bth.psn);
        if self.held.contains_key(&key) {
            return Err(NotKept::Duplicate);
        }
        if !self.fits(pkt) {
            return Err(NotKept::NoRoom);
        }
        let mut h = self.spare.pop().unwrap_or_else(|| Held {
            headers: IbHeaders::default(),
            info: pkt.info,
            len: 0,
            bytes: vec![0; self.slot_bytes].into_boxed_slice(),
        });
        h.headers = pkt.headers;
        h.info = pkt.info;
        h.len = pkt.payload.len();
        h.bytes[..h.len].copy_from_slice(pkt.payload);
        self.held.insert(key, h);
        Ok(())
    }

    /// Takes connection `conn`'s packet at `psn` out, if kept; give it back with
    /// [`ReorderBuffer::recycle`] once executed.
    pub fn take(&mut self, conn: Conn, psn: u32) -> Option<Held> {
        self.held.remove(&(conn, psn))
    }

    /// A taken packet's slot is free again.
    pub fn recycle(&mut self, h: Held) {
        self.spare.push(h);
    }

    /// Drops connection `conn`'s packet at `psn`, if kept; whether one was.
    pub fn discard(&mut self, conn: Conn, psn: u32) -> bool {
        match self.take(conn, psn) {
            Some(h) => {
                self.recycle(h);
                true
            }
            None => false,
        }
    }

    /// Drops every packet of the connections `keep` says no to (a QP reset or destroyed).
    pub fn forget_unless(&mut self, keep: impl Fn(Conn) -> bool) {
        let gone: Vec<(Conn, u32)> = self
            .held
            .keys()
            .filter(|(c, _)| !keep(*c))
            .copied()
            .collect();
        for key in gone {
            if let Some(h) = self.held.remove(&key) {
                self.spare.push(h);
            }
        }
    }
}
