// SPDX-License-Identifier: GPL-2.0
/*
 * QP1, the general services interface (IBA 13.5.1), in software over the function's netdev.
 *
 * The card's RDMA engine runs reliable connections only and leaves RoCE datagrams for QP1 to
 * the function's Ethernet receive path (docs/nic-interface.md §15.8). The kernel's MAD layer
 * creates QP1 on every RoCE port; through it the connection manager (ib_cm, rdma_cm) exchanges
 * its MADs — what `rping` and `perftest -R` need. Here:
 *
 * - post_send builds each MAD as a RoCEv2 datagram — Ethernet, IPv4 or IPv6 from the address
 *   handle's GIDs, UDP to 4791, BTH (UD SEND_ONLY, IBA 9.2), DETH (Q_Key, source QP 1), the
 *   payload and the invariant CRC (IBA A17.3.3) — and a work item sends it through the netdev
 *   (the MAD layer posts with interrupts off), then completes it;
 * - NAPI hands every UDP/4791 frame for QP1 to fldnic_gsi_rx, which checks its ICRC and Q_Key,
 *   writes the 40-byte GRH area (an IPv4 header in its last 20 bytes, or the IPv6 header) and
 *   the MAD into the next posted receive buffer, and completes it with the source QP, MAC and
 *   network header type the connection manager builds its reply's address from;
 * - the CQs and address handles of kernel consumers are software objects: a completion is an
 *   ib_wc in a ring. The device has no DMA device of its own (kernel verbs carry kernel
 *   virtual addresses, as soft-RoCE's do), so the MAD buffers are plain memory here.
 *
 * Left out: QP0 (RoCE has no subnet management), P_Key tables beyond the default partition,
 * and kernel RC QPs (a kernel consumer's RC traffic would need the card's queues for kernel
 * memory).
 */

#include <linux/crc32.h>
#include <linux/etherdevice.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/netdevice.h>
#include <linux/udp.h>
#include <linux/unaligned.h>
#include <net/ipv6.h>
#include <rdma/ib_mad.h>
#include <rdma/ib_verbs.h>

#include "ib.h"

/* RoCEv2 on the wire (IBA A17). */
#define ROCE_V2_UDP_PORT 4791
#define ROCE_UD_SEND_ONLY 0x64
#define ROCE_UD_SEND_ONLY_IMM 0x65
#define ROCE_BTH_LEN 12
#define ROCE_DETH_LEN 8
#define ROCE_IMM_LEN 4
#define ROCE_ICRC_LEN 4
#define ROCE_GRH_LEN 40
#define ROCE_PSN_MASK 0xffffff
#define ROCE_QPN_MASK 0xffffff
/* A datagram carries at most one 4 KiB MTU of payload. */
#define FLDNIC_GSI_MAX_PAYLOAD 4096

/* -------- kernel completion queues -------- */

int fldnic_kcq_create(struct fldnic_ib_cq *cq, const struct ib_cq_init_attr *attr)
{
	struct fldnic_kcq *k;

	if (attr->cqe < 1 || attr->cqe > FLDNIC_IB_MAX_KCQE)
		return -EINVAL;
	k = kzalloc(sizeof(*k), GFP_KERNEL);
	if (!k)
		return -ENOMEM;
	k->size = roundup_pow_of_two(attr->cqe + 1);
	k->wc = kvcalloc(k->size, sizeof(*k->wc), GFP_KERNEL);
	if (!k->wc) {
		kfree(k);
		return -ENOMEM;
	}
	spin_lock_init(&k->lock);
	cq->kcq = k;
	cq->cqn = FLDNIC_NONE;
	cq->ibcq.cqe = k->size - 1;
	return 0;
}

void fldnic_kcq_destroy(struct fldnic_ib_cq *cq)
{
	kvfree(cq->kcq->wc);
	kfree(cq->kcq);
	cq->kcq = NULL;
}

