// SPDX-License-Identifier: GPL-2.0
/*
 * fldnic's RoCE device: an ib_device on each NIC function, linked to its netdev, driving the
 * card's RDMA engine (docs/nic-interface.md §15) for user space.
 *
 * The kernel's RDMA core derives the RoCEv2 GIDs from the netdev's IP addresses and hands each
 * to add_gid, which writes it into the function's RoCE address table (SET_ROCE_ADDRESS). PDs,
 * memory regions, CQs, QPs and SRQs are the card's objects, made by its commands:
 *
 * - a memory region pins the user's pages (ib_umem) and gives the card an MTT of their bus
 *   addresses at the largest page size the layout allows (4 KiB..1 GiB); the card checks keys,
 *   PDs and IBA access rights itself (§15.1);
 * - CQ, QP and SRQ rings are kernel pages mapped into the caller (vm_insert_page, so a mapping
 *   outliving its object keeps its pages), and the doorbell words are BAR2 pages mapped
 *   uncached; the data path (post_send, post_recv, poll_cq, arming) is the provider's, in user
 *   space (driver/rdma-core/fldnic);
 * - MODIFY_QP takes the verbs attribute mask as it is (the card's mask bits are IBA's), with the
 *   address vector the core resolved (GID index, destination GID and MAC);
 * - the RDMA event queue, on its own MSI-X vector (after the netdev channels'), turns
 *   completion events into completion-channel notifications and QP, SRQ and CQ events into
 *   the verbs' asynchronous events;
 * - QP1 runs in software over the netdev (gsi.c), so the kernel's MAD layer and connection
 *   manager work and rdma_cm connects user QPs (rping, perftest -R); kernel consumers get
 *   software CQs and address handles for it. The device has no DMA device of its own: kernel
 *   verbs carry virtual addresses, and user memory regions are mapped for the card here.
 *
 * Every status the card returns becomes an errno (fldnic_exec).
 *
 * Left out: kernel RC QPs (so no kernel ULPs such as NVMe-oF or iSER); UD, UC and XRC QPs for
 * users; memory windows, fast registration and on-demand paging; CQ resizing. The card's
 * doorbell pages are per function, not per process (no UAR pages): a process that maps one
 * can write the other words on that page (docs/linux-driver.md).
 */

#include <linux/interrupt.h>
#include <linux/unaligned.h>
#include <rdma/ib_mad.h>
#include <rdma/ib_umem.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/ib_verbs.h>
#include <rdma/iter.h>
#include <rdma/uverbs_ioctl.h>
#include <net/addrconf.h>

#include "ib.h"
#include "../fldnic_uverbs.h"

/* What the card's RDMA engine offers (docs/nic-interface.md §15). */
#define FLDNIC_IB_MAX_QP 16384
#define FLDNIC_IB_MAX_CQ 1024
#define FLDNIC_IB_MAX_SRQ 1024
#define FLDNIC_IB_MAX_MR 65536
#define FLDNIC_IB_MAX_PD 4096
#define FLDNIC_IB_MAX_LOG_QUEUE 15
#define FLDNIC_IB_MAX_LOG_CQ 16
#define FLDNIC_IB_MAX_RECV_SGE 32
/* A ring is one physically contiguous allocation. */
#define FLDNIC_IB_MAX_RING (4U << 20)
#define FLDNIC_IB_LOG_EQ 10

struct fldnic_pd {
	struct ib_pd ibpd;
	u32 pdn;
};

struct fldnic_ucontext {
	struct ib_ucontext ibucontext;
};

enum fldnic_mmap_kind {
	FLDNIC_MMAP_RING,
	FLDNIC_MMAP_DOORBELL,
};

/* Something the provider maps: a ring's pages, or one doorbell page of BAR2. */
struct fldnic_mmap {
	struct rdma_user_mmap_entry rdma;
	enum fldnic_mmap_kind kind;
	struct device *dev;
	void *buf;		/* ring: pages from alloc_pages_exact, DMA-mapped */
	dma_addr_t dma;
	size_t bytes;
	phys_addr_t phys;	/* doorbell page */
	u32 word;		/* doorbell: the word's byte offset in its page */
};

struct fldnic_mr {
	struct ib_mr ibmr;
	struct ib_umem *umem;
	void *mtt;
	dma_addr_t mtt_dma;
	size_t mtt_bytes;
};

struct fldnic_srq {
	struct ib_srq ibsrq;
	u32 srqn;
	u32 max_wr;
	struct fldnic_mmap *ring;
	struct fldnic_mmap *db;
};

static struct fldnic_ib *to_ib(struct ib_device *ibdev)
{
	return container_of(ibdev, struct fldnic_ib, ibdev);
}

static struct fldnic *to_nic(struct ib_device *ibdev)
{
	return to_ib(ibdev)->nic;
}

static u32 to_pdn(struct ib_pd *ibpd)
{
	return container_of(ibpd, struct fldnic_pd, ibpd)->pdn;
}

/* The card's mask bits and access bits are the verbs' own (§15.1, §15.3): checked once here. */
static_assert(IB_QP_STATE == FLDNIC_QP_ATTR_STATE && IB_QP_CUR_STATE == FLDNIC_QP_ATTR_CUR_STATE);
static_assert(IB_QP_ACCESS_FLAGS == FLDNIC_QP_ATTR_ACCESS_FLAGS);
static_assert(IB_QP_PKEY_INDEX == FLDNIC_QP_ATTR_PKEY_INDEX && IB_QP_PORT == FLDNIC_QP_ATTR_PORT);
static_assert(IB_QP_AV == FLDNIC_QP_ATTR_AV && IB_QP_PATH_MTU == FLDNIC_QP_ATTR_PATH_MTU);
static_assert(IB_QP_TIMEOUT == FLDNIC_QP_ATTR_TIMEOUT && IB_QP_RETRY_CNT == FLDNIC_QP_ATTR_RETRY_CNT);
static_assert(IB_QP_RNR_RETRY == FLDNIC_QP_ATTR_RNR_RETRY && IB_QP_RQ_PSN == FLDNIC_QP_ATTR_RQ_PSN);
static_assert(IB_QP_MAX_QP_RD_ATOMIC == FLDNIC_QP_ATTR_MAX_QP_RD_ATOMIC);
static_assert(IB_QP_MIN_RNR_TIMER == FLDNIC_QP_ATTR_MIN_RNR_TIMER && IB_QP_SQ_PSN == FLDNIC_QP_ATTR_SQ_PSN);
static_assert(IB_QP_MAX_DEST_RD_ATOMIC == FLDNIC_QP_ATTR_MAX_DEST_RD_ATOMIC);
static_assert(IB_QP_DEST_QPN == FLDNIC_QP_ATTR_DEST_QPN);
static_assert(IB_ACCESS_LOCAL_WRITE == FLDNIC_ACCESS_LOCAL_WRITE &&
	      IB_ACCESS_REMOTE_WRITE == FLDNIC_ACCESS_REMOTE_WRITE &&
	      IB_ACCESS_REMOTE_READ == FLDNIC_ACCESS_REMOTE_READ &&
	      IB_ACCESS_REMOTE_ATOMIC == FLDNIC_ACCESS_REMOTE_ATOMIC);
