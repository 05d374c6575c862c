//! RDMA objects and work requests from the host side: any sequence of PD, MR (fuzzed MTT,
//! page size, bounds, access), RoCE address, QP (fuzzed rings and sizes), MODIFY_QP (any mask,
//! any attributes, any transition), SRQ and counter commands, raw and well-formed send WQEs
//! (every opcode, remote addresses and keys good or bad, inline data), raw receive WQEs and
//! doorbells of any value on any QP or SRQ slot, staging rings of any shape on any QP (and their
//! consumer doorbells) — on two live QPs connected across the
//! eSwitch, with the NIC clock advancing. Commands get statuses, bad WQEs error completions;
//! nothing is written outside mapped memory; a reset and a bring-up move verified traffic.
#![no_main]

use fld_abi::nic::{
    db, op, qp_attr, ArmSrqIn, CreateMrIn, CreateQpIn, CreateSrqIn, ModifyQpIn, ObjectIn, PkeyIn,
    QpAttr, QpStagingIn, QpState, RdmaWqe, RoceAddressIn, WqeData, MAX_WQE_BYTES, MTT_ENTRY_SIZE,
    NO_SRQ, QPN_BASE, WQEBB, WQE_OP_SEND,
};
use fld_device::nic::reorder::ReceiverMode;
use fld_fuzz::{assert_rdma_recovers, prepared_rdma_nic, Input};
use libfuzzer_sys::fuzz_target;
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, IntoBytes};

const SCRATCH: usize = 64 << 10;

/// A known id from `list` most of the time, else anything.
fn id(input: &mut Input, list: &[u32]) -> u32 {
    match (input.u8() as usize).checked_rem(list.len() + 1) {
        Some(i) if i < list.len() => list[i],
        _ => input.u32(),
    }
}

