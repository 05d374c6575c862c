// SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB
/*
 * libfldnic: the rdma-core provider of the fldemu card's RoCE devices (the kernel's fldnic
 * module, docs/linux-driver.md). libibverbs loads it for a device whose PCI ID is the card's
 * NIC function (an out-of-tree driver has no driver ID of its own).
 *
 * The control path goes through the kernel's uverbs commands; the kernel makes the card's
 * objects and hands back, for each ring and doorbell word, an mmap key (fldnic_uverbs.h). The
 * data path is here, in the caller's process, on the card's formats (fldnic_abi.h,
 * docs/nic-interface.md §15.4-15.5):
 *
 * - post_send writes each work request as one send WQE of 16-byte segments (control, remote
 *   address, atomic, then data segments or one inline segment) into the send ring, where a WQE
 *   takes as many 64-byte basic blocks as it needs and may wrap, then writes the producer
 *   counter (in basic blocks) to the QP's send doorbell once per call;
 * - post_recv and post_srq_recv write receive WQEs (scatter lists ended by RECV_SGE_END) and
 *   the receive producer counter;
 * - poll_cq reads CQEs by their owner bit, maps the card's completion status onto ibv_wc_status
 *   and reports its consumer counter back through the CQ doorbell (the card drops RDMA
 *   completions that find no room, §15.5);
 * - req_notify_cq arms the CQ with a new arm sequence number (§4); the card has no
 *   solicited-only arming, so a solicited-only request arms for every completion.
 *
 * Left out: UD, UC and XRC QPs, memory windows, the extended (ibv_wr_*) posting API, and
 * posting small WQEs by MMIO (§4.1).
 */

#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/driver.h>
#include <infiniband/verbs.h>
#include <util/mmio.h>
#include <util/udma_barrier.h>

#include "../../linux/fldnic_abi.h"
#include "../../linux/fldnic_uverbs.h"

#define FLDNIC_SEGS_PER_BB (FLDNIC_WQEBB / FLDNIC_DS_SIZE)

struct fldnic_device {
	struct verbs_device ibv_dev;
};

struct fldnic_context {
	struct verbs_context ibv_ctx;
	uint32_t max_inline_data;
	/* QPs by slot (QPN - FLDNIC_QPN_BASE), for poll_cq. */
	pthread_mutex_t qp_table_lock;
	struct fldnic_qp **qps;
};

/* A doorbell word in a mapped BAR2 page. */
struct fldnic_db {
	void *page;
	size_t bytes;	/* the kernel maps one page */
	uint8_t *word;
};

struct fldnic_cq {
	struct ibv_cq ibv_cq;
	pthread_spinlock_t lock;
	uint8_t *ring;
	size_t ring_bytes;
	uint32_t log_size;
	uint32_t ci;
	uint32_t arm_sn;
	struct fldnic_db db;
};

/* A send or receive ring: counters, and the work request ID of each slot. */
struct fldnic_wq {
	pthread_spinlock_t lock;
	uint8_t *buf;
	size_t bytes;
	uint32_t log_size;	/* in basic blocks (send) or WQEs (receive) */
	uint32_t log_stride;	/* receive WQE bytes */
	uint32_t head;		/* posted */
	_Atomic uint32_t tail;	/* completed */
	uint64_t *wrid;
	uint8_t *wqe_bbs;	/* send: basic blocks of the WQE starting at each slot */
	struct fldnic_db db;
};

struct fldnic_srq {
	struct ibv_srq ibv_srq;
	struct fldnic_wq wq;
	uint32_t max_sge;
	_Atomic uint8_t *busy;	/* posted and not yet completed, by slot */
};

struct fldnic_qp {
	struct ibv_qp ibv_qp;
	struct fldnic_wq sq;
	struct fldnic_wq rq;
	struct fldnic_srq *srq;
	uint32_t max_send_sge;
	uint32_t max_inline_data;
	uint32_t max_recv_sge;
};

static struct fldnic_context *to_ctx(struct ibv_context *ibctx)
{
	return container_of(ibctx, struct fldnic_context, ibv_ctx.context);
}

static struct fldnic_cq *to_cq(struct ibv_cq *ibcq)
{
	return container_of(ibcq, struct fldnic_cq, ibv_cq);
}

static struct fldnic_qp *to_qp(struct ibv_qp *ibqp)
{
	return container_of(ibqp, struct fldnic_qp, ibv_qp);
}

static struct fldnic_srq *to_srq(struct ibv_srq *ibsrq)
{
	return container_of(ibsrq, struct fldnic_srq, ibv_srq);
}

/* -------- mappings -------- */

static void *fldnic_map(struct ibv_context *ctx, uint64_t key, size_t bytes, int prot)
{
	void *p = mmap(NULL, bytes, prot, MAP_SHARED, ctx->cmd_fd, key);

	return p == MAP_FAILED ? NULL : p;
}

