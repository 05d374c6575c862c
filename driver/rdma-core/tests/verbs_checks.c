// SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB
/*
 * verbs_checks: what a verbs program sees on the card, good input and bad, through stock
 * libibverbs and the fldnic provider. Two QPs, one on each RoCE device named on the command
 * line, are connected to each other; each case resets and reconnects them, posts, and checks
 * the completions (status, opcode, length, immediate) and the bytes that landed.
 *
 *   verbs_checks DEV_A GID_INDEX_A DEV_B GID_INDEX_B
 *
 * Good input: SEND with and without immediate (data compared), RDMA WRITE with immediate,
 * RDMA READ, fetch-and-add and compare-and-swap (memory and returned values compared), inline
 * SEND. Bad input, each answered by the card or by the verbs, never by a hang: a local key the
 * card does not know (LOC_PROT_ERR), a remote key it does not know and an address outside the
 * region (REM_ACCESS_ERR), a READ from a region without REMOTE_READ (REM_ACCESS_ERR), a SEND
 * longer than the receive buffer (LOC_LEN_ERR at the responder, REM_INV_REQ_ERR at the
 * requester), a destination QP number that does not exist (RETRY_EXC_ERR after the retries),
 * and the requests the kernel or provider refuse outright (too many gather entries, a path
 * MTU code out of range, a GID index with no entry, remote write without local write, a CQ
 * larger than the card's). Prints "ok NAME" per case and exits 0 when all held.
 */

#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#define BUF 4096
#define DEPTH 16

struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;	/* all rights */
	struct ibv_mr *ro_mr;	/* local write only: no remote access */
	uint8_t *buf;
	uint8_t *ro_buf;
	int gid_index;
	union ibv_gid gid;
};

static int failures;

#define CHECK(cond, ...)                                                 \
	do {                                                             \
		if (!(cond)) {                                           \
			fprintf(stderr, "FAIL %s:%d: ", __func__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                    \
			fputc('\n', stderr);                             \
			failures++;                                      \
			return -1;                                       \
		}                                                        \
	} while (0)

static struct ibv_context *open_device(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	int i;

	for (i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	return ctx;
}

static int setup(struct end *e, const char *dev, int gid_index)
{
	int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		  IBV_ACCESS_REMOTE_ATOMIC;

	e->ctx = open_device(dev);
	CHECK(e->ctx, "open %s", dev);
	e->gid_index = gid_index;
	CHECK(!ibv_query_gid(e->ctx, 1, gid_index, &e->gid), "query GID %d of %s", gid_index, dev);
	e->pd = ibv_alloc_pd(e->ctx);
	e->cq = ibv_create_cq(e->ctx, 2 * DEPTH, NULL, NULL, 0);
	e->buf = aligned_alloc(4096, BUF);
	e->ro_buf = aligned_alloc(4096, BUF);
	CHECK(e->pd && e->cq && e->buf && e->ro_buf, "PD, CQ, buffers");
	e->mr = ibv_reg_mr(e->pd, e->buf, BUF, all);
	e->ro_mr = ibv_reg_mr(e->pd, e->ro_buf, BUF, IBV_ACCESS_LOCAL_WRITE);
	CHECK(e->mr && e->ro_mr, "register memory: %s", strerror(errno));
	return 0;
}

static int create_qp(struct end *e)
{
	struct ibv_qp_init_attr init = {
		.send_cq = e->cq,
		.recv_cq = e->cq,
		.cap = { .max_send_wr = DEPTH, .max_recv_wr = DEPTH, .max_send_sge = 2,
			 .max_recv_sge = 1, .max_inline_data = 64 },
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 1,
	};

	if (e->qp)
		ibv_destroy_qp(e->qp);
	e->qp = ibv_create_qp(e->pd, &init);
	CHECK(e->qp, "create QP: %s", strerror(errno));
	return 0;
}

/* RESET -> INIT -> RTR -> RTS towards @dest_qpn at @peer's GID. */
static int connect_qp(struct end *e, struct end *peer, uint32_t dest_qpn, uint8_t timeout,
		      uint8_t retry_cnt)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC,
	};

	CHECK(!ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				  IBV_QP_ACCESS_FLAGS), "to INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = 0x100;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.dgid = peer->gid;
	a.ah_attr.grh.sgid_index = e->gid_index;
	a.ah_attr.grh.hop_limit = 64;
	CHECK(!ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				  IBV_QP_MIN_RNR_TIMER), "to RTR: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0x100;
	a.timeout = timeout;
	a.retry_cnt = retry_cnt;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	CHECK(!ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
				  IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC),
	      "to RTS: %s", strerror(errno));
	return 0;
}

