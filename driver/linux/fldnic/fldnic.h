/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the parts of fldnic share: the function's state and its command interface
 * (main.c), and the RoCE ib_device on it (ib.c).
 */
#ifndef FLDNIC_H
#define FLDNIC_H

#include <linux/mutex.h>
#include <linux/netdevice.h>
#include <linux/pci.h>
#include <linux/workqueue.h>

#include "fldnic_abi.h"

struct fldnic_ib;
struct fldnic_gsi;

/* An object number that names nothing (the card numbers its objects from 0). */
#define FLDNIC_NONE U32_MAX

struct fldnic_cmd {
	struct mutex lock;	/* one command at a time */
	void *in;
	void *out;
	dma_addr_t in_dma;
	dma_addr_t out_dma;
	u16 token;
};

/* A ring in DMA memory the device reads or writes. */
struct fldnic_ring {
	void *buf;
	dma_addr_t dma;
	size_t bytes;
	u8 log_size;
};

/* An event or completion queue: its ring, number and consumer counter. */
struct fldnic_cq {
	struct fldnic_ring ring;
	u32 num;
	u32 ci;
	u32 arm_sn;
	u32 db;		/* its consumer doorbell's offset in BAR2 */
};

struct fldnic_txq {
	struct fldnic_ring ring;
	struct fldnic_cq cq;
	u32 sqn;
	u32 pi;		/* WQEs posted */
	u32 done;	/* WQEs completed */
	struct fldnic_ring bufs;	/* one frame buffer per slot */
	u32 *len;	/* bytes of the frame in each slot */
};

struct fldnic_rxq {
	struct fldnic_ring ring;
	struct fldnic_cq cq;
	u32 rqn;
	u32 pi;		/* buffers posted */
	u32 done;	/* buffers completed */
	struct fldnic_ring bufs;	/* one frame buffer per slot */
};

/* Most channels (queue pairs with their EQ and vector) a netdev gets. */
#define FLDNIC_MAX_CHANNELS 4

/* What a channel counts, summed for the netdev's statistics. */
struct fldnic_channel_stats {
	u64 rx_packets;
	u64 rx_bytes;
	u64 rx_errors;
	u64 rx_dropped;
	u64 tx_packets;
	u64 tx_bytes;
	u64 tx_errors;
	u64 tx_dropped;
};

/* One of the netdev's channels: an EQ on its own MSI-X vector, a send and a receive queue. */
struct fldnic_channel {
	struct fldnic *nic;
	unsigned int index;	/* also its MSI-X vector and its netdev queue */
	struct napi_struct napi;
	struct fldnic_cq eq;
	struct fldnic_txq tx;
	struct fldnic_rxq rx;
	/* A send error put the SQ in ERROR: tx_recover brings it back (MODIFY_SQ). */
	struct work_struct tx_recover;
	struct fldnic_channel_stats stats;
};

struct fldnic {
	struct pci_dev *pdev;
	struct net_device *netdev;
	void __iomem *bar0;
	void __iomem *db;	/* the doorbell pages of BAR2 the rings use */
	struct fldnic_cmd cmd;
	struct fldnic_caps caps;
	u32 fw_version;
	struct fldnic_channel ch[FLDNIC_MAX_CHANNELS];
	unsigned int max_channels;	/* what the MSI-X vectors allow */
	unsigned int channels;		/* in use (ethtool -L) */
	u32 rss_group;
	u8 rss_key[FLDNIC_RSS_KEY_LEN];
	u32 flow_table;
	u32 flow_entry;
	bool up;
	bool running_before_reset;
	/* Fault injection (debugfs): the next send WQE names a key the card refuses. */
	atomic_t inject_send_error;
	struct dentry *debugfs;
	struct fldnic_ib *ib;	/* the RoCE device on this function (ib.c) */
	int nvec;		/* MSI-X vectors allocated */
	int ib_vector;		/* the RoCE device's events: the vector after the channels' */
	/* QP1 of the RoCE device, which NAPI hands its datagrams to (gsi.c). */
	spinlock_t gsi_lock;
	struct fldnic_gsi *gsi;
};

int fldnic_exec(struct fldnic *nic, u16 opcode, const void *in, size_t in_len, void *out,
		size_t out_len);
int fldnic_create(struct fldnic *nic, u16 opcode, const void *in, size_t len, u32 *id);
void fldnic_destroy(struct fldnic *nic, u16 opcode, u32 id);

int fldnic_ring_alloc(struct fldnic *nic, struct fldnic_ring *r, size_t entry, u8 log_size);
void fldnic_ring_free(struct fldnic *nic, struct fldnic_ring *r);
void fldnic_ring_init_owner(void *buf, u8 log_size, size_t entry);
void fldnic_cq_update(struct fldnic *nic, struct fldnic_cq *q, bool arm);
void *fldnic_cq_peek(struct fldnic_cq *q, size_t entry);
int fldnic_create_eq(struct fldnic *nic, struct fldnic_cq *eq, u8 log_size, u16 vector);

bool fldnic_gsi_rx(struct fldnic *nic, const u8 *frame, unsigned int len);

int fldnic_ib_add(struct fldnic *nic);
void fldnic_ib_remove(struct fldnic *nic);

#endif /* FLDNIC_H */
