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
#define FLDNIC_OP_CREATE_RSS_GROUP 0x150
#define FLDNIC_OP_DESTROY_RSS_GROUP 0x151
#define FLDNIC_OP_CREATE_FLOW_TABLE 0x160
#define FLDNIC_OP_DESTROY_FLOW_TABLE 0x161
#define FLDNIC_OP_SET_FLOW_TABLE_ROOT 0x162
#define FLDNIC_OP_CREATE_FLOW_ENTRY 0x170
#define FLDNIC_OP_DESTROY_FLOW_ENTRY 0x171
#define FLDNIC_OP_CREATE_PD 0x200
#define FLDNIC_OP_DESTROY_PD 0x201
#define FLDNIC_OP_CREATE_MR 0x210
#define FLDNIC_OP_DESTROY_MR 0x211
#define FLDNIC_OP_SET_ROCE_ADDRESS 0x220
#define FLDNIC_OP_CREATE_QP 0x230
#define FLDNIC_OP_MODIFY_QP 0x231
#define FLDNIC_OP_QUERY_QP 0x232
#define FLDNIC_OP_DESTROY_QP 0x233
#define FLDNIC_OP_CREATE_SRQ 0x240
#define FLDNIC_OP_DESTROY_SRQ 0x241
#define FLDNIC_OP_ARM_SRQ 0x243
#define FLDNIC_OP_QUERY_RDMA_COUNTERS 0x250

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
#define FLDNIC_DB_PI_MASK 0xffff
#define FLDNIC_DB_CI_MASK 0xffffff
#define FLDNIC_DB_ARM_SN_SHIFT 0x1c
#define FLDNIC_DB_ARM_SN_MASK 0x3
#define FLDNIC_DB_ARM 0x80000000
#define FLDNIC_DB_QP_SQ_BASE 0x10000
#define FLDNIC_DB_QP_RQ_BASE 0x20000
#define FLDNIC_DB_SRQ_BASE 0x30000
#define FLDNIC_DB_QP_SLOTS 0x4000

/* Queue entry formats */
#define FLDNIC_CQE_SIZE 0x40
#define FLDNIC_EQE_SIZE 0x40
#define FLDNIC_INVALID_OWNER_BYTE 0xf1
#define FLDNIC_CQE_INVALID 0xf
#define FLDNIC_CQE_REQ 0x0
#define FLDNIC_CQE_RESP_SEND 0x2
#define FLDNIC_CQE_REQ_ERR 0xd
#define FLDNIC_CQE_RESP_ERR 0xe
#define FLDNIC_WQEBB 0x40
#define FLDNIC_DS_SIZE 0x10
#define FLDNIC_WQE_OP_SEND 0xa
#define FLDNIC_WQE_OP_SEND_MPW 0x29
#define FLDNIC_MAX_MPW_PACKETS 0x1e
#define FLDNIC_CE_ALWAYS 0x8
#define FLDNIC_CS_L3 0x1
#define FLDNIC_CS_L4 0x2
#define FLDNIC_QUEUE_READY 0x1
#define FLDNIC_CE_ON_ERROR 0x0
#define FLDNIC_RECV_WQE_SIZE 0x10
#define FLDNIC_RQ_TYPE_REGULAR 0x0
#define FLDNIC_RESERVED_LKEY 0x0
#define FLDNIC_EQE_COMPLETION 0x0
#define FLDNIC_EQE_CQ_ERROR 0x4
#define FLDNIC_EQE_QUEUE_ERROR 0x13
#define FLDNIC_CQE_CSUM_L3_OK 0x2
#define FLDNIC_CQE_CSUM_L4_OK 0x8
#define FLDNIC_CQE_CSUM_L4_PRESENT 0x4

/* Receive steering */
#define FLDNIC_TABLE_KIND_NIC_RX 0x1
#define FLDNIC_MISS_DROP 0x1
#define FLDNIC_NO_TABLE 0xffffffff
#define FLDNIC_ACTION_FWD_RQ 0x2
#define FLDNIC_ACTION_FWD_RSS 0x4
#define FLDNIC_RSS_FIELDS_ALL 0xf
#define FLDNIC_RSS_KEY_LEN 0x28
#define FLDNIC_RSS_MAX_INDIRECTION 0x100
#define FLDNIC_FLOW_MATCH_LEN 0x50