static_assert(IB_QPS_RESET == FLDNIC_QPS_RESET && IB_QPS_INIT == FLDNIC_QPS_INIT &&
	      IB_QPS_RTR == FLDNIC_QPS_RTR && IB_QPS_RTS == FLDNIC_QPS_RTS &&
	      IB_QPS_SQD == FLDNIC_QPS_SQD && IB_QPS_SQE == FLDNIC_QPS_SQE &&
	      IB_QPS_ERR == FLDNIC_QPS_ERR);

#define FLDNIC_ACCESS_ALL (IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | \
			   IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_ATOMIC)

static int fldnic_query_device(struct ib_device *ibdev, struct ib_device_attr *attr,
			       struct ib_udata *udata)
{
	struct fldnic *nic = to_nic(ibdev);

	if (udata->inlen || udata->outlen)
		return -EINVAL;
	memset(attr, 0, sizeof(*attr));
	attr->fw_ver = nic->fw_version;
	attr->vendor_id = FLDNIC_PCI_VENDOR_ID;
	attr->vendor_part_id = FLDNIC_PCI_DEVICE_ID;
	attr->hw_ver = nic->pdev->revision;
	attr->max_mr_size = U64_MAX;
	attr->page_size_cap = GENMASK_ULL(FLDNIC_MAX_LOG_MR_PAGE, FLDNIC_MIN_LOG_MR_PAGE);
	attr->max_qp = FLDNIC_IB_MAX_QP;
	attr->max_qp_wr = 1U << FLDNIC_IB_MAX_LOG_QUEUE;
	attr->max_send_sge = FLDNIC_MAX_SEND_SGE;
	attr->max_recv_sge = FLDNIC_IB_MAX_RECV_SGE;
	attr->max_sge_rd = FLDNIC_MAX_SEND_SGE;
	attr->max_cq = FLDNIC_IB_MAX_CQ;
	attr->max_cqe = 1U << FLDNIC_IB_MAX_LOG_CQ;
	attr->max_mr = FLDNIC_IB_MAX_MR;
	attr->max_pd = FLDNIC_IB_MAX_PD;
	attr->max_qp_rd_atom = FLDNIC_MAX_RD_ATOMIC;
	attr->max_qp_init_rd_atom = FLDNIC_MAX_RD_ATOMIC;
	attr->max_res_rd_atom = FLDNIC_MAX_RD_ATOMIC * FLDNIC_IB_MAX_QP;
	attr->atomic_cap = IB_ATOMIC_HCA;
	attr->max_srq = FLDNIC_IB_MAX_SRQ;
	attr->max_srq_wr = 1U << FLDNIC_IB_MAX_LOG_QUEUE;
	attr->max_srq_sge = FLDNIC_IB_MAX_RECV_SGE;
	/* The port shows the default partition alone (query_pkey). */
	attr->max_pkeys = 1;
	attr->local_ca_ack_delay = 15;
	/* Kernel consumers (QP1) name memory without a region. */
	attr->kernel_cap_flags = IBK_LOCAL_DMA_LKEY;
	return 0;
}

static int fldnic_query_port(struct ib_device *ibdev, u32 port, struct ib_port_attr *attr)
{
	struct net_device *ndev = to_nic(ibdev)->netdev;
	bool up = netif_running(ndev) && netif_carrier_ok(ndev);

	/* The core cleared *attr. */
	attr->state = up ? IB_PORT_ACTIVE : IB_PORT_DOWN;
	attr->phys_state = up ? IB_PORT_PHYS_STATE_LINK_UP : IB_PORT_PHYS_STATE_DISABLED;
	attr->max_mtu = IB_MTU_4096;
	attr->active_mtu = ib_mtu_int_to_enum(ndev->mtu);
	attr->gid_tbl_len = FLDNIC_ROCE_ADDRESS_ENTRIES;
	attr->pkey_tbl_len = 1;
	attr->port_cap_flags = IB_PORT_CM_SUP;
	attr->max_msg_sz = 1U << 31;
	attr->active_width = IB_WIDTH_4X;
	attr->active_speed = IB_SPEED_EDR;
	return 0;
}

static int fldnic_get_port_immutable(struct ib_device *ibdev, u32 port,
				     struct ib_port_immutable *immutable)
{
	struct ib_port_attr attr;
	int err;

	immutable->core_cap_flags = RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP;
	err = ib_query_port(ibdev, port, &attr);
	if (err)
		return err;
	immutable->pkey_tbl_len = attr.pkey_tbl_len;
	immutable->gid_tbl_len = attr.gid_tbl_len;
	immutable->max_mad_size = IB_MGMT_MAD_SIZE;
	return 0;
}

static enum rdma_link_layer fldnic_get_link_layer(struct ib_device *ibdev, u32 port)
{
	return IB_LINK_LAYER_ETHERNET;
}

static int fldnic_query_pkey(struct ib_device *ibdev, u32 port, u16 index, u16 *pkey)
{
	if (index)
		return -EINVAL;
	*pkey = IB_DEFAULT_PKEY_FULL;
	return 0;
}

/* Writes GID table entry @index of the function: @gid from @mac, or cleared. */
static int fldnic_set_gid(struct fldnic *nic, unsigned int index, const union ib_gid *gid,
			  const u8 *mac)
{
	struct fldnic_roce_address_in in = {};

	if (index >= FLDNIC_ROCE_ADDRESS_ENTRIES)
		return -EINVAL;
	in.index = cpu_to_le16(index);
	if (gid) {
		in.flags = FLDNIC_ROCE_ADDRESS_VALID;
		memcpy(in.gid, gid->raw, sizeof(in.gid));
		memcpy(in.mac, mac, ETH_ALEN);
	}
	return fldnic_exec(nic, FLDNIC_OP_SET_ROCE_ADDRESS, &in, sizeof(in), NULL, 0);
}

static int fldnic_add_gid(const struct ib_gid_attr *attr, void **context)
{
	struct fldnic *nic = to_nic(attr->device);

	/* The card speaks RoCEv2 only; v1 entries stay out of its table. */
	if (attr->gid_type != IB_GID_TYPE_ROCE_UDP_ENCAP)
		return 0;
	return fldnic_set_gid(nic, attr->index, &attr->gid, nic->netdev->dev_addr);
}

static int fldnic_del_gid(const struct ib_gid_attr *attr, void **context)
{
	if (attr->gid_type != IB_GID_TYPE_ROCE_UDP_ENCAP)
		return 0;
	return fldnic_set_gid(to_nic(attr->device), attr->index, NULL, NULL);
}

static int fldnic_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct fldnic_pd *pd = container_of(ibpd, struct fldnic_pd, ibpd);

	return fldnic_create(to_nic(ibpd->device), FLDNIC_OP_CREATE_PD, NULL, 0, &pd->pdn);
}

static int fldnic_dealloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	fldnic_destroy(to_nic(ibpd->device), FLDNIC_OP_DESTROY_PD, to_pdn(ibpd));
	return 0;
}