/* Fresh QPs on both ends, connected to each other. */
static int pair(struct end *a, struct end *b)
{
	if (create_qp(a) || create_qp(b))
		return -1;
	if (connect_qp(a, b, b->qp->qp_num, 14, 7) || connect_qp(b, a, a->qp->qp_num, 14, 7))
		return -1;
	return 0;
}

/* One completion from @cq within two seconds. */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	struct timespec start, now;
	int n;

	clock_gettime(CLOCK_MONOTONIC, &start);
	do {
		n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n == 1 ? 0 : -1;
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while (now.tv_sec - start.tv_sec < 2);
	return -1;
}

static int post_recv(struct end *e, uint64_t id, uint32_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)e->buf, .length = len, .lkey = e->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(e->qp, &wr, &bad);
}

static int post(struct end *e, enum ibv_wr_opcode op, uint64_t id, void *addr, uint32_t len,
		uint32_t lkey, uint64_t raddr, uint32_t rkey, unsigned int flags)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_send_wr wr = {
		.wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = op,
		.send_flags = IBV_SEND_SIGNALED | flags,
	}, *bad;

	wr.imm_data = htobe32(0x12345678);
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = op == IBV_WR_ATOMIC_FETCH_AND_ADD ? 5 : 105;
		wr.wr.atomic.swap = 7;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	return ibv_post_send(e->qp, &wr, &bad);
}

/* The requester's completion of @id has @status (and, on success, @opcode). */
static int expect(struct end *e, uint64_t id, enum ibv_wc_status status,
		  enum ibv_wc_opcode opcode, const char *what)
{
	struct ibv_wc wc;

	CHECK(!poll_one(e->cq, &wc), "%s: no completion", what);
	CHECK(wc.wr_id == id, "%s: wr_id %llu, expected %llu", what,
	      (unsigned long long)wc.wr_id, (unsigned long long)id);
	CHECK(wc.status == status, "%s: status %s, expected %s", what,
	      ibv_wc_status_str(wc.status), ibv_wc_status_str(status));
	if (status == IBV_WC_SUCCESS)
		CHECK(wc.opcode == opcode, "%s: opcode %d, expected %d", what, wc.opcode, opcode);
	return 0;
}

static void fill(uint8_t *p, size_t n, uint8_t seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = (uint8_t)(seed + i * 7);
}