/* RDMA */
#define FLDNIC_ROCE_ADDRESS_ENTRIES 0x10
#define FLDNIC_ROCE_ADDRESS_VALID 0x1
#define FLDNIC_PKEY_TABLE_ENTRIES 0x40
#define FLDNIC_QPN_BASE 0x100
#define FLDNIC_NO_SRQ 0xffffffff
#define FLDNIC_QP_FLAG_SIGNAL_ALL 0x1
#define FLDNIC_MIN_LOG_RQ_STRIDE 0x4
#define FLDNIC_MAX_LOG_RQ_STRIDE 0x9
#define FLDNIC_MIN_LOG_MR_PAGE 0xc
#define FLDNIC_MAX_LOG_MR_PAGE 0x1e
#define FLDNIC_MTT_ENTRY_SIZE 0x8
#define FLDNIC_MAX_RD_ATOMIC 0x10
#define FLDNIC_MAX_INLINE_DATA 0x200
#define FLDNIC_MAX_SEND_SGE 0x1e
#define FLDNIC_INLINE_SEG 0x80000000
#define FLDNIC_RECV_SGE_END 0x100
#define FLDNIC_ACCESS_LOCAL_WRITE 0x1
#define FLDNIC_ACCESS_REMOTE_WRITE 0x2
#define FLDNIC_ACCESS_REMOTE_READ 0x4
#define FLDNIC_ACCESS_REMOTE_ATOMIC 0x8
#define FLDNIC_QPS_RESET 0x0
#define FLDNIC_QPS_INIT 0x1
#define FLDNIC_QPS_RTR 0x2
#define FLDNIC_QPS_RTS 0x3
#define FLDNIC_QPS_SQD 0x4
#define FLDNIC_QPS_SQE 0x5
#define FLDNIC_QPS_ERR 0x6
#define FLDNIC_QP_ATTR_STATE 0x1
#define FLDNIC_QP_ATTR_CUR_STATE 0x2
#define FLDNIC_QP_ATTR_ACCESS_FLAGS 0x8
#define FLDNIC_QP_ATTR_PKEY_INDEX 0x10
#define FLDNIC_QP_ATTR_PORT 0x20
#define FLDNIC_QP_ATTR_AV 0x80
#define FLDNIC_QP_ATTR_PATH_MTU 0x100
#define FLDNIC_QP_ATTR_TIMEOUT 0x200
#define FLDNIC_QP_ATTR_RETRY_CNT 0x400
#define FLDNIC_QP_ATTR_RNR_RETRY 0x800
#define FLDNIC_QP_ATTR_RQ_PSN 0x1000
#define FLDNIC_QP_ATTR_MAX_QP_RD_ATOMIC 0x2000
#define FLDNIC_QP_ATTR_MIN_RNR_TIMER 0x8000
#define FLDNIC_QP_ATTR_SQ_PSN 0x10000
#define FLDNIC_QP_ATTR_MAX_DEST_RD_ATOMIC 0x20000
#define FLDNIC_QP_ATTR_DEST_QPN 0x100000
#define FLDNIC_QP_ATTR_KNOWN 0x13bfbb
#define FLDNIC_WQE_OP_RDMA_WRITE 0x8
#define FLDNIC_WQE_OP_RDMA_WRITE_IMM 0x9
#define FLDNIC_WQE_OP_SEND_IMM 0xb
#define FLDNIC_WQE_OP_RDMA_READ 0x10
#define FLDNIC_WQE_OP_ATOMIC_CS 0x11
#define FLDNIC_WQE_OP_ATOMIC_FA 0x12
#define FLDNIC_WQE_SOLICITED 0x2
#define FLDNIC_WQE_FENCE 0x20
#define FLDNIC_CQE_RESP_WRITE_IMM 0x1
#define FLDNIC_CQE_RESP_SEND_IMM 0x3
#define FLDNIC_CQE_FLAG_QP 0x8
#define FLDNIC_CQE_FLAG_SRQ 0x10
#define FLDNIC_CQE_FLAG_SOLICITED 0x20
#define FLDNIC_EQE_QP_EVENT 0x20
#define FLDNIC_EQE_SRQ_LIMIT 0x21
#define FLDNIC_QP_EVENT_FATAL 0x1
#define FLDNIC_QP_EVENT_SQ_DRAINED 0x2
#define FLDNIC_QP_EVENT_COMM_ESTABLISHED 0x3
#define FLDNIC_QP_EVENT_LAST_WQE_REACHED 0x4
#define FLDNIC_WC_SUCCESS 0x0
#define FLDNIC_WC_LOCAL_LENGTH 0x1
#define FLDNIC_WC_LOCAL_QP_OPERATION 0x2
#define FLDNIC_WC_LOCAL_PROTECTION 0x4
#define FLDNIC_WC_WR_FLUSH 0x5
#define FLDNIC_WC_BAD_RESPONSE 0x10
#define FLDNIC_WC_LOCAL_ACCESS 0x11
#define FLDNIC_WC_REMOTE_INVALID_REQUEST 0x12
#define FLDNIC_WC_REMOTE_ACCESS 0x13
#define FLDNIC_WC_REMOTE_OPERATION 0x14
#define FLDNIC_WC_RETRY_EXCEEDED 0x15
#define FLDNIC_WC_RNR_RETRY_EXCEEDED 0x16

struct fldnic_cmd_in_header {
	__le16 opcode;
	__le16 op_mod;
	__u8 rsvd[12];
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_cmd_in_header) == 16, "fldnic_cmd_in_header: size");
_Static_assert(offsetof(struct fldnic_cmd_in_header, opcode) == 0, "fldnic_cmd_in_header.opcode");
_Static_assert(offsetof(struct fldnic_cmd_in_header, op_mod) == 2, "fldnic_cmd_in_header.op_mod");
_Static_assert(offsetof(struct fldnic_cmd_in_header, rsvd) == 4, "fldnic_cmd_in_header.rsvd");

struct fldnic_cmd_out_header {
	__u8 status;
	__u8 rsvd[3];
	__le32 syndrome;
	__u8 rsvd2[8];
} __attribute__((packed));
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
} __attribute__((packed));
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

struct fldnic_object_in {
	__le32 id;
	__u8 rsvd[4];
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_object_in) == 8, "fldnic_object_in: size");
_Static_assert(offsetof(struct fldnic_object_in, id) == 0, "fldnic_object_in.id");
_Static_assert(offsetof(struct fldnic_object_in, rsvd) == 4, "fldnic_object_in.rsvd");

struct fldnic_create_out {
	__le32 id;
	__u8 rsvd[4];
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_create_out) == 8, "fldnic_create_out: size");
_Static_assert(offsetof(struct fldnic_create_out, id) == 0, "fldnic_create_out.id");
_Static_assert(offsetof(struct fldnic_create_out, rsvd) == 4, "fldnic_create_out.rsvd");

