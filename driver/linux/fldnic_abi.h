/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * The fldemu card's host interface for C drivers: registers, commands and their
 * layouts (docs/nic-interface.md). Generated from the fld-abi crate by
 * `cargo xtask c-header`; do not edit.
 */
#ifndef FLDNIC_ABI_H
#define FLDNIC_ABI_H

#include <linux/types.h>
#ifdef __KERNEL__
#include <linux/stddef.h>
#else
#include <stddef.h>
#endif

/* PCI identity and BARs */
#define FLDNIC_PCI_VENDOR_ID 0xfff0
#define FLDNIC_PCI_DEVICE_ID 0xf100
#define FLDNIC_BAR_CONTROL 0x0
#define FLDNIC_BAR_DOORBELL 0x2
#define FLDNIC_BAR_MSIX 0x4
#define FLDNIC_BAR_CONTROL_SIZE 0x1000
#define FLDNIC_BAR_DOORBELL_SIZE 0x800000

/* Control registers (BAR0) */
#define FLDNIC_REG_FW_VERSION 0x0
#define FLDNIC_REG_CMD_INTERFACE_REV 0x4
#define FLDNIC_REG_DEVICE_STATUS 0x8
#define FLDNIC_REG_DEVICE_RESET 0xc
#define FLDNIC_REG_CMD_IN_ADDR_LO 0x10
#define FLDNIC_REG_CMD_IN_ADDR_HI 0x14
#define FLDNIC_REG_CMD_OUT_ADDR_LO 0x18
#define FLDNIC_REG_CMD_OUT_ADDR_HI 0x1c
#define FLDNIC_REG_CMD_IN_LEN 0x20
#define FLDNIC_REG_CMD_OUT_LEN 0x24
#define FLDNIC_REG_CMD_DOORBELL 0x28
#define FLDNIC_REG_CMD_STATUS 0x2c
#define FLDNIC_REG_VPORT_NUMBER 0x30
#define FLDNIC_REG_MAC_LO 0x34
#define FLDNIC_REG_MAC_HI 0x38
#define FLDNIC_INTERFACE_REV 0x1
#define FLDNIC_STATUS_READY 0x1
#define FLDNIC_STATUS_FATAL 0x2
#define FLDNIC_RESET_MAGIC 0x1
#define FLDNIC_CMD_STATUS_DONE 0x2
#define FLDNIC_CMD_MAX_LEN 0x1000
#define FLDNIC_CMD_HEADER_LEN 0x10

/* Command opcodes */
#define FLDNIC_OP_QUERY_CAPS 0x100
#define FLDNIC_OP_CREATE_EQ 0x110
#define FLDNIC_OP_DESTROY_EQ 0x111
#define FLDNIC_OP_CREATE_CQ 0x120
#define FLDNIC_OP_DESTROY_CQ 0x121
#define FLDNIC_OP_CREATE_SQ 0x130
#define FLDNIC_OP_DESTROY_SQ 0x131
#define FLDNIC_OP_MODIFY_SQ 0x133
#define FLDNIC_OP_CREATE_RQ 0x140
#define FLDNIC_OP_DESTROY_RQ 0x141
#define FLDNIC_OP_MODIFY_RQ 0x143
#define FLDNIC_OP_QUERY_VPORT 0x180
#define FLDNIC_OP_CREATE_PD 0x200
#define FLDNIC_OP_CREATE_MR 0x210
#define FLDNIC_OP_SET_ROCE_ADDRESS 0x220
#define FLDNIC_OP_CREATE_QP 0x230
#define FLDNIC_OP_MODIFY_QP 0x231
#define FLDNIC_OP_DESTROY_QP 0x233

/* Command statuses (fldnic_cmd_out_header.status) */
#define FLDNIC_CMD_OK 0x0
#define FLDNIC_CMD_BAD_OPCODE 0x2
#define FLDNIC_CMD_BAD_PARAM 0x3
#define FLDNIC_CMD_BAD_STATE 0x4
#define FLDNIC_CMD_BAD_RESOURCE 0x5
#define FLDNIC_CMD_RESOURCE_BUSY 0x6
#define FLDNIC_CMD_EXCEED_LIMIT 0x8
#define FLDNIC_CMD_NOT_PERMITTED 0xa
#define FLDNIC_CMD_BAD_INPUT_LENGTH 0x50
#define FLDNIC_CMD_BAD_OUTPUT_LENGTH 0x51

/* Doorbell pages (BAR2) */
#define FLDNIC_DB_SQ_BASE 0x0
#define FLDNIC_DB_RQ_BASE 0x1000
#define FLDNIC_DB_CQ_BASE 0x2000
#define FLDNIC_DB_EQ_BASE 0x3000

struct fldnic_cmd_in_header {
	__le16 opcode;
	__le16 op_mod;
	__u8 rsvd[12];
};
_Static_assert(sizeof(struct fldnic_cmd_in_header) == 16, "fldnic_cmd_in_header: size");
_Static_assert(offsetof(struct fldnic_cmd_in_header, opcode) == 0, "fldnic_cmd_in_header.opcode");
_Static_assert(offsetof(struct fldnic_cmd_in_header, op_mod) == 2, "fldnic_cmd_in_header.op_mod");
_Static_assert(offsetof(struct fldnic_cmd_in_header, rsvd) == 4, "fldnic_cmd_in_header.rsvd");

