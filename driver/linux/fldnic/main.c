// SPDX-License-Identifier: GPL-2.0
/*
 * fldnic: Linux driver for the NIC functions of the fldemu card (docs/linux-driver.md).
 *
 * It binds a NIC function, checks its command interface, resets it to a clean state, reads its
 * capabilities and registers an Ethernet netdev with the MAC address the card gives the
 * function. Commands go through the BAR0 mailbox (docs/nic-interface.md §2): the input and
 * output buffers are DMA memory, a token written to the doorbell register starts the command
 * and the status register says when it is done.
 *
 * The data path, made at open: one event queue on MSI-X vector 0, a send queue and a receive
 * queue with a completion queue each (rings in DMA memory, doorbells in BAR2), and a receive
 * table whose one entry sends every frame of the vPort to the receive queue. NAPI polls both
 * CQs; the CQs and the EQ are armed again when it is done (docs/nic-interface.md §4, §8).
 *
 * A function-level reset while bound detaches the netdev and brings the function back.
 *
 * The card inserts TCP/UDP checksums on send (IP_CSUM, IPV6_CSUM) and its receive checksum
 * verdict is passed on (RXCSUM); frames are copied in and out of buffers mapped once per
 * queue, so any skb shape can be sent (SG).
 *
 * A send error (the SQ enters ERROR) is recovered by MODIFY_SQ from a work item; debugfs's
 * inject_send_error makes the next send WQE one the card refuses, to exercise it.
 *
 * Not yet: several queues with RSS, segmentation offload.
 */

#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/etherdevice.h>
#include <linux/if_vlan.h>
#include <linux/interrupt.h>
#include <linux/ethtool.h>
#include <linux/io.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/netdevice.h>
#include <linux/pci.h>
#include <linux/rtnetlink.h>
#include <linux/unaligned.h>

#include "fldnic.h"

#define DRV_NAME "fldnic"

/* A command not done in this long is given up: the device is not answering. */
#define FLDNIC_CMD_TIMEOUT_MS 5000
/* The reset's return to READY. */
#define FLDNIC_RESET_TIMEOUT_MS 5000
/* Ethernet frames above 9000 bytes of MTU are not offered, whatever the card takes. */
#define FLDNIC_MAX_MTU 9000
/* Ring sizes (log2): 64 events, 256 sends, 256 receives and as many completions each. */
#define FLDNIC_LOG_EQ 6
#define FLDNIC_LOG_TXQ 8
#define FLDNIC_LOG_RXQ 8
/*
 * Frame buffers: one per ring slot, each holding the largest frame the MTU allows (and a VLAN
 * tag), in DMA memory mapped once when the queue is made. Frames are copied in and out: under
 * a virtual IOMMU every streaming mapping costs the host a round trip, and the device may be
 * told of a WQE before it learns of the mapping its buffer needs (seen as DMA_ERROR sends).
 */
#define FLDNIC_LOG_BUF 14	/* 16 KiB: the largest frame at MTU 9000 */
/* BAR2 bytes the Ethernet doorbells span (SQ, RQ, CQ and EQ pages). */
#define FLDNIC_DB_PAGES (FLDNIC_DB_EQ_BASE + 0x1000)

static u32 fldnic_rd(struct fldnic *nic, u32 reg)
{
	return ioread32(nic->bar0 + reg);
}

static void fldnic_wr(struct fldnic *nic, u32 reg, u32 val)
{
	iowrite32(val, nic->bar0 + reg);
}

/* The errno a command status stands for. */
static int fldnic_status_errno(u8 status)
{
	switch (status) {
	case FLDNIC_CMD_OK:
		return 0;
	case FLDNIC_CMD_BAD_OPCODE:
		return -EOPNOTSUPP;
	case FLDNIC_CMD_BAD_PARAM:
	case FLDNIC_CMD_BAD_INPUT_LENGTH:
	case FLDNIC_CMD_BAD_OUTPUT_LENGTH:
		return -EINVAL;
	case FLDNIC_CMD_BAD_STATE:
	case FLDNIC_CMD_RESOURCE_BUSY:
		return -EBUSY;
	case FLDNIC_CMD_BAD_RESOURCE:
		return -ENOENT;
	case FLDNIC_CMD_EXCEED_LIMIT:
		return -ENOSPC;
	case FLDNIC_CMD_NOT_PERMITTED:
		return -EPERM;
	default:
		return -EIO;
	}
}

/*
 * Executes command @opcode with @in_len bytes of input after the header, and copies
 * @out_len bytes of output after the header to @out. A status other than OK becomes an errno
 * and is logged with its syndrome.
 */