struct fldnic_create_eq_in {
	__le64 addr;
	__u8 log_size;
	__u8 rsvd;
	__le16 msix_vector;
	__u8 rsvd2[4];
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_create_eq_in) == 16, "fldnic_create_eq_in: size");
_Static_assert(offsetof(struct fldnic_create_eq_in, addr) == 0, "fldnic_create_eq_in.addr");
_Static_assert(offsetof(struct fldnic_create_eq_in, log_size) == 8, "fldnic_create_eq_in.log_size");
_Static_assert(offsetof(struct fldnic_create_eq_in, rsvd) == 9, "fldnic_create_eq_in.rsvd");
_Static_assert(offsetof(struct fldnic_create_eq_in, msix_vector) == 10, "fldnic_create_eq_in.msix_vector");
_Static_assert(offsetof(struct fldnic_create_eq_in, rsvd2) == 12, "fldnic_create_eq_in.rsvd2");

struct fldnic_create_cq_in {
	__le64 addr;
	__le32 eqn;
	__u8 log_size;
	__u8 rsvd[3];
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_create_cq_in) == 16, "fldnic_create_cq_in: size");
_Static_assert(offsetof(struct fldnic_create_cq_in, addr) == 0, "fldnic_create_cq_in.addr");
_Static_assert(offsetof(struct fldnic_create_cq_in, eqn) == 8, "fldnic_create_cq_in.eqn");
_Static_assert(offsetof(struct fldnic_create_cq_in, log_size) == 12, "fldnic_create_cq_in.log_size");
_Static_assert(offsetof(struct fldnic_create_cq_in, rsvd) == 13, "fldnic_create_cq_in.rsvd");

struct fldnic_create_sq_in {
	__le64 addr;
	__le32 cqn;
	__u8 log_size;
	__u8 flags;
	__u8 rsvd[2];
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_create_sq_in) == 16, "fldnic_create_sq_in: size");
_Static_assert(offsetof(struct fldnic_create_sq_in, addr) == 0, "fldnic_create_sq_in.addr");
_Static_assert(offsetof(struct fldnic_create_sq_in, cqn) == 8, "fldnic_create_sq_in.cqn");
_Static_assert(offsetof(struct fldnic_create_sq_in, log_size) == 12, "fldnic_create_sq_in.log_size");
_Static_assert(offsetof(struct fldnic_create_sq_in, flags) == 13, "fldnic_create_sq_in.flags");
_Static_assert(offsetof(struct fldnic_create_sq_in, rsvd) == 14, "fldnic_create_sq_in.rsvd");

struct fldnic_create_rq_in {
	__le64 addr;
	__le32 cqn;
	__u8 log_size;
	__u8 rq_type;
	__u8 log_stride_size;
	__u8 log_strides;
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_create_rq_in) == 16, "fldnic_create_rq_in: size");
_Static_assert(offsetof(struct fldnic_create_rq_in, addr) == 0, "fldnic_create_rq_in.addr");
_Static_assert(offsetof(struct fldnic_create_rq_in, cqn) == 8, "fldnic_create_rq_in.cqn");
_Static_assert(offsetof(struct fldnic_create_rq_in, log_size) == 12, "fldnic_create_rq_in.log_size");
_Static_assert(offsetof(struct fldnic_create_rq_in, rq_type) == 13, "fldnic_create_rq_in.rq_type");
_Static_assert(offsetof(struct fldnic_create_rq_in, log_stride_size) == 14, "fldnic_create_rq_in.log_stride_size");
_Static_assert(offsetof(struct fldnic_create_rq_in, log_strides) == 15, "fldnic_create_rq_in.log_strides");

struct fldnic_modify_queue_in {
	__le32 id;
	__u8 new_state;
	__u8 rsvd[3];
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_modify_queue_in) == 8, "fldnic_modify_queue_in: size");
_Static_assert(offsetof(struct fldnic_modify_queue_in, id) == 0, "fldnic_modify_queue_in.id");
_Static_assert(offsetof(struct fldnic_modify_queue_in, new_state) == 4, "fldnic_modify_queue_in.new_state");
_Static_assert(offsetof(struct fldnic_modify_queue_in, rsvd) == 5, "fldnic_modify_queue_in.rsvd");

struct fldnic_eqe {
	__u8 event_type;
	__u8 subtype;
	__u8 rsvd[2];
	__le32 data;
	__u8 rsvd2[55];
	__u8 owner;
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_eqe) == 64, "fldnic_eqe: size");
_Static_assert(offsetof(struct fldnic_eqe, event_type) == 0, "fldnic_eqe.event_type");
_Static_assert(offsetof(struct fldnic_eqe, subtype) == 1, "fldnic_eqe.subtype");
_Static_assert(offsetof(struct fldnic_eqe, rsvd) == 2, "fldnic_eqe.rsvd");
_Static_assert(offsetof(struct fldnic_eqe, data) == 4, "fldnic_eqe.data");
_Static_assert(offsetof(struct fldnic_eqe, rsvd2) == 8, "fldnic_eqe.rsvd2");
_Static_assert(offsetof(struct fldnic_eqe, owner) == 63, "fldnic_eqe.owner");