static int fldnic_alloc_ucontext(struct ib_ucontext *uctx, struct ib_udata *udata)
{
	struct fldnic_alloc_ucontext_resp resp = {
		.max_inline_data = FLDNIC_MAX_INLINE_DATA,
		.max_send_sge = FLDNIC_MAX_SEND_SGE,
	};

	if (udata->outlen < sizeof(resp))
		return -EINVAL;
	return ib_copy_to_udata(udata, &resp, sizeof(resp));
}

static void fldnic_dealloc_ucontext(struct ib_ucontext *uctx)
{
}

/*
 * The device is going away under its users (unbind, FLR): the core zaps their doorbell
 * mappings and destroys their objects; ring pages stay with whoever still maps them.
 */
static void fldnic_disassociate_ucontext(struct ib_ucontext *uctx)
{
}

/* -------- what the provider maps -------- */

static void fldnic_mmap_free(struct rdma_user_mmap_entry *rdma)
{
	struct fldnic_mmap *m = container_of(rdma, struct fldnic_mmap, rdma);

	if (m->kind == FLDNIC_MMAP_RING) {
		dma_unmap_single(m->dev, m->dma, m->bytes, DMA_BIDIRECTIONAL);
		free_pages_exact(m->buf, m->bytes);
	}
	kfree(m);
}

/* Withdraws a mapping offer; a ring's pages go when the last mapping of them does. */
static void fldnic_mmap_remove(struct fldnic_mmap *m)
{
	if (m)
		rdma_user_mmap_entry_remove(&m->rdma);
}

static u64 fldnic_mmap_key(struct fldnic_mmap *m)
{
	return m ? rdma_user_mmap_get_offset(&m->rdma) : 0;
}

/* Zeroed pages for a ring the card reaches at ->dma, offered to the caller's context. */
static struct fldnic_mmap *fldnic_ring_user(struct fldnic_ib *ib, struct ib_udata *udata,
					    size_t bytes)
{
	struct fldnic_ucontext *uctx =
		rdma_udata_to_drv_context(udata, struct fldnic_ucontext, ibucontext);
	struct device *dev = &ib->nic->pdev->dev;
	struct fldnic_mmap *m;
	int err;

	if (!bytes || bytes > FLDNIC_IB_MAX_RING)
		return ERR_PTR(-EINVAL);
	m = kzalloc(sizeof(*m), GFP_KERNEL);
	if (!m)
		return ERR_PTR(-ENOMEM);
	m->kind = FLDNIC_MMAP_RING;
	m->dev = dev;
	m->bytes = PAGE_ALIGN(bytes);
	m->buf = alloc_pages_exact(m->bytes, GFP_KERNEL | __GFP_ZERO);
	if (!m->buf) {
		kfree(m);
		return ERR_PTR(-ENOMEM);
	}
	m->dma = dma_map_single(dev, m->buf, m->bytes, DMA_BIDIRECTIONAL);
	if (dma_mapping_error(dev, m->dma)) {
		free_pages_exact(m->buf, m->bytes);
		kfree(m);
		return ERR_PTR(-ENOMEM);
	}
	err = rdma_user_mmap_entry_insert(&uctx->ibucontext, &m->rdma, m->bytes);
	if (err) {
		dma_unmap_single(dev, m->dma, m->bytes, DMA_BIDIRECTIONAL);
		free_pages_exact(m->buf, m->bytes);
		kfree(m);
		return ERR_PTR(err);
	}
	return m;
}

/* The BAR2 page holding the doorbell word at @offset, offered to the caller's context. */
static struct fldnic_mmap *fldnic_db_user(struct fldnic_ib *ib, struct ib_udata *udata,
					  u64 offset)
{
	struct fldnic_ucontext *uctx =
		rdma_udata_to_drv_context(udata, struct fldnic_ucontext, ibucontext);
	struct fldnic_mmap *m;
	int err;

	m = kzalloc(sizeof(*m), GFP_KERNEL);
	if (!m)
		return ERR_PTR(-ENOMEM);
	m->kind = FLDNIC_MMAP_DOORBELL;
	m->phys = pci_resource_start(ib->nic->pdev, FLDNIC_BAR_DOORBELL) +
		  (offset & ~(u64)(PAGE_SIZE - 1));
	m->word = offset & (PAGE_SIZE - 1);
	err = rdma_user_mmap_entry_insert(&uctx->ibucontext, &m->rdma, PAGE_SIZE);
	if (err) {
		kfree(m);
		return ERR_PTR(err);
	}
	return m;
}

static int fldnic_mmap(struct ib_ucontext *uctx, struct vm_area_struct *vma)
{
	struct rdma_user_mmap_entry *rdma = rdma_user_mmap_entry_get(uctx, vma);
	struct fldnic_mmap *m;
	unsigned long off;
	int err = 0;

	if (!rdma)
		return -EINVAL;
	m = container_of(rdma, struct fldnic_mmap, rdma);
	if (m->kind == FLDNIC_MMAP_DOORBELL) {
		err = rdma_user_mmap_io(uctx, vma, PHYS_PFN(m->phys), PAGE_SIZE,
					pgprot_noncached(vma->vm_page_prot), rdma);
	} else {
		vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
		for (off = 0; off < m->bytes && !err; off += PAGE_SIZE)
			err = vm_insert_page(vma, vma->vm_start + off, virt_to_page(m->buf + off));
	}
	rdma_user_mmap_entry_put(rdma);
	return err;
}

/* -------- memory regions -------- */

static struct ib_mr *fldnic_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length, u64 iova,
					int access, struct ib_udata *udata)
{
	struct fldnic *nic = to_nic(ibpd->device);
	struct fldnic_create_mr_in in = {};
	struct ib_block_iter biter;
	unsigned long pgsz;
	struct fldnic_mr *mr;
	__le64 *mtt;
	size_t pages, i = 0;
	u32 key;
	int err;

	if (access & ~(FLDNIC_ACCESS_ALL | IB_ACCESS_OPTIONAL))
		return ERR_PTR(-EOPNOTSUPP);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->umem = ib_umem_get(ibpd->device, start, length, access);
	if (IS_ERR(mr->umem)) {
		err = PTR_ERR(mr->umem);
		goto err_free;
	}
	/* The RoCE device has no DMA device (kernel verbs use virtual addresses, gsi.c): the
	 * pinned pages are mapped for the card here, and unmapped before they are released.
	 */
	err = dma_map_sgtable(&nic->pdev->dev, &mr->umem->sgt_append.sgt, DMA_BIDIRECTIONAL, 0);
	if (err)
		goto err_release;
	/* The card takes pages of 2^12..2^30 bytes counted from iova rounded down (§15.2). */
	pgsz = ib_umem_find_best_pgsz(mr->umem, GENMASK(FLDNIC_MAX_LOG_MR_PAGE,
							FLDNIC_MIN_LOG_MR_PAGE), iova);
	if (!pgsz) {
		err = -EINVAL;
		goto err_umem;
	}
	pages = ib_umem_num_dma_blocks(mr->umem, pgsz);
	mr->mtt_bytes = pages * FLDNIC_MTT_ENTRY_SIZE;
	mr->mtt = dma_alloc_coherent(&nic->pdev->dev, mr->mtt_bytes, &mr->mtt_dma, GFP_KERNEL);
	if (!mr->mtt) {
		err = -ENOMEM;
		goto err_umem;
	}
	mtt = mr->mtt;
	rdma_umem_for_each_dma_block(mr->umem, &biter, pgsz)
		mtt[i++] = cpu_to_le64(rdma_block_iter_dma_address(&biter));

	in.pd = cpu_to_le32(to_pdn(ibpd));
	in.access = cpu_to_le32(access & FLDNIC_ACCESS_ALL);
	in.start = cpu_to_le64(iova);
	in.length = cpu_to_le64(length);
	in.mtt_addr = cpu_to_le64(mr->mtt_dma);
	in.log_page_size = order_base_2(pgsz);
	err = fldnic_create(nic, FLDNIC_OP_CREATE_MR, &in, sizeof(in), &key);
	if (err)
		goto err_mtt;
	/* One key serves both ends (§15.1). */
	mr->ibmr.lkey = key;
	mr->ibmr.rkey = key;
	return &mr->ibmr;

err_mtt:
	dma_free_coherent(&nic->pdev->dev, mr->mtt_bytes, mr->mtt, mr->mtt_dma);
err_umem:
	dma_unmap_sgtable(&nic->pdev->dev, &mr->umem->sgt_append.sgt, DMA_BIDIRECTIONAL, 0);
err_release:
	ib_umem_release(mr->umem);
err_free:
	kfree(mr);
	return ERR_PTR(err);
}