int fldnic_exec(struct fldnic *nic, u16 opcode, const void *in, size_t in_len, void *out,
		size_t out_len)
{
	struct fldnic_cmd *cmd = &nic->cmd;
	struct fldnic_cmd_in_header *ih = cmd->in;
	struct fldnic_cmd_out_header *oh = cmd->out;
	unsigned long deadline;
	u32 st = 0;
	int err;

	if (in_len > FLDNIC_CMD_MAX_LEN - FLDNIC_CMD_HEADER_LEN ||
	    out_len > FLDNIC_CMD_MAX_LEN - FLDNIC_CMD_HEADER_LEN)
		return -EINVAL;

	mutex_lock(&cmd->lock);
	memset(cmd->in, 0, FLDNIC_CMD_HEADER_LEN);
	ih->opcode = cpu_to_le16(opcode);
	if (in_len)
		memcpy(cmd->in + FLDNIC_CMD_HEADER_LEN, in, in_len);
	memset(cmd->out, 0, FLDNIC_CMD_HEADER_LEN + out_len);
	/* The buffers are written before the doorbell reaches the device. */
	wmb();

	fldnic_wr(nic, FLDNIC_REG_CMD_IN_ADDR_LO, lower_32_bits(cmd->in_dma));
	fldnic_wr(nic, FLDNIC_REG_CMD_IN_ADDR_HI, upper_32_bits(cmd->in_dma));
	fldnic_wr(nic, FLDNIC_REG_CMD_OUT_ADDR_LO, lower_32_bits(cmd->out_dma));
	fldnic_wr(nic, FLDNIC_REG_CMD_OUT_ADDR_HI, upper_32_bits(cmd->out_dma));
	fldnic_wr(nic, FLDNIC_REG_CMD_IN_LEN, FLDNIC_CMD_HEADER_LEN + in_len);
	fldnic_wr(nic, FLDNIC_REG_CMD_OUT_LEN, FLDNIC_CMD_HEADER_LEN + out_len);
	cmd->token++;
	fldnic_wr(nic, FLDNIC_REG_CMD_DOORBELL, cmd->token);

	deadline = jiffies + msecs_to_jiffies(FLDNIC_CMD_TIMEOUT_MS);
	for (;;) {
		st = fldnic_rd(nic, FLDNIC_REG_CMD_STATUS);
		if ((st & FLDNIC_CMD_STATUS_DONE) && (st >> 16) == cmd->token)
			break;
		if (st == ~0U || time_after(jiffies, deadline)) {
			dev_err(&nic->pdev->dev, "command %#x: no answer (status %#x)\n",
				opcode, st);
			err = -ETIMEDOUT;
			goto out;
		}
		usleep_range(10, 100);
	}
	if ((st >> 8) & 0xff) {
		dev_err(&nic->pdev->dev, "command %#x: not delivered (%u)\n", opcode,
			(st >> 8) & 0xff);
		err = -EIO;
		goto out;
	}
	/* The device's output is read after its status said done. */
	rmb();
	err = fldnic_status_errno(oh->status);
	if (err) {
		/* Programs can ask for what the card refuses: said, not flooded. */
		dev_warn_ratelimited(&nic->pdev->dev, "command %#x: status %#x, syndrome %#x\n",
				     opcode, oh->status, le32_to_cpu(oh->syndrome));
		goto out;
	}
	if (out_len)
		memcpy(out, cmd->out + FLDNIC_CMD_HEADER_LEN, out_len);
out:
	mutex_unlock(&cmd->lock);
	return err;
}

/* A function-level reset: every object the function made is gone, its doorbells cleared. */
static int fldnic_reset(struct fldnic *nic)
{
	unsigned long deadline = jiffies + msecs_to_jiffies(FLDNIC_RESET_TIMEOUT_MS);
	u32 st;

	fldnic_wr(nic, FLDNIC_REG_DEVICE_RESET, FLDNIC_RESET_MAGIC);
	for (;;) {
		st = fldnic_rd(nic, FLDNIC_REG_DEVICE_STATUS);
		if (st != ~0U && (st & FLDNIC_STATUS_READY) && !(st & FLDNIC_STATUS_FATAL))
			return 0;
		if (time_after(jiffies, deadline)) {
			dev_err(&nic->pdev->dev, "not ready after reset (status %#x)\n", st);
			return -ETIMEDOUT;
		}
		usleep_range(100, 1000);
	}
}

int fldnic_ring_alloc(struct fldnic *nic, struct fldnic_ring *r, size_t entry, u8 log_size)
{
	r->log_size = log_size;
	r->bytes = entry << log_size;
	r->buf = dma_alloc_coherent(&nic->pdev->dev, r->bytes, &r->dma, GFP_KERNEL);
	return r->buf ? 0 : -ENOMEM;
}

void fldnic_ring_free(struct fldnic *nic, struct fldnic_ring *r)
{
	if (r->buf)
		dma_free_coherent(&nic->pdev->dev, r->bytes, r->buf, r->dma);
	r->buf = NULL;
}

/* Marks every entry of an event or completion ring as never written. */
void fldnic_ring_init_owner(struct fldnic_ring *r, size_t entry)
{
	u32 i;

	for (i = 0; i < (1U << r->log_size); i++)
		((u8 *)r->buf)[i * entry + entry - 1] = FLDNIC_INVALID_OWNER_BYTE;
}

/* The consumer doorbell word: the counter, and the bits of the last arm (§4). */
void fldnic_cq_update(struct fldnic *nic, struct fldnic_cq *q, bool arm)
{
	u32 v;

	if (arm)
		q->arm_sn++;
	v = (q->ci & FLDNIC_DB_CI_MASK) |
	    ((q->arm_sn & FLDNIC_DB_ARM_SN_MASK) << FLDNIC_DB_ARM_SN_SHIFT);
	if (q->arm_sn)
		v |= FLDNIC_DB_ARM;
	iowrite32(v, nic->db + q->db);
}

/* The entry at the consumer counter, if the device wrote it on this pass over the ring. */
void *fldnic_cq_peek(struct fldnic_cq *q, size_t entry)
{
	u8 *e = q->ring.buf + (q->ci & ((1U << q->ring.log_size) - 1)) * entry;
	u8 own = READ_ONCE(e[entry - 1]);

	if ((own & 1) != ((q->ci >> q->ring.log_size) & 1) || (own >> 4) == FLDNIC_CQE_INVALID)
		return NULL;
	/* The entry is read after its owner byte said it is new. */
	dma_rmb();
	return e;
}

int fldnic_create(struct fldnic *nic, u16 opcode, const void *in, size_t len, u32 *id)
{
	struct fldnic_create_out out;
	int err = fldnic_exec(nic, opcode, in, len, &out, sizeof(out));

	if (!err)
		*id = le32_to_cpu(out.id);
	return err;
}