struct fldnic_cqe {
	__le32 flow_tag;
	__le32 rss_hash;
	__le32 byte_count;
	__le16 wqe_counter;
	__le16 stride_index;
	__le16 consumed_strides;
	__u8 csum;
	__u8 flags;
	__le32 qn;
	__le64 timestamp;
	__le32 metadata;
	__le16 vport;
	__le32 imm;
	__u8 wqe_opcode;
	__u8 rsvd[18];
	__u8 syndrome;
	__u8 rsvd2;
	__u8 op_own;
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_cqe) == 64, "fldnic_cqe: size");
_Static_assert(offsetof(struct fldnic_cqe, flow_tag) == 0, "fldnic_cqe.flow_tag");
_Static_assert(offsetof(struct fldnic_cqe, rss_hash) == 4, "fldnic_cqe.rss_hash");
_Static_assert(offsetof(struct fldnic_cqe, byte_count) == 8, "fldnic_cqe.byte_count");
_Static_assert(offsetof(struct fldnic_cqe, wqe_counter) == 12, "fldnic_cqe.wqe_counter");
_Static_assert(offsetof(struct fldnic_cqe, stride_index) == 14, "fldnic_cqe.stride_index");
_Static_assert(offsetof(struct fldnic_cqe, consumed_strides) == 16, "fldnic_cqe.consumed_strides");
_Static_assert(offsetof(struct fldnic_cqe, csum) == 18, "fldnic_cqe.csum");
_Static_assert(offsetof(struct fldnic_cqe, flags) == 19, "fldnic_cqe.flags");
_Static_assert(offsetof(struct fldnic_cqe, qn) == 20, "fldnic_cqe.qn");
_Static_assert(offsetof(struct fldnic_cqe, timestamp) == 24, "fldnic_cqe.timestamp");
_Static_assert(offsetof(struct fldnic_cqe, metadata) == 32, "fldnic_cqe.metadata");
_Static_assert(offsetof(struct fldnic_cqe, vport) == 36, "fldnic_cqe.vport");
_Static_assert(offsetof(struct fldnic_cqe, imm) == 38, "fldnic_cqe.imm");
_Static_assert(offsetof(struct fldnic_cqe, wqe_opcode) == 42, "fldnic_cqe.wqe_opcode");
_Static_assert(offsetof(struct fldnic_cqe, rsvd) == 43, "fldnic_cqe.rsvd");
_Static_assert(offsetof(struct fldnic_cqe, syndrome) == 61, "fldnic_cqe.syndrome");
_Static_assert(offsetof(struct fldnic_cqe, rsvd2) == 62, "fldnic_cqe.rsvd2");
_Static_assert(offsetof(struct fldnic_cqe, op_own) == 63, "fldnic_cqe.op_own");

struct fldnic_ctrl_seg {
	__u8 opcode;
	__u8 rsvd;
	__le16 wqe_index;
	__u8 ds_count;
	__u8 fm_ce_se;
	__le16 rsvd2;
	__le32 sqn;
	__le32 imm;
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_ctrl_seg) == 16, "fldnic_ctrl_seg: size");
_Static_assert(offsetof(struct fldnic_ctrl_seg, opcode) == 0, "fldnic_ctrl_seg.opcode");
_Static_assert(offsetof(struct fldnic_ctrl_seg, rsvd) == 1, "fldnic_ctrl_seg.rsvd");
_Static_assert(offsetof(struct fldnic_ctrl_seg, wqe_index) == 2, "fldnic_ctrl_seg.wqe_index");
_Static_assert(offsetof(struct fldnic_ctrl_seg, ds_count) == 4, "fldnic_ctrl_seg.ds_count");
_Static_assert(offsetof(struct fldnic_ctrl_seg, fm_ce_se) == 5, "fldnic_ctrl_seg.fm_ce_se");
_Static_assert(offsetof(struct fldnic_ctrl_seg, rsvd2) == 6, "fldnic_ctrl_seg.rsvd2");
_Static_assert(offsetof(struct fldnic_ctrl_seg, sqn) == 8, "fldnic_ctrl_seg.sqn");
_Static_assert(offsetof(struct fldnic_ctrl_seg, imm) == 12, "fldnic_ctrl_seg.imm");

struct fldnic_eth_seg {
	__u8 cs_flags;
	__u8 flags;
	__u8 rsvd[2];
	__u8 rsvd2[6];
	__le16 mss;
	__le16 inline_hdr_size;
	__u8 inline_start[2];
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_eth_seg) == 16, "fldnic_eth_seg: size");
_Static_assert(offsetof(struct fldnic_eth_seg, cs_flags) == 0, "fldnic_eth_seg.cs_flags");
_Static_assert(offsetof(struct fldnic_eth_seg, flags) == 1, "fldnic_eth_seg.flags");
_Static_assert(offsetof(struct fldnic_eth_seg, rsvd) == 2, "fldnic_eth_seg.rsvd");
_Static_assert(offsetof(struct fldnic_eth_seg, rsvd2) == 4, "fldnic_eth_seg.rsvd2");
_Static_assert(offsetof(struct fldnic_eth_seg, mss) == 10, "fldnic_eth_seg.mss");
_Static_assert(offsetof(struct fldnic_eth_seg, inline_hdr_size) == 12, "fldnic_eth_seg.inline_hdr_size");
_Static_assert(offsetof(struct fldnic_eth_seg, inline_start) == 14, "fldnic_eth_seg.inline_start");

struct fldnic_query_vport_in {
	__le16 vport;
	__u8 rsvd[6];
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_query_vport_in) == 8, "fldnic_query_vport_in: size");
_Static_assert(offsetof(struct fldnic_query_vport_in, vport) == 0, "fldnic_query_vport_in.vport");
_Static_assert(offsetof(struct fldnic_query_vport_in, rsvd) == 2, "fldnic_query_vport_in.rsvd");