static int fldnic_map_db(struct ibv_context *ctx, struct fldnic_db *db, uint64_t key,
			 uint32_t offset)
{
	db->bytes = sysconf(_SC_PAGESIZE);
	db->page = fldnic_map(ctx, key, db->bytes, PROT_WRITE);
	if (!db->page)
		return errno;
	db->word = (uint8_t *)db->page + offset;
	return 0;
}

static void fldnic_unmap_db(struct fldnic_db *db)
{
	if (db->page)
		munmap(db->page, db->bytes);
	db->page = NULL;
}

static void fldnic_ring_db(struct fldnic_db *db, uint32_t value)
{
	/* The ring entries are in memory before the card samples the new counter. */
	udma_to_device_barrier();
	mmio_write32_le(db->word, htole32(value));
}

static void fldnic_wq_free(struct fldnic_wq *wq)
{
	fldnic_unmap_db(&wq->db);
	if (wq->buf)
		munmap(wq->buf, wq->bytes);
	free(wq->wrid);
	free(wq->wqe_bbs);
	pthread_spin_destroy(&wq->lock);
}

/* Maps a ring of 2^log_size slots and allocates its bookkeeping. */
static int fldnic_wq_init(struct ibv_context *ctx, struct fldnic_wq *wq, uint64_t key,
			  size_t bytes, uint32_t log_size, bool send)
{
	memset(wq, 0, sizeof(*wq));
	pthread_spin_init(&wq->lock, PTHREAD_PROCESS_PRIVATE);
	wq->log_size = log_size;
	wq->bytes = bytes;
	wq->buf = fldnic_map(ctx, key, bytes, PROT_READ | PROT_WRITE);
	if (!wq->buf)
		return errno;
	wq->wrid = calloc(1U << log_size, sizeof(*wq->wrid));
	if (send)
		wq->wqe_bbs = calloc(1U << log_size, 1);
	if (!wq->wrid || (send && !wq->wqe_bbs))
		return ENOMEM;
	return 0;
}

/* -------- device, port, PD, MR -------- */

static int fldnic_query_device(struct ibv_context *ctx,
			       const struct ibv_query_device_ex_input *input,
			       struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ib_uverbs_ex_query_device_resp resp;
	size_t resp_size = sizeof(resp);
	uint64_t fw;
	int err;

	err = ibv_cmd_query_device_any(ctx, input, attr, attr_size, &resp, &resp_size);
	if (err)
		return err;
	/* The card reports its firmware as major.minor in the two halves of a 32-bit word. */
	fw = resp.base.fw_ver;
	snprintf(attr->orig_attr.fw_ver, sizeof(attr->orig_attr.fw_ver), "%u.%u",
		 (unsigned int)(fw >> 16) & 0xffff, (unsigned int)fw & 0xffff);
	return 0;
}

static int fldnic_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
	struct ibv_query_port cmd = {};

	return ibv_cmd_query_port(ctx, port, attr, &cmd, sizeof(cmd));
}

static struct ibv_pd *fldnic_alloc_pd(struct ibv_context *ctx)
{
	struct ib_uverbs_alloc_pd_resp resp;
	struct ibv_alloc_pd cmd;
	struct ibv_pd *pd;

	pd = calloc(1, sizeof(*pd));
	if (!pd)
		return NULL;
	if (ibv_cmd_alloc_pd(ctx, pd, &cmd, sizeof(cmd), &resp, sizeof(resp))) {
		free(pd);
		return NULL;
	}
	return pd;
}

static int fldnic_dealloc_pd(struct ibv_pd *pd)
{
	int err = ibv_cmd_dealloc_pd(pd);

	if (!err)
		free(pd);
	return err;
}

static struct ibv_mr *fldnic_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
				    uint64_t hca_va, int access)
{
	struct ib_uverbs_reg_mr_resp resp;
	struct ibv_reg_mr cmd;
	struct verbs_mr *vmr;

	vmr = calloc(1, sizeof(*vmr));
	if (!vmr)
		return NULL;
	if (ibv_cmd_reg_mr(pd, addr, length, hca_va, access, vmr, &cmd, sizeof(cmd), &resp,
			   sizeof(resp))) {
		free(vmr);
		return NULL;
	}
	return &vmr->ibv_mr;
}

static int fldnic_dereg_mr(struct verbs_mr *vmr)
{
	int err = ibv_cmd_dereg_mr(vmr);

	if (!err)
		free(vmr);
	return err;
}

/* -------- completion queues -------- */

static struct ibv_cq *fldnic_create_cq(struct ibv_context *ibctx, int cqe,
				       struct ibv_comp_channel *channel, int comp_vector)
{
	struct {
		struct ib_uverbs_create_cq_resp ibv_resp;
		struct fldnic_create_cq_resp drv;
	} resp = {};
	struct ibv_create_cq cmd;
	struct fldnic_cq *cq;
	int err;

	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return NULL;
	pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);
	if (ibv_cmd_create_cq(ibctx, cqe, channel, comp_vector, &cq->ibv_cq, &cmd, sizeof(cmd),
			      &resp.ibv_resp, sizeof(resp)))
		goto err_free;
	cq->log_size = resp.drv.log_size;
	cq->ring_bytes = (size_t)FLDNIC_CQE_SIZE << cq->log_size;
	cq->ring = fldnic_map(ibctx, resp.drv.ring_key, cq->ring_bytes, PROT_READ | PROT_WRITE);
	if (!cq->ring)
		goto err_destroy;
	err = fldnic_map_db(ibctx, &cq->db, resp.drv.db_key, resp.drv.db_offset);
	if (err)
		goto err_destroy;
	return &cq->ibv_cq;