/*
 * The kernel's "all of memory" region: the card's reserved key 0 names bus addresses, and QP1
 * (the one kernel consumer, gsi.c) uses virtual ones. No remote rights: key 0 is never an
 * rkey (§15.1).
 */
static struct ib_mr *fldnic_get_dma_mr(struct ib_pd *ibpd, int access)
{
	struct fldnic_mr *mr;

	if (access & ~IB_ACCESS_LOCAL_WRITE)
		return ERR_PTR(-EOPNOTSUPP);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->ibmr.lkey = FLDNIC_RESERVED_LKEY;
	mr->ibmr.rkey = FLDNIC_RESERVED_LKEY;
	return &mr->ibmr;
}

static int fldnic_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata)
{
	struct fldnic_mr *mr = container_of(ibmr, struct fldnic_mr, ibmr);
	struct fldnic *nic = to_nic(ibmr->device);

	if (!mr->umem) {
		kfree(mr);
		return 0;
	}

	/* The key stops working before the MTT and the pages it names go. */
	fldnic_destroy(nic, FLDNIC_OP_DESTROY_MR, ibmr->lkey);
	dma_free_coherent(&nic->pdev->dev, mr->mtt_bytes, mr->mtt, mr->mtt_dma);
	dma_unmap_sgtable(&nic->pdev->dev, &mr->umem->sgt_append.sgt, DMA_BIDIRECTIONAL, 0);
	ib_umem_release(mr->umem);
	kfree(mr);
	return 0;
}

/* -------- completion queues -------- */

static int fldnic_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
			    struct uverbs_attr_bundle *attrs)
{
	struct fldnic_ib_cq *cq = container_of(ibcq, struct fldnic_ib_cq, ibcq);
	struct fldnic_ib *ib = to_ib(ibcq->device);
	struct fldnic_create_cq_resp resp = {};
	struct fldnic_create_cq_in in = {};
	struct ib_udata *udata = attrs ? &attrs->driver_udata : NULL;
	u32 log_size;
	int err;

	if (attr->flags)
		return -EINVAL;
	if (!udata)
		return fldnic_kcq_create(cq, attr);
	if (udata->outlen < sizeof(resp))
		return -EINVAL;
	if (attr->cqe < 1 || attr->cqe > 1U << FLDNIC_IB_MAX_LOG_CQ)
		return -EINVAL;
	log_size = order_base_2(max_t(u32, attr->cqe, 2));
	cq->ring = fldnic_ring_user(ib, udata, FLDNIC_CQE_SIZE << log_size);
	if (IS_ERR(cq->ring))
		return PTR_ERR(cq->ring);
	fldnic_ring_init_owner(cq->ring->buf, log_size, FLDNIC_CQE_SIZE);
	in.addr = cpu_to_le64(cq->ring->dma);
	in.eqn = cpu_to_le32(ib->eq.num);
	in.log_size = log_size;
	err = fldnic_create(ib->nic, FLDNIC_OP_CREATE_CQ, &in, sizeof(in), &cq->cqn);
	if (err)
		goto err_ring;
	cq->db = fldnic_db_user(ib, udata, FLDNIC_DB_CQ_BASE + 4 * cq->cqn);
	if (IS_ERR(cq->db)) {
		err = PTR_ERR(cq->db);
		goto err_cq;
	}
	resp.ring_key = fldnic_mmap_key(cq->ring);
	resp.db_key = fldnic_mmap_key(cq->db);
	resp.cqn = cq->cqn;
	resp.db_offset = cq->db->word;
	resp.log_size = log_size;
	err = ib_copy_to_udata(udata, &resp, sizeof(resp));
	if (err)
		goto err_db;
	err = xa_err(xa_store(&ib->cqs, cq->cqn, cq, GFP_KERNEL));
	if (err)
		goto err_db;
	ibcq->cqe = 1U << log_size;
	return 0;

err_db:
	fldnic_mmap_remove(cq->db);
err_cq:
	fldnic_destroy(ib->nic, FLDNIC_OP_DESTROY_CQ, cq->cqn);
err_ring:
	fldnic_mmap_remove(cq->ring);
	return err;
}

static int fldnic_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata)
{
	struct fldnic_ib_cq *cq = container_of(ibcq, struct fldnic_ib_cq, ibcq);
	struct fldnic_ib *ib = to_ib(ibcq->device);

	if (cq->kcq) {
		fldnic_kcq_destroy(cq);
		return 0;
	}
	fldnic_destroy(ib->nic, FLDNIC_OP_DESTROY_CQ, cq->cqn);
	xa_erase(&ib->cqs, cq->cqn);
	/* The event handler is done with it before the core frees it. */
	synchronize_irq(ib->irq);
	fldnic_mmap_remove(cq->db);
	fldnic_mmap_remove(cq->ring);
	return 0;
}

/* -------- queue pairs -------- */

/* The largest send WQE of the QP in 16-byte segments: control, remote address and atomic
 * segments, then the data (§15.4).
 */
static u32 fldnic_send_wqe_ds(const struct ib_qp_cap *cap)
{
	u32 inline_ds = cap->max_inline_data ? DIV_ROUND_UP(4 + cap->max_inline_data,
							    FLDNIC_DS_SIZE) : 0;

	return 3 + max3(cap->max_send_sge, inline_ds, 1U);
}

static int fldnic_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init,
			    struct ib_udata *udata)
{
	struct fldnic_qp *qp = container_of(ibqp, struct fldnic_qp, ibqp);
	struct fldnic_ib *ib = to_ib(ibqp->device);
	struct fldnic_create_qp_resp resp = {};
	struct fldnic_create_qp_in in = {};
	struct ib_qp_cap *cap = &init->cap;
	u32 wqe_bbs, log_sq, log_rq = 0, log_stride = FLDNIC_MIN_LOG_RQ_STRIDE, slot, data_ds;
	int err;