/* Adds a completion; the consumer hears of it if it armed the CQ. */
static void fldnic_kcq_push(struct fldnic_ib_cq *cq, const struct ib_wc *wc)
{
	struct fldnic_kcq *k = cq->kcq;
	bool notify = false, overflow = false;
	unsigned long flags;

	spin_lock_irqsave(&k->lock, flags);
	if (k->head - k->tail < k->size) {
		k->wc[k->head & (k->size - 1)] = *wc;
		k->head++;
		notify = k->armed;
		k->armed = false;
	} else {
		overflow = !k->overflowed;
		k->overflowed = true;
	}
	spin_unlock_irqrestore(&k->lock, flags);
	if (notify && cq->ibcq.comp_handler)
		cq->ibcq.comp_handler(&cq->ibcq, cq->ibcq.cq_context);
	if (overflow && cq->ibcq.event_handler) {
		struct ib_event ev = {
			.device = cq->ibcq.device,
			.element.cq = &cq->ibcq,
			.event = IB_EVENT_CQ_ERR,
		};

		cq->ibcq.event_handler(&ev, cq->ibcq.cq_context);
	}
}

int fldnic_poll_cq(struct ib_cq *ibcq, int ne, struct ib_wc *wc)
{
	struct fldnic_kcq *k = to_fldnic_cq(ibcq)->kcq;
	unsigned long flags;
	int n = 0;

	/* A user CQ is polled in user space, by the provider. */
	if (!k)
		return -EOPNOTSUPP;
	spin_lock_irqsave(&k->lock, flags);
	while (n < ne && k->tail != k->head) {
		wc[n++] = k->wc[k->tail & (k->size - 1)];
		k->tail++;
	}
	spin_unlock_irqrestore(&k->lock, flags);
	return n;
}

int fldnic_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags)
{
	struct fldnic_kcq *k = to_fldnic_cq(ibcq)->kcq;
	unsigned long irqflags;
	int missed = 0;

	if (!k)
		return -EOPNOTSUPP;
	spin_lock_irqsave(&k->lock, irqflags);
	/* Solicited-only arms for every completion: at most a spurious call. */
	k->armed = true;
	if ((flags & IB_CQ_REPORT_MISSED_EVENTS) && k->tail != k->head)
		missed = 1;
	spin_unlock_irqrestore(&k->lock, irqflags);
	return missed;
}

/* -------- address handles -------- */

int fldnic_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init, struct ib_udata *udata)
{
	struct fldnic_ah *ah = container_of(ibah, struct fldnic_ah, ibah);
	const struct ib_global_route *grh;
	struct rdma_ah_attr *attr = init->ah_attr;

	/* Datagrams are the kernel's GSI only: no user UD QPs. */
	if (udata)
		return -EOPNOTSUPP;
	if (attr->type != RDMA_AH_ATTR_TYPE_ROCE || !(rdma_ah_get_ah_flags(attr) & IB_AH_GRH))
		return -EINVAL;
	grh = rdma_ah_read_grh(attr);
	if (!grh->sgid_attr)
		return -EINVAL;
	ah->sgid = grh->sgid_attr->gid;
	ah->dgid = grh->dgid;
	ah->ipv4 = rdma_gid_attr_network_type(grh->sgid_attr) == RDMA_NETWORK_IPV4;
	ah->hop_limit = grh->hop_limit;
	ah->traffic_class = grh->traffic_class;
	ah->flow_label = grh->flow_label;
	memcpy(ah->dmac, attr->roce.dmac, ETH_ALEN);
	return 0;
}

int fldnic_destroy_ah(struct ib_ah *ibah, u32 flags)
{
	return 0;
}

/* -------- the invariant CRC (IBA A17.3.3) -------- */

/*
 * The ICRC of the RoCEv2 packet whose IP header is at @ip and whose payload and pad end at
 * @end: CRC-32 over 8 bytes of ones standing for the LRH, the IP, UDP and BTH headers with
 * the fields routers change set to ones, then the rest.
 */