err_destroy:
	err = errno;
	if (cq->ring)
		munmap(cq->ring, cq->ring_bytes);
	ibv_cmd_destroy_cq(&cq->ibv_cq);
	errno = err;
err_free:
	pthread_spin_destroy(&cq->lock);
	free(cq);
	return NULL;
}

static int fldnic_destroy_cq(struct ibv_cq *ibcq)
{
	struct fldnic_cq *cq = to_cq(ibcq);
	int err = ibv_cmd_destroy_cq(ibcq);

	if (err)
		return err;
	fldnic_unmap_db(&cq->db);
	munmap(cq->ring, cq->ring_bytes);
	pthread_spin_destroy(&cq->lock);
	free(cq);
	return 0;
}

/* The consumer doorbell: the counter, and the bits of the last arm (§4). */
static void fldnic_cq_doorbell(struct fldnic_cq *cq)
{
	uint32_t v = (cq->ci & FLDNIC_DB_CI_MASK) |
		     ((cq->arm_sn & FLDNIC_DB_ARM_SN_MASK) << FLDNIC_DB_ARM_SN_SHIFT);

	if (cq->arm_sn)
		v |= FLDNIC_DB_ARM;
	fldnic_ring_db(&cq->db, v);
}

static int fldnic_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct fldnic_cq *cq = to_cq(ibcq);

	pthread_spin_lock(&cq->lock);
	cq->arm_sn++;
	fldnic_cq_doorbell(cq);
	pthread_spin_unlock(&cq->lock);
	return 0;
}

static enum ibv_wc_status fldnic_wc_status(uint8_t status)
{
	switch (status) {
	case FLDNIC_WC_SUCCESS: return IBV_WC_SUCCESS;
	case FLDNIC_WC_LOCAL_LENGTH: return IBV_WC_LOC_LEN_ERR;
	case FLDNIC_WC_LOCAL_QP_OPERATION: return IBV_WC_LOC_QP_OP_ERR;
	case FLDNIC_WC_LOCAL_PROTECTION: return IBV_WC_LOC_PROT_ERR;
	case FLDNIC_WC_WR_FLUSH: return IBV_WC_WR_FLUSH_ERR;
	case FLDNIC_WC_BAD_RESPONSE: return IBV_WC_BAD_RESP_ERR;
	case FLDNIC_WC_LOCAL_ACCESS: return IBV_WC_LOC_ACCESS_ERR;
	case FLDNIC_WC_REMOTE_INVALID_REQUEST: return IBV_WC_REM_INV_REQ_ERR;
	case FLDNIC_WC_REMOTE_ACCESS: return IBV_WC_REM_ACCESS_ERR;
	case FLDNIC_WC_REMOTE_OPERATION: return IBV_WC_REM_OP_ERR;
	case FLDNIC_WC_RETRY_EXCEEDED: return IBV_WC_RETRY_EXC_ERR;
	case FLDNIC_WC_RNR_RETRY_EXCEEDED: return IBV_WC_RNR_RETRY_EXC_ERR;
	default: return IBV_WC_GENERAL_ERR;
	}
}

static enum ibv_wc_opcode fldnic_send_wc_opcode(uint8_t wqe_opcode)
{
	switch (wqe_opcode) {
	case FLDNIC_WQE_OP_RDMA_WRITE:
	case FLDNIC_WQE_OP_RDMA_WRITE_IMM: return IBV_WC_RDMA_WRITE;
	case FLDNIC_WQE_OP_RDMA_READ: return IBV_WC_RDMA_READ;
	case FLDNIC_WQE_OP_ATOMIC_CS: return IBV_WC_COMP_SWAP;
	case FLDNIC_WQE_OP_ATOMIC_FA: return IBV_WC_FETCH_ADD;
	default: return IBV_WC_SEND;
	}
}

/* Fills @wc from @cqe; false for a CQE that names no QP of this context (it is consumed). */
static bool fldnic_parse_cqe(struct fldnic_context *ctx, const struct fldnic_cqe *cqe,
			     struct ibv_wc *wc)
{
	uint32_t qpn = le32toh(cqe->qn), slot, counter = le16toh(cqe->wqe_counter);
	uint8_t opcode = cqe->op_own >> 4;
	struct fldnic_qp *qp;
	struct fldnic_wq *wq;