	if (!udata)
		return init->qp_type == IB_QPT_GSI ? fldnic_gsi_create(ib, qp, init) : -EOPNOTSUPP;
	if (init->qp_type != IB_QPT_RC || init->create_flags)
		return -EOPNOTSUPP;
	if (udata->outlen < sizeof(resp))
		return -EINVAL;
	if (cap->max_send_sge > FLDNIC_MAX_SEND_SGE ||
	    cap->max_inline_data > FLDNIC_MAX_INLINE_DATA ||
	    cap->max_recv_sge > FLDNIC_IB_MAX_RECV_SGE || !cap->max_send_wr)
		return -EINVAL;
	wqe_bbs = DIV_ROUND_UP(fldnic_send_wqe_ds(cap) * FLDNIC_DS_SIZE, FLDNIC_WQEBB);
	log_sq = order_base_2(cap->max_send_wr * wqe_bbs);
	if (log_sq > FLDNIC_IB_MAX_LOG_QUEUE)
		return -EINVAL;
	if (!init->srq) {
		if (!cap->max_recv_wr)
			return -EINVAL;
		log_rq = order_base_2(cap->max_recv_wr);
		log_stride = max_t(u32, FLDNIC_MIN_LOG_RQ_STRIDE,
				   order_base_2(max(cap->max_recv_sge, 1U) * FLDNIC_DS_SIZE));
		if (log_rq > FLDNIC_IB_MAX_LOG_QUEUE || log_stride > FLDNIC_MAX_LOG_RQ_STRIDE)
			return -EINVAL;
	}

	qp->sq = fldnic_ring_user(ib, udata, FLDNIC_WQEBB << log_sq);
	if (IS_ERR(qp->sq))
		return PTR_ERR(qp->sq);
	if (!init->srq) {
		qp->rq = fldnic_ring_user(ib, udata, (size_t)1 << (log_rq + log_stride));
		if (IS_ERR(qp->rq)) {
			err = PTR_ERR(qp->rq);
			qp->rq = NULL;
			goto err_sq;
		}
	}
	in.pd = cpu_to_le32(to_pdn(ibqp->pd));
	in.send_cqn = cpu_to_le32(container_of(init->send_cq, struct fldnic_ib_cq, ibcq)->cqn);
	in.recv_cqn = cpu_to_le32(container_of(init->recv_cq, struct fldnic_ib_cq, ibcq)->cqn);
	in.srqn = cpu_to_le32(init->srq ? container_of(init->srq, struct fldnic_srq, ibsrq)->srqn :
			      FLDNIC_NO_SRQ);
	in.sq_addr = cpu_to_le64(qp->sq->dma);
	in.rq_addr = cpu_to_le64(qp->rq ? qp->rq->dma : 0);
	in.log_sq_size = log_sq;
	in.log_rq_size = log_rq;
	in.log_rq_stride = log_stride;
	in.flags = init->sq_sig_type == IB_SIGNAL_ALL_WR ? FLDNIC_QP_FLAG_SIGNAL_ALL : 0;
	err = fldnic_create(ib->nic, FLDNIC_OP_CREATE_QP, &in, sizeof(in), &qp->qpn);
	if (err)
		goto err_rq;
	slot = qp->qpn - FLDNIC_QPN_BASE;
	qp->sq_db = fldnic_db_user(ib, udata, FLDNIC_DB_QP_SQ_BASE + 4 * slot);
	if (IS_ERR(qp->sq_db)) {
		err = PTR_ERR(qp->sq_db);
		qp->sq_db = NULL;
		goto err_qp;
	}
	if (qp->rq) {
		qp->rq_db = fldnic_db_user(ib, udata, FLDNIC_DB_QP_RQ_BASE + 4 * slot);
		if (IS_ERR(qp->rq_db)) {
			err = PTR_ERR(qp->rq_db);
			qp->rq_db = NULL;
			goto err_qp;
		}
	}
	resp.sq_key = fldnic_mmap_key(qp->sq);
	resp.rq_key = fldnic_mmap_key(qp->rq);
	resp.sq_db_key = fldnic_mmap_key(qp->sq_db);
	resp.rq_db_key = fldnic_mmap_key(qp->rq_db);
	resp.qpn = qp->qpn;
	resp.sq_db_offset = qp->sq_db->word;
	resp.rq_db_offset = qp->rq_db ? qp->rq_db->word : 0;
	resp.log_sq_size = log_sq;
	resp.log_rq_size = log_rq;
	resp.log_rq_stride = log_stride;
	err = ib_copy_to_udata(udata, &resp, sizeof(resp));
	if (err)
		goto err_qp;
	err = xa_err(xa_store(&ib->qps, qp->qpn, qp, GFP_KERNEL));
	if (err)
		goto err_qp;

	/* What the QP can hold, as the verbs report it back. */
	data_ds = fldnic_send_wqe_ds(cap) - 3;
	cap->max_send_wr = (1U << log_sq) / wqe_bbs;
	cap->max_send_sge = min_t(u32, data_ds, FLDNIC_MAX_SEND_SGE);
	cap->max_inline_data = min_t(u32, data_ds * FLDNIC_DS_SIZE - 4, FLDNIC_MAX_INLINE_DATA);
	if (!init->srq) {
		cap->max_recv_wr = 1U << log_rq;
		cap->max_recv_sge = (1U << log_stride) / FLDNIC_DS_SIZE;
	}
	qp->cap = *cap;
	qp->signal_all = init->sq_sig_type == IB_SIGNAL_ALL_WR;
	qp->ibqp.qp_num = qp->qpn;
	return 0;

err_qp:
	fldnic_mmap_remove(qp->rq_db);
	fldnic_mmap_remove(qp->sq_db);
	fldnic_destroy(ib->nic, FLDNIC_OP_DESTROY_QP, qp->qpn);
err_rq:
	fldnic_mmap_remove(qp->rq);
err_sq:
	fldnic_mmap_remove(qp->sq);
	return err;
}

static int fldnic_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
			    struct ib_udata *udata)
{
	struct fldnic_qp *qp = container_of(ibqp, struct fldnic_qp, ibqp);
	struct fldnic_modify_qp_in in = {};
	struct fldnic_qp_attr *a = &in.attr;

