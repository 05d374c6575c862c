// SPDX-License-Identifier: GPL-2.0
/*
 * fldnic's RoCE device: an ib_device on each NIC function, linked to its netdev, so the kernel's
 * RDMA core sees the card (`rdma link`, /sys/class/infiniband) and keeps its RoCEv2 GID table:
 * the core derives GIDs from the netdev's IP addresses and hands each to add_gid, which writes
 * it into the function's RoCE address table (SET_ROCE_ADDRESS); del_gid clears it. Protection
 * domains are the card's (CREATE_PD); a user context exists so user space can open the device.
 *
 * Not yet: memory regions, CQs, QPs and SRQs, the doorbell mmap, events — and the rdma-core
 * provider that runs the data path in user space.
 */

#include <rdma/ib_mad.h>
#include <rdma/ib_verbs.h>
#include <net/addrconf.h>

#include "fldnic.h"

/* What the card's RDMA engine offers (docs/nic-interface.md §15). */
#define FLDNIC_IB_MAX_QP 16384
#define FLDNIC_IB_MAX_CQ 1024
#define FLDNIC_IB_MAX_MR 65536
#define FLDNIC_IB_MAX_PD 65536
#define FLDNIC_IB_MAX_QP_WR 32768
#define FLDNIC_IB_MAX_SGE 32
#define FLDNIC_IB_MAX_CQE 65535
#define FLDNIC_IB_MAX_RD_ATOMIC 16

struct fldnic_ib {
	struct ib_device ibdev;
	struct fldnic *nic;
};

struct fldnic_pd {
	struct ib_pd ibpd;
	u32 pdn;
};

struct fldnic_ucontext {
	struct ib_ucontext ibucontext;
};

static struct fldnic *to_nic(struct ib_device *ibdev)
{
	return container_of(ibdev, struct fldnic_ib, ibdev)->nic;
}

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
	attr->page_size_cap = SZ_4K;
	attr->max_qp = FLDNIC_IB_MAX_QP;
	attr->max_qp_wr = FLDNIC_IB_MAX_QP_WR;
	attr->max_send_sge = FLDNIC_IB_MAX_SGE;
	attr->max_recv_sge = FLDNIC_IB_MAX_SGE;
	attr->max_sge_rd = FLDNIC_IB_MAX_SGE;
	attr->max_cq = FLDNIC_IB_MAX_CQ;
	attr->max_cqe = FLDNIC_IB_MAX_CQE;
	attr->max_mr = FLDNIC_IB_MAX_MR;
	attr->max_pd = FLDNIC_IB_MAX_PD;
	attr->max_qp_rd_atom = FLDNIC_IB_MAX_RD_ATOMIC;
	attr->max_qp_init_rd_atom = FLDNIC_IB_MAX_RD_ATOMIC;
	attr->atomic_cap = IB_ATOMIC_HCA;
	/* The port shows the default partition alone (query_pkey). */
	attr->max_pkeys = 1;
	attr->local_ca_ack_delay = 15;
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
	struct fldnic *nic = to_nic(ibpd->device);

	return fldnic_create(nic, FLDNIC_OP_CREATE_PD, NULL, 0, &pd->pdn);
}

static int fldnic_dealloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct fldnic_pd *pd = container_of(ibpd, struct fldnic_pd, ibpd);

	fldnic_destroy(to_nic(ibpd->device), FLDNIC_OP_DESTROY_PD, pd->pdn);
	return 0;
}

static int fldnic_alloc_ucontext(struct ib_ucontext *uctx, struct ib_udata *udata)
{
	return 0;
}

static void fldnic_dealloc_ucontext(struct ib_ucontext *uctx)
{
}

static const struct ib_device_ops fldnic_ib_ops = {
	.owner = THIS_MODULE,
	.driver_id = RDMA_DRIVER_UNKNOWN,
	.uverbs_abi_ver = 1,

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

	INIT_RDMA_OBJ_SIZE(ib_pd, fldnic_pd, ibpd),
	INIT_RDMA_OBJ_SIZE(ib_ucontext, fldnic_ucontext, ibucontext),
};

int fldnic_ib_add(struct fldnic *nic)
{
	struct fldnic_ib *ib;
	int err;

	ib = ib_alloc_device(fldnic_ib, ibdev);
	if (!ib)
		return -ENOMEM;
	ib->nic = nic;
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
	err = ib_device_set_netdev(&ib->ibdev, nic->netdev, 1);
	if (err)
		goto err_free;
	err = ib_register_device(&ib->ibdev, "fldnic_%d", &nic->pdev->dev);
	if (err)
		goto err_free;
	nic->ib = ib;
	return 0;

err_free:
	ib_dealloc_device(&ib->ibdev);
	return err;
}

void fldnic_ib_remove(struct fldnic *nic)
{
	if (!nic->ib)
		return;
	ib_unregister_device(&nic->ib->ibdev);
	ib_dealloc_device(&nic->ib->ibdev);
	nic->ib = NULL;
}