	slot = qpn - FLDNIC_QPN_BASE;
	if (!(cqe->flags & FLDNIC_CQE_FLAG_QP) || qpn < FLDNIC_QPN_BASE ||
	    slot >= FLDNIC_DB_QP_SLOTS)
		return false;
	qp = ctx->qps[slot];
	if (!qp)
		return false;
	memset(wc, 0, sizeof(*wc));
	wc->qp_num = qpn;
	wc->status = fldnic_wc_status(cqe->syndrome);
	wc->vendor_err = cqe->syndrome;
	wc->byte_len = le32toh(cqe->byte_count);

	if (opcode == FLDNIC_CQE_REQ || opcode == FLDNIC_CQE_REQ_ERR) {
		uint32_t tail, mask;

		wq = &qp->sq;
		mask = (1U << wq->log_size) - 1;
		wc->wr_id = wq->wrid[counter & mask];
		wc->opcode = fldnic_send_wc_opcode(cqe->wqe_opcode);
		/* A CQE for WQE k says every WQE before it is done too (§15.5). */
		tail = atomic_load_explicit(&wq->tail, memory_order_relaxed);
		tail += (uint16_t)(counter + wq->wqe_bbs[counter & mask] - tail);
		atomic_store_explicit(&wq->tail, tail, memory_order_release);
		return true;
	}
	if (cqe->flags & FLDNIC_CQE_FLAG_SRQ) {
		struct fldnic_srq *srq = qp->srq;

		if (!srq)
			return false;
		slot = counter & ((1U << srq->wq.log_size) - 1);
		wc->wr_id = srq->wq.wrid[slot];
		atomic_store_explicit(&srq->busy[slot], 0, memory_order_release);
	} else {
		wq = &qp->rq;
		if (!wq->wrid)
			return false;
		wc->wr_id = wq->wrid[counter & ((1U << wq->log_size) - 1)];
		/* The responder takes its receive WQEs in order: one CQE each. */
		atomic_fetch_add_explicit(&wq->tail, 1, memory_order_release);
	}
	wc->opcode = opcode == FLDNIC_CQE_RESP_WRITE_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
	if (opcode == FLDNIC_CQE_RESP_SEND_IMM || opcode == FLDNIC_CQE_RESP_WRITE_IMM) {
		wc->wc_flags |= IBV_WC_WITH_IMM;
		/* The card gives the immediate as a host-order value; verbs carry it big-endian. */
		wc->imm_data = htobe32(le32toh(cqe->imm));
	}
	return true;
}

static int fldnic_poll_cq(struct ibv_cq *ibcq, int ne, struct ibv_wc *wc)
{
	struct fldnic_context *ctx = to_ctx(ibcq->context);
	struct fldnic_cq *cq = to_cq(ibcq);
	uint32_t mask = (1U << cq->log_size) - 1, start;
	int n = 0;

	pthread_spin_lock(&cq->lock);
	start = cq->ci;
	while (n < ne) {
		const struct fldnic_cqe *cqe =
			(const void *)(cq->ring + (size_t)(cq->ci & mask) * FLDNIC_CQE_SIZE);
		uint8_t own = atomic_load_explicit((_Atomic uint8_t *)&cqe->op_own,
						   memory_order_relaxed);

		if ((own & 1) != ((cq->ci >> cq->log_size) & 1) ||
		    (own >> 4) == FLDNIC_CQE_INVALID)
			break;
		/* The entry is read after its owner byte said it is new. */
		udma_from_device_barrier();
		cq->ci++;
		if (fldnic_parse_cqe(ctx, cqe, &wc[n]))
			n++;
	}
	if (cq->ci != start)
		fldnic_cq_doorbell(cq);
	pthread_spin_unlock(&cq->lock);
	return n;
}

/* -------- queue pairs -------- */

static void fldnic_qp_table_set(struct fldnic_context *ctx, uint32_t qpn, struct fldnic_qp *qp)
{
	pthread_mutex_lock(&ctx->qp_table_lock);
	ctx->qps[qpn - FLDNIC_QPN_BASE] = qp;
	pthread_mutex_unlock(&ctx->qp_table_lock);
}

static void fldnic_qp_free(struct fldnic_qp *qp)
{
	fldnic_wq_free(&qp->sq);
	fldnic_wq_free(&qp->rq);
	free(qp);
}