static int good_traffic(struct end *a, struct end *b)
{
	struct ibv_wc wc;
	uint64_t *word;

	if (pair(a, b))
		return -1;
	/* SEND with immediate: data and immediate arrive. */
	fill(a->buf, 1500, 3);
	memset(b->buf, 0, BUF);
	CHECK(!post_recv(b, 1, BUF), "post_recv");
	CHECK(!post(a, IBV_WR_SEND_WITH_IMM, 2, a->buf, 1500, a->mr->lkey, 0, 0, 0), "post");
	if (expect(a, 2, IBV_WC_SUCCESS, IBV_WC_SEND, "SEND_IMM"))
		return -1;
	CHECK(!poll_one(b->cq, &wc) && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV,
	      "SEND_IMM: receive completion");
	CHECK(wc.byte_len == 1500 && (wc.wc_flags & IBV_WC_WITH_IMM) &&
	      be32toh(wc.imm_data) == 0x12345678, "SEND_IMM: length %u, imm %#x", wc.byte_len,
	      be32toh(wc.imm_data));
	CHECK(!memcmp(a->buf, b->buf, 1500), "SEND: bytes differ");

	/* Inline SEND: the bytes travel in the WQE. */
	fill(a->buf, 48, 9);
	CHECK(!post_recv(b, 3, BUF), "post_recv");
	CHECK(!post(a, IBV_WR_SEND, 4, a->buf, 48, 0, 0, 0, IBV_SEND_INLINE), "post inline");
	memset(a->buf, 0, 48);	/* the WQE carries them: changing the buffer now changes nothing */
	if (expect(a, 4, IBV_WC_SUCCESS, IBV_WC_SEND, "inline SEND"))
		return -1;
	CHECK(!poll_one(b->cq, &wc) && wc.byte_len == 48, "inline SEND: receive");
	fill(a->buf, 48, 9);
	CHECK(!memcmp(a->buf, b->buf, 48), "inline SEND: bytes differ");

	/* RDMA WRITE with immediate into b's region at an offset, then READ it back. */
	fill(a->buf, 3000, 17);
	CHECK(!post_recv(b, 5, 0), "post_recv");
	CHECK(!post(a, IBV_WR_RDMA_WRITE_WITH_IMM, 6, a->buf, 3000, a->mr->lkey,
		    (uintptr_t)b->buf + 100, b->mr->rkey, 0), "post WRITE_IMM");
	if (expect(a, 6, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "WRITE_IMM"))
		return -1;
	CHECK(!poll_one(b->cq, &wc) && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
	      be32toh(wc.imm_data) == 0x12345678, "WRITE_IMM: receive completion");
	CHECK(!memcmp(a->buf, b->buf + 100, 3000), "WRITE: bytes differ");
	memset(a->buf + 1024, 0, 2000);
	CHECK(!post(a, IBV_WR_RDMA_READ, 7, a->buf + 1024, 2000, a->mr->lkey,
		    (uintptr_t)b->buf + 100, b->mr->rkey, 0), "post READ");
	if (expect(a, 7, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, "READ"))
		return -1;
	CHECK(!memcmp(a->buf + 1024, b->buf + 100, 2000), "READ: bytes differ");

	/* Atomics on an 8-byte word of b: the old value comes back, the new one stays. */
	word = (uint64_t *)(b->buf + 8);
	*word = 100;
	CHECK(!post(a, IBV_WR_ATOMIC_FETCH_AND_ADD, 8, a->buf, 8, a->mr->lkey, (uintptr_t)word,
		    b->mr->rkey, 0), "post FETCH_ADD");
	if (expect(a, 8, IBV_WC_SUCCESS, IBV_WC_FETCH_ADD, "FETCH_ADD"))
		return -1;
	CHECK(*(uint64_t *)a->buf == 100 && *word == 105, "FETCH_ADD: got %llu, word %llu",
	      (unsigned long long)*(uint64_t *)a->buf, (unsigned long long)*word);
	CHECK(!post(a, IBV_WR_ATOMIC_CMP_AND_SWP, 9, a->buf, 8, a->mr->lkey, (uintptr_t)word,
		    b->mr->rkey, 0), "post CMP_SWP");
	if (expect(a, 9, IBV_WC_SUCCESS, IBV_WC_COMP_SWAP, "CMP_SWP"))
		return -1;
	CHECK(*(uint64_t *)a->buf == 105 && *word == 7, "CMP_SWP: got %llu, word %llu",
	      (unsigned long long)*(uint64_t *)a->buf, (unsigned long long)*word);
	printf("ok good_traffic\n");
	return 0;
}

static int bad_keys(struct end *a, struct end *b)
{
	if (pair(a, b))
		return -1;
	CHECK(!post(a, IBV_WR_RDMA_WRITE, 20, a->buf, 64, a->mr->lkey ^ 0x5500, (uintptr_t)b->buf,
		    b->mr->rkey, 0), "post");
	if (expect(a, 20, IBV_WC_LOC_PROT_ERR, 0, "unknown lkey"))
		return -1;

	if (pair(a, b))
		return -1;
	CHECK(!post(a, IBV_WR_RDMA_WRITE, 21, a->buf, 64, a->mr->lkey, (uintptr_t)b->buf,
		    b->mr->rkey ^ 0x5500, 0), "post");
	if (expect(a, 21, IBV_WC_REM_ACCESS_ERR, 0, "unknown rkey"))
		return -1;

	if (pair(a, b))
		return -1;
	CHECK(!post(a, IBV_WR_RDMA_WRITE, 22, a->buf, 64, a->mr->lkey, (uintptr_t)b->buf + BUF - 8,
		    b->mr->rkey, 0), "post");
	if (expect(a, 22, IBV_WC_REM_ACCESS_ERR, 0, "WRITE past the region's end"))
		return -1;

	if (pair(a, b))
		return -1;
	CHECK(!post(a, IBV_WR_RDMA_READ, 23, a->buf, 64, a->mr->lkey, (uintptr_t)b->ro_buf,
		    b->ro_mr->rkey, 0), "post");
	if (expect(a, 23, IBV_WC_REM_ACCESS_ERR, 0, "READ without REMOTE_READ"))
		return -1;
	printf("ok bad_keys\n");
	return 0;
}

static int bad_length(struct end *a, struct end *b)
{
	struct ibv_wc wc;

	if (pair(a, b))
		return -1;
	CHECK(!post_recv(b, 30, 64), "post_recv");
	CHECK(!post(a, IBV_WR_SEND, 31, a->buf, 128, a->mr->lkey, 0, 0, 0), "post");
	if (expect(a, 31, IBV_WC_REM_INV_REQ_ERR, 0, "SEND longer than the receive buffer"))
		return -1;
	CHECK(!poll_one(b->cq, &wc) && wc.wr_id == 30 && wc.status == IBV_WC_LOC_LEN_ERR,
	      "the responder's receive: %s", ibv_wc_status_str(wc.status));
	printf("ok bad_length\n");
	return 0;
}