static u32 fldnic_icrc(const u8 *ip, const u8 *end, bool ipv6)
{
	u8 masked[8 + sizeof(struct ipv6hdr) + sizeof(struct udphdr) + ROCE_BTH_LEN];
	unsigned int ip_len = ipv6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr);
	unsigned int hdr = ip_len + sizeof(struct udphdr) + ROCE_BTH_LEN;
	u8 *m = masked + 8;
	u32 crc;

	memset(masked, 0xff, 8);
	memcpy(m, ip, hdr);
	if (ipv6) {
		m[0] |= 0x0f;		/* traffic class and flow label */
		memset(m + 1, 0xff, 3);
		m[7] = 0xff;		/* hop limit */
	} else {
		m[1] = 0xff;		/* DSCP and ECN */
		m[8] = 0xff;		/* TTL */
		m[10] = m[11] = 0xff;	/* header checksum */
	}
	m[ip_len + 6] = m[ip_len + 7] = 0xff;	/* UDP checksum */
	m[ip_len + sizeof(struct udphdr) + 4] = 0xff;	/* BTH: FECN, BECN, resv6 */
	crc = crc32_le(~0U, masked, 8 + hdr);
	crc = crc32_le(crc, ip + hdr, end - (ip + hdr));
	return ~crc;
}

/* -------- QP1 -------- */

int fldnic_gsi_create(struct fldnic_ib *ib, struct fldnic_qp *qp, struct ib_qp_init_attr *init)
{
	struct fldnic *nic = ib->nic;
	struct fldnic_gsi *gsi;

	if (init->cap.max_send_sge > FLDNIC_GSI_MAX_SGE ||
	    init->cap.max_recv_sge > FLDNIC_GSI_MAX_SGE || !init->cap.max_recv_wr ||
	    init->cap.max_recv_wr > FLDNIC_GSI_MAX_WR)
		return -EINVAL;
	gsi = kzalloc(sizeof(*gsi), GFP_KERNEL);
	if (!gsi)
		return -ENOMEM;
	gsi->rq_size = roundup_pow_of_two(init->cap.max_recv_wr);
	gsi->rq = kvcalloc(gsi->rq_size, sizeof(*gsi->rq), GFP_KERNEL);
	if (!gsi->rq) {
		kfree(gsi);
		return -ENOMEM;
	}
	gsi->qp = qp;
	gsi->nic = nic;
	gsi->send_cq = to_fldnic_cq(init->send_cq);
	gsi->recv_cq = to_fldnic_cq(init->recv_cq);
	gsi->signal_all = init->sq_sig_type == IB_SIGNAL_ALL_WR;
	spin_lock_init(&gsi->lock);
	skb_queue_head_init(&gsi->txq);
	INIT_WORK(&gsi->tx_work, fldnic_gsi_tx_work);
	if (!gsi->send_cq->kcq || !gsi->recv_cq->kcq) {
		kvfree(gsi->rq);
		kfree(gsi);
		return -EINVAL;
	}
	spin_lock_bh(&nic->gsi_lock);
	if (nic->gsi) {
		spin_unlock_bh(&nic->gsi_lock);
		kvfree(gsi->rq);
		kfree(gsi);
		return -EBUSY;
	}
	nic->gsi = gsi;
	spin_unlock_bh(&nic->gsi_lock);

	qp->gsi = gsi;
	qp->qpn = 1;
	qp->ibqp.qp_num = 1;
	init->cap.max_recv_wr = gsi->rq_size;
	init->cap.max_send_wr = FLDNIC_GSI_MAX_WR;
	init->cap.max_send_sge = FLDNIC_GSI_MAX_SGE;
	init->cap.max_recv_sge = FLDNIC_GSI_MAX_SGE;
	init->cap.max_inline_data = 0;
	return 0;
}

void fldnic_gsi_destroy(struct fldnic_qp *qp)
{
	struct fldnic_gsi *gsi = qp->gsi;
	struct fldnic *nic = gsi->nic;

	/* The receive path stops seeing it, then the send work ends. */
	spin_lock_bh(&nic->gsi_lock);
	nic->gsi = NULL;
	spin_unlock_bh(&nic->gsi_lock);
	cancel_work_sync(&gsi->tx_work);
	skb_queue_purge(&gsi->txq);
	kvfree(gsi->rq);
	kfree(gsi);
	qp->gsi = NULL;
}