static struct ibv_qp *fldnic_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct fldnic_context *ctx = to_ctx(pd->context);
	struct {
		struct ib_uverbs_create_qp_resp ibv_resp;
		struct fldnic_create_qp_resp drv;
	} resp = {};
	struct ibv_create_qp cmd;
	struct fldnic_qp *qp;
	int err;

	if (attr->qp_type != IBV_QPT_RC) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp)
		return NULL;
	if (ibv_cmd_create_qp(pd, &qp->ibv_qp, attr, &cmd, sizeof(cmd), &resp.ibv_resp,
			      sizeof(resp))) {
		err = errno;
		free(qp);
		errno = err;
		return NULL;
	}
	qp->max_send_sge = attr->cap.max_send_sge;
	qp->max_inline_data = attr->cap.max_inline_data;
	qp->max_recv_sge = attr->cap.max_recv_sge;
	err = fldnic_wq_init(pd->context, &qp->sq, resp.drv.sq_key,
			     (size_t)FLDNIC_WQEBB << resp.drv.log_sq_size, resp.drv.log_sq_size, true);
	if (!err)
		err = fldnic_map_db(pd->context, &qp->sq.db, resp.drv.sq_db_key,
				    resp.drv.sq_db_offset);
	if (!err && attr->srq) {
		qp->srq = to_srq(attr->srq);
	} else if (!err) {
		err = fldnic_wq_init(pd->context, &qp->rq, resp.drv.rq_key,
				     (size_t)1 << (resp.drv.log_rq_size + resp.drv.log_rq_stride),
				     resp.drv.log_rq_size, false);
		qp->rq.log_stride = resp.drv.log_rq_stride;
		if (!err)
			err = fldnic_map_db(pd->context, &qp->rq.db, resp.drv.rq_db_key,
					    resp.drv.rq_db_offset);
	}
	if (err) {
		ibv_cmd_destroy_qp(&qp->ibv_qp);
		fldnic_qp_free(qp);
		errno = err;
		return NULL;
	}
	fldnic_qp_table_set(ctx, resp.drv.qpn, qp);
	return &qp->ibv_qp;
}

static int fldnic_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask)
{
	struct fldnic_qp *qp = to_qp(ibqp);
	struct ibv_modify_qp cmd;
	int err;

	err = ibv_cmd_modify_qp(ibqp, attr, mask, &cmd, sizeof(cmd));
	if (err)
		return err;
	/* RESET zeroes the card's counters and doorbells (§15.3): the rings start over. */
	if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RESET) {
		pthread_spin_lock(&qp->sq.lock);
		qp->sq.head = 0;
		atomic_store(&qp->sq.tail, 0);
		pthread_spin_unlock(&qp->sq.lock);
		if (qp->rq.buf) {
			pthread_spin_lock(&qp->rq.lock);
			qp->rq.head = 0;
			atomic_store(&qp->rq.tail, 0);
			pthread_spin_unlock(&qp->rq.lock);
		}
	}
	return 0;
}

static int fldnic_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask,
			   struct ibv_qp_init_attr *init)
{
	struct ibv_query_qp cmd;

	return ibv_cmd_query_qp(ibqp, attr, mask, init, &cmd, sizeof(cmd));
}

static int fldnic_destroy_qp(struct ibv_qp *ibqp)
{
	struct fldnic_qp *qp = to_qp(ibqp);
	uint32_t qpn = ibqp->qp_num;
	int err;

	err = ibv_cmd_destroy_qp(ibqp);
	if (err)
		return err;
	fldnic_qp_table_set(to_ctx(ibqp->context), qpn, NULL);
	fldnic_qp_free(qp);
	return 0;
}

/* Copies @len bytes to byte @off of a ring of @bytes, wrapping at its end. */
static void fldnic_copy_to_ring(uint8_t *ring, size_t bytes, size_t off, const void *src,
				size_t len)
{
	size_t first;

	off &= bytes - 1;
	first = len < bytes - off ? len : bytes - off;
	memcpy(ring + off, src, first);
	memcpy(ring, (const uint8_t *)src + first, len - first);
}

static int fldnic_wqe_opcode(enum ibv_wr_opcode op, uint8_t *opcode)
{
	switch (op) {
	case IBV_WR_SEND: *opcode = FLDNIC_WQE_OP_SEND; return 0;
	case IBV_WR_SEND_WITH_IMM: *opcode = FLDNIC_WQE_OP_SEND_IMM; return 0;
	case IBV_WR_RDMA_WRITE: *opcode = FLDNIC_WQE_OP_RDMA_WRITE; return 0;
	case IBV_WR_RDMA_WRITE_WITH_IMM: *opcode = FLDNIC_WQE_OP_RDMA_WRITE_IMM; return 0;
	case IBV_WR_RDMA_READ: *opcode = FLDNIC_WQE_OP_RDMA_READ; return 0;
	case IBV_WR_ATOMIC_CMP_AND_SWP: *opcode = FLDNIC_WQE_OP_ATOMIC_CS; return 0;
	case IBV_WR_ATOMIC_FETCH_AND_ADD: *opcode = FLDNIC_WQE_OP_ATOMIC_FA; return 0;
	default: return EINVAL;
	}
}

