/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the RoCE device's parts share: the device (ib.c), and QP1 with the kernel consumers'
 * CQs and address handles (gsi.c).
 */
#ifndef FLDNIC_IB_H
#define FLDNIC_IB_H

#include <linux/skbuff.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>
#include <rdma/ib_verbs.h>

#include "fldnic.h"

/* A kernel consumer's CQ holds up to this many completions. */
#define FLDNIC_IB_MAX_KCQE 65536
/* QP1's limits: the MAD layer asks for 2 gather entries and up to 4096 work requests. */
#define FLDNIC_GSI_MAX_SGE 4
#define FLDNIC_GSI_MAX_WR 4096

struct fldnic_mmap;

struct fldnic_ib {
	struct ib_device ibdev;
	struct fldnic *nic;
	struct fldnic_cq eq;
	int irq;
	/* Objects by their card numbers, for the event queue. */
	struct xarray cqs;
	struct xarray qps;
	struct xarray srqs;
};

/* A kernel consumer's CQ: completions as ib_wc entries in a ring. */
struct fldnic_kcq {
	spinlock_t lock;
	struct ib_wc *wc;
	u32 size;
	u32 head;
	u32 tail;
	bool armed;
	bool overflowed;
};

struct fldnic_ib_cq {
	struct ib_cq ibcq;
	u32 cqn;			/* the card's CQ (user CQs) */
	struct fldnic_mmap *ring;
	struct fldnic_mmap *db;
	struct fldnic_kcq *kcq;		/* a kernel consumer's CQ, in software */
};

/* A receive buffer the MAD layer posted to QP1. */
struct fldnic_gsi_recv {
	u64 wr_id;
	u64 addr;
	u32 length;
};

/* QP1 in software (gsi.c). */
struct fldnic_gsi {
	struct fldnic *nic;
	struct fldnic_qp *qp;
	struct fldnic_ib_cq *send_cq;
	struct fldnic_ib_cq *recv_cq;
	spinlock_t lock;		/* the receive ring, the state, PSN and Q_Key */
	struct fldnic_gsi_recv *rq;
	u32 rq_size;
	u32 rq_head;
	u32 rq_tail;
	enum ib_qp_state state;
	u32 qkey;
	u32 psn;
	u16 ip_id;
	bool signal_all;
	struct sk_buff_head txq;	/* built datagrams, sent by tx_work */
	struct work_struct tx_work;
	u64 sent;
	u64 received;
	u64 dropped;
};

struct fldnic_qp {
	struct ib_qp ibqp;
	u32 qpn;
	struct ib_qp_cap cap;	/* as reported at creation */
	bool signal_all;
	struct fldnic_mmap *sq;
	struct fldnic_mmap *rq;
	struct fldnic_mmap *sq_db;
	struct fldnic_mmap *rq_db;
	struct fldnic_gsi *gsi;	/* QP1 */
};

/* An address handle of a kernel consumer (QP1's replies): what a datagram's headers need. */
struct fldnic_ah {
	struct ib_ah ibah;
	union ib_gid sgid;
	union ib_gid dgid;
	u8 dmac[ETH_ALEN];
	bool ipv4;
	u8 hop_limit;
	u8 traffic_class;
	u32 flow_label;
};

static inline struct fldnic_ib_cq *to_fldnic_cq(struct ib_cq *ibcq)
{
	return container_of(ibcq, struct fldnic_ib_cq, ibcq);
}

static inline struct fldnic_qp *to_fldnic_qp(struct ib_qp *ibqp)
{
	return container_of(ibqp, struct fldnic_qp, ibqp);
}

int fldnic_kcq_create(struct fldnic_ib_cq *cq, const struct ib_cq_init_attr *attr);
void fldnic_kcq_destroy(struct fldnic_ib_cq *cq);
int fldnic_poll_cq(struct ib_cq *ibcq, int ne, struct ib_wc *wc);
int fldnic_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags);
int fldnic_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init, struct ib_udata *udata);
int fldnic_destroy_ah(struct ib_ah *ibah, u32 flags);
int fldnic_gsi_create(struct fldnic_ib *ib, struct fldnic_qp *qp, struct ib_qp_init_attr *init);
void fldnic_gsi_destroy(struct fldnic_qp *qp);
int fldnic_gsi_modify(struct fldnic_qp *qp, struct ib_qp_attr *attr, int mask);
int fldnic_gsi_query(struct fldnic_qp *qp, struct ib_qp_attr *attr, struct ib_qp_init_attr *init);
void fldnic_gsi_tx_work(struct work_struct *work);
void fldnic_gsi_counters(struct fldnic *nic, u64 out[3]);
int fldnic_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
		     const struct ib_send_wr **bad_wr);
int fldnic_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
		     const struct ib_recv_wr **bad_wr);

#endif /* FLDNIC_IB_H */