int fldnic_gsi_modify(struct fldnic_qp *qp, struct ib_qp_attr *attr, int mask)
{
	struct fldnic_gsi *gsi = qp->gsi;
	unsigned long flags;

	spin_lock_irqsave(&gsi->lock, flags);
	if (mask & IB_QP_STATE)
		gsi->state = attr->qp_state;
	if (mask & IB_QP_QKEY)
		gsi->qkey = attr->qkey;
	if (mask & IB_QP_SQ_PSN)
		gsi->psn = attr->sq_psn & ROCE_PSN_MASK;
	if ((mask & IB_QP_STATE) && attr->qp_state == IB_QPS_RESET)
		gsi->rq_head = gsi->rq_tail = 0;
	spin_unlock_irqrestore(&gsi->lock, flags);
	return 0;
}

int fldnic_gsi_query(struct fldnic_qp *qp, struct ib_qp_attr *attr, struct ib_qp_init_attr *init)
{
	struct fldnic_gsi *gsi = qp->gsi;
	unsigned long flags;

	memset(attr, 0, sizeof(*attr));
	memset(init, 0, sizeof(*init));
	spin_lock_irqsave(&gsi->lock, flags);
	attr->qp_state = gsi->state;
	attr->cur_qp_state = gsi->state;
	attr->qkey = gsi->qkey;
	attr->sq_psn = gsi->psn;
	spin_unlock_irqrestore(&gsi->lock, flags);
	attr->port_num = 1;
	attr->cap.max_send_wr = FLDNIC_GSI_MAX_WR;
	attr->cap.max_recv_wr = gsi->rq_size;
	attr->cap.max_send_sge = FLDNIC_GSI_MAX_SGE;
	attr->cap.max_recv_sge = FLDNIC_GSI_MAX_SGE;
	init->qp_type = IB_QPT_GSI;
	init->send_cq = &gsi->send_cq->ibcq;
	init->recv_cq = &gsi->recv_cq->ibcq;
	init->cap = attr->cap;
	init->sq_sig_type = gsi->signal_all ? IB_SIGNAL_ALL_WR : IB_SIGNAL_REQ_WR;
	return 0;
}

/* QP1's datagrams sent, received and dropped, for `rdma statistic` (zeros without QP1). */
void fldnic_gsi_counters(struct fldnic *nic, u64 out[3])
{
	spin_lock_bh(&nic->gsi_lock);
	out[0] = nic->gsi ? nic->gsi->sent : 0;
	out[1] = nic->gsi ? nic->gsi->received : 0;
	out[2] = nic->gsi ? nic->gsi->dropped : 0;
	spin_unlock_bh(&nic->gsi_lock);
}

/* The skb's control block: what the send completion needs. */
struct fldnic_gsi_cb {
	u64 wr_id;
	u32 byte_len;
	bool signaled;
};