/* Writes one send WQE at the ring's head; the caller holds the send lock. */
static int fldnic_write_send_wqe(struct fldnic_qp *qp, const struct ibv_send_wr *wr)
{
	struct fldnic_wq *sq = &qp->sq;
	size_t ring = sq->bytes, at = (size_t)sq->head * FLDNIC_WQEBB;
	bool remote, atomic, inl;
	uint32_t ds, bbs, inline_len = 0, i, used;
	uint8_t opcode, seg[FLDNIC_DS_SIZE];
	struct fldnic_ctrl_seg ctrl = {};
	int err;

	err = fldnic_wqe_opcode(wr->opcode, &opcode);
	if (err)
		return err;
	remote = opcode != FLDNIC_WQE_OP_SEND && opcode != FLDNIC_WQE_OP_SEND_IMM;
	atomic = opcode == FLDNIC_WQE_OP_ATOMIC_CS || opcode == FLDNIC_WQE_OP_ATOMIC_FA;
	inl = (wr->send_flags & IBV_SEND_INLINE) && opcode != FLDNIC_WQE_OP_RDMA_READ && !atomic;
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->max_send_sge)
		return EINVAL;
	if (inl) {
		for (i = 0; i < (uint32_t)wr->num_sge; i++)
			inline_len += wr->sg_list[i].length;
		if (inline_len > qp->max_inline_data)
			return EINVAL;
	}
	ds = 1 + remote + atomic +
	     (inl ? (inline_len ? (4 + inline_len + FLDNIC_DS_SIZE - 1) / FLDNIC_DS_SIZE : 0) :
		    (uint32_t)wr->num_sge);
	bbs = (ds + FLDNIC_SEGS_PER_BB - 1) / FLDNIC_SEGS_PER_BB;
	used = sq->head - atomic_load_explicit(&sq->tail, memory_order_acquire);
	if (used + bbs > 1U << sq->log_size)
		return ENOMEM;

	ctrl.opcode = opcode;
	ctrl.wqe_index = htole16(sq->head & 0xffff);
	ctrl.ds_count = ds;
	if (wr->send_flags & IBV_SEND_SIGNALED)
		ctrl.fm_ce_se |= FLDNIC_CE_ALWAYS;
	if (wr->send_flags & IBV_SEND_SOLICITED)
		ctrl.fm_ce_se |= FLDNIC_WQE_SOLICITED;
	if (wr->send_flags & IBV_SEND_FENCE)
		ctrl.fm_ce_se |= FLDNIC_WQE_FENCE;
	ctrl.sqn = htole32(qp->ibv_qp.qp_num);
	if (opcode == FLDNIC_WQE_OP_SEND_IMM || opcode == FLDNIC_WQE_OP_RDMA_WRITE_IMM)
		ctrl.imm = htole32(be32toh(wr->imm_data));
	fldnic_copy_to_ring(sq->buf, ring, at, &ctrl, sizeof(ctrl));
	at += FLDNIC_DS_SIZE;

	if (remote) {
		struct fldnic_remote_addr_seg r = {};

		if (atomic) {
			r.addr = htole64(wr->wr.atomic.remote_addr);
			r.rkey = htole32(wr->wr.atomic.rkey);
		} else {
			r.addr = htole64(wr->wr.rdma.remote_addr);
			r.rkey = htole32(wr->wr.rdma.rkey);
		}
		fldnic_copy_to_ring(sq->buf, ring, at, &r, sizeof(r));
		at += FLDNIC_DS_SIZE;
	}
	if (atomic) {
		struct fldnic_atomic_seg a = {
			.swap_add = htole64(opcode == FLDNIC_WQE_OP_ATOMIC_CS ?
					    wr->wr.atomic.swap : wr->wr.atomic.compare_add),
			.compare = htole64(opcode == FLDNIC_WQE_OP_ATOMIC_CS ?
					   wr->wr.atomic.compare_add : 0),
		};

		fldnic_copy_to_ring(sq->buf, ring, at, &a, sizeof(a));
		at += FLDNIC_DS_SIZE;
	}
	if (inl && inline_len) {
		uint32_t word = htole32(inline_len | FLDNIC_INLINE_SEG);
		size_t end = at + (ds - 1 - remote - atomic) * FLDNIC_DS_SIZE;

		fldnic_copy_to_ring(sq->buf, ring, at, &word, sizeof(word));
		at += sizeof(word);
		for (i = 0; i < (uint32_t)wr->num_sge; i++) {
			fldnic_copy_to_ring(sq->buf, ring, at,
					    (const void *)(uintptr_t)wr->sg_list[i].addr,
					    wr->sg_list[i].length);
			at += wr->sg_list[i].length;
		}
		/* The segment's padding is zero. */
		memset(seg, 0, sizeof(seg));
		if (end > at)
			fldnic_copy_to_ring(sq->buf, ring, at, seg, end - at);
	} else if (!inl) {
		for (i = 0; i < (uint32_t)wr->num_sge; i++) {
			struct fldnic_data_seg d = {
				.byte_count = htole32(wr->sg_list[i].length),
				.lkey = htole32(wr->sg_list[i].lkey),
				.addr = htole64(wr->sg_list[i].addr),
			};

			fldnic_copy_to_ring(sq->buf, ring, at, &d, sizeof(d));
			at += FLDNIC_DS_SIZE;
		}
	}
	sq->wrid[sq->head & ((1U << sq->log_size) - 1)] = wr->wr_id;
	sq->wqe_bbs[sq->head & ((1U << sq->log_size) - 1)] = bbs;
	sq->head += bbs;
	return 0;
}