void fldnic_destroy(struct fldnic *nic, u16 opcode, u32 id)
{
	struct fldnic_object_in in = { .id = cpu_to_le32(id) };

	fldnic_exec(nic, opcode, &in, sizeof(in), NULL, 0);
}

static int fldnic_create_cq(struct fldnic *nic, struct fldnic_cq *cq, u8 log_size)
{
	struct fldnic_create_cq_in in = {};
	int err;

	err = fldnic_ring_alloc(nic, &cq->ring, FLDNIC_CQE_SIZE, log_size);
	if (err)
		return err;
	fldnic_ring_init_owner(&cq->ring, FLDNIC_CQE_SIZE);
	in.addr = cpu_to_le64(cq->ring.dma);
	in.eqn = cpu_to_le32(nic->eq.num);
	in.log_size = log_size;
	err = fldnic_create(nic, FLDNIC_OP_CREATE_CQ, &in, sizeof(in), &cq->num);
	if (err)
		return err;
	cq->ci = 0;
	cq->arm_sn = 0;
	cq->db = FLDNIC_DB_CQ_BASE + 4 * cq->num;
	return 0;
}

/* Gives the device the next slot of the receive ring, its buffer the slot's own. */
static void fldnic_rx_post(struct fldnic *nic)
{
	struct fldnic_rxq *rx = &nic->rx;
	u32 slot = rx->pi & ((1U << rx->ring.log_size) - 1);
	struct fldnic_data_seg *wqe = rx->ring.buf + slot * FLDNIC_RECV_WQE_SIZE;

	wqe->byte_count = cpu_to_le32(1U << FLDNIC_LOG_BUF);
	wqe->lkey = cpu_to_le32(FLDNIC_RESERVED_LKEY);
	wqe->addr = cpu_to_le64(rx->bufs.dma + ((dma_addr_t)slot << FLDNIC_LOG_BUF));
	rx->pi++;
}

static void fldnic_rx_doorbell(struct fldnic *nic)
{
	/* The WQEs are in memory before the device reads the new producer counter. */
	dma_wmb();
	iowrite32(nic->rx.pi & FLDNIC_DB_PI_MASK, nic->db + FLDNIC_DB_RQ_BASE + 4 * nic->rx.rqn);
}

/* Send completions: each frees the WQEs up to the one it names. */
static void fldnic_tx_complete(struct fldnic *nic)
{
	struct fldnic_txq *tx = &nic->tx;
	struct fldnic_cqe *cqe;
	u32 mask = (1U << tx->ring.log_size) - 1;
	unsigned int packets = 0, bytes = 0;

	while ((cqe = fldnic_cq_peek(&tx->cq, FLDNIC_CQE_SIZE))) {
		u16 last = le16_to_cpu(cqe->wqe_counter);
		u8 op = cqe->op_own >> 4;

		tx->cq.ci++;
		if (op == FLDNIC_CQE_REQ_ERR) {
			nic->netdev->stats.tx_errors++;
			net_warn_ratelimited("%s: send error, syndrome %#x, WQE %u\n",
					     nic->netdev->name, cqe->syndrome, last);
			/* The SQ is in ERROR and takes nothing more until it is recovered. */
			netif_stop_queue(nic->netdev);
			schedule_work(&nic->tx_recover);
		}
		while ((u16)tx->done != (u16)(last + 1) && tx->done != tx->pi) {
			packets++;
			bytes += tx->len[tx->done & mask];
			tx->done++;
		}
	}
	nic->netdev->stats.tx_packets += packets;
	nic->netdev->stats.tx_bytes += bytes;
	if (netif_queue_stopped(nic->netdev) && tx->pi - tx->done < (1U << tx->ring.log_size) &&
	    !work_pending(&nic->tx_recover))
		netif_wake_queue(nic->netdev);
}

/*
 * Brings a send queue in ERROR back (docs/nic-interface.md §3.14): MODIFY_SQ to READY sets
 * the card's consumer counter and doorbell to 0 and discards the WQEs that were outstanding,
 * without completions; the driver counts them dropped and posts again from slot 0.
 */
static void fldnic_tx_recover(struct work_struct *work)
{
	struct fldnic *nic = container_of(work, struct fldnic, tx_recover);
	struct net_device *ndev = nic->netdev;
	struct fldnic_modify_queue_in in = {};
	int err;

	rtnl_lock();
	if (!netif_running(ndev) || !nic->up)
		goto out;
	netif_tx_disable(ndev);
	napi_disable(&nic->napi);
	in.id = cpu_to_le32(nic->tx.sqn);
	in.new_state = FLDNIC_QUEUE_READY;
	err = fldnic_exec(nic, FLDNIC_OP_MODIFY_SQ, &in, sizeof(in), NULL, 0);
	ndev->stats.tx_dropped += nic->tx.pi - nic->tx.done;
	nic->tx.pi = 0;
	nic->tx.done = 0;
	napi_enable(&nic->napi);
	if (err) {
		netdev_err(ndev, "send queue not recovered: %d\n", err);
		goto out;
	}
	netif_wake_queue(ndev);
	netdev_info(ndev, "send queue recovered\n");
out:
	rtnl_unlock();
}

