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
 * The data path, made at open, is one channel per online CPU (ethtool -L: up to
 * FLDNIC_MAX_CHANNELS, as the MSI-X vectors allow): an event queue on the channel's own
 * vector, a send queue and a receive queue with a completion queue each (rings in DMA memory,
 * doorbells in BAR2), and NAPI on both CQs, arming them and the EQ again when done
 * (docs/nic-interface.md §4, §8). A receive table's one entry sends every frame of the vPort
 * to the receive queue, or with several channels to an RSS group over all of them (the card's
 * Toeplitz hash of addresses and ports, §9.6, passed on as the skb hash).
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
 * Left out: segmentation offload (the card has none, §14).
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

/* Marks every entry of an event or completion ring of 2^@log_size entries as never written. */
void fldnic_ring_init_owner(void *buf, u8 log_size, size_t entry)
{
	u32 i;

	for (i = 0; i < (1U << log_size); i++)
		((u8 *)buf)[i * entry + entry - 1] = FLDNIC_INVALID_OWNER_BYTE;
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

/*
 * An event queue of 2^@log_size entries signalling MSI-X @vector, not armed; its ring is
 * freed by the caller (fldnic_ring_free) whether or not the command succeeded.
 */
int fldnic_create_eq(struct fldnic *nic, struct fldnic_cq *eq, u8 log_size, u16 vector)
{
	struct fldnic_create_eq_in in = {};
	int err;

	err = fldnic_ring_alloc(nic, &eq->ring, FLDNIC_EQE_SIZE, log_size);
	if (err)
		return err;
	fldnic_ring_init_owner(eq->ring.buf, log_size, FLDNIC_EQE_SIZE);
	in.addr = cpu_to_le64(eq->ring.dma);
	in.log_size = log_size;
	in.msix_vector = cpu_to_le16(vector);
	err = fldnic_create(nic, FLDNIC_OP_CREATE_EQ, &in, sizeof(in), &eq->num);
	if (err)
		return err;
	eq->ci = 0;
	eq->arm_sn = 0;
	eq->db = FLDNIC_DB_EQ_BASE + 4 * eq->num;
	return 0;
}

static int fldnic_create_cq(struct fldnic *nic, struct fldnic_cq *cq, u32 eqn, u8 log_size)
{
	struct fldnic_create_cq_in in = {};
	int err;

	err = fldnic_ring_alloc(nic, &cq->ring, FLDNIC_CQE_SIZE, log_size);
	if (err)
		return err;
	fldnic_ring_init_owner(cq->ring.buf, log_size, FLDNIC_CQE_SIZE);
	in.addr = cpu_to_le64(cq->ring.dma);
	in.eqn = cpu_to_le32(eqn);
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
static void fldnic_rx_post(struct fldnic_channel *ch)
{
	struct fldnic_rxq *rx = &ch->rx;
	u32 slot = rx->pi & ((1U << rx->ring.log_size) - 1);
	struct fldnic_data_seg *wqe = rx->ring.buf + slot * FLDNIC_RECV_WQE_SIZE;

	wqe->byte_count = cpu_to_le32(1U << FLDNIC_LOG_BUF);
	wqe->lkey = cpu_to_le32(FLDNIC_RESERVED_LKEY);
	wqe->addr = cpu_to_le64(rx->bufs.dma + ((dma_addr_t)slot << FLDNIC_LOG_BUF));
	rx->pi++;
}

static void fldnic_rx_doorbell(struct fldnic_channel *ch)
{
	/* The WQEs are in memory before the device reads the new producer counter. */
	dma_wmb();
	iowrite32(ch->rx.pi & FLDNIC_DB_PI_MASK,
		  ch->nic->db + FLDNIC_DB_RQ_BASE + 4 * ch->rx.rqn);
}

/* Send completions: each frees the WQEs up to the one it names. */
static void fldnic_tx_complete(struct fldnic_channel *ch)
{
	struct netdev_queue *txq = netdev_get_tx_queue(ch->nic->netdev, ch->index);
	struct fldnic_txq *tx = &ch->tx;
	struct fldnic_cqe *cqe;
	u32 mask = (1U << tx->ring.log_size) - 1;
	unsigned int packets = 0, bytes = 0;

	while ((cqe = fldnic_cq_peek(&tx->cq, FLDNIC_CQE_SIZE))) {
		u16 last = le16_to_cpu(cqe->wqe_counter);
		u8 op = cqe->op_own >> 4;

		tx->cq.ci++;
		if (op == FLDNIC_CQE_REQ_ERR) {
			ch->stats.tx_errors++;
			net_warn_ratelimited("%s: send error, syndrome %#x, WQE %u\n",
					     ch->nic->netdev->name, cqe->syndrome, last);
			/* The SQ is in ERROR and takes nothing more until it is recovered. */
			netif_tx_stop_queue(txq);
			schedule_work(&ch->tx_recover);
		}
		while ((u16)tx->done != (u16)(last + 1) && tx->done != tx->pi) {
			packets++;
			bytes += tx->len[tx->done & mask];
			tx->done++;
		}
	}
	ch->stats.tx_packets += packets;
	ch->stats.tx_bytes += bytes;
	if (netif_tx_queue_stopped(txq) && tx->pi - tx->done < (1U << tx->ring.log_size) &&
	    !work_pending(&ch->tx_recover))
		netif_tx_wake_queue(txq);
}

/*
 * Brings a send queue in ERROR back (docs/nic-interface.md §3.14): MODIFY_SQ to READY sets
 * the card's consumer counter and doorbell to 0 and discards the WQEs that were outstanding,
 * without completions; the driver counts them dropped and posts again from slot 0.
 */
static void fldnic_tx_recover(struct work_struct *work)
{
	struct fldnic_channel *ch = container_of(work, struct fldnic_channel, tx_recover);
	struct fldnic *nic = ch->nic;
	struct net_device *ndev = nic->netdev;
	struct netdev_queue *txq = netdev_get_tx_queue(ndev, ch->index);
	struct fldnic_modify_queue_in in = {};
	int err;

	rtnl_lock();
	if (!netif_running(ndev) || !nic->up || ch->index >= nic->channels)
		goto out;
	__netif_tx_lock_bh(txq);
	netif_tx_stop_queue(txq);
	__netif_tx_unlock_bh(txq);
	napi_disable(&ch->napi);
	in.id = cpu_to_le32(ch->tx.sqn);
	in.new_state = FLDNIC_QUEUE_READY;
	err = fldnic_exec(nic, FLDNIC_OP_MODIFY_SQ, &in, sizeof(in), NULL, 0);
	ch->stats.tx_dropped += ch->tx.pi - ch->tx.done;
	ch->tx.pi = 0;
	ch->tx.done = 0;
	napi_enable(&ch->napi);
	if (err) {
		netdev_err(ndev, "send queue %u not recovered: %d\n", ch->index, err);
		goto out;
	}
	netif_tx_wake_queue(txq);
	netdev_info(ndev, "send queue recovered\n");
out:
	rtnl_unlock();
}

/* Receive completions, up to @budget frames handed to the stack. */
static int fldnic_rx_complete(struct fldnic_channel *ch, int budget)
{
	struct fldnic *nic = ch->nic;
	struct fldnic_rxq *rx = &ch->rx;
	u32 mask = (1U << rx->ring.log_size) - 1;
	struct fldnic_cqe *cqe;
	int n = 0;

	while (n < budget && (cqe = fldnic_cq_peek(&rx->cq, FLDNIC_CQE_SIZE))) {
		u32 slot = rx->done & mask;
		u32 len = le32_to_cpu(cqe->byte_count);
		u8 op = cqe->op_own >> 4;
		void *frame = rx->bufs.buf + ((size_t)slot << FLDNIC_LOG_BUF);
		struct sk_buff *skb;

		rx->cq.ci++;
		rx->done++;
		if (op != FLDNIC_CQE_RESP_SEND || len > (1U << FLDNIC_LOG_BUF) || len < ETH_HLEN) {
			ch->stats.rx_errors++;
			continue;
		}
		/* RoCE datagrams for QP1 are the RoCE device's (gsi.c). */
		if (fldnic_gsi_rx(nic, frame, len))
			continue;
		skb = napi_alloc_skb(&ch->napi, len);
		if (!skb) {
			ch->stats.rx_dropped++;
			continue;
		}
		skb_put_data(skb, frame, len);
		skb->protocol = eth_type_trans(skb, nic->netdev);
		skb_record_rx_queue(skb, ch->index);
		/* The card's Toeplitz hash over addresses and ports (§9.6), for RPS and RFS. */
		if (nic->channels > 1)
			skb_set_hash(skb, le32_to_cpu(cqe->rss_hash), PKT_HASH_TYPE_L4);
		/* The card checked the TCP/UDP checksum (and the IPv4 header's on the way). */
		if ((nic->netdev->features & NETIF_F_RXCSUM) &&
		    (cqe->csum & (FLDNIC_CQE_CSUM_L4_PRESENT | FLDNIC_CQE_CSUM_L4_OK)) ==
		    (FLDNIC_CQE_CSUM_L4_PRESENT | FLDNIC_CQE_CSUM_L4_OK))
			skb->ip_summed = CHECKSUM_UNNECESSARY;
		ch->stats.rx_packets++;
		ch->stats.rx_bytes += len;
		napi_gro_receive(&ch->napi, skb);
		n++;
	}
	while (rx->pi - rx->done < (1U << rx->ring.log_size))
		fldnic_rx_post(ch);
	fldnic_rx_doorbell(ch);
	return n;
}

static int fldnic_poll(struct napi_struct *napi, int budget)
{
	struct fldnic_channel *ch = container_of(napi, struct fldnic_channel, napi);
	struct fldnic *nic = ch->nic;
	int done;

	/* The events only said which CQs to look at; both are looked at. */
	while (fldnic_cq_peek(&ch->eq, FLDNIC_EQE_SIZE))
		ch->eq.ci++;
	fldnic_tx_complete(ch);
	done = fldnic_rx_complete(ch, budget);
	fldnic_cq_update(nic, &ch->tx.cq, false);
	if (done < budget && napi_complete_done(napi, done)) {
		fldnic_cq_update(nic, &ch->tx.cq, true);
		fldnic_cq_update(nic, &ch->rx.cq, true);
		fldnic_cq_update(nic, &ch->eq, true);
	} else {
		fldnic_cq_update(nic, &ch->rx.cq, false);
	}
	return done;
}

static irqreturn_t fldnic_irq(int irq, void *data)
{
	struct fldnic_channel *ch = data;

	napi_schedule_irqoff(&ch->napi);
	return IRQ_HANDLED;
}

/* Marks every object of the data path as not made. */
static void fldnic_forget_objects(struct fldnic *nic)
{
	unsigned int i;

	nic->flow_entry = FLDNIC_NONE;
	nic->flow_table = FLDNIC_NONE;
	nic->rss_group = FLDNIC_NONE;
	for (i = 0; i < FLDNIC_MAX_CHANNELS; i++) {
		struct fldnic_channel *ch = &nic->ch[i];

		ch->tx.sqn = FLDNIC_NONE;
		ch->rx.rqn = FLDNIC_NONE;
		ch->tx.cq.num = FLDNIC_NONE;
		ch->rx.cq.num = FLDNIC_NONE;
		ch->eq.num = FLDNIC_NONE;
	}
}

static void fldnic_channel_free(struct fldnic *nic, struct fldnic_channel *ch)
{
	if (ch->tx.sqn != FLDNIC_NONE)
		fldnic_destroy(nic, FLDNIC_OP_DESTROY_SQ, ch->tx.sqn);
	if (ch->rx.rqn != FLDNIC_NONE)
		fldnic_destroy(nic, FLDNIC_OP_DESTROY_RQ, ch->rx.rqn);
	if (ch->tx.cq.num != FLDNIC_NONE)
		fldnic_destroy(nic, FLDNIC_OP_DESTROY_CQ, ch->tx.cq.num);
	if (ch->rx.cq.num != FLDNIC_NONE)
		fldnic_destroy(nic, FLDNIC_OP_DESTROY_CQ, ch->rx.cq.num);
	if (ch->eq.num != FLDNIC_NONE)
		fldnic_destroy(nic, FLDNIC_OP_DESTROY_EQ, ch->eq.num);
	kfree(ch->tx.len);
	ch->tx.len = NULL;
	fldnic_ring_free(nic, &ch->tx.bufs);
	fldnic_ring_free(nic, &ch->rx.bufs);
	fldnic_ring_free(nic, &ch->tx.ring);
	fldnic_ring_free(nic, &ch->rx.ring);
	fldnic_ring_free(nic, &ch->tx.cq.ring);
	fldnic_ring_free(nic, &ch->rx.cq.ring);
	fldnic_ring_free(nic, &ch->eq.ring);
}

/* Tears down what fldnic_up made, in reverse order; safe on a partial setup. */
static void fldnic_down(struct fldnic *nic)
{
	struct fldnic_set_root_in root = {
		.kind = FLDNIC_TABLE_KIND_NIC_RX,
		.table = cpu_to_le32(FLDNIC_NO_TABLE),
	};
	unsigned int i;

	/* Object numbers start at 0: FLDNIC_NONE says "not made". */
	if (nic->flow_table != FLDNIC_NONE) {
		fldnic_exec(nic, FLDNIC_OP_SET_FLOW_TABLE_ROOT, &root, sizeof(root), NULL, 0);
		if (nic->flow_entry != FLDNIC_NONE)
			fldnic_destroy(nic, FLDNIC_OP_DESTROY_FLOW_ENTRY, nic->flow_entry);
		fldnic_destroy(nic, FLDNIC_OP_DESTROY_FLOW_TABLE, nic->flow_table);
	}
	if (nic->rss_group != FLDNIC_NONE)
		fldnic_destroy(nic, FLDNIC_OP_DESTROY_RSS_GROUP, nic->rss_group);
	for (i = 0; i < FLDNIC_MAX_CHANNELS; i++)
		fldnic_channel_free(nic, &nic->ch[i]);
	fldnic_forget_objects(nic);
}

/* One channel: its EQ on its vector, its CQs, the send queue and the filled receive queue. */
static int fldnic_channel_up(struct fldnic *nic, struct fldnic_channel *ch)
{
	struct fldnic_create_sq_in sq = {};
	struct fldnic_create_rq_in rq = {};
	u32 ntx = 1U << FLDNIC_LOG_TXQ, nrx = 1U << FLDNIC_LOG_RXQ;
	int err;

	err = fldnic_create_eq(nic, &ch->eq, FLDNIC_LOG_EQ, ch->index);
	if (err)
		return err;

	err = fldnic_create_cq(nic, &ch->tx.cq, ch->eq.num, FLDNIC_LOG_TXQ);
	if (err)
		return err;
	err = fldnic_create_cq(nic, &ch->rx.cq, ch->eq.num, FLDNIC_LOG_RXQ);
	if (err)
		return err;

	ch->tx.len = kcalloc(ntx, sizeof(*ch->tx.len), GFP_KERNEL);
	if (!ch->tx.len)
		return -ENOMEM;
	err = fldnic_ring_alloc(nic, &ch->tx.bufs, 1U << FLDNIC_LOG_BUF, FLDNIC_LOG_TXQ);
	if (err)
		return err;
	err = fldnic_ring_alloc(nic, &ch->rx.bufs, 1U << FLDNIC_LOG_BUF, FLDNIC_LOG_RXQ);
	if (err)
		return err;

	err = fldnic_ring_alloc(nic, &ch->tx.ring, FLDNIC_WQEBB, FLDNIC_LOG_TXQ);
	if (err)
		return err;
	sq.addr = cpu_to_le64(ch->tx.ring.dma);
	sq.cqn = cpu_to_le32(ch->tx.cq.num);
	sq.log_size = FLDNIC_LOG_TXQ;
	err = fldnic_create(nic, FLDNIC_OP_CREATE_SQ, &sq, sizeof(sq), &ch->tx.sqn);
	if (err)
		return err;
	ch->tx.pi = ch->tx.done = 0;

	err = fldnic_ring_alloc(nic, &ch->rx.ring, FLDNIC_RECV_WQE_SIZE, FLDNIC_LOG_RXQ);
	if (err)
		return err;
	rq.addr = cpu_to_le64(ch->rx.ring.dma);
	rq.cqn = cpu_to_le32(ch->rx.cq.num);
	rq.log_size = FLDNIC_LOG_RXQ;
	rq.rq_type = FLDNIC_RQ_TYPE_REGULAR;
	err = fldnic_create(nic, FLDNIC_OP_CREATE_RQ, &rq, sizeof(rq), &ch->rx.rqn);
	if (err)
		return err;
	ch->rx.pi = ch->rx.done = 0;
	while (ch->rx.pi < nrx)
		fldnic_rx_post(ch);
	fldnic_rx_doorbell(ch);
	return 0;
}

/*
 * With several channels, an RSS group spreads the vPort's frames over their receive queues by
 * the card's Toeplitz hash of addresses and ports (§9.6), the indirection table filled round
 * robin as ethtool's default does; its number is the flow entry's destination.
 */
static int fldnic_rss_up(struct fldnic *nic, u32 *dest)
{
	unsigned int n = min_t(unsigned int, FLDNIC_RSS_MAX_INDIRECTION,
			       max_t(unsigned int, le16_to_cpu(nic->caps.max_rss_indirection), 1));
	struct fldnic_create_rss_group_in *in;
	__le32 *table;
	unsigned int i;
	int err;

	n = rounddown_pow_of_two(n);
	in = kzalloc(sizeof(*in) + n * sizeof(*table), GFP_KERNEL);
	if (!in)
		return -ENOMEM;
	memcpy(in->key, nic->rss_key, sizeof(in->key));
	in->hash_fields = FLDNIC_RSS_FIELDS_ALL;
	in->indirection_len = cpu_to_le16(n);
	table = (__le32 *)(in + 1);
	for (i = 0; i < n; i++)
		table[i] = cpu_to_le32(nic->ch[ethtool_rxfh_indir_default(i, nic->channels)].rx.rqn);
	err = fldnic_create(nic, FLDNIC_OP_CREATE_RSS_GROUP, in, sizeof(*in) + n * sizeof(*table),
			    &nic->rss_group);
	kfree(in);
	*dest = nic->rss_group;
	return err;
}

/*
 * Makes the channels in use, and steers every frame of the vPort to them: to the one receive
 * queue, or through an RSS group over all of them.
 */
static int fldnic_up(struct fldnic *nic)
{
	struct fldnic_create_flow_table_in table = {};
	struct fldnic_create_flow_entry_in *entry;
	struct fldnic_set_root_in root = {};
	u32 action = FLDNIC_ACTION_FWD_RQ, dest;
	unsigned int i;
	int err;

	fldnic_forget_objects(nic);
	for (i = 0; i < nic->channels; i++) {
		err = fldnic_channel_up(nic, &nic->ch[i]);
		if (err)
			return err;
	}
	dest = nic->ch[0].rx.rqn;
	if (nic->channels > 1) {
		action = FLDNIC_ACTION_FWD_RSS;
		err = fldnic_rss_up(nic, &dest);
		if (err)
			return err;
	}

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
	entry->actions = cpu_to_le32(action);
	entry->dest = cpu_to_le32(dest);
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
	unsigned int i;
	int err;

	err = netif_set_real_num_tx_queues(ndev, nic->channels);
	if (!err)
		err = netif_set_real_num_rx_queues(ndev, nic->channels);
	if (!err)
		err = fldnic_up(nic);
	if (err) {
		netdev_err(ndev, "rings not made: %d\n", err);
		fldnic_down(nic);
		return err;
	}
	for (i = 0; i < nic->channels; i++) {
		struct fldnic_channel *ch = &nic->ch[i];

		napi_enable(&ch->napi);
		fldnic_cq_update(nic, &ch->tx.cq, true);
		fldnic_cq_update(nic, &ch->rx.cq, true);
		fldnic_cq_update(nic, &ch->eq, true);
	}
	nic->up = true;
	if (fldnic_link_up(nic))
		netif_carrier_on(ndev);
	else
		netif_carrier_off(ndev);
	netif_tx_start_all_queues(ndev);
	return 0;
}

static int fldnic_stop(struct net_device *ndev)
{
	struct fldnic *nic = netdev_priv(ndev);
	unsigned int i;

	netif_tx_disable(ndev);
	netif_carrier_off(ndev);
	if (nic->up) {
		for (i = 0; i < nic->channels; i++)
			napi_disable(&nic->ch[i].napi);
		nic->up = false;
	}
	fldnic_down(nic);
	return 0;
}

static netdev_tx_t fldnic_start_xmit(struct sk_buff *skb, struct net_device *ndev)
{
	struct fldnic *nic = netdev_priv(ndev);
	struct fldnic_channel *ch = &nic->ch[skb_get_queue_mapping(skb)];
	struct netdev_queue *txq = netdev_get_tx_queue(ndev, ch->index);
	struct fldnic_txq *tx = &ch->tx;
	u32 slot = tx->pi & ((1U << tx->ring.log_size) - 1);
	struct fldnic_ctrl_seg *ctrl = tx->ring.buf + slot * FLDNIC_WQEBB;
	struct fldnic_eth_seg *eth = (void *)ctrl + FLDNIC_DS_SIZE;
	struct fldnic_data_seg *data = (void *)ctrl + 2 * FLDNIC_DS_SIZE;
	void *buf = tx->bufs.buf + ((size_t)slot << FLDNIC_LOG_BUF);

	if (skb->len < ETH_HLEN || skb->len > (1U << FLDNIC_LOG_BUF) ||
	    skb_copy_bits(skb, 0, buf, skb->len)) {
		ch->stats.tx_dropped++;
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
		netif_tx_stop_queue(txq);
		/* A completion that freed room in between would not wake the queue. */
		smp_mb();
		if (tx->pi - READ_ONCE(tx->done) < (1U << tx->ring.log_size))
			netif_tx_wake_queue(txq);
	}
	return NETDEV_TX_OK;
}

/* The channels' counts, summed. */
static void fldnic_get_stats64(struct net_device *ndev, struct rtnl_link_stats64 *st)
{
	struct fldnic *nic = netdev_priv(ndev);
	unsigned int i;

	for (i = 0; i < FLDNIC_MAX_CHANNELS; i++) {
		const struct fldnic_channel_stats *c = &nic->ch[i].stats;

		st->rx_packets += READ_ONCE(c->rx_packets);
		st->rx_bytes += READ_ONCE(c->rx_bytes);
		st->rx_errors += READ_ONCE(c->rx_errors);
		st->rx_dropped += READ_ONCE(c->rx_dropped);
		st->tx_packets += READ_ONCE(c->tx_packets);
		st->tx_bytes += READ_ONCE(c->tx_bytes);
		st->tx_errors += READ_ONCE(c->tx_errors);
		st->tx_dropped += READ_ONCE(c->tx_dropped);
	}
}

static const struct net_device_ops fldnic_netdev_ops = {
	.ndo_open = fldnic_open,
	.ndo_stop = fldnic_stop,
	.ndo_start_xmit = fldnic_start_xmit,
	.ndo_get_stats64 = fldnic_get_stats64,
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

/* After the card's counters, each channel's own: what RSS gave each receive queue. */
static const char *const fldnic_channel_stats[] = { "rx%u_packets", "tx%u_packets" };
#define FLDNIC_CHANNEL_STATS ARRAY_SIZE(fldnic_channel_stats)

static int fldnic_get_sset_count(struct net_device *ndev, int sset)
{
	struct fldnic *nic = netdev_priv(ndev);

	if (sset != ETH_SS_STATS)
		return -EOPNOTSUPP;
	return FLDNIC_VPORT_STATS + nic->max_channels * FLDNIC_CHANNEL_STATS;
}

static void fldnic_get_strings(struct net_device *ndev, u32 sset, u8 *data)
{
	struct fldnic *nic = netdev_priv(ndev);
	unsigned int i, j;

	if (sset != ETH_SS_STATS)
		return;
	for (i = 0; i < FLDNIC_VPORT_STATS; i++)
		ethtool_puts(&data, fldnic_vport_stats[i].name);
	for (i = 0; i < nic->max_channels; i++)
		for (j = 0; j < FLDNIC_CHANNEL_STATS; j++)
			ethtool_sprintf(&data, fldnic_channel_stats[j], i);
}

static void fldnic_get_ethtool_stats(struct net_device *ndev, struct ethtool_stats *stats,
				     u64 *data)
{
	struct fldnic *nic = netdev_priv(ndev);
	struct fldnic_query_vport_in in = { .vport = nic->caps.vport };
	struct fldnic_query_vport_out out;
	unsigned int i;

	if (fldnic_exec(nic, FLDNIC_OP_QUERY_VPORT, &in, sizeof(in), &out, sizeof(out)))
		memset(data, 0, FLDNIC_VPORT_STATS * sizeof(*data));
	else
		for (i = 0; i < FLDNIC_VPORT_STATS; i++)
			data[i] = get_unaligned_le64((u8 *)&out + fldnic_vport_stats[i].offset);
	data += FLDNIC_VPORT_STATS;
	for (i = 0; i < nic->max_channels; i++) {
		*data++ = READ_ONCE(nic->ch[i].stats.rx_packets);
		*data++ = READ_ONCE(nic->ch[i].stats.tx_packets);
	}
}

static void fldnic_get_channels(struct net_device *ndev, struct ethtool_channels *ch)
{
	struct fldnic *nic = netdev_priv(ndev);

	ch->max_combined = nic->max_channels;
	ch->combined_count = nic->channels;
}

/* ethtool -L combined N: the interface, if up, is made again with N channels. */
static int fldnic_set_channels(struct net_device *ndev, struct ethtool_channels *ch)
{
	struct fldnic *nic = netdev_priv(ndev);
	bool running = netif_running(ndev);
	int err = 0;

	if (!ch->combined_count || ch->rx_count || ch->tx_count || ch->other_count ||
	    ch->combined_count > nic->max_channels)
		return -EINVAL;
	if (ch->combined_count == nic->channels)
		return 0;
	if (running)
		fldnic_stop(ndev);
	nic->channels = ch->combined_count;
	if (running)
		err = fldnic_open(ndev);
	return err;
}

static u32 fldnic_get_rxfh_key_size(struct net_device *ndev)
{
	return FLDNIC_RSS_KEY_LEN;
}

/* The Toeplitz key and the hash function (§9.6); the table is ethtool's default spread. */
static int fldnic_get_rxfh(struct net_device *ndev, struct ethtool_rxfh_param *rxfh)
{
	struct fldnic *nic = netdev_priv(ndev);

	rxfh->hfunc = ETH_RSS_HASH_TOP;
	if (rxfh->key)
		memcpy(rxfh->key, nic->rss_key, sizeof(nic->rss_key));
	return 0;
}

static const struct ethtool_ops fldnic_ethtool_ops = {
	.get_drvinfo = fldnic_get_drvinfo,
	.get_link = ethtool_op_get_link,
	.get_sset_count = fldnic_get_sset_count,
	.get_strings = fldnic_get_strings,
	.get_ethtool_stats = fldnic_get_ethtool_stats,
	.get_channels = fldnic_get_channels,
	.set_channels = fldnic_set_channels,
	.get_rxfh_key_size = fldnic_get_rxfh_key_size,
	.get_rxfh = fldnic_get_rxfh,
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
	unsigned int i, irqs = 0;
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

	ndev = alloc_etherdev_mqs(sizeof(*nic), FLDNIC_MAX_CHANNELS, FLDNIC_MAX_CHANNELS);
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

	spin_lock_init(&nic->gsi_lock);
	/*
	 * One vector per channel, as many channels as the vectors allow (up to
	 * FLDNIC_MAX_CHANNELS), then one for the RoCE device's events. A channel per online CPU
	 * is used at first; ethtool -L takes up to the maximum.
	 */
	err = pci_alloc_irq_vectors(pdev, 2, FLDNIC_MAX_CHANNELS + 1, PCI_IRQ_MSIX);
	if (err < 0)
		goto err_cmd;
	nic->nvec = err;
	nic->max_channels = nic->nvec - 1;
	nic->ib_vector = nic->max_channels;
	nic->channels = min_t(unsigned int, nic->max_channels, num_online_cpus());
	netdev_rss_key_fill(nic->rss_key, sizeof(nic->rss_key));
	for (i = 0; i < nic->max_channels; i++) {
		struct fldnic_channel *ch = &nic->ch[i];

		ch->nic = nic;
		ch->index = i;
		INIT_WORK(&ch->tx_recover, fldnic_tx_recover);
		netif_napi_add(ndev, &ch->napi, fldnic_poll);
		err = request_irq(pci_irq_vector(pdev, i), fldnic_irq, 0, DRV_NAME, ch);
		if (err)
			goto err_irq;
		irqs = i + 1;
	}

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
	for (i = 0; i < nic->max_channels; i++) {
		if (i < irqs)
			free_irq(pci_irq_vector(pdev, i), &nic->ch[i]);
		netif_napi_del(&nic->ch[i].napi);
	}
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
	unsigned int i;

	debugfs_remove_recursive(nic->debugfs);
	fldnic_ib_remove(nic);
	unregister_netdev(ndev);
	for (i = 0; i < nic->max_channels; i++) {
		cancel_work_sync(&nic->ch[i].tx_recover);
		free_irq(pci_irq_vector(pdev, i), &nic->ch[i]);
		netif_napi_del(&nic->ch[i].napi);
	}
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