static int fldnic_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
			    struct ibv_send_wr **bad_wr)
{
	struct fldnic_qp *qp = to_qp(ibqp);
	uint32_t start;
	int err = 0;

	pthread_spin_lock(&qp->sq.lock);
	start = qp->sq.head;
	for (; wr; wr = wr->next) {
		err = fldnic_write_send_wqe(qp, wr);
		if (err) {
			*bad_wr = wr;
			break;
		}
	}
	/* One doorbell for the batch: the producer counter in basic blocks. */
	if (qp->sq.head != start)
		fldnic_ring_db(&qp->sq.db, qp->sq.head & FLDNIC_DB_PI_MASK);
	pthread_spin_unlock(&qp->sq.lock);
	return err;
}

/* Writes the scatter list of @wr as the receive WQE at @wqe (2^log_stride bytes). */
static int fldnic_write_recv_wqe(uint8_t *wqe, uint32_t log_stride, const struct ibv_recv_wr *wr)
{
	uint32_t entries = (1U << log_stride) / FLDNIC_DS_SIZE;
	struct fldnic_data_seg *seg = (struct fldnic_data_seg *)wqe;
	int i;

	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > entries)
		return EINVAL;
	for (i = 0; i < wr->num_sge; i++) {
		seg[i].byte_count = htole32(wr->sg_list[i].length);
		seg[i].lkey = htole32(wr->sg_list[i].lkey);
		seg[i].addr = htole64(wr->sg_list[i].addr);
	}
	/* A shorter list ends at the end marker (§15.4). */
	if ((uint32_t)wr->num_sge < entries) {
		seg[i].byte_count = 0;
		seg[i].lkey = htole32(FLDNIC_RECV_SGE_END);
		seg[i].addr = 0;
	}
	return 0;
}

static int fldnic_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
			    struct ibv_recv_wr **bad_wr)
{
	struct fldnic_qp *qp = to_qp(ibqp);
	struct fldnic_wq *rq = &qp->rq;
	uint32_t start, mask;
	int err = 0;

	if (qp->srq) {
		*bad_wr = wr;
		return EINVAL;
	}
	mask = (1U << rq->log_size) - 1;
	pthread_spin_lock(&rq->lock);
	start = rq->head;
	for (; wr; wr = wr->next) {
		uint32_t slot = rq->head & mask;

		if (rq->head - atomic_load_explicit(&rq->tail, memory_order_acquire) > mask) {
			err = ENOMEM;
		} else {
			err = fldnic_write_recv_wqe(rq->buf + ((size_t)slot << rq->log_stride),
						    rq->log_stride, wr);
		}
		if (err) {
			*bad_wr = wr;
			break;
		}
		rq->wrid[slot] = wr->wr_id;
		rq->head++;
	}
	if (rq->head != start)
		fldnic_ring_db(&rq->db, rq->head & FLDNIC_DB_PI_MASK);
	pthread_spin_unlock(&rq->lock);
	return err;
}

/* -------- shared receive queues -------- */

static struct ibv_srq *fldnic_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct {
		struct ib_uverbs_create_srq_resp ibv_resp;
		struct fldnic_create_srq_resp drv;
	} resp = {};
	struct ibv_create_srq cmd;
	struct fldnic_srq *srq;
	int err;

	srq = calloc(1, sizeof(*srq));
	if (!srq)
		return NULL;
	if (ibv_cmd_create_srq(pd, &srq->ibv_srq, attr, &cmd, sizeof(cmd), &resp.ibv_resp,
			       sizeof(resp))) {
		err = errno;
		free(srq);
		errno = err;
		return NULL;
	}
	err = fldnic_wq_init(pd->context, &srq->wq, resp.drv.ring_key,
			     (size_t)1 << (resp.drv.log_size + resp.drv.log_stride),
			     resp.drv.log_size, false);
	srq->wq.log_stride = resp.drv.log_stride;
	srq->busy = calloc(1U << resp.drv.log_size, sizeof(*srq->busy));
	if (!err && !srq->busy)
		err = ENOMEM;
	if (!err)
		err = fldnic_map_db(pd->context, &srq->wq.db, resp.drv.db_key, resp.drv.db_offset);
	if (err) {
		ibv_cmd_destroy_srq(&srq->ibv_srq);
		fldnic_wq_free(&srq->wq);
		free(srq->busy);
		free(srq);
		errno = err;
		return NULL;
	}
	return &srq->ibv_srq;
}

static int fldnic_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	struct ibv_modify_srq cmd;

	return ibv_cmd_modify_srq(srq, attr, mask, &cmd, sizeof(cmd));
}

static int fldnic_destroy_srq(struct ibv_srq *ibsrq)
{
	struct fldnic_srq *srq = to_srq(ibsrq);
	int err = ibv_cmd_destroy_srq(ibsrq);

	if (err)
		return err;
	fldnic_wq_free(&srq->wq);
	free(srq->busy);
	free(srq);
	return 0;
}

