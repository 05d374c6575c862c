/* SPDX-License-Identifier: (GPL-2.0 OR Linux-OpenIB) */
/*
 * What the fldnic kernel driver tells its rdma-core provider beyond the verbs' own answers: the
 * driver-private tails of the uverbs responses (udata). The kernel module (ib.c) writes them,
 * the provider (driver/rdma-core/fldnic) reads them; this header is the one definition both
 * include. The card's own formats (WQEs, CQEs, doorbells) are in fldnic_abi.h.
 *
 * Every ring and doorbell page the provider maps comes with a key: the offset to pass to
 * mmap(2) on the context's command file. Rings are kernel memory the card reaches by DMA; a
 * doorbell key maps one 4 KiB page of BAR2 and *_db_offset is the word's byte offset in it.
 */
#ifndef FLDNIC_UVERBS_H
#define FLDNIC_UVERBS_H

#include <linux/types.h>

/* The ABI version both sides check (ib_device_ops.uverbs_abi_ver). */
#define FLDNIC_UVERBS_ABI_VERSION 1

struct fldnic_alloc_ucontext_resp {
	__u32 max_inline_data;	/* bytes of inline data a send WQE may carry */
	__u32 max_send_sge;	/* data segments of a send WQE */
};

struct fldnic_create_cq_resp {
	__aligned_u64 ring_key;	/* 2^log_size CQEs of FLDNIC_CQE_SIZE bytes */
	__aligned_u64 db_key;
	__u32 cqn;
	__u32 db_offset;	/* the CQ's consumer counter and arm word */
	__u32 log_size;
	__u32 rsvd;
};

struct fldnic_create_qp_resp {
	__aligned_u64 sq_key;	/* 2^log_sq_size WQE basic blocks (FLDNIC_WQEBB bytes) */
	__aligned_u64 rq_key;	/* 2^log_rq_size receive WQEs of 2^log_rq_stride bytes; 0 with an SRQ */
	__aligned_u64 sq_db_key;
	__aligned_u64 rq_db_key;	/* 0 with an SRQ */
	__u32 qpn;
	__u32 sq_db_offset;	/* the send producer counter, in basic blocks */
	__u32 rq_db_offset;	/* the receive producer counter, in WQEs; 0 with an SRQ */
	__u8 log_sq_size;
	__u8 log_rq_size;
	__u8 log_rq_stride;
	__u8 rsvd;
};

struct fldnic_create_srq_resp {
	__aligned_u64 ring_key;	/* 2^log_size receive WQEs of 2^log_stride bytes */
	__aligned_u64 db_key;
	__u32 srqn;
	__u32 db_offset;	/* the SRQ's producer counter, in WQEs */
	__u8 log_size;
	__u8 log_stride;
	__u8 rsvd[6];
};

#endif /* FLDNIC_UVERBS_H */