/* Builds the RoCEv2 datagram of one UD work request; NULL for one that cannot be sent. */
static struct sk_buff *fldnic_gsi_build(struct fldnic_gsi *gsi, const struct ib_send_wr *wr,
					int *err)
{
	const struct ib_ud_wr *ud = ud_wr(wr);
	struct fldnic_ah *ah = container_of(ud->ah, struct fldnic_ah, ibah);
	struct net_device *ndev = gsi->nic->netdev;
	bool imm = wr->opcode == IB_WR_SEND_WITH_IMM;
	unsigned int ip_len = ah->ipv4 ? sizeof(struct iphdr) : sizeof(struct ipv6hdr);
	unsigned int payload = 0, pad, ib_len, l4_len, i;
	struct fldnic_gsi_cb *cb;
	struct sk_buff *skb;
	u8 *ip, *p, *bth;
	struct udphdr *udp;
	struct ethhdr *eth;
	unsigned long flags;
	u32 qkey, psn;

	*err = -EINVAL;
	if ((wr->opcode != IB_WR_SEND && !imm) || wr->num_sge > FLDNIC_GSI_MAX_SGE)
		return NULL;
	for (i = 0; i < wr->num_sge; i++)
		payload += wr->sg_list[i].length;
	if (payload > FLDNIC_GSI_MAX_PAYLOAD)
		return NULL;
	pad = (4 - payload % 4) % 4;
	ib_len = ROCE_BTH_LEN + ROCE_DETH_LEN + (imm ? ROCE_IMM_LEN : 0) + payload + pad +
		 ROCE_ICRC_LEN;
	l4_len = sizeof(struct udphdr) + ib_len;
	*err = -ENOMEM;
	skb = alloc_skb(LL_RESERVED_SPACE(ndev) + ETH_HLEN + ip_len + l4_len, GFP_ATOMIC);
	if (!skb)
		return NULL;
	skb_reserve(skb, LL_RESERVED_SPACE(ndev));

	eth = skb_put(skb, ETH_HLEN);
	ether_addr_copy(eth->h_dest, ah->dmac);
	ether_addr_copy(eth->h_source, ndev->dev_addr);
	eth->h_proto = htons(ah->ipv4 ? ETH_P_IP : ETH_P_IPV6);
	ip = skb_put(skb, ip_len);
	if (ah->ipv4) {
		struct iphdr *h = (struct iphdr *)ip;

		h->version = 4;
		h->ihl = 5;
		h->tos = ah->traffic_class;
		h->tot_len = htons(ip_len + l4_len);
		h->id = htons(gsi->ip_id++);
		h->frag_off = htons(IP_DF);
		h->ttl = ah->hop_limit ? ah->hop_limit : 64;
		h->protocol = IPPROTO_UDP;
		memcpy(&h->saddr, ah->sgid.raw + 12, 4);
		memcpy(&h->daddr, ah->dgid.raw + 12, 4);
		h->check = 0;
		h->check = ip_fast_csum(h, h->ihl);
	} else {
		struct ipv6hdr *h = (struct ipv6hdr *)ip;

		ip6_flow_hdr(h, ah->traffic_class, htonl(ah->flow_label));
		h->payload_len = htons(l4_len);
		h->nexthdr = IPPROTO_UDP;
		h->hop_limit = ah->hop_limit ? ah->hop_limit : 64;
		memcpy(&h->saddr, ah->sgid.raw, 16);
		memcpy(&h->daddr, ah->dgid.raw, 16);
	}
	udp = skb_put(skb, sizeof(*udp));
	/* One source port for QP1's datagrams (A17.3.2 leaves it to the sender). */
	udp->source = htons(0xc000 | 1);
	udp->dest = htons(ROCE_V2_UDP_PORT);
	udp->len = htons(l4_len);
	udp->check = 0;

	bth = skb_put(skb, ROCE_BTH_LEN);
	bth[0] = imm ? ROCE_UD_SEND_ONLY_IMM : ROCE_UD_SEND_ONLY;
	bth[1] = (wr->send_flags & IB_SEND_SOLICITED ? 0x80 : 0) | pad << 4;
	put_unaligned_be16(IB_DEFAULT_PKEY_FULL, bth + 2);
	put_unaligned_be32(ud->remote_qpn & ROCE_QPN_MASK, bth + 4);
	spin_lock_irqsave(&gsi->lock, flags);
	psn = gsi->psn;
	gsi->psn = (psn + 1) & ROCE_PSN_MASK;
	/* A Q_Key with its high bit set means the QP's own (IBA 10.2.5). */
	qkey = ud->remote_qkey & 0x80000000 ? gsi->qkey : ud->remote_qkey;
	spin_unlock_irqrestore(&gsi->lock, flags);
	put_unaligned_be32(psn, bth + 8);
	p = skb_put(skb, ROCE_DETH_LEN);
	put_unaligned_be32(qkey, p);
	put_unaligned_be32(1, p + 4);
	if (imm) {
		p = skb_put(skb, ROCE_IMM_LEN);
		memcpy(p, &wr->ex.imm_data, ROCE_IMM_LEN);
	}
	/* Kernel verbs on this device carry kernel virtual addresses. */
	for (i = 0; i < wr->num_sge; i++)
		skb_put_data(skb, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
	skb_put_zero(skb, pad);
	p = skb_put(skb, ROCE_ICRC_LEN);
	put_unaligned_le32(fldnic_icrc(ip, p, !ah->ipv4), p);

	skb->dev = ndev;
	skb->protocol = eth->h_proto;
	skb_reset_mac_header(skb);
	cb = (struct fldnic_gsi_cb *)skb->cb;
	cb->wr_id = wr->wr_id;
	cb->byte_len = payload;
	cb->signaled = gsi->signal_all || (wr->send_flags & IB_SEND_SIGNALED);
	*err = 0;
	return skb;
}

int fldnic_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
		     const struct ib_send_wr **bad_wr)
{
	struct fldnic_gsi *gsi = to_fldnic_qp(ibqp)->gsi;
	struct sk_buff *skb;
	int err = 0;

	/* RC QPs post from user space, through the provider. */
	if (!gsi) {
		*bad_wr = wr;
		return -EOPNOTSUPP;
	}
	for (; wr; wr = wr->next) {
		skb = fldnic_gsi_build(gsi, wr, &err);
		if (!skb) {
			*bad_wr = wr;
			break;
		}
		skb_queue_tail(&gsi->txq, skb);
	}
	/* The MAD layer posts with interrupts off; the netdev is fed from process context. */
	schedule_work(&gsi->tx_work);
	return err;
}