struct fldnic_cmd_out_header {
	__u8 status;
	__u8 rsvd[3];
	__le32 syndrome;
	__u8 rsvd2[8];
};
_Static_assert(sizeof(struct fldnic_cmd_out_header) == 16, "fldnic_cmd_out_header: size");
_Static_assert(offsetof(struct fldnic_cmd_out_header, status) == 0, "fldnic_cmd_out_header.status");
_Static_assert(offsetof(struct fldnic_cmd_out_header, rsvd) == 1, "fldnic_cmd_out_header.rsvd");
_Static_assert(offsetof(struct fldnic_cmd_out_header, syndrome) == 4, "fldnic_cmd_out_header.syndrome");
_Static_assert(offsetof(struct fldnic_cmd_out_header, rsvd2) == 8, "fldnic_cmd_out_header.rsvd2");

struct fldnic_caps {
	__le32 max_sqs;
	__le32 max_rqs;
	__le32 max_cqs;
	__le32 max_eqs;
	__u8 max_log_sq_size;
	__u8 max_log_rq_size;
	__u8 max_log_cq_size;
	__u8 max_log_eq_size;
	__u8 min_log_stride_size;
	__u8 max_log_stride_size;
	__u8 min_log_strides;
	__u8 max_log_strides;
	__le32 max_flow_tables;
	__le32 max_flow_entries;
	__le32 max_rss_groups;
	__le16 max_rss_indirection;
	__le16 rss_key_len;
	__le16 msix_vectors;
	__le16 max_wqe_ds;
	__le16 max_inline_header;
	__u8 max_flow_table_level;
	__u8 receiver;
	__le32 max_mtu;
	__le16 vport;
	__u8 is_eswitch_manager;
	__u8 rsvd2;
	__le32 qp_context_cache;
};
_Static_assert(sizeof(struct fldnic_caps) == 60, "fldnic_caps: size");
_Static_assert(offsetof(struct fldnic_caps, max_sqs) == 0, "fldnic_caps.max_sqs");
_Static_assert(offsetof(struct fldnic_caps, max_rqs) == 4, "fldnic_caps.max_rqs");
_Static_assert(offsetof(struct fldnic_caps, max_cqs) == 8, "fldnic_caps.max_cqs");
_Static_assert(offsetof(struct fldnic_caps, max_eqs) == 12, "fldnic_caps.max_eqs");
_Static_assert(offsetof(struct fldnic_caps, max_log_sq_size) == 16, "fldnic_caps.max_log_sq_size");
_Static_assert(offsetof(struct fldnic_caps, max_log_rq_size) == 17, "fldnic_caps.max_log_rq_size");
_Static_assert(offsetof(struct fldnic_caps, max_log_cq_size) == 18, "fldnic_caps.max_log_cq_size");
_Static_assert(offsetof(struct fldnic_caps, max_log_eq_size) == 19, "fldnic_caps.max_log_eq_size");
_Static_assert(offsetof(struct fldnic_caps, min_log_stride_size) == 20, "fldnic_caps.min_log_stride_size");
_Static_assert(offsetof(struct fldnic_caps, max_log_stride_size) == 21, "fldnic_caps.max_log_stride_size");
_Static_assert(offsetof(struct fldnic_caps, min_log_strides) == 22, "fldnic_caps.min_log_strides");
_Static_assert(offsetof(struct fldnic_caps, max_log_strides) == 23, "fldnic_caps.max_log_strides");
_Static_assert(offsetof(struct fldnic_caps, max_flow_tables) == 24, "fldnic_caps.max_flow_tables");
_Static_assert(offsetof(struct fldnic_caps, max_flow_entries) == 28, "fldnic_caps.max_flow_entries");
_Static_assert(offsetof(struct fldnic_caps, max_rss_groups) == 32, "fldnic_caps.max_rss_groups");
_Static_assert(offsetof(struct fldnic_caps, max_rss_indirection) == 36, "fldnic_caps.max_rss_indirection");
_Static_assert(offsetof(struct fldnic_caps, rss_key_len) == 38, "fldnic_caps.rss_key_len");
_Static_assert(offsetof(struct fldnic_caps, msix_vectors) == 40, "fldnic_caps.msix_vectors");
_Static_assert(offsetof(struct fldnic_caps, max_wqe_ds) == 42, "fldnic_caps.max_wqe_ds");
_Static_assert(offsetof(struct fldnic_caps, max_inline_header) == 44, "fldnic_caps.max_inline_header");
_Static_assert(offsetof(struct fldnic_caps, max_flow_table_level) == 46, "fldnic_caps.max_flow_table_level");
_Static_assert(offsetof(struct fldnic_caps, receiver) == 47, "fldnic_caps.receiver");
_Static_assert(offsetof(struct fldnic_caps, max_mtu) == 48, "fldnic_caps.max_mtu");
_Static_assert(offsetof(struct fldnic_caps, vport) == 52, "fldnic_caps.vport");
_Static_assert(offsetof(struct fldnic_caps, is_eswitch_manager) == 54, "fldnic_caps.is_eswitch_manager");
_Static_assert(offsetof(struct fldnic_caps, rsvd2) == 55, "fldnic_caps.rsvd2");
_Static_assert(offsetof(struct fldnic_caps, qp_context_cache) == 56, "fldnic_caps.qp_context_cache");

#endif /* FLDNIC_ABI_H */