	if (qp->gsi)
		return fldnic_gsi_modify(qp, attr, mask);
	if (mask & ~FLDNIC_QP_ATTR_KNOWN)
		return -EOPNOTSUPP;
	in.qpn = cpu_to_le32(qp->qpn);
	in.attr_mask = cpu_to_le32(mask);
	a->qp_state = attr->qp_state;
	a->cur_state = attr->cur_qp_state;
	a->path_mtu = attr->path_mtu;
	a->timeout = attr->timeout;
	a->retry_cnt = attr->retry_cnt;
	a->rnr_retry = attr->rnr_retry;
	a->min_rnr_timer = attr->min_rnr_timer;
	/* Out-of-range values reach the card, which refuses them (BAD_PARAM). */
	a->max_rd_atomic = min_t(u32, attr->max_rd_atomic, U8_MAX);
	a->max_dest_rd_atomic = min_t(u32, attr->max_dest_rd_atomic, U8_MAX);
	a->port = attr->port_num;
	a->pkey_index = cpu_to_le16(attr->pkey_index);
	a->access_flags = cpu_to_le32(attr->qp_access_flags);
	a->rq_psn = cpu_to_le32(attr->rq_psn);
	a->sq_psn = cpu_to_le32(attr->sq_psn);
	a->dest_qpn = cpu_to_le32(attr->dest_qp_num);
	if (mask & IB_QP_AV) {
		const struct ib_global_route *grh = rdma_ah_read_grh(&attr->ah_attr);

		if (!(rdma_ah_get_ah_flags(&attr->ah_attr) & IB_AH_GRH) ||
		    attr->ah_attr.type != RDMA_AH_ATTR_TYPE_ROCE)
			return -EINVAL;
		a->sgid_index = grh->sgid_index;
		a->hop_limit = grh->hop_limit;
		a->traffic_class = grh->traffic_class;
		a->flow_label = cpu_to_le32(grh->flow_label);
		memcpy(a->dgid, grh->dgid.raw, sizeof(a->dgid));
		/* The core resolved the peer's (or the next hop's) MAC. */
		memcpy(a->dmac, attr->ah_attr.roce.dmac, ETH_ALEN);
	}
	return fldnic_exec(to_nic(ibqp->device), FLDNIC_OP_MODIFY_QP, &in, sizeof(in), NULL, 0);
}

/* The QP as the card has it (QUERY_QP): state, attributes, and the PSNs it is at. */
static int fldnic_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
			   struct ib_qp_init_attr *init)
{
	struct fldnic_qp *qp = container_of(ibqp, struct fldnic_qp, ibqp);
	struct fldnic_object_in in = { .id = cpu_to_le32(qp->qpn) };
	struct fldnic_query_qp_out *out;
	struct fldnic_qp_attr *a;
	struct ib_global_route *grh;
	int err;

	if (qp->gsi)
		return fldnic_gsi_query(qp, attr, init);
	out = kzalloc(sizeof(*out), GFP_KERNEL);
	if (!out)
		return -ENOMEM;
	err = fldnic_exec(to_nic(ibqp->device), FLDNIC_OP_QUERY_QP, &in, sizeof(in), out,
			  sizeof(*out));
	if (err)
		goto out;
	a = &out->attr;
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = a->qp_state;
	attr->cur_qp_state = a->qp_state;
	attr->path_mtu = a->path_mtu;
	attr->path_mig_state = IB_MIG_MIGRATED;
	attr->timeout = a->timeout;
	attr->retry_cnt = a->retry_cnt;
	attr->rnr_retry = a->rnr_retry;
	attr->min_rnr_timer = a->min_rnr_timer;
	attr->max_rd_atomic = a->max_rd_atomic;
	attr->max_dest_rd_atomic = a->max_dest_rd_atomic;
	attr->port_num = a->port;
	attr->pkey_index = le16_to_cpu(a->pkey_index);
	attr->qp_access_flags = le32_to_cpu(a->access_flags);
	attr->rq_psn = le32_to_cpu(out->expected_psn);
	attr->sq_psn = le32_to_cpu(out->next_psn);
	attr->dest_qp_num = le32_to_cpu(a->dest_qpn);
	attr->cap = qp->cap;
	attr->ah_attr.type = RDMA_AH_ATTR_TYPE_ROCE;
	rdma_ah_set_port_num(&attr->ah_attr, a->port ? a->port : 1);
	rdma_ah_set_ah_flags(&attr->ah_attr, IB_AH_GRH);
	grh = rdma_ah_retrieve_grh(&attr->ah_attr);
	memcpy(grh->dgid.raw, a->dgid, sizeof(grh->dgid.raw));
	grh->sgid_index = a->sgid_index;
	grh->hop_limit = a->hop_limit;
	grh->traffic_class = a->traffic_class;
	grh->flow_label = le32_to_cpu(a->flow_label);
	memcpy(attr->ah_attr.roce.dmac, a->dmac, ETH_ALEN);

	memset(init, 0, sizeof(*init));
	init->send_cq = ibqp->send_cq;
	init->recv_cq = ibqp->recv_cq;
	init->srq = ibqp->srq;
	init->cap = qp->cap;
	init->qp_type = IB_QPT_RC;
	init->sq_sig_type = qp->signal_all ? IB_SIGNAL_ALL_WR : IB_SIGNAL_REQ_WR;
out:
	kfree(out);
	return err;
}

static int fldnic_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata)
{
	struct fldnic_qp *qp = container_of(ibqp, struct fldnic_qp, ibqp);
	struct fldnic_ib *ib = to_ib(ibqp->device);

	if (qp->gsi) {
		fldnic_gsi_destroy(qp);
		return 0;
	}
	fldnic_destroy(ib->nic, FLDNIC_OP_DESTROY_QP, qp->qpn);
	xa_erase(&ib->qps, qp->qpn);
	synchronize_irq(ib->irq);
	fldnic_mmap_remove(qp->rq_db);
	fldnic_mmap_remove(qp->sq_db);
	fldnic_mmap_remove(qp->rq);
	fldnic_mmap_remove(qp->sq);
	return 0;
}

/* -------- shared receive queues -------- */

static int fldnic_arm_srq(struct fldnic_ib *ib, struct fldnic_srq *srq, u32 limit)
{
	struct fldnic_arm_srq_in in = {
		.srqn = cpu_to_le32(srq->srqn),
		.limit = cpu_to_le32(limit),
		.eqn = cpu_to_le32(ib->eq.num),
	};

	return fldnic_exec(ib->nic, FLDNIC_OP_ARM_SRQ, &in, sizeof(in), NULL, 0);
}

static int fldnic_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init,
			     struct ib_udata *udata)
{
	struct fldnic_srq *srq = container_of(ibsrq, struct fldnic_srq, ibsrq);
	struct fldnic_ib *ib = to_ib(ibsrq->device);
	struct fldnic_create_srq_resp resp = {};
	struct fldnic_create_srq_in in = {};
	struct ib_srq_attr *attr = &init->attr;
	u32 log_size, log_stride;
	int err;