struct fldnic_query_vport_out {
	__u8 mac[6];
	__u8 up;
	__u8 rsvd;
	__le64 tx_packets;
	__le64 tx_bytes;
	__le64 rx_packets;
	__le64 rx_bytes;
	__le64 rx_steering_drops;
	__le64 rx_no_steering;
	__le64 rx_out_of_buffer;
	__le64 tx_malformed;
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_query_vport_out) == 72, "fldnic_query_vport_out: size");
_Static_assert(offsetof(struct fldnic_query_vport_out, mac) == 0, "fldnic_query_vport_out.mac");
_Static_assert(offsetof(struct fldnic_query_vport_out, up) == 6, "fldnic_query_vport_out.up");
_Static_assert(offsetof(struct fldnic_query_vport_out, rsvd) == 7, "fldnic_query_vport_out.rsvd");
_Static_assert(offsetof(struct fldnic_query_vport_out, tx_packets) == 8, "fldnic_query_vport_out.tx_packets");
_Static_assert(offsetof(struct fldnic_query_vport_out, tx_bytes) == 16, "fldnic_query_vport_out.tx_bytes");
_Static_assert(offsetof(struct fldnic_query_vport_out, rx_packets) == 24, "fldnic_query_vport_out.rx_packets");
_Static_assert(offsetof(struct fldnic_query_vport_out, rx_bytes) == 32, "fldnic_query_vport_out.rx_bytes");
_Static_assert(offsetof(struct fldnic_query_vport_out, rx_steering_drops) == 40, "fldnic_query_vport_out.rx_steering_drops");
_Static_assert(offsetof(struct fldnic_query_vport_out, rx_no_steering) == 48, "fldnic_query_vport_out.rx_no_steering");
_Static_assert(offsetof(struct fldnic_query_vport_out, rx_out_of_buffer) == 56, "fldnic_query_vport_out.rx_out_of_buffer");
_Static_assert(offsetof(struct fldnic_query_vport_out, tx_malformed) == 64, "fldnic_query_vport_out.tx_malformed");

struct fldnic_create_rss_group_in {
	__u8 key[40];
	__u8 hash_fields;
	__u8 rsvd;
	__le16 indirection_len;
	__u8 rsvd2[4];
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_create_rss_group_in) == 48, "fldnic_create_rss_group_in: size");
_Static_assert(offsetof(struct fldnic_create_rss_group_in, key) == 0, "fldnic_create_rss_group_in.key");
_Static_assert(offsetof(struct fldnic_create_rss_group_in, hash_fields) == 40, "fldnic_create_rss_group_in.hash_fields");
_Static_assert(offsetof(struct fldnic_create_rss_group_in, rsvd) == 41, "fldnic_create_rss_group_in.rsvd");
_Static_assert(offsetof(struct fldnic_create_rss_group_in, indirection_len) == 42, "fldnic_create_rss_group_in.indirection_len");
_Static_assert(offsetof(struct fldnic_create_rss_group_in, rsvd2) == 44, "fldnic_create_rss_group_in.rsvd2");

struct fldnic_create_flow_table_in {
	__u8 kind;
	__u8 level;
	__u8 miss;
	__u8 rsvd;
	__le32 miss_table;
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_create_flow_table_in) == 8, "fldnic_create_flow_table_in: size");
_Static_assert(offsetof(struct fldnic_create_flow_table_in, kind) == 0, "fldnic_create_flow_table_in.kind");
_Static_assert(offsetof(struct fldnic_create_flow_table_in, level) == 1, "fldnic_create_flow_table_in.level");
_Static_assert(offsetof(struct fldnic_create_flow_table_in, miss) == 2, "fldnic_create_flow_table_in.miss");
_Static_assert(offsetof(struct fldnic_create_flow_table_in, rsvd) == 3, "fldnic_create_flow_table_in.rsvd");
_Static_assert(offsetof(struct fldnic_create_flow_table_in, miss_table) == 4, "fldnic_create_flow_table_in.miss_table");

struct fldnic_set_root_in {
	__u8 kind;
	__u8 rsvd[3];
	__le32 table;
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_set_root_in) == 8, "fldnic_set_root_in: size");
_Static_assert(offsetof(struct fldnic_set_root_in, kind) == 0, "fldnic_set_root_in.kind");
_Static_assert(offsetof(struct fldnic_set_root_in, rsvd) == 1, "fldnic_set_root_in.rsvd");
_Static_assert(offsetof(struct fldnic_set_root_in, table) == 4, "fldnic_set_root_in.table");

