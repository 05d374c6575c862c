// SPDX-License-Identifier: GPL-2.0
/*
 * fldnic: Linux driver for the NIC functions of the fldemu card (docs/linux-driver.md).
 *
 * This part binds a NIC function, checks its command interface, resets it to a clean state,
 * reads its capabilities and registers an Ethernet netdev with the MAC address the card gives
 * the function, with ethtool driver information. Commands go through the BAR0 mailbox
 * (docs/nic-interface.md §2): the input and output buffers are DMA memory, a token written
 * to the doorbell register starts the command and the status register says when it is done.
 *
 * A function-level reset while bound detaches the netdev and brings the function back.
 *
 * Not yet: the data path (rings, NAPI, RSS, offloads) — until then the carrier stays off and
 * transmitted frames are dropped and counted — interrupts, and the RoCE ib_device.
 */

#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/etherdevice.h>
#include <linux/ethtool.h>
#include <linux/io.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/netdevice.h>
#include <linux/pci.h>
#include <linux/rtnetlink.h>

#include "fldnic_abi.h"

#define DRV_NAME "fldnic"

/* A command not done in this long is given up: the device is not answering. */
#define FLDNIC_CMD_TIMEOUT_MS 5000
/* The reset's return to READY. */
#define FLDNIC_RESET_TIMEOUT_MS 5000
/* Ethernet frames above 9000 bytes of MTU are not offered, whatever the card takes. */
#define FLDNIC_MAX_MTU 9000

struct fldnic_cmd {
	struct mutex lock;	/* one command at a time */
	void *in;
	void *out;
	dma_addr_t in_dma;
	dma_addr_t out_dma;
	u16 token;
};

struct fldnic {
	struct pci_dev *pdev;
	struct net_device *netdev;
	void __iomem *bar0;
	struct fldnic_cmd cmd;
	struct fldnic_caps caps;
	u32 fw_version;
};

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
static int fldnic_exec(struct fldnic *nic, u16 opcode, const void *in, size_t in_len,
		       void *out, size_t out_len)
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
		dev_warn(&nic->pdev->dev, "command %#x: status %#x, syndrome %#x\n",
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

static int fldnic_open(struct net_device *ndev)
{
	/* No rings yet: the link is down until the data path exists. */
	netif_carrier_off(ndev);
	netif_start_queue(ndev);
	return 0;
}

static int fldnic_stop(struct net_device *ndev)
{
	netif_stop_queue(ndev);
	return 0;
}

static netdev_tx_t fldnic_start_xmit(struct sk_buff *skb, struct net_device *ndev)
{
	ndev->stats.tx_dropped++;
	dev_kfree_skb_any(skb);
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

static const struct ethtool_ops fldnic_ethtool_ops = {
	.get_drvinfo = fldnic_get_drvinfo,
	.get_link = ethtool_op_get_link,
};

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
	ndev->netdev_ops = &fldnic_netdev_ops;
	ndev->ethtool_ops = &fldnic_ethtool_ops;
	ndev->min_mtu = ETH_MIN_MTU;
	ndev->max_mtu = min_t(u32, le32_to_cpu(nic->caps.max_mtu), FLDNIC_MAX_MTU);
	if (ndev->max_mtu < ETH_MIN_MTU)
		ndev->max_mtu = ETH_DATA_LEN;
	netif_carrier_off(ndev);

	err = register_netdev(ndev);
	if (err)
		goto err_cmd;
	netdev_info(ndev, "vport %u, MAC %pM, firmware %u.%u\n", le16_to_cpu(nic->caps.vport),
		    ndev->dev_addr, nic->fw_version >> 16, nic->fw_version & 0xffff);
	return 0;

err_cmd:
	fldnic_cmd_free(nic);
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

	unregister_netdev(ndev);
	/* Nothing the function made outlives the driver; a failed reset is only logged. */
	fldnic_reset(nic);
	fldnic_cmd_free(nic);
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

	rtnl_lock();
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
	rtnl_unlock();
	netdev_info(nic->netdev, "function reset done\n");
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
module_pci_driver(fldnic_driver);

MODULE_DESCRIPTION("fldemu card NIC functions");
MODULE_LICENSE("GPL");