	if (!udata)
		return -EOPNOTSUPP;
	if (init->srq_type != IB_SRQT_BASIC)
		return -EOPNOTSUPP;
	if (udata->outlen < sizeof(resp) || !attr->max_wr ||
	    attr->max_sge > FLDNIC_IB_MAX_RECV_SGE)
		return -EINVAL;
	log_size = order_base_2(attr->max_wr);
	log_stride = max_t(u32, FLDNIC_MIN_LOG_RQ_STRIDE,
			   order_base_2(max(attr->max_sge, 1U) * FLDNIC_DS_SIZE));
	if (log_size > FLDNIC_IB_MAX_LOG_QUEUE || attr->srq_limit > 1U << log_size)
		return -EINVAL;
	srq->ring = fldnic_ring_user(ib, udata, (size_t)1 << (log_size + log_stride));
	if (IS_ERR(srq->ring))
		return PTR_ERR(srq->ring);
	in.pd = cpu_to_le32(to_pdn(ibsrq->pd));
	in.addr = cpu_to_le64(srq->ring->dma);
	in.log_size = log_size;
	in.log_stride = log_stride;
	err = fldnic_create(ib->nic, FLDNIC_OP_CREATE_SRQ, &in, sizeof(in), &srq->srqn);
	if (err)
		goto err_ring;
	srq->db = fldnic_db_user(ib, udata, FLDNIC_DB_SRQ_BASE + 4 * srq->srqn);
	if (IS_ERR(srq->db)) {
		err = PTR_ERR(srq->db);
		goto err_srq;
	}
	err = xa_err(xa_store(&ib->srqs, srq->srqn, srq, GFP_KERNEL));
	if (err)
		goto err_db;
	if (attr->srq_limit) {
		err = fldnic_arm_srq(ib, srq, attr->srq_limit);
		if (err)
			goto err_xa;
	}
	resp.ring_key = fldnic_mmap_key(srq->ring);
	resp.db_key = fldnic_mmap_key(srq->db);
	resp.srqn = srq->srqn;
	resp.db_offset = srq->db->word;
	resp.log_size = log_size;
	resp.log_stride = log_stride;
	err = ib_copy_to_udata(udata, &resp, sizeof(resp));
	if (err)
		goto err_xa;
	srq->max_wr = 1U << log_size;
	attr->max_wr = srq->max_wr;
	attr->max_sge = (1U << log_stride) / FLDNIC_DS_SIZE;
	return 0;

err_xa:
	xa_erase(&ib->srqs, srq->srqn);
err_db:
	fldnic_mmap_remove(srq->db);
err_srq:
	fldnic_destroy(ib->nic, FLDNIC_OP_DESTROY_SRQ, srq->srqn);
err_ring:
	fldnic_mmap_remove(srq->ring);
	return err;
}

static int fldnic_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
			     enum ib_srq_attr_mask mask, struct ib_udata *udata)
{
	struct fldnic_srq *srq = container_of(ibsrq, struct fldnic_srq, ibsrq);

	/* The ring's size is fixed at creation. */
	if (mask & IB_SRQ_MAX_WR)
		return -EOPNOTSUPP;
	if (!(mask & IB_SRQ_LIMIT))
		return 0;
	if (attr->srq_limit > srq->max_wr)
		return -EINVAL;
	return fldnic_arm_srq(to_ib(ibsrq->device), srq, attr->srq_limit);
}

static int fldnic_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata)
{
	struct fldnic_srq *srq = container_of(ibsrq, struct fldnic_srq, ibsrq);
	struct fldnic_ib *ib = to_ib(ibsrq->device);

	fldnic_destroy(ib->nic, FLDNIC_OP_DESTROY_SRQ, srq->srqn);
	xa_erase(&ib->srqs, srq->srqn);
	synchronize_irq(ib->irq);
	fldnic_mmap_remove(srq->db);
	fldnic_mmap_remove(srq->ring);
	return 0;
}

/* -------- counters (`rdma statistic`) -------- */

static const struct {
	const char *name;
	unsigned int offset;
} fldnic_rdma_stats[FLDNIC_RDMA_STATS] = { FLDNIC_RDMA_STAT_TABLE };

/* After the card's counters, the driver's own: QP1's datagrams (gsi.c). */
static const char *const fldnic_gsi_stats[] = { "gsi_sent", "gsi_received", "gsi_dropped" };
#define FLDNIC_HW_STATS (FLDNIC_RDMA_STATS + ARRAY_SIZE(fldnic_gsi_stats))

static struct rdma_stat_desc fldnic_rdma_stat_descs[FLDNIC_HW_STATS];

static struct rdma_hw_stats *fldnic_alloc_hw_port_stats(struct ib_device *ibdev, u32 port)
{
	unsigned int i;

	for (i = 0; i < FLDNIC_RDMA_STATS; i++)
		fldnic_rdma_stat_descs[i].name = fldnic_rdma_stats[i].name;
	for (i = 0; i < ARRAY_SIZE(fldnic_gsi_stats); i++)
		fldnic_rdma_stat_descs[FLDNIC_RDMA_STATS + i].name = fldnic_gsi_stats[i];
	return rdma_alloc_hw_stats_struct(fldnic_rdma_stat_descs, FLDNIC_HW_STATS,
					  RDMA_HW_STATS_DEFAULT_LIFESPAN);
}

/* The function's RoCE counters as the card keeps them (QUERY_RDMA_COUNTERS, §15.7). */
static int fldnic_get_hw_stats(struct ib_device *ibdev, struct rdma_hw_stats *stats, u32 port,
			       int index)
{
	u8 out[FLDNIC_RDMA_COUNTERS_LEN];
	unsigned int i;
	int err;

	err = fldnic_exec(to_nic(ibdev), FLDNIC_OP_QUERY_RDMA_COUNTERS, NULL, 0, out, sizeof(out));
	if (err)
		return err;
	for (i = 0; i < FLDNIC_RDMA_STATS; i++)
		stats->value[i] = get_unaligned_le64(out + fldnic_rdma_stats[i].offset);
	fldnic_gsi_counters(to_nic(ibdev), &stats->value[FLDNIC_RDMA_STATS]);
	return FLDNIC_HW_STATS;
}

/* -------- the RDMA event queue -------- */

static void fldnic_qp_event(struct fldnic_ib *ib, u32 qpn, u8 subtype)
{
	static const enum ib_event_type events[] = {
		[FLDNIC_QP_EVENT_FATAL] = IB_EVENT_QP_FATAL,
		[FLDNIC_QP_EVENT_SQ_DRAINED] = IB_EVENT_SQ_DRAINED,
		[FLDNIC_QP_EVENT_COMM_ESTABLISHED] = IB_EVENT_COMM_EST,
		[FLDNIC_QP_EVENT_LAST_WQE_REACHED] = IB_EVENT_QP_LAST_WQE_REACHED,
	};
	struct fldnic_qp *qp = xa_load(&ib->qps, qpn);
	struct ib_event ev = {};

	if (!qp || !subtype || subtype >= ARRAY_SIZE(events) || !qp->ibqp.event_handler)
		return;
	ev.device = &ib->ibdev;
	ev.element.qp = &qp->ibqp;
	ev.event = events[subtype];
	qp->ibqp.event_handler(&ev, qp->ibqp.qp_context);
}