struct fldnic_create_flow_entry_in {
	__le32 table;
	__le16 priority;
	__le16 rsvd;
	__u8 mask[80];
	__u8 value[80];
	__le32 actions;
	__le16 vport;
	__le16 rsvd2;
	__le32 dest;
	__le32 flow_tag;
	__le32 meter;
	__le32 encap;
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_create_flow_entry_in) == 192, "fldnic_create_flow_entry_in: size");
_Static_assert(offsetof(struct fldnic_create_flow_entry_in, table) == 0, "fldnic_create_flow_entry_in.table");
_Static_assert(offsetof(struct fldnic_create_flow_entry_in, priority) == 4, "fldnic_create_flow_entry_in.priority");
_Static_assert(offsetof(struct fldnic_create_flow_entry_in, rsvd) == 6, "fldnic_create_flow_entry_in.rsvd");
_Static_assert(offsetof(struct fldnic_create_flow_entry_in, mask) == 8, "fldnic_create_flow_entry_in.mask");
_Static_assert(offsetof(struct fldnic_create_flow_entry_in, value) == 88, "fldnic_create_flow_entry_in.value");
_Static_assert(offsetof(struct fldnic_create_flow_entry_in, actions) == 168, "fldnic_create_flow_entry_in.actions");
_Static_assert(offsetof(struct fldnic_create_flow_entry_in, vport) == 172, "fldnic_create_flow_entry_in.vport");
_Static_assert(offsetof(struct fldnic_create_flow_entry_in, rsvd2) == 174, "fldnic_create_flow_entry_in.rsvd2");
_Static_assert(offsetof(struct fldnic_create_flow_entry_in, dest) == 176, "fldnic_create_flow_entry_in.dest");
_Static_assert(offsetof(struct fldnic_create_flow_entry_in, flow_tag) == 180, "fldnic_create_flow_entry_in.flow_tag");
_Static_assert(offsetof(struct fldnic_create_flow_entry_in, meter) == 184, "fldnic_create_flow_entry_in.meter");
_Static_assert(offsetof(struct fldnic_create_flow_entry_in, encap) == 188, "fldnic_create_flow_entry_in.encap");

struct fldnic_roce_address_in {
	__le16 index;
	__u8 flags;
	__u8 rsvd[5];
	__u8 gid[16];
	__u8 mac[6];
	__u8 rsvd2[2];
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_roce_address_in) == 32, "fldnic_roce_address_in: size");
_Static_assert(offsetof(struct fldnic_roce_address_in, index) == 0, "fldnic_roce_address_in.index");
_Static_assert(offsetof(struct fldnic_roce_address_in, flags) == 2, "fldnic_roce_address_in.flags");
_Static_assert(offsetof(struct fldnic_roce_address_in, rsvd) == 3, "fldnic_roce_address_in.rsvd");
_Static_assert(offsetof(struct fldnic_roce_address_in, gid) == 8, "fldnic_roce_address_in.gid");
_Static_assert(offsetof(struct fldnic_roce_address_in, mac) == 24, "fldnic_roce_address_in.mac");
_Static_assert(offsetof(struct fldnic_roce_address_in, rsvd2) == 30, "fldnic_roce_address_in.rsvd2");

struct fldnic_data_seg {
	__le32 byte_count;
	__le32 lkey;
	__le64 addr;
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_data_seg) == 16, "fldnic_data_seg: size");
_Static_assert(offsetof(struct fldnic_data_seg, byte_count) == 0, "fldnic_data_seg.byte_count");
_Static_assert(offsetof(struct fldnic_data_seg, lkey) == 4, "fldnic_data_seg.lkey");
_Static_assert(offsetof(struct fldnic_data_seg, addr) == 8, "fldnic_data_seg.addr");

struct fldnic_remote_addr_seg {
	__le64 addr;
	__le32 rkey;
	__le32 rsvd;
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_remote_addr_seg) == 16, "fldnic_remote_addr_seg: size");
_Static_assert(offsetof(struct fldnic_remote_addr_seg, addr) == 0, "fldnic_remote_addr_seg.addr");
_Static_assert(offsetof(struct fldnic_remote_addr_seg, rkey) == 8, "fldnic_remote_addr_seg.rkey");
_Static_assert(offsetof(struct fldnic_remote_addr_seg, rsvd) == 12, "fldnic_remote_addr_seg.rsvd");

struct fldnic_atomic_seg {
	__le64 swap_add;
	__le64 compare;
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_atomic_seg) == 16, "fldnic_atomic_seg: size");
_Static_assert(offsetof(struct fldnic_atomic_seg, swap_add) == 0, "fldnic_atomic_seg.swap_add");
_Static_assert(offsetof(struct fldnic_atomic_seg, compare) == 8, "fldnic_atomic_seg.compare");

struct fldnic_create_mr_in {
	__le32 pd;
	__le32 access;
	__le64 start;
	__le64 length;
	__le64 mtt_addr;
	__u8 log_page_size;
	__u8 flags;
	__u8 rsvd[2];
	__le32 peer_key;
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_create_mr_in) == 40, "fldnic_create_mr_in: size");
_Static_assert(offsetof(struct fldnic_create_mr_in, pd) == 0, "fldnic_create_mr_in.pd");
_Static_assert(offsetof(struct fldnic_create_mr_in, access) == 4, "fldnic_create_mr_in.access");
_Static_assert(offsetof(struct fldnic_create_mr_in, start) == 8, "fldnic_create_mr_in.start");
_Static_assert(offsetof(struct fldnic_create_mr_in, length) == 16, "fldnic_create_mr_in.length");
_Static_assert(offsetof(struct fldnic_create_mr_in, mtt_addr) == 24, "fldnic_create_mr_in.mtt_addr");
_Static_assert(offsetof(struct fldnic_create_mr_in, log_page_size) == 32, "fldnic_create_mr_in.log_page_size");
_Static_assert(offsetof(struct fldnic_create_mr_in, flags) == 33, "fldnic_create_mr_in.flags");
_Static_assert(offsetof(struct fldnic_create_mr_in, rsvd) == 34, "fldnic_create_mr_in.rsvd");
_Static_assert(offsetof(struct fldnic_create_mr_in, peer_key) == 36, "fldnic_create_mr_in.peer_key");