/* Receive completions, up to @budget frames handed to the stack. */
static int fldnic_rx_complete(struct fldnic *nic, int budget)
{
	struct fldnic_rxq *rx = &nic->rx;
	u32 mask = (1U << rx->ring.log_size) - 1;
	struct fldnic_cqe *cqe;
	int n = 0;

	while (n < budget && (cqe = fldnic_cq_peek(&rx->cq, FLDNIC_CQE_SIZE))) {
		u32 slot = rx->done & mask;
		u32 len = le32_to_cpu(cqe->byte_count);
		u8 op = cqe->op_own >> 4;
		struct sk_buff *skb;

		rx->cq.ci++;
		rx->done++;
		if (op != FLDNIC_CQE_RESP_SEND || len > (1U << FLDNIC_LOG_BUF) || len < ETH_HLEN) {
			nic->netdev->stats.rx_errors++;
			continue;
		}
		/* RoCE datagrams for QP1 are the RoCE device's (gsi.c). */
		if (fldnic_gsi_rx(nic, rx->bufs.buf + ((size_t)slot << FLDNIC_LOG_BUF), len))
			continue;
		skb = napi_alloc_skb(&nic->napi, len);
		if (!skb) {
			nic->netdev->stats.rx_dropped++;
			continue;
		}
		skb_put_data(skb, rx->bufs.buf + ((size_t)slot << FLDNIC_LOG_BUF), len);
		skb->protocol = eth_type_trans(skb, nic->netdev);
		/* The card checked the TCP/UDP checksum (and the IPv4 header's on the way). */
		if ((nic->netdev->features & NETIF_F_RXCSUM) &&
		    (cqe->csum & (FLDNIC_CQE_CSUM_L4_PRESENT | FLDNIC_CQE_CSUM_L4_OK)) ==
		    (FLDNIC_CQE_CSUM_L4_PRESENT | FLDNIC_CQE_CSUM_L4_OK))
			skb->ip_summed = CHECKSUM_UNNECESSARY;
		nic->netdev->stats.rx_packets++;
		nic->netdev->stats.rx_bytes += len;
		napi_gro_receive(&nic->napi, skb);
		n++;
	}
	while (rx->pi - rx->done < (1U << rx->ring.log_size))
		fldnic_rx_post(nic);
	fldnic_rx_doorbell(nic);
	return n;
}

static int fldnic_poll(struct napi_struct *napi, int budget)
{
	struct fldnic *nic = container_of(napi, struct fldnic, napi);
	int done;

	/* The events only said which CQs to look at; both are looked at. */
	while (fldnic_cq_peek(&nic->eq, FLDNIC_EQE_SIZE))
		nic->eq.ci++;
	fldnic_tx_complete(nic);
	done = fldnic_rx_complete(nic, budget);
	fldnic_cq_update(nic, &nic->tx.cq, false);
	if (done < budget && napi_complete_done(napi, done)) {
		fldnic_cq_update(nic, &nic->tx.cq, true);
		fldnic_cq_update(nic, &nic->rx.cq, true);
		fldnic_cq_update(nic, &nic->eq, true);
	} else {
		fldnic_cq_update(nic, &nic->rx.cq, false);
	}
	return done;
}

static irqreturn_t fldnic_irq(int irq, void *data)
{
	struct fldnic *nic = data;

	napi_schedule_irqoff(&nic->napi);
	return IRQ_HANDLED;
}

/* Marks every object of the data path as not made. */
static void fldnic_forget_objects(struct fldnic *nic)
{
	nic->flow_entry = FLDNIC_NONE;
	nic->flow_table = FLDNIC_NONE;
	nic->tx.sqn = FLDNIC_NONE;
	nic->rx.rqn = FLDNIC_NONE;
	nic->tx.cq.num = FLDNIC_NONE;
	nic->rx.cq.num = FLDNIC_NONE;
	nic->eq.num = FLDNIC_NONE;
}

/* Tears down what fldnic_up made, in reverse order; safe on a partial setup. */
static void fldnic_down(struct fldnic *nic)
{
	struct fldnic_set_root_in root = {
		.kind = FLDNIC_TABLE_KIND_NIC_RX,
		.table = cpu_to_le32(FLDNIC_NO_TABLE),
	};
	/* Object numbers start at 0: FLDNIC_NONE says "not made". */
	if (nic->flow_table != FLDNIC_NONE) {
		fldnic_exec(nic, FLDNIC_OP_SET_FLOW_TABLE_ROOT, &root, sizeof(root), NULL, 0);
		if (nic->flow_entry != FLDNIC_NONE)
			fldnic_destroy(nic, FLDNIC_OP_DESTROY_FLOW_ENTRY, nic->flow_entry);
		fldnic_destroy(nic, FLDNIC_OP_DESTROY_FLOW_TABLE, nic->flow_table);
	}
	if (nic->tx.sqn != FLDNIC_NONE)
		fldnic_destroy(nic, FLDNIC_OP_DESTROY_SQ, nic->tx.sqn);
	if (nic->rx.rqn != FLDNIC_NONE)
		fldnic_destroy(nic, FLDNIC_OP_DESTROY_RQ, nic->rx.rqn);
	if (nic->tx.cq.num != FLDNIC_NONE)
		fldnic_destroy(nic, FLDNIC_OP_DESTROY_CQ, nic->tx.cq.num);
	if (nic->rx.cq.num != FLDNIC_NONE)
		fldnic_destroy(nic, FLDNIC_OP_DESTROY_CQ, nic->rx.cq.num);
	if (nic->eq.num != FLDNIC_NONE)
		fldnic_destroy(nic, FLDNIC_OP_DESTROY_EQ, nic->eq.num);
	fldnic_forget_objects(nic);

	kfree(nic->tx.len);
	nic->tx.len = NULL;
	fldnic_ring_free(nic, &nic->tx.bufs);
	fldnic_ring_free(nic, &nic->rx.bufs);
	fldnic_ring_free(nic, &nic->tx.ring);
	fldnic_ring_free(nic, &nic->rx.ring);
	fldnic_ring_free(nic, &nic->tx.cq.ring);
	fldnic_ring_free(nic, &nic->rx.cq.ring);
	fldnic_ring_free(nic, &nic->eq.ring);
}

/*
 * Makes the event queue, the send and receive queues with their completion queues, fills the
 * receive ring and steers every frame of the vPort to it.
 */