static irqreturn_t fldnic_ib_events(int irq, void *data)
{
	struct fldnic_ib *ib = data;
	struct fldnic_eqe *eqe;
	struct ib_event ev = { .device = &ib->ibdev };

	while ((eqe = fldnic_cq_peek(&ib->eq, FLDNIC_EQE_SIZE))) {
		u32 num = le32_to_cpu(eqe->data);
		struct fldnic_ib_cq *cq;
		struct fldnic_srq *srq;

		switch (eqe->event_type) {
		case FLDNIC_EQE_COMPLETION:
			cq = xa_load(&ib->cqs, num);
			if (cq && cq->ibcq.comp_handler)
				cq->ibcq.comp_handler(&cq->ibcq, cq->ibcq.cq_context);
			break;
		case FLDNIC_EQE_CQ_ERROR:
			cq = xa_load(&ib->cqs, num);
			if (cq && cq->ibcq.event_handler) {
				ev.event = IB_EVENT_CQ_ERR;
				ev.element.cq = &cq->ibcq;
				cq->ibcq.event_handler(&ev, cq->ibcq.cq_context);
			}
			break;
		case FLDNIC_EQE_QP_EVENT:
			fldnic_qp_event(ib, num, eqe->subtype);
			break;
		case FLDNIC_EQE_SRQ_LIMIT:
			srq = xa_load(&ib->srqs, num);
			if (srq && srq->ibsrq.event_handler) {
				ev.event = IB_EVENT_SRQ_LIMIT_REACHED;
				ev.element.srq = &srq->ibsrq;
				srq->ibsrq.event_handler(&ev, srq->ibsrq.srq_context);
			}
			break;
		}
		ib->eq.ci++;
	}
	fldnic_cq_update(ib->nic, &ib->eq, true);
	return IRQ_HANDLED;
}

static int fldnic_ib_eq_create(struct fldnic_ib *ib)
{
	int err = fldnic_create_eq(ib->nic, &ib->eq, FLDNIC_IB_LOG_EQ, ib->nic->ib_vector);

	if (err)
		fldnic_ring_free(ib->nic, &ib->eq.ring);
	return err;
}

static void fldnic_ib_eq_destroy(struct fldnic_ib *ib)
{
	fldnic_destroy(ib->nic, FLDNIC_OP_DESTROY_EQ, ib->eq.num);
	fldnic_ring_free(ib->nic, &ib->eq.ring);
}

static const struct ib_device_ops fldnic_ib_ops = {
	.owner = THIS_MODULE,
	.driver_id = RDMA_DRIVER_UNKNOWN,
	.uverbs_abi_ver = FLDNIC_UVERBS_ABI_VERSION,

	.query_device = fldnic_query_device,
	.query_port = fldnic_query_port,
	.get_port_immutable = fldnic_get_port_immutable,
	.get_link_layer = fldnic_get_link_layer,
	.query_pkey = fldnic_query_pkey,
	.add_gid = fldnic_add_gid,
	.del_gid = fldnic_del_gid,
	.alloc_pd = fldnic_alloc_pd,
	.dealloc_pd = fldnic_dealloc_pd,
	.alloc_ucontext = fldnic_alloc_ucontext,
	.dealloc_ucontext = fldnic_dealloc_ucontext,
	.disassociate_ucontext = fldnic_disassociate_ucontext,
	.mmap = fldnic_mmap,
	.mmap_free = fldnic_mmap_free,
	.get_dma_mr = fldnic_get_dma_mr,
	.reg_user_mr = fldnic_reg_user_mr,
	.dereg_mr = fldnic_dereg_mr,
	.create_cq = fldnic_create_cq,
	.destroy_cq = fldnic_destroy_cq,
	.create_qp = fldnic_create_qp,
	.modify_qp = fldnic_modify_qp,
	.query_qp = fldnic_query_qp,
	.destroy_qp = fldnic_destroy_qp,
	.create_srq = fldnic_create_srq,
	.modify_srq = fldnic_modify_srq,
	.destroy_srq = fldnic_destroy_srq,
	.post_send = fldnic_post_send,
	.post_recv = fldnic_post_recv,
	.poll_cq = fldnic_poll_cq,
	.req_notify_cq = fldnic_req_notify_cq,
	.create_ah = fldnic_create_ah,
	.destroy_ah = fldnic_destroy_ah,
	.alloc_hw_port_stats = fldnic_alloc_hw_port_stats,
	.get_hw_stats = fldnic_get_hw_stats,

	INIT_RDMA_OBJ_SIZE(ib_pd, fldnic_pd, ibpd),
	INIT_RDMA_OBJ_SIZE(ib_ucontext, fldnic_ucontext, ibucontext),
	INIT_RDMA_OBJ_SIZE(ib_cq, fldnic_ib_cq, ibcq),
	INIT_RDMA_OBJ_SIZE(ib_qp, fldnic_qp, ibqp),
	INIT_RDMA_OBJ_SIZE(ib_srq, fldnic_srq, ibsrq),
	INIT_RDMA_OBJ_SIZE(ib_ah, fldnic_ah, ibah),
};

int fldnic_ib_add(struct fldnic *nic)
{
	struct fldnic_ib *ib;
	int err;

	if (nic->ib_vector >= nic->nvec)
		return -ENOSPC;
	ib = ib_alloc_device(fldnic_ib, ibdev);
	if (!ib)
		return -ENOMEM;
	ib->nic = nic;
	ib->irq = pci_irq_vector(nic->pdev, nic->ib_vector);
	xa_init(&ib->cqs);
	xa_init(&ib->qps);
	xa_init(&ib->srqs);
	ib->ibdev.node_type = RDMA_NODE_IB_CA;
	ib->ibdev.phys_port_cnt = 1;
	ib->ibdev.num_comp_vectors = 1;
	/* The PCI function is the device's parent: libibverbs matches its provider by the
	 * function's modalias.
	 */
	ib->ibdev.dev.parent = &nic->pdev->dev;
	strscpy(ib->ibdev.node_desc, "fldnic", sizeof(ib->ibdev.node_desc));
	addrconf_addr_eui48((u8 *)&ib->ibdev.node_guid, nic->netdev->dev_addr);
	ib_set_device_ops(&ib->ibdev, &fldnic_ib_ops);

	err = fldnic_ib_eq_create(ib);
	if (err)
		goto err_free;
	/* Threaded: the handler runs the consumers' completion and event callbacks. */
	err = request_threaded_irq(ib->irq, NULL, fldnic_ib_events, IRQF_ONESHOT, "fldnic-rdma",
				   ib);
	if (err)
		goto err_eq;
	fldnic_cq_update(nic, &ib->eq, true);
	err = ib_device_set_netdev(&ib->ibdev, nic->netdev, 1);
	if (err)
		goto err_irq;
	ib->ibdev.local_dma_lkey = FLDNIC_RESERVED_LKEY;
	/* No DMA device: kernel verbs (QP1's MADs) carry virtual addresses (gsi.c). */
	err = ib_register_device(&ib->ibdev, "fldnic_%d", NULL);
	if (err)
		goto err_irq;
	nic->ib = ib;
	return 0;

err_irq:
	free_irq(ib->irq, ib);
err_eq:
	fldnic_ib_eq_destroy(ib);
err_free:
	ib_dealloc_device(&ib->ibdev);
	return err;
}

void fldnic_ib_remove(struct fldnic *nic)
{
	struct fldnic_ib *ib = nic->ib;

	if (!ib)
		return;
	/* Disassociates the users: their objects are destroyed here, while the card answers. */
	ib_unregister_device(&ib->ibdev);
	free_irq(ib->irq, ib);
	fldnic_ib_eq_destroy(ib);
	xa_destroy(&ib->cqs);
	xa_destroy(&ib->qps);
	xa_destroy(&ib->srqs);
	ib_dealloc_device(&ib->ibdev);
	nic->ib = NULL;
}