struct fldnic_create_qp_in {
	__le32 pd;
	__le32 send_cqn;
	__le32 recv_cqn;
	__le32 srqn;
	__le64 sq_addr;
	__le64 rq_addr;
	__u8 log_sq_size;
	__u8 log_rq_size;
	__u8 log_rq_stride;
	__u8 flags;
	__u8 rsvd[4];
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_create_qp_in) == 40, "fldnic_create_qp_in: size");
_Static_assert(offsetof(struct fldnic_create_qp_in, pd) == 0, "fldnic_create_qp_in.pd");
_Static_assert(offsetof(struct fldnic_create_qp_in, send_cqn) == 4, "fldnic_create_qp_in.send_cqn");
_Static_assert(offsetof(struct fldnic_create_qp_in, recv_cqn) == 8, "fldnic_create_qp_in.recv_cqn");
_Static_assert(offsetof(struct fldnic_create_qp_in, srqn) == 12, "fldnic_create_qp_in.srqn");
_Static_assert(offsetof(struct fldnic_create_qp_in, sq_addr) == 16, "fldnic_create_qp_in.sq_addr");
_Static_assert(offsetof(struct fldnic_create_qp_in, rq_addr) == 24, "fldnic_create_qp_in.rq_addr");
_Static_assert(offsetof(struct fldnic_create_qp_in, log_sq_size) == 32, "fldnic_create_qp_in.log_sq_size");
_Static_assert(offsetof(struct fldnic_create_qp_in, log_rq_size) == 33, "fldnic_create_qp_in.log_rq_size");
_Static_assert(offsetof(struct fldnic_create_qp_in, log_rq_stride) == 34, "fldnic_create_qp_in.log_rq_stride");
_Static_assert(offsetof(struct fldnic_create_qp_in, flags) == 35, "fldnic_create_qp_in.flags");
_Static_assert(offsetof(struct fldnic_create_qp_in, rsvd) == 36, "fldnic_create_qp_in.rsvd");

struct fldnic_qp_attr {
	__u8 qp_state;
	__u8 cur_state;
	__u8 path_mtu;
	__u8 timeout;
	__u8 retry_cnt;
	__u8 rnr_retry;
	__u8 min_rnr_timer;
	__u8 max_rd_atomic;
	__u8 max_dest_rd_atomic;
	__u8 port;
	__u8 sgid_index;
	__u8 hop_limit;
	__u8 traffic_class;
	__u8 rsvd;
	__le16 pkey_index;
	__le32 access_flags;
	__le32 rq_psn;
	__le32 sq_psn;
	__le32 dest_qpn;
	__le32 flow_label;
	__u8 dgid[16];
	__u8 dmac[6];
	__u8 rsvd2[6];
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_qp_attr) == 64, "fldnic_qp_attr: size");
_Static_assert(offsetof(struct fldnic_qp_attr, qp_state) == 0, "fldnic_qp_attr.qp_state");
_Static_assert(offsetof(struct fldnic_qp_attr, cur_state) == 1, "fldnic_qp_attr.cur_state");
_Static_assert(offsetof(struct fldnic_qp_attr, path_mtu) == 2, "fldnic_qp_attr.path_mtu");
_Static_assert(offsetof(struct fldnic_qp_attr, timeout) == 3, "fldnic_qp_attr.timeout");
_Static_assert(offsetof(struct fldnic_qp_attr, retry_cnt) == 4, "fldnic_qp_attr.retry_cnt");
_Static_assert(offsetof(struct fldnic_qp_attr, rnr_retry) == 5, "fldnic_qp_attr.rnr_retry");
_Static_assert(offsetof(struct fldnic_qp_attr, min_rnr_timer) == 6, "fldnic_qp_attr.min_rnr_timer");
_Static_assert(offsetof(struct fldnic_qp_attr, max_rd_atomic) == 7, "fldnic_qp_attr.max_rd_atomic");
_Static_assert(offsetof(struct fldnic_qp_attr, max_dest_rd_atomic) == 8, "fldnic_qp_attr.max_dest_rd_atomic");
_Static_assert(offsetof(struct fldnic_qp_attr, port) == 9, "fldnic_qp_attr.port");
_Static_assert(offsetof(struct fldnic_qp_attr, sgid_index) == 10, "fldnic_qp_attr.sgid_index");
_Static_assert(offsetof(struct fldnic_qp_attr, hop_limit) == 11, "fldnic_qp_attr.hop_limit");
_Static_assert(offsetof(struct fldnic_qp_attr, traffic_class) == 12, "fldnic_qp_attr.traffic_class");
_Static_assert(offsetof(struct fldnic_qp_attr, rsvd) == 13, "fldnic_qp_attr.rsvd");
_Static_assert(offsetof(struct fldnic_qp_attr, pkey_index) == 14, "fldnic_qp_attr.pkey_index");
_Static_assert(offsetof(struct fldnic_qp_attr, access_flags) == 16, "fldnic_qp_attr.access_flags");
_Static_assert(offsetof(struct fldnic_qp_attr, rq_psn) == 20, "fldnic_qp_attr.rq_psn");
_Static_assert(offsetof(struct fldnic_qp_attr, sq_psn) == 24, "fldnic_qp_attr.sq_psn");
_Static_assert(offsetof(struct fldnic_qp_attr, dest_qpn) == 28, "fldnic_qp_attr.dest_qpn");
_Static_assert(offsetof(struct fldnic_qp_attr, flow_label) == 32, "fldnic_qp_attr.flow_label");
_Static_assert(offsetof(struct fldnic_qp_attr, dgid) == 36, "fldnic_qp_attr.dgid");
_Static_assert(offsetof(struct fldnic_qp_attr, dmac) == 52, "fldnic_qp_attr.dmac");
_Static_assert(offsetof(struct fldnic_qp_attr, rsvd2) == 58, "fldnic_qp_attr.rsvd2");