static int fldnic_up(struct fldnic *nic)
{
	struct fldnic_create_eq_in eq = {};
	struct fldnic_create_sq_in sq = {};
	struct fldnic_create_rq_in rq = {};
	struct fldnic_create_flow_table_in table = {};
	struct fldnic_create_flow_entry_in *entry;
	struct fldnic_set_root_in root = {};
	u32 ntx = 1U << FLDNIC_LOG_TXQ, nrx = 1U << FLDNIC_LOG_RXQ;
	int err;

	fldnic_forget_objects(nic);

	err = fldnic_ring_alloc(nic, &nic->eq.ring, FLDNIC_EQE_SIZE, FLDNIC_LOG_EQ);
	if (err)
		return err;
	fldnic_ring_init_owner(&nic->eq.ring, FLDNIC_EQE_SIZE);
	eq.addr = cpu_to_le64(nic->eq.ring.dma);
	eq.log_size = FLDNIC_LOG_EQ;
	eq.msix_vector = cpu_to_le16(0);
	err = fldnic_create(nic, FLDNIC_OP_CREATE_EQ, &eq, sizeof(eq), &nic->eq.num);
	if (err)
		return err;
	nic->eq.ci = 0;
	nic->eq.arm_sn = 0;
	nic->eq.db = FLDNIC_DB_EQ_BASE + 4 * nic->eq.num;

	err = fldnic_create_cq(nic, &nic->tx.cq, FLDNIC_LOG_TXQ);
	if (err)
		return err;
	err = fldnic_create_cq(nic, &nic->rx.cq, FLDNIC_LOG_RXQ);
	if (err)
		return err;

	nic->tx.len = kcalloc(ntx, sizeof(*nic->tx.len), GFP_KERNEL);
	if (!nic->tx.len)
		return -ENOMEM;
	err = fldnic_ring_alloc(nic, &nic->tx.bufs, 1U << FLDNIC_LOG_BUF, FLDNIC_LOG_TXQ);
	if (err)
		return err;
	err = fldnic_ring_alloc(nic, &nic->rx.bufs, 1U << FLDNIC_LOG_BUF, FLDNIC_LOG_RXQ);
	if (err)
		return err;

	err = fldnic_ring_alloc(nic, &nic->tx.ring, FLDNIC_WQEBB, FLDNIC_LOG_TXQ);
	if (err)
		return err;
	sq.addr = cpu_to_le64(nic->tx.ring.dma);
	sq.cqn = cpu_to_le32(nic->tx.cq.num);
	sq.log_size = FLDNIC_LOG_TXQ;
	err = fldnic_create(nic, FLDNIC_OP_CREATE_SQ, &sq, sizeof(sq), &nic->tx.sqn);
	if (err)
		return err;
	nic->tx.pi = nic->tx.done = 0;

	err = fldnic_ring_alloc(nic, &nic->rx.ring, FLDNIC_RECV_WQE_SIZE, FLDNIC_LOG_RXQ);
	if (err)
		return err;
	rq.addr = cpu_to_le64(nic->rx.ring.dma);
	rq.cqn = cpu_to_le32(nic->rx.cq.num);
	rq.log_size = FLDNIC_LOG_RXQ;
	rq.rq_type = FLDNIC_RQ_TYPE_REGULAR;
	err = fldnic_create(nic, FLDNIC_OP_CREATE_RQ, &rq, sizeof(rq), &nic->rx.rqn);
	if (err)
		return err;
	nic->rx.pi = nic->rx.done = 0;
	while (nic->rx.pi < nrx)
		fldnic_rx_post(nic);
	fldnic_rx_doorbell(nic);

	table.kind = FLDNIC_TABLE_KIND_NIC_RX;
	table.miss = FLDNIC_MISS_DROP;
	err = fldnic_create(nic, FLDNIC_OP_CREATE_FLOW_TABLE, &table, sizeof(table),
			    &nic->flow_table);
	if (err)
		return err;
	entry = kzalloc(sizeof(*entry), GFP_KERNEL);
	if (!entry)
		return -ENOMEM;
	/* An all-zero mask matches every frame. */
	entry->table = cpu_to_le32(nic->flow_table);
	entry->actions = cpu_to_le32(FLDNIC_ACTION_FWD_RQ);
	entry->dest = cpu_to_le32(nic->rx.rqn);
	err = fldnic_create(nic, FLDNIC_OP_CREATE_FLOW_ENTRY, entry, sizeof(*entry),
			    &nic->flow_entry);
	kfree(entry);
	if (err)
		return err;
	root.kind = FLDNIC_TABLE_KIND_NIC_RX;
	root.table = cpu_to_le32(nic->flow_table);
	return fldnic_exec(nic, FLDNIC_OP_SET_FLOW_TABLE_ROOT, &root, sizeof(root), NULL, 0);
}

/* Whether the card says the vPort's link is up. */
static bool fldnic_link_up(struct fldnic *nic)
{
	struct fldnic_query_vport_in in = { .vport = nic->caps.vport };
	struct fldnic_query_vport_out out;

	return !fldnic_exec(nic, FLDNIC_OP_QUERY_VPORT, &in, sizeof(in), &out, sizeof(out)) &&
	       out.up;
}

static int fldnic_open(struct net_device *ndev)
{
	struct fldnic *nic = netdev_priv(ndev);
	int err;

	err = fldnic_up(nic);
	if (err) {
		netdev_err(ndev, "rings not made: %d\n", err);
		fldnic_down(nic);
		return err;
	}
	napi_enable(&nic->napi);
	nic->up = true;
	fldnic_cq_update(nic, &nic->tx.cq, true);
	fldnic_cq_update(nic, &nic->rx.cq, true);
	fldnic_cq_update(nic, &nic->eq, true);
	if (fldnic_link_up(nic))
		netif_carrier_on(ndev);
	else
		netif_carrier_off(ndev);
	netif_start_queue(ndev);
	return 0;
}