void fldnic_gsi_tx_work(struct work_struct *work)
{
	struct fldnic_gsi *gsi = container_of(work, struct fldnic_gsi, tx_work);
	struct sk_buff *skb;

	while ((skb = skb_dequeue(&gsi->txq))) {
		struct fldnic_gsi_cb cb = *(struct fldnic_gsi_cb *)skb->cb;
		struct ib_wc wc = {
			.wr_id = cb.wr_id,
			.opcode = IB_WC_SEND,
			.byte_len = cb.byte_len,
			.qp = &gsi->qp->ibqp,
		};
		int rc;

		local_bh_disable();
		rc = dev_queue_xmit(skb);
		local_bh_enable();
		wc.status = rc < 0 ? IB_WC_LOC_QP_OP_ERR : IB_WC_SUCCESS;
		if (rc >= 0)
			gsi->sent++;
		if (cb.signaled || wc.status != IB_WC_SUCCESS)
			fldnic_kcq_push(gsi->send_cq, &wc);
	}
}

int fldnic_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
		     const struct ib_recv_wr **bad_wr)
{
	struct fldnic_gsi *gsi = to_fldnic_qp(ibqp)->gsi;
	unsigned long flags;
	int err = 0;

	if (!gsi) {
		*bad_wr = wr;
		return -EOPNOTSUPP;
	}
	spin_lock_irqsave(&gsi->lock, flags);
	for (; wr; wr = wr->next) {
		struct fldnic_gsi_recv *r;

		if (wr->num_sge != 1 || gsi->rq_head - gsi->rq_tail >= gsi->rq_size) {
			err = wr->num_sge != 1 ? -EINVAL : -ENOMEM;
			*bad_wr = wr;
			break;
		}
		r = &gsi->rq[gsi->rq_head & (gsi->rq_size - 1)];
		r->wr_id = wr->wr_id;
		r->addr = wr->sg_list[0].addr;
		r->length = wr->sg_list[0].length;
		gsi->rq_head++;
	}
	spin_unlock_irqrestore(&gsi->lock, flags);
	return err;
}

/*
 * A frame from the function's receive queue (NAPI): whether it was a RoCEv2 datagram for QP1,
 * taken here (delivered, or dropped and counted), rather than one for the network stack.
 */