struct fldnic_modify_qp_in {
	__le32 qpn;
	__le32 attr_mask;
	struct fldnic_qp_attr attr;
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_modify_qp_in) == 72, "fldnic_modify_qp_in: size");
_Static_assert(offsetof(struct fldnic_modify_qp_in, qpn) == 0, "fldnic_modify_qp_in.qpn");
_Static_assert(offsetof(struct fldnic_modify_qp_in, attr_mask) == 4, "fldnic_modify_qp_in.attr_mask");
_Static_assert(offsetof(struct fldnic_modify_qp_in, attr) == 8, "fldnic_modify_qp_in.attr");

struct fldnic_query_qp_out {
	struct fldnic_qp_attr attr;
	__le32 next_psn;
	__le32 unacked_psn;
	__le32 expected_psn;
	__le32 rsvd;
	__u8 counters[120];
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_query_qp_out) == 200, "fldnic_query_qp_out: size");
_Static_assert(offsetof(struct fldnic_query_qp_out, attr) == 0, "fldnic_query_qp_out.attr");
_Static_assert(offsetof(struct fldnic_query_qp_out, next_psn) == 64, "fldnic_query_qp_out.next_psn");
_Static_assert(offsetof(struct fldnic_query_qp_out, unacked_psn) == 68, "fldnic_query_qp_out.unacked_psn");
_Static_assert(offsetof(struct fldnic_query_qp_out, expected_psn) == 72, "fldnic_query_qp_out.expected_psn");
_Static_assert(offsetof(struct fldnic_query_qp_out, rsvd) == 76, "fldnic_query_qp_out.rsvd");
_Static_assert(offsetof(struct fldnic_query_qp_out, counters) == 80, "fldnic_query_qp_out.counters");

struct fldnic_create_srq_in {
	__le32 pd;
	__le32 rsvd;
	__le64 addr;
	__u8 log_size;
	__u8 log_stride;
	__u8 rsvd2[6];
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_create_srq_in) == 24, "fldnic_create_srq_in: size");
_Static_assert(offsetof(struct fldnic_create_srq_in, pd) == 0, "fldnic_create_srq_in.pd");
_Static_assert(offsetof(struct fldnic_create_srq_in, rsvd) == 4, "fldnic_create_srq_in.rsvd");
_Static_assert(offsetof(struct fldnic_create_srq_in, addr) == 8, "fldnic_create_srq_in.addr");
_Static_assert(offsetof(struct fldnic_create_srq_in, log_size) == 16, "fldnic_create_srq_in.log_size");
_Static_assert(offsetof(struct fldnic_create_srq_in, log_stride) == 17, "fldnic_create_srq_in.log_stride");
_Static_assert(offsetof(struct fldnic_create_srq_in, rsvd2) == 18, "fldnic_create_srq_in.rsvd2");

struct fldnic_arm_srq_in {
	__le32 srqn;
	__le32 limit;
	__le32 eqn;
	__le32 rsvd;
} __attribute__((packed));
_Static_assert(sizeof(struct fldnic_arm_srq_in) == 16, "fldnic_arm_srq_in: size");
_Static_assert(offsetof(struct fldnic_arm_srq_in, srqn) == 0, "fldnic_arm_srq_in.srqn");
_Static_assert(offsetof(struct fldnic_arm_srq_in, limit) == 4, "fldnic_arm_srq_in.limit");
_Static_assert(offsetof(struct fldnic_arm_srq_in, eqn) == 8, "fldnic_arm_srq_in.eqn");
_Static_assert(offsetof(struct fldnic_arm_srq_in, rsvd) == 12, "fldnic_arm_srq_in.rsvd");

/* QUERY_VPORT's counters (struct fldnic_query_vport_out) by their tool names: { name, offset of the __le64 }. */
#define FLDNIC_VPORT_STATS 8
#define FLDNIC_VPORT_STAT_TABLE \
	{ "rx_packets", 24 }, \
	{ "rx_bytes", 32 }, \
	{ "tx_packets", 8 }, \
	{ "tx_bytes", 16 }, \
	{ "rx_steering_drops", 40 }, \
	{ "rx_steer_missed_packets", 48 }, \
	{ "rx_out_of_buffer", 56 }, \
	{ "tx_malformed", 64 },

/* QUERY_RDMA_COUNTERS's output length. */
#define FLDNIC_RDMA_COUNTERS_LEN 144

/* QUERY_RDMA_COUNTERS's counters by their tool names: { name, offset of the __le64 }. */
#define FLDNIC_RDMA_STATS 18
#define FLDNIC_RDMA_STAT_TABLE \
	{ "rcvd_pkts", 0 }, \
	{ "sent_pkts", 40 }, \
	{ "rx_icrc_encapsulated", 8 }, \
	{ "bad_pkey_cntr", 88 }, \
	{ "rx_unknown_qp", 16 }, \
	{ "rx_malformed", 24 }, \
	{ "rx_qp_not_ready", 32 }, \
	{ "rx_wrong_source", 48 }, \
	{ "qp_cache_hits", 56 }, \
	{ "qp_cache_misses", 64 }, \
	{ "mtt_cache_hits", 72 }, \
	{ "mtt_cache_misses", 80 }, \
	{ "star_served", 96 }, \
	{ "star_refused", 104 }, \
	{ "star_dma_errors", 112 }, \
	{ "star_tx_blocked", 120 }, \
	{ "qp_contexts_connected", 128 }, \
	{ "rx_out_of_order", 136 },

#endif /* FLDNIC_ABI_H */