static int fldnic_stop(struct net_device *ndev)
{
	struct fldnic *nic = netdev_priv(ndev);

	netif_stop_queue(ndev);
	netif_carrier_off(ndev);
	if (nic->up) {
		napi_disable(&nic->napi);
		nic->up = false;
	}
	fldnic_down(nic);
	return 0;
}

static netdev_tx_t fldnic_start_xmit(struct sk_buff *skb, struct net_device *ndev)
{
	struct fldnic *nic = netdev_priv(ndev);
	struct fldnic_txq *tx = &nic->tx;
	u32 slot = tx->pi & ((1U << tx->ring.log_size) - 1);
	struct fldnic_ctrl_seg *ctrl = tx->ring.buf + slot * FLDNIC_WQEBB;
	struct fldnic_eth_seg *eth = (void *)ctrl + FLDNIC_DS_SIZE;
	struct fldnic_data_seg *data = (void *)ctrl + 2 * FLDNIC_DS_SIZE;
	void *buf = tx->bufs.buf + ((size_t)slot << FLDNIC_LOG_BUF);

	if (skb->len < ETH_HLEN || skb->len > (1U << FLDNIC_LOG_BUF) ||
	    skb_copy_bits(skb, 0, buf, skb->len)) {
		ndev->stats.tx_dropped++;
		dev_kfree_skb_any(skb);
		return NETDEV_TX_OK;
	}
	tx->len[slot] = skb->len;
	memset(ctrl, 0, FLDNIC_WQEBB);
	ctrl->opcode = FLDNIC_WQE_OP_SEND;
	ctrl->wqe_index = cpu_to_le16(tx->pi);
	ctrl->ds_count = 3;
	ctrl->fm_ce_se = FLDNIC_CE_ALWAYS;
	ctrl->sqn = cpu_to_le32(tx->sqn);
	eth->inline_hdr_size = 0;
	/* The stack left the TCP/UDP checksum to the card, which computes it whatever the
	 * field holds (docs/nic-interface.md §6).
	 */
	if (skb->ip_summed == CHECKSUM_PARTIAL)
		eth->cs_flags = FLDNIC_CS_L4;
	data->byte_count = cpu_to_le32(tx->len[slot]);
	data->lkey = cpu_to_le32(FLDNIC_RESERVED_LKEY);
	if (unlikely(atomic_xchg(&nic->inject_send_error, 0)))
		data->lkey = cpu_to_le32(U32_MAX);
	data->addr = cpu_to_le64(tx->bufs.dma + ((dma_addr_t)slot << FLDNIC_LOG_BUF));
	tx->pi++;
	skb_tx_timestamp(skb);
	dev_consume_skb_any(skb);
	/* The WQE is in memory before the device reads the new producer counter. */
	dma_wmb();
	iowrite32(tx->pi & FLDNIC_DB_PI_MASK, nic->db + FLDNIC_DB_SQ_BASE + 4 * tx->sqn);
	if (tx->pi - tx->done >= (1U << tx->ring.log_size)) {
		netif_stop_queue(ndev);
		/* A completion that freed room in between would not wake the queue. */
		smp_mb();
		if (tx->pi - READ_ONCE(tx->done) < (1U << tx->ring.log_size))
			netif_wake_queue(ndev);
	}
	return NETDEV_TX_OK;
}

static const struct net_device_ops fldnic_netdev_ops = {
	.ndo_open = fldnic_open,
	.ndo_stop = fldnic_stop,
	.ndo_start_xmit = fldnic_start_xmit,
	.ndo_validate_addr = eth_validate_addr,
};

static void fldnic_get_drvinfo(struct net_device *ndev, struct ethtool_drvinfo *info)
{
	struct fldnic *nic = netdev_priv(ndev);

	strscpy(info->driver, DRV_NAME, sizeof(info->driver));
	strscpy(info->bus_info, pci_name(nic->pdev), sizeof(info->bus_info));
	snprintf(info->fw_version, sizeof(info->fw_version), "%u.%u",
		 nic->fw_version >> 16, nic->fw_version & 0xffff);
}

/* The card's counters of the function's vPort (QUERY_VPORT), by their ethtool names. */
static const struct {
	const char *name;
	unsigned int offset;
} fldnic_vport_stats[FLDNIC_VPORT_STATS] = { FLDNIC_VPORT_STAT_TABLE };

static int fldnic_get_sset_count(struct net_device *ndev, int sset)
{
	return sset == ETH_SS_STATS ? FLDNIC_VPORT_STATS : -EOPNOTSUPP;
}

static void fldnic_get_strings(struct net_device *ndev, u32 sset, u8 *data)
{
	unsigned int i;

	if (sset != ETH_SS_STATS)
		return;
	for (i = 0; i < FLDNIC_VPORT_STATS; i++)
		ethtool_puts(&data, fldnic_vport_stats[i].name);
}

static void fldnic_get_ethtool_stats(struct net_device *ndev, struct ethtool_stats *stats,
				     u64 *data)
{
	struct fldnic *nic = netdev_priv(ndev);
	struct fldnic_query_vport_in in = { .vport = nic->caps.vport };
	struct fldnic_query_vport_out out;
	unsigned int i;

	if (fldnic_exec(nic, FLDNIC_OP_QUERY_VPORT, &in, sizeof(in), &out, sizeof(out))) {
		memset(data, 0, FLDNIC_VPORT_STATS * sizeof(*data));
		return;
	}
	for (i = 0; i < FLDNIC_VPORT_STATS; i++)
		data[i] = get_unaligned_le64((u8 *)&out + fldnic_vport_stats[i].offset);
}