static int bad_qpn(struct end *a, struct end *b)
{
	if (create_qp(a))
		return -1;
	/* A QP number nobody has: the responder drops every packet; 4 us x 2^8 = 1 ms timer. */
	if (connect_qp(a, b, 0xfff0f0, 8, 2))
		return -1;
	CHECK(!post(a, IBV_WR_SEND, 40, a->buf, 64, a->mr->lkey, 0, 0, 0), "post");
	if (expect(a, 40, IBV_WC_RETRY_EXC_ERR, 0, "SEND to a QP that does not exist"))
		return -1;
	printf("ok bad_qpn\n");
	return 0;
}

static int refused_requests(struct end *a, struct end *b)
{
	struct ibv_sge sge[64] = {};
	struct ibv_send_wr wr = { .sg_list = sge, .opcode = IBV_WR_SEND }, *bad;
	struct ibv_qp_init_attr got;
	struct ibv_qp_init_attr init = { .send_cq = a->cq, .recv_cq = a->cq,
					 .cap = { .max_send_wr = 1, .max_recv_wr = 1,
						  .max_send_sge = 1000, .max_recv_sge = 1 },
					 .qp_type = IBV_QPT_RC };
	struct ibv_qp_attr attr = {};
	struct ibv_mr *mr;
	struct ibv_cq *cq;

	if (pair(a, b))
		return -1;
	/* The QP says what it holds (at least what was asked); one more is refused. */
	CHECK(!ibv_query_qp(a->qp, &attr, IBV_QP_STATE | IBV_QP_CAP, &got), "query_qp");
	CHECK(attr.qp_state == IBV_QPS_RTS && got.cap.max_send_sge >= 2 &&
	      got.cap.max_send_sge < 64, "query_qp: state %d, %u gather entries", attr.qp_state,
	      got.cap.max_send_sge);
	wr.num_sge = got.cap.max_send_sge + 1;
	CHECK(ibv_post_send(a->qp, &wr, &bad) == EINVAL && bad == &wr,
	      "%d gather entries on a QP of %u", wr.num_sge, got.cap.max_send_sge);
	CHECK(!ibv_create_qp(a->pd, &init), "a QP with 1000 gather entries");
	mr = ibv_reg_mr(a->pd, a->buf, BUF, IBV_ACCESS_REMOTE_WRITE);
	CHECK(!mr, "remote write without local write");
	cq = ibv_create_cq(a->ctx, 1 << 20, NULL, NULL, 0);
	CHECK(!cq, "a CQ of 2^20 entries");

	if (create_qp(a))
		return -1;
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_INIT;
	attr.port_num = 1;
	CHECK(!ibv_modify_qp(a->qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				  IBV_QP_ACCESS_FLAGS), "to INIT");
	attr.qp_state = IBV_QPS_RTR;
	attr.path_mtu = 7;
	attr.dest_qp_num = b->qp->qp_num;
	attr.ah_attr.is_global = 1;
	attr.ah_attr.port_num = 1;
	attr.ah_attr.grh.dgid = b->gid;
	attr.ah_attr.grh.sgid_index = a->gid_index;
	CHECK(ibv_modify_qp(a->qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				 IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				 IBV_QP_MIN_RNR_TIMER), "path MTU code 7 taken");
	attr.path_mtu = IBV_MTU_1024;
	attr.ah_attr.grh.sgid_index = 15;
	CHECK(ibv_modify_qp(a->qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				 IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				 IBV_QP_MIN_RNR_TIMER), "GID index 15 (no entry) taken");
	printf("ok refused_requests\n");
	return 0;
}

int main(int argc, char **argv)
{
	struct end a = {}, b = {};

	if (argc != 5) {
		fprintf(stderr, "usage: %s DEV_A GID_INDEX_A DEV_B GID_INDEX_B\n", argv[0]);
		return 2;
	}
	if (setup(&a, argv[1], atoi(argv[2])) || setup(&b, argv[3], atoi(argv[4])))
		return 1;
	good_traffic(&a, &b);
	bad_keys(&a, &b);
	bad_length(&a, &b);
	bad_qpn(&a, &b);
	refused_requests(&a, &b);
	if (failures) {
		fprintf(stderr, "%d case(s) failed\n", failures);
		return 1;
	}
	printf("verbs_checks: all cases held\n");
	return 0;
}