fuzz_target!(|data: &[u8]| {
    let (mut kept, (mut a, mut b, scratch)) = prepared_rdma_nic(ReceiverMode::GoBackN, |h| {
        let a = h.create_rdma_qp(0, [10, 0, 0, 1], 16 << 10);
        let b = h.create_rdma_qp(1, [10, 0, 0, 2], 16 << 10);
        h.connect_qp(&a, b.qpn, b.gid, h.nic_mac(1), 5);
        h.connect_qp(&b, a.qpn, a.gid, h.nic_mac(0), 5);
        (a, b, h.alloc(SCRATCH))
    });
    let h = &mut kept.host;
    let mut now = 0u64;
    h.nic.set_clock(Some(now));
    let in_scratch = |input: &mut Input| scratch + u64::from(input.u16()) % SCRATCH as u64;
    let (mut pds, mut keys, mut qpns, mut srqs) = (
        vec![a.pd, b.pd],
        vec![a.key, b.key],
        vec![a.qpn, b.qpn],
        Vec::<u32>::new(),
    );
    let cqs = [a.cq.id, b.cq.id];
    let mut input = Input::new(data);
    for _ in 0..96 {
        if input.is_empty() {
            break;
        }
        let ctl = input.u8();
        let f = u16::from(ctl >> 7);
        match ctl % 13 {
            0 => {
                if ctl & 0x40 != 0 {
                    if let Some(pd) = h
                        .command(f, op::CREATE_PD, ObjectIn::new(0).as_bytes())
                        .id()
                    {
                        pds.push(pd);
                    }
                } else {
                    let pd = id(&mut input, &pds);
                    h.command(f, op::DESTROY_PD, ObjectIn::new(pd).as_bytes());
                }
            }
            1 => {
                // A region whose MTT entries the input writes: inside or outside host memory.
                let log_page_size = input.u8() % 34;
                let start = if ctl & 0x40 != 0 {
                    input.u64()
                } else {
                    in_scratch(&mut input)
                };
                let length = u64::from(input.u32() >> (input.u8() % 32));
                let mtt_addr = if ctl & 0x20 != 0 {
                    input.u64()
                } else {
                    in_scratch(&mut input) & !7
                };
                for i in 0..u64::from(input.u8() % 8) {
                    let entry = if input.u8() & 1 != 0 {
                        input.u64()
                    } else {
                        in_scratch(&mut input) & !0xfff
                    };
                    let at = mtt_addr.wrapping_add(i * MTT_ENTRY_SIZE as u64);
                    if at >= scratch && at < scratch + SCRATCH as u64 - 8 {
                        h.write(at, &entry.to_le_bytes());
                    }
                }
                let mr = CreateMrIn {
                    pd: U32::new(id(&mut input, &pds)),
                    access: U32::new(input.u32() & 0x3f),
                    start: U64::new(start),
                    length: U64::new(length),
                    mtt_addr: U64::new(mtt_addr),
                    log_page_size,
                    // Sometimes a StaR peer region (any key), which no local access may use.
                    flags: input.u8() & 3,
                    rsvd: [0; 2],
                    peer_key: U32::new(input.u32()),
                };
                if let Some(key) = h.command(f, op::CREATE_MR, mr.as_bytes()).id() {
                    keys.push(key);
                }
            }
            2 if ctl & 0x10 != 0 => {
                // StaR's commands from either function, with any body: the server switch and
                // its control CQ, the egress security module's entries and its knob.
                let opcode = input.pick(&[
                    op::SET_STAR_SERVER,
                    op::STAR_GUARD_ADD,
                    op::STAR_GUARD_DEL,
                    op::STAR_GUARD_ENFORCE,
                ]);
                let len = input.u8() as usize % 48;
                h.command(f, opcode, input.bytes(len));
            }
            2 => {
                let opcode = if ctl & 0x40 != 0 {
                    op::DESTROY_MR
                } else {
                    op::QUERY_MR
                };
                let key = id(&mut input, &keys);
                h.command(f, opcode, ObjectIn::new(key).as_bytes());
            }
            3 if ctl & 0x20 != 0 => {
                // The P_Key table: any entry (also beyond it), any value.
                let entry = PkeyIn {
                    index: U16::new(input.u16() % 80),
                    pkey: U16::new(input.u16()),
                    rsvd: [0; 4],
                };
                let opcode = if ctl & 0x40 != 0 {
                    op::SET_PKEY
                } else {
                    op::QUERY_PKEY
                };
                h.command(f, opcode, entry.as_bytes());
            }
            3 => {
                let entry = RoceAddressIn {
                    index: U16::new(input.u16() % 20),
                    flags: input.u8(),
                    rsvd: [0; 5],
                    gid: input.bytes(16).try_into().unwrap_or([0; 16]),
                    mac: input.bytes(6).try_into().unwrap_or([0; 6]),
                    rsvd2: [0; 2],
                };
                let opcode = if ctl & 0x40 != 0 {
                    op::SET_ROCE_ADDRESS
                } else {
                    op::QUERY_ROCE_ADDRESS
                };
                h.command(f, opcode, entry.as_bytes());
            }
            4 => {
                let ring = |input: &mut Input| {
                    if input.u8() & 3 == 0 {
                        input.u64()
                    } else {
                        in_scratch(input) & !63
                    }
                };
                let qp = CreateQpIn {
                    pd: U32::new(id(&mut input, &pds)),
                    send_cqn: U32::new(id(&mut input, &cqs)),
                    recv_cqn: U32::new(id(&mut input, &cqs)),
                    srqn: U32::new(if ctl & 0x40 != 0 {
                        id(&mut input, &srqs)
                    } else {
                        NO_SRQ
                    }),
                    sq_addr: U64::new(ring(&mut input)),
                    rq_addr: U64::new(ring(&mut input)),
                    log_sq_size: input.u8() % 20,
                    log_rq_size: input.u8() % 20,
                    log_rq_stride: input.u8() % 12,
                    flags: input.u8(),
                    rsvd: [0; 4],
                };
                if let Some(qpn) = h.command(f, op::CREATE_QP, qp.as_bytes()).id() {
                    qpns.push(qpn);
                }
            }
            5 => {
                // Any transition with any attributes: raw attribute bytes, or the live
                // QP's path with a few fields changed.
                let qpn = id(&mut input, &qpns);
                let mask = if ctl & 0x40 != 0 {
                    input.u32()
                } else {
                    input.u32() & qp_attr::KNOWN
                };
                let mut attr = if ctl & 0x20 != 0 {
                    let mut raw = [0u8; std::mem::size_of::<QpAttr>()];
                    let bytes = input.bytes(raw.len());
                    raw[..bytes.len()].copy_from_slice(bytes);
                    QpAttr::read_from_bytes(&raw).unwrap_or_default()
                } else {
                    QpAttr {
                        path_mtu: input.u8() % 7,
                        timeout: input.u8() % 32,
                        retry_cnt: input.u8() % 8,
                        rnr_retry: input.u8() % 8,
                        max_rd_atomic: input.u8() % 20,
                        max_dest_rd_atomic: input.u8() % 20,
                        port: 1,
                        dgid: b.gid,
                        dmac: h.nic_mac(1),
                        ..Default::default()
                    }
                };
                if ctl & 0x20 == 0 {
                    attr.qp_state = input.u8() % 8;
                    attr.cur_state = QpState::Rts as u8;
                    attr.dest_qpn.set(id(&mut input, &qpns));
                    attr.sq_psn.set(input.u32());
                    attr.rq_psn.set(input.u32());
                    attr.access_flags.set(input.u32() & 0xf);
                }
                h.command(
                    f,
                    op::MODIFY_QP,
                    ModifyQpIn {
                        qpn: U32::new(qpn),
                        attr_mask: U32::new(mask),
                        attr,
                    }
                    .as_bytes(),
                );
            }
            6 if ctl & 0x80 != 0 => {
                // A staging ring (uRDMA's in-RNIC unload path): any QP, key, place and shape,
                // often B's own buffer so WRITEs A sends get staged.
                let staging = QpStagingIn {
                    qpn: U32::new(id(&mut input, &qpns)),
                    lkey: U32::new(id(&mut input, &keys)),
                    addr: U64::new(if ctl & 0x20 != 0 {
                        b.buf + u64::from(input.u16() % 4096)
                    } else {
                        input.u64()
                    }),
                    log_slots: input.u8() % 18,
                    log_slot_bytes: input.u8() % 14,
                    rsvd: if ctl & 0x10 != 0 {
                        [0; 6]
                    } else {
                        [input.u8(); 6]
                    },
                };
                h.command(f, op::SET_QP_STAGING, staging.as_bytes());
            }
            6 => {
                let opcode = if ctl & 0x40 != 0 {
                    op::DESTROY_QP
                } else {
                    op::QUERY_QP
                };
                let qpn = id(&mut input, &qpns);
                h.command(f, opcode, ObjectIn::new(qpn).as_bytes());
            }
            7 => match input.u8() % 5 {
                0 => {
                    let srq = CreateSrqIn {
                        pd: U32::new(id(&mut input, &pds)),
                        rsvd: U32::new(0),
                        addr: U64::new(in_scratch(&mut input) & !63),
                        log_size: input.u8() % 16,
                        log_stride: input.u8() % 12,
                        rsvd2: [0; 6],
                    };
                    if let Some(srqn) = h.command(f, op::CREATE_SRQ, srq.as_bytes()).id() {
                        srqs.push(srqn);
                    }
                }
                1 => {
                    let arm = ArmSrqIn {
                        srqn: U32::new(id(&mut input, &srqs)),
                        limit: U32::new(input.u32() % 64),
                        eqn: U32::new(id(&mut input, &[a.eq.id, b.eq.id])),
                        rsvd: U32::new(0),
                    };
                    h.command(f, op::ARM_SRQ, arm.as_bytes());
                }
                2 => {
                    let srqn = id(&mut input, &srqs);
                    h.command(f, op::DESTROY_SRQ, ObjectIn::new(srqn).as_bytes());
                }
                3 => {
                    let srqn = id(&mut input, &srqs);
                    h.command(f, op::QUERY_SRQ, ObjectIn::new(srqn).as_bytes());
                }
                _ => {
                    h.command(f, op::QUERY_RDMA_COUNTERS, &[]);
                }
            },
            8 => {
                // A send WQE: raw bytes with data pointers aimed at the buffer, or a
                // well-formed one with any opcode, remote address, key and inline data.
                if ctl & 0x40 != 0 {
                    let len = input.u16() as usize % (MAX_WQE_BYTES + 64);
                    let mut wqe = input.bytes(len).to_vec();
                    if ctl & 0x20 != 0 {
                        for seg in wqe.chunks_mut(16).skip(1) {
                            if seg.len() == 16 {
                                let at = a.buf + u64::from(input.u16()) % (16 << 10);
                                seg[8..16].copy_from_slice(&at.to_le_bytes());
                                seg[4..8].copy_from_slice(&a.key.to_le_bytes());
                            }
                        }
                    }
                    if !wqe.is_empty() {
                        a.post_send_raw(h, &wqe);
                    }
                } else {
                    let opcode = input.u8() % 0x18;
                    let remote_key = if input.u8() & 1 != 0 {
                        b.key
                    } else {
                        input.u32()
                    };
                    let remote_addr = b.buf + u64::from(input.u16()) % (20 << 10);
                    let inline_len = input.u8() as usize * 3;
                    let inline: Vec<u8> = input.bytes(inline_len).to_vec();
                    let s = [a.sge(u64::from(input.u16() % 8192), u32::from(input.u16()))];
                    let wqe = RdmaWqe {
                        opcode,
                        signal: ctl & 0x20 != 0,
                        solicited: ctl & 0x10 != 0,
                        fence: ctl & 0x08 != 0,
                        imm: input.u32(),
                        remote: Some((remote_addr, remote_key)),
                        atomic: Some((input.u64(), input.u64())),
                        data: if inline.is_empty() {
                            WqeData::Gather(&s)
                        } else {
                            WqeData::Inline(&inline)
                        },
                    };
                    let mut buf = [0u8; MAX_WQE_BYTES];
                    if let Ok(n) = wqe.encode(a.qpn, a.sq.pi as u16, &mut buf) {
                        a.post_send_raw(h, &buf[..n.next_multiple_of(WQEBB)]);
                    } else if opcode == WQE_OP_SEND {
                        a.post_send_raw(h, &buf[..WQEBB]);
                    }
                }
            }
            9 => {
                // A raw receive WQE on b's ring, then its doorbell (the right count or any).
                let stride = 1usize << b.log_stride;
                let mut w = vec![0u8; stride];
                let bytes = input.bytes(stride);
                w[..bytes.len()].copy_from_slice(bytes);
                if ctl & 0x40 == 0 {
                    for seg in w.chunks_mut(16) {
                        seg[4..8].copy_from_slice(&b.key.to_le_bytes());
                        let at = b.buf + u64::from(input.u16()) % (16 << 10);
                        seg[8..16].copy_from_slice(&at.to_le_bytes());
                    }
                }
                let slot = u64::from(b.rq_pi & ((1 << b.log_rq) - 1)) * stride as u64;
                h.write(b.rq_addr + slot, &w);
                b.rq_pi = b.rq_pi.wrapping_add(1);
                let value = if ctl & 0x20 != 0 {
                    input.u32()
                } else {
                    b.rq_pi & db::PI_MASK
                };
                h.doorbell(1, db::slot(db::QP_RQ_BASE, b.qpn - QPN_BASE), value);
            }
            10 => {
                // Any doorbell slot of the QP and SRQ pages, any value.
                let base = input.pick(&[
                    db::QP_SQ_BASE,
                    db::QP_RQ_BASE,
                    db::SRQ_BASE,
                    db::QP_STAGING_BASE,
                ]);
                let slot = u32::from(input.u16()) % (db::QP_SLOTS + 4);
                h.doorbell(f, db::slot(base, slot), input.u32());
            }
            11 => {
                for qp in [&mut a, &mut b] {
                    while qp.cq.poll_cqe(h).is_some() {}
                    qp.cq.update_ci(h, qp.function, db::CQ_BASE);
                    while qp.eq.poll_eqe(h).is_some() {}
                    qp.eq.update_ci(h, qp.function, db::EQ_BASE);
                }
            }
            _ => {
                if ctl & 0x40 != 0 {
                    now += 1000u64 << (input.u8() % 24);
                    h.nic.set_clock(Some(now));
                }
                h.run(input.u8() as usize % 64 + 1);
            }
        }
    }
    h.run(512);
    assert_rdma_recovers(h);
});