static int fldnic_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
				struct ibv_recv_wr **bad_wr)
{
	struct fldnic_srq *srq = to_srq(ibsrq);
	struct fldnic_wq *wq = &srq->wq;
	uint32_t start, mask = (1U << wq->log_size) - 1;
	int err = 0;

	pthread_spin_lock(&wq->lock);
	start = wq->head;
	for (; wr; wr = wr->next) {
		uint32_t slot = wq->head & mask;

		/* The card takes SRQ WQEs in order; a slot is free once its WQE completed. */
		if (atomic_load_explicit(&srq->busy[slot], memory_order_acquire))
			err = ENOMEM;
		else
			err = fldnic_write_recv_wqe(wq->buf + ((size_t)slot << wq->log_stride),
						    wq->log_stride, wr);
		if (err) {
			*bad_wr = wr;
			break;
		}
		wq->wrid[slot] = wr->wr_id;
		atomic_store_explicit(&srq->busy[slot], 1, memory_order_relaxed);
		wq->head++;
	}
	if (wq->head != start)
		fldnic_ring_db(&wq->db, wq->head & FLDNIC_DB_PI_MASK);
	pthread_spin_unlock(&wq->lock);
	return err;
}

/* -------- context and device -------- */

static void fldnic_free_context(struct ibv_context *ibctx)
{
	struct fldnic_context *ctx = to_ctx(ibctx);

	free(ctx->qps);
	pthread_mutex_destroy(&ctx->qp_table_lock);
	verbs_uninit_context(&ctx->ibv_ctx);
	free(ctx);
}

static const struct verbs_context_ops fldnic_ctx_ops = {
	.query_device_ex = fldnic_query_device,
	.query_port = fldnic_query_port,
	.alloc_pd = fldnic_alloc_pd,
	.dealloc_pd = fldnic_dealloc_pd,
	.reg_mr = fldnic_reg_mr,
	.dereg_mr = fldnic_dereg_mr,
	.create_cq = fldnic_create_cq,
	.poll_cq = fldnic_poll_cq,
	.req_notify_cq = fldnic_req_notify_cq,
	.destroy_cq = fldnic_destroy_cq,
	.create_qp = fldnic_create_qp,
	.modify_qp = fldnic_modify_qp,
	.query_qp = fldnic_query_qp,
	.destroy_qp = fldnic_destroy_qp,
	.post_send = fldnic_post_send,
	.post_recv = fldnic_post_recv,
	.create_srq = fldnic_create_srq,
	.modify_srq = fldnic_modify_srq,
	.destroy_srq = fldnic_destroy_srq,
	.post_srq_recv = fldnic_post_srq_recv,
	.free_context = fldnic_free_context,
};

static struct verbs_context *fldnic_alloc_context(struct ibv_device *ibdev, int cmd_fd,
						  void *private_data)
{
	struct {
		struct ib_uverbs_get_context_resp ibv_resp;
		struct fldnic_alloc_ucontext_resp drv;
	} resp = {};
	struct ibv_get_context cmd;
	struct fldnic_context *ctx;

	ctx = verbs_init_and_alloc_context(ibdev, cmd_fd, ctx, ibv_ctx, RDMA_DRIVER_UNKNOWN);
	if (!ctx)
		return NULL;
	pthread_mutex_init(&ctx->qp_table_lock, NULL);
	ctx->qps = calloc(FLDNIC_DB_QP_SLOTS, sizeof(*ctx->qps));
	if (!ctx->qps ||
	    ibv_cmd_get_context(&ctx->ibv_ctx, &cmd, sizeof(cmd), &resp.ibv_resp, sizeof(resp))) {
		free(ctx->qps);
		verbs_uninit_context(&ctx->ibv_ctx);
		free(ctx);
		return NULL;
	}
	ctx->max_inline_data = resp.drv.max_inline_data;
	verbs_set_ops(&ctx->ibv_ctx, &fldnic_ctx_ops);
	return &ctx->ibv_ctx;
}

static struct verbs_device *fldnic_alloc_device(struct verbs_sysfs_dev *sysfs_dev)
{
	struct fldnic_device *dev = calloc(1, sizeof(*dev));

	return dev ? &dev->ibv_dev : NULL;
}

static void fldnic_uninit_device(struct verbs_device *vdev)
{
	free(container_of(vdev, struct fldnic_device, ibv_dev));
}

static const struct verbs_match_ent fldnic_match_table[] = {
	VERBS_PCI_MATCH(FLDNIC_PCI_VENDOR_ID, FLDNIC_PCI_DEVICE_ID, NULL),
	{},
};

static const struct verbs_device_ops fldnic_dev_ops = {
	.name = "fldnic",
	.match_min_abi_version = FLDNIC_UVERBS_ABI_VERSION,
	.match_max_abi_version = FLDNIC_UVERBS_ABI_VERSION,
	.match_table = fldnic_match_table,
	.alloc_device = fldnic_alloc_device,
	.uninit_device = fldnic_uninit_device,
	.alloc_context = fldnic_alloc_context,
};

PROVIDER_DRIVER(fldnic, fldnic_dev_ops);