static void fldnic_get_channels(struct net_device *ndev, struct ethtool_channels *ch)
{
	ch->max_combined = 1;
	ch->combined_count = 1;
}

static const struct ethtool_ops fldnic_ethtool_ops = {
	.get_drvinfo = fldnic_get_drvinfo,
	.get_link = ethtool_op_get_link,
	.get_sset_count = fldnic_get_sset_count,
	.get_strings = fldnic_get_strings,
	.get_ethtool_stats = fldnic_get_ethtool_stats,
	.get_channels = fldnic_get_channels,
};

/* debugfs: writing to inject_send_error makes the next send WQE one the card refuses. */
static ssize_t fldnic_inject_write(struct file *file, const char __user *buf, size_t len,
				   loff_t *pos)
{
	struct fldnic *nic = file->private_data;

	atomic_set(&nic->inject_send_error, 1);
	return len;
}

static const struct file_operations fldnic_inject_fops = {
	.owner = THIS_MODULE,
	.open = simple_open,
	.write = fldnic_inject_write,
};

static struct dentry *fldnic_debugfs_root;

static int fldnic_cmd_init(struct fldnic *nic)
{
	struct device *dev = &nic->pdev->dev;

	mutex_init(&nic->cmd.lock);
	nic->cmd.in = dma_alloc_coherent(dev, FLDNIC_CMD_MAX_LEN, &nic->cmd.in_dma, GFP_KERNEL);
	nic->cmd.out = dma_alloc_coherent(dev, FLDNIC_CMD_MAX_LEN, &nic->cmd.out_dma, GFP_KERNEL);
	if (!nic->cmd.in || !nic->cmd.out)
		return -ENOMEM;
	return 0;
}

static void fldnic_cmd_free(struct fldnic *nic)
{
	struct device *dev = &nic->pdev->dev;

	if (nic->cmd.in)
		dma_free_coherent(dev, FLDNIC_CMD_MAX_LEN, nic->cmd.in, nic->cmd.in_dma);
	if (nic->cmd.out)
		dma_free_coherent(dev, FLDNIC_CMD_MAX_LEN, nic->cmd.out, nic->cmd.out_dma);
	mutex_destroy(&nic->cmd.lock);
}

static int fldnic_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct net_device *ndev;
	struct fldnic *nic;
	u8 mac[ETH_ALEN];
	u32 rev, lo, hi;
	int err;

	err = pci_enable_device(pdev);
	if (err)
		return err;
	err = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	if (err)
		goto err_disable;
	err = pci_request_regions(pdev, DRV_NAME);
	if (err)
		goto err_disable;
	pci_set_master(pdev);

	ndev = alloc_etherdev(sizeof(*nic));
	if (!ndev) {
		err = -ENOMEM;
		goto err_regions;
	}
	SET_NETDEV_DEV(ndev, &pdev->dev);
	nic = netdev_priv(ndev);
	nic->pdev = pdev;
	nic->netdev = ndev;
	pci_set_drvdata(pdev, nic);

	nic->bar0 = pci_iomap(pdev, FLDNIC_BAR_CONTROL, FLDNIC_BAR_CONTROL_SIZE);
	if (!nic->bar0) {
		err = -ENOMEM;
		goto err_netdev;
	}
	rev = fldnic_rd(nic, FLDNIC_REG_CMD_INTERFACE_REV);
	if (rev != FLDNIC_INTERFACE_REV) {
		dev_err(&pdev->dev, "command interface revision %u, this driver knows %u\n",
			rev, FLDNIC_INTERFACE_REV);
		err = -ENODEV;
		goto err_unmap;
	}
	nic->fw_version = fldnic_rd(nic, FLDNIC_REG_FW_VERSION);
	/* The SQ, RQ, CQ and EQ doorbell pages: the first four of BAR2. */
	nic->db = pci_iomap(pdev, FLDNIC_BAR_DOORBELL, FLDNIC_DB_PAGES);
	if (!nic->db) {
		err = -ENOMEM;
		goto err_unmap;
	}
	err = fldnic_cmd_init(nic);
	if (err)
		goto err_cmd;
	err = fldnic_reset(nic);
	if (err)
		goto err_cmd;
	err = fldnic_exec(nic, FLDNIC_OP_QUERY_CAPS, NULL, 0, &nic->caps, sizeof(nic->caps));
	if (err)
		goto err_cmd;

	lo = fldnic_rd(nic, FLDNIC_REG_MAC_LO);
	hi = fldnic_rd(nic, FLDNIC_REG_MAC_HI);
	mac[0] = lo;
	mac[1] = lo >> 8;
	mac[2] = lo >> 16;
	mac[3] = lo >> 24;
	mac[4] = hi;
	mac[5] = hi >> 8;
	if (!is_valid_ether_addr(mac)) {
		dev_warn(&pdev->dev, "invalid MAC %pM from the card, using a random one\n", mac);
		eth_hw_addr_random(ndev);
	} else {
		eth_hw_addr_set(ndev, mac);
	}
	/* Frames are copied into the send buffers: any skb shape goes. */
	ndev->hw_features = NETIF_F_SG | NETIF_F_RXCSUM | NETIF_F_IP_CSUM | NETIF_F_IPV6_CSUM;
	ndev->features = ndev->hw_features;
	ndev->netdev_ops = &fldnic_netdev_ops;
	ndev->ethtool_ops = &fldnic_ethtool_ops;
	ndev->min_mtu = ETH_MIN_MTU;
	ndev->max_mtu = min_t(u32, le32_to_cpu(nic->caps.max_mtu), FLDNIC_MAX_MTU);
	if (ndev->max_mtu < ETH_MIN_MTU)
		ndev->max_mtu = ETH_DATA_LEN;
	netif_carrier_off(ndev);

	INIT_WORK(&nic->tx_recover, fldnic_tx_recover);
	spin_lock_init(&nic->gsi_lock);
	/* Vector 0 for the netdev's queues, vector 1 for the RoCE device's events. */
	err = pci_alloc_irq_vectors(pdev, 1, 2, PCI_IRQ_MSIX);
	if (err < 0)
		goto err_cmd;
	nic->nvec = err;
	netif_napi_add(ndev, &nic->napi, fldnic_poll);
	err = request_irq(pci_irq_vector(pdev, 0), fldnic_irq, 0, DRV_NAME, nic);
	if (err)
		goto err_vectors;

	err = register_netdev(ndev);
	if (err)
		goto err_irq;
	netdev_info(ndev, "vport %u, MAC %pM, firmware %u.%u\n", le16_to_cpu(nic->caps.vport),
		    ndev->dev_addr, nic->fw_version >> 16, nic->fw_version & 0xffff);
	nic->debugfs = debugfs_create_dir(pci_name(pdev), fldnic_debugfs_root);
	debugfs_create_file("inject_send_error", 0200, nic->debugfs, nic, &fldnic_inject_fops);
	/* The netdev works without its RoCE device; a failure is only logged. */
	err = fldnic_ib_add(nic);
	if (err)
		netdev_warn(ndev, "no RoCE device: %d\n", err);
	return 0;