bool fldnic_gsi_rx(struct fldnic *nic, const u8 *frame, unsigned int len)
{
	const struct ethhdr *eth = (const void *)frame;
	const u8 *ip = frame + ETH_HLEN, *bth, *deth, *payload, *end;
	unsigned int ip_len, pad, paylen;
	struct fldnic_gsi_recv *r;
	struct fldnic_gsi *gsi;
	bool ipv4, imm;
	struct ib_wc wc = {};
	u8 opcode;

	if (len < ETH_HLEN)
		return false;
	if (eth->h_proto == htons(ETH_P_IP)) {
		const struct iphdr *h = (const void *)ip;

		if (len < ETH_HLEN + sizeof(*h) || h->ihl != 5 || h->protocol != IPPROTO_UDP ||
		    (h->frag_off & htons(IP_MF | IP_OFFSET)))
			return false;
		ipv4 = true;
		ip_len = sizeof(*h);
		end = ip + ntohs(h->tot_len);
	} else if (eth->h_proto == htons(ETH_P_IPV6)) {
		const struct ipv6hdr *h = (const void *)ip;

		if (len < ETH_HLEN + sizeof(*h) || h->nexthdr != IPPROTO_UDP)
			return false;
		ipv4 = false;
		ip_len = sizeof(*h);
		end = ip + sizeof(*h) + ntohs(h->payload_len);
	} else {
		return false;
	}
	bth = ip + ip_len + sizeof(struct udphdr);
	if (end > frame + len || bth + ROCE_BTH_LEN > end ||
	    get_unaligned_be16(ip + ip_len + 2) != ROCE_V2_UDP_PORT ||
	    (get_unaligned_be32(bth + 4) & ROCE_QPN_MASK) != 1)
		return false;

	/* QP1's from here on: taken, whatever becomes of it. */
	spin_lock(&nic->gsi_lock);
	gsi = nic->gsi;
	if (!gsi)
		goto drop;
	opcode = bth[0];
	imm = opcode == ROCE_UD_SEND_ONLY_IMM;
	pad = (bth[1] >> 4) & 3;
	deth = bth + ROCE_BTH_LEN;
	payload = deth + ROCE_DETH_LEN + (imm ? ROCE_IMM_LEN : 0);
	if ((opcode != ROCE_UD_SEND_ONLY && !imm) || payload + pad + ROCE_ICRC_LEN > end)
		goto drop;
	if (get_unaligned_le32(end - ROCE_ICRC_LEN) != fldnic_icrc(ip, end - ROCE_ICRC_LEN, !ipv4))
		goto drop;
	/* GSI datagrams carry the well-known Q_Key (IBA 13.5.1.1). */
	if (get_unaligned_be32(deth) != IB_QP1_QKEY)
		goto drop;
	paylen = end - ROCE_ICRC_LEN - pad - payload;

	spin_lock(&gsi->lock);
	if (gsi->state < IB_QPS_RTR || gsi->state == IB_QPS_ERR ||
	    gsi->rq_tail == gsi->rq_head) {
		spin_unlock(&gsi->lock);
		goto drop;
	}
	r = &gsi->rq[gsi->rq_tail & (gsi->rq_size - 1)];
	gsi->rq_tail++;
	spin_unlock(&gsi->lock);

	wc.wr_id = r->wr_id;
	wc.qp = &gsi->qp->ibqp;
	wc.opcode = IB_WC_RECV;
	if (ROCE_GRH_LEN + paylen > r->length) {
		wc.status = IB_WC_LOC_LEN_ERR;
	} else {
		u8 *buf = (u8 *)(uintptr_t)r->addr;

		/* The GRH area: an IPv4 header in its last 20 bytes, or the IPv6 header. */
		memset(buf, 0, ROCE_GRH_LEN - ip_len);
		memcpy(buf + ROCE_GRH_LEN - ip_len, ip, ip_len);
		memcpy(buf + ROCE_GRH_LEN, payload, paylen);
		wc.status = IB_WC_SUCCESS;
		wc.byte_len = ROCE_GRH_LEN + paylen;
		wc.src_qp = get_unaligned_be32(deth + 4) & ROCE_QPN_MASK;
		wc.wc_flags = IB_WC_GRH | IB_WC_WITH_SMAC | IB_WC_WITH_NETWORK_HDR_TYPE;
		if (imm) {
			wc.wc_flags |= IB_WC_WITH_IMM;
			memcpy(&wc.ex.imm_data, deth + ROCE_DETH_LEN, ROCE_IMM_LEN);
		}
		wc.network_hdr_type = ipv4 ? RDMA_NETWORK_IPV4 : RDMA_NETWORK_IPV6;
		ether_addr_copy(wc.smac, eth->h_source);
		wc.port_num = 1;
		wc.pkey_index = 0;
		gsi->received++;
	}
	fldnic_kcq_push(gsi->recv_cq, &wc);
	spin_unlock(&nic->gsi_lock);
	return true;

drop:
	if (gsi)
		gsi->dropped++;
	spin_unlock(&nic->gsi_lock);
	return true;
}
