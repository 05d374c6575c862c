// SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB
/*
 * libfldnic: the rdma-core provider of the fldemu card's RoCE devices (the kernel's fldnic
 * module, docs/linux-driver.md). libibverbs loads it for a device whose PCI ID is the card's
 * NIC function (an out-of-tree driver has no driver ID of its own) and calls it for each
 * context a program opens.
 *
 * This part opens the device and answers the control path through the kernel's uverbs
 * commands: query device, query port, protection domains. So ibv_devices and ibv_devinfo see
 * the card.
 *
 * Not yet: memory regions, CQs, QPs and SRQs, and the data path (post_send, post_recv and
 * poll_cq writing and reading the card's WQEs and CQEs through its doorbell pages).
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/driver.h>
#include <infiniband/verbs.h>

#include "../../linux/fldnic_abi.h"

struct fldnic_device {
	struct verbs_device ibv_dev;
};

struct fldnic_context {
	struct verbs_context ibv_ctx;
};

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

static void fldnic_free_context(struct ibv_context *ibctx)
{
	struct fldnic_context *ctx = container_of(ibctx, struct fldnic_context, ibv_ctx.context);

	verbs_uninit_context(&ctx->ibv_ctx);
	free(ctx);
}

static const struct verbs_context_ops fldnic_ctx_ops = {
	.query_device_ex = fldnic_query_device,
	.query_port = fldnic_query_port,
	.alloc_pd = fldnic_alloc_pd,
	.dealloc_pd = fldnic_dealloc_pd,
	.free_context = fldnic_free_context,
};

static struct verbs_context *fldnic_alloc_context(struct ibv_device *ibdev, int cmd_fd,
						  void *private_data)
{
	struct ib_uverbs_get_context_resp resp;
	struct ibv_get_context cmd;
	struct fldnic_context *ctx;

	ctx = verbs_init_and_alloc_context(ibdev, cmd_fd, ctx, ibv_ctx, RDMA_DRIVER_UNKNOWN);
	if (!ctx)
		return NULL;
	if (ibv_cmd_get_context(&ctx->ibv_ctx, &cmd, sizeof(cmd), &resp, sizeof(resp))) {
		verbs_uninit_context(&ctx->ibv_ctx);
		free(ctx);
		return NULL;
	}
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
	.match_min_abi_version = 1,
	.match_max_abi_version = 1,
	.match_table = fldnic_match_table,
	.alloc_device = fldnic_alloc_device,
	.uninit_device = fldnic_uninit_device,
	.alloc_context = fldnic_alloc_context,
};

PROVIDER_DRIVER(fldnic, fldnic_dev_ops);