err_irq:
	free_irq(pci_irq_vector(pdev, 0), nic);
err_vectors:
	netif_napi_del(&nic->napi);
	pci_free_irq_vectors(pdev);
err_cmd:
	fldnic_cmd_free(nic);
	if (nic->db)
		pci_iounmap(pdev, nic->db);
err_unmap:
	pci_iounmap(pdev, nic->bar0);
err_netdev:
	free_netdev(ndev);
err_regions:
	pci_release_regions(pdev);
err_disable:
	pci_disable_device(pdev);
	return err;
}

static void fldnic_remove(struct pci_dev *pdev)
{
	struct fldnic *nic = pci_get_drvdata(pdev);
	struct net_device *ndev = nic->netdev;

	debugfs_remove_recursive(nic->debugfs);
	fldnic_ib_remove(nic);
	unregister_netdev(ndev);
	cancel_work_sync(&nic->tx_recover);
	free_irq(pci_irq_vector(pdev, 0), nic);
	netif_napi_del(&nic->napi);
	pci_free_irq_vectors(pdev);
	/* Nothing the function made outlives the driver; a failed reset is only logged. */
	fldnic_reset(nic);
	fldnic_cmd_free(nic);
	pci_iounmap(pdev, nic->db);
	pci_iounmap(pdev, nic->bar0);
	free_netdev(ndev);
	pci_release_regions(pdev);
	pci_disable_device(pdev);
}

/*
 * A function-level reset while bound (`echo 1 > /sys/bus/pci/devices/.../reset`): the card
 * drops everything the function made. The netdev is detached across it, and the command
 * interface is checked and the capabilities read again after it.
 */
static void fldnic_reset_prepare(struct pci_dev *pdev)
{
	struct fldnic *nic = pci_get_drvdata(pdev);

	/* The RoCE device's users are disassociated while the card still answers commands. */
	fldnic_ib_remove(nic);
	rtnl_lock();
	nic->running_before_reset = netif_running(nic->netdev);
	if (nic->running_before_reset)
		dev_close(nic->netdev);
	netif_device_detach(nic->netdev);
	rtnl_unlock();
}

static void fldnic_reset_done(struct pci_dev *pdev)
{
	struct fldnic *nic = pci_get_drvdata(pdev);
	int err;

	pci_set_master(pdev);
	err = fldnic_reset(nic);
	if (!err)
		err = fldnic_exec(nic, FLDNIC_OP_QUERY_CAPS, NULL, 0, &nic->caps,
				  sizeof(nic->caps));
	if (err) {
		netdev_err(nic->netdev, "not usable after the function reset: %d\n", err);
		return;
	}
	rtnl_lock();
	netif_device_attach(nic->netdev);
	if (nic->running_before_reset)
		err = dev_open(nic->netdev, NULL);
	rtnl_unlock();
	if (err)
		netdev_err(nic->netdev, "not reopened after the function reset: %d\n", err);
	else
		netdev_info(nic->netdev, "function reset done\n");
	err = fldnic_ib_add(nic);
	if (err)
		netdev_warn(nic->netdev, "no RoCE device after the function reset: %d\n", err);
}

static const struct pci_error_handlers fldnic_err_handlers = {
	.reset_prepare = fldnic_reset_prepare,
	.reset_done = fldnic_reset_done,
};

static const struct pci_device_id fldnic_ids[] = {
	{ PCI_DEVICE(FLDNIC_PCI_VENDOR_ID, FLDNIC_PCI_DEVICE_ID) },
	{ }
};
MODULE_DEVICE_TABLE(pci, fldnic_ids);

static struct pci_driver fldnic_driver = {
	.name = DRV_NAME,
	.id_table = fldnic_ids,
	.probe = fldnic_probe,
	.remove = fldnic_remove,
	.err_handler = &fldnic_err_handlers,
};
static int __init fldnic_init(void)
{
	int err;

	fldnic_debugfs_root = debugfs_create_dir(DRV_NAME, NULL);
	err = pci_register_driver(&fldnic_driver);
	if (err)
		debugfs_remove_recursive(fldnic_debugfs_root);
	return err;
}

static void __exit fldnic_exit(void)
{
	pci_unregister_driver(&fldnic_driver);
	debugfs_remove_recursive(fldnic_debugfs_root);
}

module_init(fldnic_init);
module_exit(fldnic_exit);

MODULE_DESCRIPTION("fldemu card NIC functions");
MODULE_LICENSE("GPL");
