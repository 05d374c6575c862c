//! `cargo xtask c-header`: the C view of the card's interface for the drivers the ecosystem
//! fixes in C (the Linux kernel module under `driver/linux/`, later the rdma-core provider and the
//! DPDK PMD), generated from `fld_abi` so the formats are defined once. Every struct is emitted
//! with its fields in order and a `_Static_assert` per field offset and per size, computed here
//! from the Rust layout: a header that disagrees with the Rust types does not compile.
//!
//! Types are the ones both kernel and user space get from `<linux/types.h>`: `__u8`, `__le16`,
//! `__le32`, `__le64`. Structs are packed, as the Rust ones are (their little-endian fields are
//! byte-aligned: a CQE's `imm` sits at offset 38).
//!
//! `--check` compares instead of writing, and fails when the committed header is stale.

use std::fmt::Write as _;
use std::mem::{offset_of, size_of};
use std::path::Path;

use fld_abi::nic::{
    self, access, action, cqe_csum, cqe_flags, db, op, qp_attr, qp_event, rdma_status, reg,
    ArmSrqIn, AtomicSeg, Caps, CmdInHeader, CmdOutHeader, CmdStatus, Cqe, CreateCqIn, CreateEqIn,
    CreateFlowEntryIn, CreateFlowTableIn, CreateMrIn, CreateOut, CreateQpIn, CreateRqIn,
    CreateRssGroupIn, CreateSqIn, CreateSrqIn, CtrlSeg, DataSeg, Eqe, EthSeg, ModifyQpIn,
    ModifyQueueIn, ObjectIn, QpAttr, QpState, QueryQpOut, QueryVportIn, QueryVportOut,
    RdmaCountersOut, RemoteAddrSeg, RoceAddressIn, SetRootIn,
};

/// Where the header lives, relative to the workspace.
pub const HEADER: &str = "driver/linux/fldnic_abi.h";

/// `(C name, value)` constants.
type Consts = &'static [(&'static str, u64)];

/// One field: name, C type, array length (0: not an array), Rust offset.
struct Field(&'static str, &'static str, usize, usize);

/// A struct: C name, fields, Rust size.
struct Struct(&'static str, Vec<Field>, usize);

/// The fields of `$ty` as `name: ctype` or `name: ctype[n]`, offsets taken from Rust.
macro_rules! c_struct {
    ($cname:literal, $ty:ty, { $($f:ident : $cty:literal $([$n:literal])?),* $(,)? }) => {
        Struct(
            $cname,
            vec![$(Field(stringify!($f), $cty, 0 $(+ $n)?, offset_of!($ty, $f))),*],
            size_of::<$ty>(),
        )
    };
}

const PCI: Consts = &[
    ("FLDNIC_PCI_VENDOR_ID", fld_abi::pci::PCI_VENDOR_ID as u64),
    ("FLDNIC_PCI_DEVICE_ID", nic::NIC_DEVICE_ID as u64),
    ("FLDNIC_BAR_CONTROL", nic::BAR_CONTROL as u64),
    ("FLDNIC_BAR_DOORBELL", nic::BAR_DOORBELL as u64),
    ("FLDNIC_BAR_MSIX", nic::BAR_MSIX as u64),
    ("FLDNIC_BAR_CONTROL_SIZE", nic::BAR_CONTROL_SIZE),
    ("FLDNIC_BAR_DOORBELL_SIZE", nic::BAR_DOORBELL_SIZE),
];

const REGISTERS: Consts = &[
    ("FLDNIC_REG_FW_VERSION", reg::FW_VERSION),
    ("FLDNIC_REG_CMD_INTERFACE_REV", reg::CMD_INTERFACE_REV),
    ("FLDNIC_REG_DEVICE_STATUS", reg::DEVICE_STATUS),
    ("FLDNIC_REG_DEVICE_RESET", reg::DEVICE_RESET),
    ("FLDNIC_REG_CMD_IN_ADDR_LO", reg::CMD_IN_ADDR_LO),
    ("FLDNIC_REG_CMD_IN_ADDR_HI", reg::CMD_IN_ADDR_HI),
    ("FLDNIC_REG_CMD_OUT_ADDR_LO", reg::CMD_OUT_ADDR_LO),
    ("FLDNIC_REG_CMD_OUT_ADDR_HI", reg::CMD_OUT_ADDR_HI),
    ("FLDNIC_REG_CMD_IN_LEN", reg::CMD_IN_LEN),
    ("FLDNIC_REG_CMD_OUT_LEN", reg::CMD_OUT_LEN),
    ("FLDNIC_REG_CMD_DOORBELL", reg::CMD_DOORBELL),
    ("FLDNIC_REG_CMD_STATUS", reg::CMD_STATUS),
    ("FLDNIC_REG_VPORT_NUMBER", reg::VPORT_NUMBER),
    ("FLDNIC_REG_MAC_LO", reg::MAC_LO),
    ("FLDNIC_REG_MAC_HI", reg::MAC_HI),
    ("FLDNIC_INTERFACE_REV", nic::INTERFACE_REV as u64),
    ("FLDNIC_STATUS_READY", nic::STATUS_READY as u64),
    ("FLDNIC_STATUS_FATAL", nic::STATUS_FATAL as u64),
    ("FLDNIC_RESET_MAGIC", nic::RESET_MAGIC as u64),
    ("FLDNIC_CMD_STATUS_DONE", nic::CMD_STATUS_DONE as u64),
    ("FLDNIC_CMD_MAX_LEN", nic::CMD_MAX_LEN as u64),
    ("FLDNIC_CMD_HEADER_LEN", nic::CMD_HEADER_LEN as u64),
];

const OPCODES: Consts = &[
    ("FLDNIC_OP_QUERY_CAPS", op::QUERY_CAPS as u64),
    ("FLDNIC_OP_CREATE_EQ", op::CREATE_EQ as u64),
    ("FLDNIC_OP_DESTROY_EQ", op::DESTROY_EQ as u64),
    ("FLDNIC_OP_CREATE_CQ", op::CREATE_CQ as u64),
    ("FLDNIC_OP_DESTROY_CQ", op::DESTROY_CQ as u64),
    ("FLDNIC_OP_CREATE_SQ", op::CREATE_SQ as u64),
    ("FLDNIC_OP_DESTROY_SQ", op::DESTROY_SQ as u64),
    ("FLDNIC_OP_MODIFY_SQ", op::MODIFY_SQ as u64),
    ("FLDNIC_OP_CREATE_RQ", op::CREATE_RQ as u64),
    ("FLDNIC_OP_DESTROY_RQ", op::DESTROY_RQ as u64),
    ("FLDNIC_OP_MODIFY_RQ", op::MODIFY_RQ as u64),
    ("FLDNIC_OP_QUERY_VPORT", op::QUERY_VPORT as u64),
    ("FLDNIC_OP_CREATE_RSS_GROUP", op::CREATE_RSS_GROUP as u64),
    ("FLDNIC_OP_DESTROY_RSS_GROUP", op::DESTROY_RSS_GROUP as u64),
    ("FLDNIC_OP_CREATE_FLOW_TABLE", op::CREATE_FLOW_TABLE as u64),
    (
        "FLDNIC_OP_DESTROY_FLOW_TABLE",
        op::DESTROY_FLOW_TABLE as u64,
    ),
    (
        "FLDNIC_OP_SET_FLOW_TABLE_ROOT",
        op::SET_FLOW_TABLE_ROOT as u64,
    ),
    ("FLDNIC_OP_CREATE_FLOW_ENTRY", op::CREATE_FLOW_ENTRY as u64),
    (
        "FLDNIC_OP_DESTROY_FLOW_ENTRY",
        op::DESTROY_FLOW_ENTRY as u64,
    ),
    ("FLDNIC_OP_CREATE_PD", op::CREATE_PD as u64),
    ("FLDNIC_OP_DESTROY_PD", op::DESTROY_PD as u64),
    ("FLDNIC_OP_CREATE_MR", op::CREATE_MR as u64),
    ("FLDNIC_OP_DESTROY_MR", op::DESTROY_MR as u64),
    ("FLDNIC_OP_SET_ROCE_ADDRESS", op::SET_ROCE_ADDRESS as u64),
    ("FLDNIC_OP_CREATE_QP", op::CREATE_QP as u64),
    ("FLDNIC_OP_MODIFY_QP", op::MODIFY_QP as u64),
    ("FLDNIC_OP_QUERY_QP", op::QUERY_QP as u64),
    ("FLDNIC_OP_DESTROY_QP", op::DESTROY_QP as u64),
    ("FLDNIC_OP_CREATE_SRQ", op::CREATE_SRQ as u64),
    ("FLDNIC_OP_DESTROY_SRQ", op::DESTROY_SRQ as u64),
    ("FLDNIC_OP_ARM_SRQ", op::ARM_SRQ as u64),
    (
        "FLDNIC_OP_QUERY_RDMA_COUNTERS",
        op::QUERY_RDMA_COUNTERS as u64,
    ),
];

const STATUSES: Consts = &[
    ("FLDNIC_CMD_OK", CmdStatus::Ok as u64),
    ("FLDNIC_CMD_BAD_OPCODE", CmdStatus::BadOpcode as u64),
    ("FLDNIC_CMD_BAD_PARAM", CmdStatus::BadParam as u64),
    ("FLDNIC_CMD_BAD_STATE", CmdStatus::BadState as u64),
    ("FLDNIC_CMD_BAD_RESOURCE", CmdStatus::BadResource as u64),
    ("FLDNIC_CMD_RESOURCE_BUSY", CmdStatus::ResourceBusy as u64),
    ("FLDNIC_CMD_EXCEED_LIMIT", CmdStatus::ExceedLimit as u64),
    ("FLDNIC_CMD_NOT_PERMITTED", CmdStatus::NotPermitted as u64),
    (
        "FLDNIC_CMD_BAD_INPUT_LENGTH",
        CmdStatus::BadInputLength as u64,
    ),
    (
        "FLDNIC_CMD_BAD_OUTPUT_LENGTH",
        CmdStatus::BadOutputLength as u64,
    ),
];

const DOORBELLS: Consts = &[
    ("FLDNIC_DB_SQ_BASE", db::SQ_BASE),
    ("FLDNIC_DB_RQ_BASE", db::RQ_BASE),
    ("FLDNIC_DB_CQ_BASE", db::CQ_BASE),
    ("FLDNIC_DB_EQ_BASE", db::EQ_BASE),
    ("FLDNIC_DB_PI_MASK", db::PI_MASK as u64),
    ("FLDNIC_DB_CI_MASK", db::CI_MASK as u64),
    ("FLDNIC_DB_ARM_SN_SHIFT", db::ARM_SN_SHIFT as u64),
    ("FLDNIC_DB_ARM_SN_MASK", db::ARM_SN_MASK as u64),
    ("FLDNIC_DB_ARM", db::ARM as u64),
    ("FLDNIC_DB_QP_SQ_BASE", db::QP_SQ_BASE),
    ("FLDNIC_DB_QP_RQ_BASE", db::QP_RQ_BASE),
    ("FLDNIC_DB_SRQ_BASE", db::SRQ_BASE),
    ("FLDNIC_DB_QP_SLOTS", db::QP_SLOTS as u64),
];

const FORMATS: Consts = &[
    ("FLDNIC_CQE_SIZE", nic::CQE_SIZE as u64),
    ("FLDNIC_EQE_SIZE", nic::EQE_SIZE as u64),
    ("FLDNIC_INVALID_OWNER_BYTE", nic::INVALID_OWNER_BYTE as u64),
    ("FLDNIC_CQE_INVALID", nic::CQE_INVALID as u64),
    ("FLDNIC_CQE_REQ", nic::CQE_REQ as u64),
    ("FLDNIC_CQE_RESP_SEND", nic::CQE_RESP_SEND as u64),
    ("FLDNIC_CQE_REQ_ERR", nic::CQE_REQ_ERR as u64),
    ("FLDNIC_CQE_RESP_ERR", nic::CQE_RESP_ERR as u64),
    ("FLDNIC_WQEBB", nic::WQEBB as u64),
    ("FLDNIC_DS_SIZE", nic::DS_SIZE as u64),
    ("FLDNIC_WQE_OP_SEND", nic::WQE_OP_SEND as u64),
    ("FLDNIC_WQE_OP_SEND_MPW", nic::WQE_OP_SEND_MPW as u64),
    ("FLDNIC_MAX_MPW_PACKETS", nic::MAX_MPW_PACKETS as u64),
    ("FLDNIC_CE_ALWAYS", nic::CE_ALWAYS as u64),
    ("FLDNIC_CS_L3", nic::CS_L3 as u64),
    ("FLDNIC_CS_L4", nic::CS_L4 as u64),
    ("FLDNIC_QUEUE_READY", nic::QueueState::Ready as u64),
    ("FLDNIC_CE_ON_ERROR", nic::CE_ON_ERROR as u64),
    ("FLDNIC_RECV_WQE_SIZE", nic::RECV_WQE_SIZE as u64),
    ("FLDNIC_RQ_TYPE_REGULAR", nic::RQ_TYPE_REGULAR as u64),
    ("FLDNIC_RESERVED_LKEY", nic::RESERVED_LKEY as u64),
    ("FLDNIC_EQE_COMPLETION", nic::EQE_COMPLETION as u64),
    ("FLDNIC_EQE_CQ_ERROR", nic::EQE_CQ_ERROR as u64),
    ("FLDNIC_EQE_QUEUE_ERROR", nic::EQE_QUEUE_ERROR as u64),
    ("FLDNIC_CQE_CSUM_L3_OK", cqe_csum::L3_OK as u64),
    ("FLDNIC_CQE_CSUM_L4_OK", cqe_csum::L4_OK as u64),
    ("FLDNIC_CQE_CSUM_L4_PRESENT", cqe_csum::L4_PRESENT as u64),
];

const RDMA: Consts = &[
    (
        "FLDNIC_ROCE_ADDRESS_ENTRIES",
        nic::ROCE_ADDRESS_ENTRIES as u64,
    ),
    ("FLDNIC_ROCE_ADDRESS_VALID", nic::ROCE_ADDRESS_VALID as u64),
    ("FLDNIC_PKEY_TABLE_ENTRIES", nic::PKEY_TABLE_ENTRIES as u64),
    ("FLDNIC_QPN_BASE", nic::QPN_BASE as u64),
    ("FLDNIC_NO_SRQ", nic::NO_SRQ as u64),
    ("FLDNIC_QP_FLAG_SIGNAL_ALL", nic::QP_FLAG_SIGNAL_ALL as u64),
    ("FLDNIC_MIN_LOG_RQ_STRIDE", nic::MIN_LOG_RQ_STRIDE as u64),
    ("FLDNIC_MAX_LOG_RQ_STRIDE", nic::MAX_LOG_RQ_STRIDE as u64),
    ("FLDNIC_MIN_LOG_MR_PAGE", nic::MIN_LOG_MR_PAGE as u64),
    ("FLDNIC_MAX_LOG_MR_PAGE", nic::MAX_LOG_MR_PAGE as u64),
    ("FLDNIC_MTT_ENTRY_SIZE", nic::MTT_ENTRY_SIZE as u64),
    ("FLDNIC_MAX_RD_ATOMIC", nic::MAX_RD_ATOMIC as u64),
    ("FLDNIC_MAX_INLINE_DATA", nic::MAX_INLINE_DATA as u64),
    ("FLDNIC_MAX_SEND_SGE", nic::MAX_SEND_SGE as u64),
    ("FLDNIC_INLINE_SEG", nic::INLINE_SEG as u64),
    ("FLDNIC_RECV_SGE_END", nic::RECV_SGE_END as u64),
    ("FLDNIC_ACCESS_LOCAL_WRITE", access::LOCAL_WRITE as u64),
    ("FLDNIC_ACCESS_REMOTE_WRITE", access::REMOTE_WRITE as u64),
    ("FLDNIC_ACCESS_REMOTE_READ", access::REMOTE_READ as u64),
    ("FLDNIC_ACCESS_REMOTE_ATOMIC", access::REMOTE_ATOMIC as u64),
    ("FLDNIC_QPS_RESET", QpState::Reset as u64),
    ("FLDNIC_QPS_INIT", QpState::Init as u64),
    ("FLDNIC_QPS_RTR", QpState::Rtr as u64),
    ("FLDNIC_QPS_RTS", QpState::Rts as u64),
    ("FLDNIC_QPS_SQD", QpState::Sqd as u64),
    ("FLDNIC_QPS_SQE", QpState::Sqe as u64),
    ("FLDNIC_QPS_ERR", QpState::Err as u64),
    ("FLDNIC_QP_ATTR_STATE", qp_attr::STATE as u64),
    ("FLDNIC_QP_ATTR_CUR_STATE", qp_attr::CUR_STATE as u64),
    ("FLDNIC_QP_ATTR_ACCESS_FLAGS", qp_attr::ACCESS_FLAGS as u64),
    ("FLDNIC_QP_ATTR_PKEY_INDEX", qp_attr::PKEY_INDEX as u64),
    ("FLDNIC_QP_ATTR_PORT", qp_attr::PORT as u64),
    ("FLDNIC_QP_ATTR_AV", qp_attr::AV as u64),
    ("FLDNIC_QP_ATTR_PATH_MTU", qp_attr::PATH_MTU as u64),
    ("FLDNIC_QP_ATTR_TIMEOUT", qp_attr::TIMEOUT as u64),
    ("FLDNIC_QP_ATTR_RETRY_CNT", qp_attr::RETRY_CNT as u64),
    ("FLDNIC_QP_ATTR_RNR_RETRY", qp_attr::RNR_RETRY as u64),
    ("FLDNIC_QP_ATTR_RQ_PSN", qp_attr::RQ_PSN as u64),
    (
        "FLDNIC_QP_ATTR_MAX_QP_RD_ATOMIC",
        qp_attr::MAX_QP_RD_ATOMIC as u64,
    ),
    (
        "FLDNIC_QP_ATTR_MIN_RNR_TIMER",
        qp_attr::MIN_RNR_TIMER as u64,
    ),
    ("FLDNIC_QP_ATTR_SQ_PSN", qp_attr::SQ_PSN as u64),
    (
        "FLDNIC_QP_ATTR_MAX_DEST_RD_ATOMIC",
        qp_attr::MAX_DEST_RD_ATOMIC as u64,
    ),
    ("FLDNIC_QP_ATTR_DEST_QPN", qp_attr::DEST_QPN as u64),
    ("FLDNIC_QP_ATTR_KNOWN", qp_attr::KNOWN as u64),
    ("FLDNIC_WQE_OP_RDMA_WRITE", nic::WQE_OP_RDMA_WRITE as u64),
    (
        "FLDNIC_WQE_OP_RDMA_WRITE_IMM",
        nic::WQE_OP_RDMA_WRITE_IMM as u64,
    ),
    ("FLDNIC_WQE_OP_SEND_IMM", nic::WQE_OP_SEND_IMM as u64),
    ("FLDNIC_WQE_OP_RDMA_READ", nic::WQE_OP_RDMA_READ as u64),
    ("FLDNIC_WQE_OP_ATOMIC_CS", nic::WQE_OP_ATOMIC_CS as u64),
    ("FLDNIC_WQE_OP_ATOMIC_FA", nic::WQE_OP_ATOMIC_FA as u64),
    ("FLDNIC_WQE_SOLICITED", nic::WQE_SOLICITED as u64),
    ("FLDNIC_WQE_FENCE", nic::WQE_FENCE as u64),
    ("FLDNIC_CQE_RESP_WRITE_IMM", nic::CQE_RESP_WRITE_IMM as u64),
    ("FLDNIC_CQE_RESP_SEND_IMM", nic::CQE_RESP_SEND_IMM as u64),
    ("FLDNIC_CQE_FLAG_QP", cqe_flags::QP as u64),
    ("FLDNIC_CQE_FLAG_SRQ", cqe_flags::SRQ as u64),
    ("FLDNIC_CQE_FLAG_SOLICITED", cqe_flags::SOLICITED as u64),
    ("FLDNIC_EQE_QP_EVENT", nic::EQE_QP_EVENT as u64),
    ("FLDNIC_EQE_SRQ_LIMIT", nic::EQE_SRQ_LIMIT as u64),
    ("FLDNIC_QP_EVENT_FATAL", qp_event::FATAL as u64),
    ("FLDNIC_QP_EVENT_SQ_DRAINED", qp_event::SQ_DRAINED as u64),
    (
        "FLDNIC_QP_EVENT_COMM_ESTABLISHED",
        qp_event::COMM_ESTABLISHED as u64,
    ),
    (
        "FLDNIC_QP_EVENT_LAST_WQE_REACHED",
        qp_event::LAST_WQE_REACHED as u64,
    ),
    ("FLDNIC_WC_SUCCESS", rdma_status::SUCCESS as u64),
    ("FLDNIC_WC_LOCAL_LENGTH", rdma_status::LOCAL_LENGTH as u64),
    (
        "FLDNIC_WC_LOCAL_QP_OPERATION",
        rdma_status::LOCAL_QP_OPERATION as u64,
    ),
    (
        "FLDNIC_WC_LOCAL_PROTECTION",
        rdma_status::LOCAL_PROTECTION as u64,
    ),
    ("FLDNIC_WC_WR_FLUSH", rdma_status::WR_FLUSH as u64),
    ("FLDNIC_WC_BAD_RESPONSE", rdma_status::BAD_RESPONSE as u64),
    ("FLDNIC_WC_LOCAL_ACCESS", rdma_status::LOCAL_ACCESS as u64),
    (
        "FLDNIC_WC_REMOTE_INVALID_REQUEST",
        rdma_status::REMOTE_INVALID_REQUEST as u64,
    ),
    ("FLDNIC_WC_REMOTE_ACCESS", rdma_status::REMOTE_ACCESS as u64),
    (
        "FLDNIC_WC_REMOTE_OPERATION",
        rdma_status::REMOTE_OPERATION as u64,
    ),
    (
        "FLDNIC_WC_RETRY_EXCEEDED",
        rdma_status::RETRY_EXCEEDED as u64,
    ),
    (
        "FLDNIC_WC_RNR_RETRY_EXCEEDED",
        rdma_status::RNR_RETRY_EXCEEDED as u64,
    ),
];

const STEERING: Consts = &[
    ("FLDNIC_TABLE_KIND_NIC_RX", nic::TABLE_KIND_NIC_RX as u64),
    ("FLDNIC_MISS_DROP", nic::MISS_DROP as u64),
    ("FLDNIC_NO_TABLE", nic::NO_TABLE as u64),
    ("FLDNIC_ACTION_FWD_RQ", action::FWD_RQ as u64),
    ("FLDNIC_ACTION_FWD_RSS", action::FWD_RSS as u64),
    ("FLDNIC_RSS_FIELDS_ALL", nic::rss_fields::ALL as u64),
    // The key is the layout's first field.
    (
        "FLDNIC_RSS_KEY_LEN",
        offset_of!(CreateRssGroupIn, hash_fields) as u64,
    ),
    (
        "FLDNIC_RSS_MAX_INDIRECTION",
        nic::RSS_MAX_INDIRECTION as u64,
    ),
    ("FLDNIC_FLOW_MATCH_LEN", nic::FLOW_MATCH_LEN as u64),
];

fn structs() -> Vec<Struct> {
    vec![
        c_struct!("fldnic_cmd_in_header", CmdInHeader, {
            opcode: "__le16", op_mod: "__le16", rsvd: "__u8"[12],
        }),
        c_struct!("fldnic_cmd_out_header", CmdOutHeader, {
            status: "__u8", rsvd: "__u8"[3], syndrome: "__le32", rsvd2: "__u8"[8],
        }),
        c_struct!("fldnic_caps", Caps, {
            max_sqs: "__le32", max_rqs: "__le32", max_cqs: "__le32", max_eqs: "__le32",
            max_log_sq_size: "__u8", max_log_rq_size: "__u8", max_log_cq_size: "__u8",
            max_log_eq_size: "__u8", min_log_stride_size: "__u8", max_log_stride_size: "__u8",
            min_log_strides: "__u8", max_log_strides: "__u8", max_flow_tables: "__le32",
            max_flow_entries: "__le32", max_rss_groups: "__le32", max_rss_indirection: "__le16",
            rss_key_len: "__le16", msix_vectors: "__le16", max_wqe_ds: "__le16",
            max_inline_header: "__le16", max_flow_table_level: "__u8", receiver: "__u8",
            max_mtu: "__le32", vport: "__le16", is_eswitch_manager: "__u8", rsvd2: "__u8",
            qp_context_cache: "__le32",
        }),
        c_struct!("fldnic_object_in", ObjectIn, { id: "__le32", rsvd: "__u8"[4] }),
        c_struct!("fldnic_create_out", CreateOut, { id: "__le32", rsvd: "__u8"[4] }),
        c_struct!("fldnic_create_eq_in", CreateEqIn, {
            addr: "__le64", log_size: "__u8", rsvd: "__u8", msix_vector: "__le16",
            rsvd2: "__u8"[4],
        }),
        c_struct!("fldnic_create_cq_in", CreateCqIn, {
            addr: "__le64", eqn: "__le32", log_size: "__u8", rsvd: "__u8"[3],
        }),
        c_struct!("fldnic_create_sq_in", CreateSqIn, {
            addr: "__le64", cqn: "__le32", log_size: "__u8", flags: "__u8", rsvd: "__u8"[2],
        }),
        c_struct!("fldnic_create_rq_in", CreateRqIn, {
            addr: "__le64", cqn: "__le32", log_size: "__u8", rq_type: "__u8",
            log_stride_size: "__u8", log_strides: "__u8",
        }),
        c_struct!("fldnic_modify_queue_in", ModifyQueueIn, {
            id: "__le32", new_state: "__u8", rsvd: "__u8"[3],
        }),
        c_struct!("fldnic_eqe", Eqe, {
            event_type: "__u8", subtype: "__u8", rsvd: "__u8"[2], data: "__le32",
            rsvd2: "__u8"[55], owner: "__u8",
        }),
        c_struct!("fldnic_cqe", Cqe, {
            flow_tag: "__le32", rss_hash: "__le32", byte_count: "__le32", wqe_counter: "__le16",
            stride_index: "__le16", consumed_strides: "__le16", csum: "__u8", flags: "__u8",
            qn: "__le32", timestamp: "__le64", metadata: "__le32", vport: "__le16",
            imm: "__le32", wqe_opcode: "__u8", rsvd: "__u8"[18], syndrome: "__u8",
            rsvd2: "__u8", op_own: "__u8",
        }),
        c_struct!("fldnic_ctrl_seg", CtrlSeg, {
            opcode: "__u8", rsvd: "__u8", wqe_index: "__le16", ds_count: "__u8",
            fm_ce_se: "__u8", rsvd2: "__le16", sqn: "__le32", imm: "__le32",
        }),
        c_struct!("fldnic_eth_seg", EthSeg, {
            cs_flags: "__u8", flags: "__u8", rsvd: "__u8"[2], rsvd2: "__u8"[6], mss: "__le16",
            inline_hdr_size: "__le16", inline_start: "__u8"[2],
        }),
        c_struct!("fldnic_query_vport_in", QueryVportIn, { vport: "__le16", rsvd: "__u8"[6] }),
        c_struct!("fldnic_query_vport_out", QueryVportOut, {
            mac: "__u8"[6], up: "__u8", rsvd: "__u8", tx_packets: "__le64", tx_bytes: "__le64",
            rx_packets: "__le64", rx_bytes: "__le64", rx_steering_drops: "__le64",
            rx_no_steering: "__le64", rx_out_of_buffer: "__le64", tx_malformed: "__le64",
        }),
        // The indirection table (`indirection_len` RQ numbers, __le32) follows.
        c_struct!("fldnic_create_rss_group_in", CreateRssGroupIn, {
            key: "__u8"[40], hash_fields: "__u8", rsvd: "__u8", indirection_len: "__le16",
            rsvd2: "__u8"[4],
        }),
        c_struct!("fldnic_create_flow_table_in", CreateFlowTableIn, {
            kind: "__u8", level: "__u8", miss: "__u8", rsvd: "__u8", miss_table: "__le32",
        }),
        c_struct!("fldnic_set_root_in", SetRootIn, {
            kind: "__u8", rsvd: "__u8"[3], table: "__le32",
        }),
        // The match layout (`FlowMatch`) is carried as bytes: a match-all entry is all zeros.
        c_struct!("fldnic_create_flow_entry_in", CreateFlowEntryIn, {
            table: "__le32", priority: "__le16", rsvd: "__le16", mask: "__u8"[80],
            value: "__u8"[80], actions: "__le32", vport: "__le16", rsvd2: "__le16",
            dest: "__le32", flow_tag: "__le32", meter: "__le32", encap: "__le32",
        }),
        c_struct!("fldnic_roce_address_in", RoceAddressIn, {
            index: "__le16", flags: "__u8", rsvd: "__u8"[5], gid: "__u8"[16], mac: "__u8"[6],
            rsvd2: "__u8"[2],
        }),
        c_struct!("fldnic_data_seg", DataSeg, {
            byte_count: "__le32", lkey: "__le32", addr: "__le64",
        }),
        c_struct!("fldnic_remote_addr_seg", RemoteAddrSeg, {
            addr: "__le64", rkey: "__le32", rsvd: "__le32",
        }),
        c_struct!("fldnic_atomic_seg", AtomicSeg, { swap_add: "__le64", compare: "__le64" }),
        c_struct!("fldnic_create_mr_in", CreateMrIn, {
            pd: "__le32", access: "__le32", start: "__le64", length: "__le64",
            mtt_addr: "__le64", log_page_size: "__u8", flags: "__u8", rsvd: "__u8"[2],
            peer_key: "__le32",
        }),
        c_struct!("fldnic_create_qp_in", CreateQpIn, {
            pd: "__le32", send_cqn: "__le32", recv_cqn: "__le32", srqn: "__le32",
            sq_addr: "__le64", rq_addr: "__le64", log_sq_size: "__u8", log_rq_size: "__u8",
            log_rq_stride: "__u8", flags: "__u8", rsvd: "__u8"[4],
        }),
        c_struct!("fldnic_qp_attr", QpAttr, {
            qp_state: "__u8", cur_state: "__u8", path_mtu: "__u8", timeout: "__u8",
            retry_cnt: "__u8", rnr_retry: "__u8", min_rnr_timer: "__u8", max_rd_atomic: "__u8",
            max_dest_rd_atomic: "__u8", port: "__u8", sgid_index: "__u8", hop_limit: "__u8",
            traffic_class: "__u8", rsvd: "__u8", pkey_index: "__le16", access_flags: "__le32",
            rq_psn: "__le32", sq_psn: "__le32", dest_qpn: "__le32", flow_label: "__le32",
            dgid: "__u8"[16], dmac: "__u8"[6], rsvd2: "__u8"[6],
        }),
        c_struct!("fldnic_modify_qp_in", ModifyQpIn, {
            qpn: "__le32", attr_mask: "__le32", attr: "struct fldnic_qp_attr",
        }),
        // The per-QP counters (`QpCounters`) are carried as bytes.
        c_struct!("fldnic_query_qp_out", QueryQpOut, {
            attr: "struct fldnic_qp_attr", next_psn: "__le32", unacked_psn: "__le32",
            expected_psn: "__le32", rsvd: "__le32", counters: "__u8"[120],
        }),
        c_struct!("fldnic_create_srq_in", CreateSrqIn, {
            pd: "__le32", rsvd: "__le32", addr: "__le64", log_size: "__u8", log_stride: "__u8",
            rsvd2: "__u8"[6],
        }),
        c_struct!("fldnic_arm_srq_in", ArmSrqIn, {
            srqn: "__le32", limit: "__le32", eqn: "__le32", rsvd: "__le32",
        }),
    ]
}

/// A counter block's counters by the names tools print (`named`), each with the offset of its
/// little-endian 64-bit field: every 8-byte word of a block is set to its own offset, and
/// `named` says which name reads which.
fn stat_offsets<T: zerocopy::IntoBytes + zerocopy::FromBytes + Default>(
    named: impl Fn(&T) -> Vec<(&'static str, u64)>,
) -> Vec<(&'static str, u64)> {
    let mut block = T::default();
    for (i, word) in block.as_mut_bytes().chunks_exact_mut(8).enumerate() {
        word.copy_from_slice(&((i * 8) as u64).to_le_bytes());
    }
    named(&block)
}

/// QUERY_VPORT's counters (mlx5's ethtool names).
fn vport_stats() -> Vec<(&'static str, u64)> {
    stat_offsets(|o: &QueryVportOut| o.named().to_vec())
}

/// QUERY_RDMA_COUNTERS's counters (rxe's and mlx5's hw_counters names where one exists).
fn rdma_stats() -> Vec<(&'static str, u64)> {
    stat_offsets(|o: &RdmaCountersOut| o.named().to_vec())
}

/// A `{ name, offset }` table as a C macro.
fn stat_table(s: &mut String, what: &str, count: &str, table: &str, stats: &[(&str, u64)]) {
    let _ = writeln!(
        s,
        "\n/* {what} by their tool names: {{ name, offset of the __le64 }}. */\n\
         #define {count} {}\n#define {table} \\",
        stats.len()
    );
    for (i, (name, off)) in stats.iter().enumerate() {
        let more = if i + 1 < stats.len() { " \\" } else { "" };
        let _ = writeln!(s, "\t{{ \"{name}\", {off} }},{more}");
    }
}

/// The header's text.
pub fn render() -> String {
    let mut s = String::new();
    s.push_str(
        "/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */\n\
         /*\n\
         \x20* The fldemu card's host interface for C drivers: registers, commands and their\n\
         \x20* layouts (docs/nic-interface.md). Generated from the fld-abi crate by\n\
         \x20* `cargo xtask c-header`; do not edit.\n\
         \x20*/\n\
         #ifndef FLDNIC_ABI_H\n#define FLDNIC_ABI_H\n\n\
         #include <linux/types.h>\n\
         #ifdef __KERNEL__\n#include <linux/stddef.h>\n#else\n#include <stddef.h>\n#endif\n",
    );
    for (title, consts) in [
        ("PCI identity and BARs", PCI),
        ("Control registers (BAR0)", REGISTERS),
        ("Command opcodes", OPCODES),
        ("Command statuses (fldnic_cmd_out_header.status)", STATUSES),
        ("Doorbell pages (BAR2)", DOORBELLS),
        ("Queue entry formats", FORMATS),
        ("Receive steering", STEERING),
        ("RDMA", RDMA),
    ] {
        let _ = writeln!(s, "\n/* {title} */");
        for (name, value) in consts {
            let _ = writeln!(s, "#define {name} {value:#x}");
        }
    }
    for Struct(name, fields, size) in structs() {
        let _ = writeln!(s, "\nstruct {name} {{");
        for Field(f, ty, n, _) in &fields {
            match n {
                0 => writeln!(s, "\t{ty} {f};"),
                n => writeln!(s, "\t{ty} {f}[{n}];"),
            }
            .ok();
        }
        let _ = writeln!(s, "}} __attribute__((packed));");
        let _ = writeln!(
            s,
            "_Static_assert(sizeof(struct {name}) == {size}, \"{name}: size\");"
        );
        for Field(f, _, _, off) in &fields {
            let _ = writeln!(
                s,
                "_Static_assert(offsetof(struct {name}, {f}) == {off}, \"{name}.{f}\");"
            );
        }
    }
    stat_table(
        &mut s,
        "QUERY_VPORT's counters (struct fldnic_query_vport_out)",
        "FLDNIC_VPORT_STATS",
        "FLDNIC_VPORT_STAT_TABLE",
        &vport_stats(),
    );
    let _ = writeln!(
        s,
        "\n/* QUERY_RDMA_COUNTERS's output length. */\n#define FLDNIC_RDMA_COUNTERS_LEN {}",
        size_of::<RdmaCountersOut>()
    );
    stat_table(
        &mut s,
        "QUERY_RDMA_COUNTERS's counters",
        "FLDNIC_RDMA_STATS",
        "FLDNIC_RDMA_STAT_TABLE",
        &rdma_stats(),
    );
    s.push_str("\n#endif /* FLDNIC_ABI_H */\n");
    s
}

/// Writes the header under `workspace`, or with `check` says whether the committed one is
/// current.
pub fn run(workspace: &Path, check: bool) -> Result<bool, String> {
    let path = workspace.join(HEADER);
    let text = render();
    if check {
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed != text {
            eprintln!("xtask: {HEADER} is stale: run `cargo xtask c-header`");
            return Ok(false);
        }
        return Ok(true);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("wrote {HEADER}");
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field of every struct is emitted at its Rust offset, in order, without overlap,
    /// and the fields cover the whole struct (no hidden padding the C compiler would lay out
    /// differently).
    #[test]
    fn fields_tile_each_struct() {
        let width = |ty: &str| match ty {
            "__u8" => 1,
            "__le16" => 2,
            "__le32" => 4,
            "__le64" => 8,
            "struct fldnic_qp_attr" => size_of::<QpAttr>(),
            other => panic!("type {other}"),
        };
        for Struct(name, fields, size) in structs() {
            let mut at = 0;
            for Field(f, ty, n, off) in &fields {
                assert_eq!(*off, at, "{name}.{f}");
                at += width(ty) * (*n).max(1);
            }
            assert_eq!(at, size, "{name}");
        }
    }

    #[test]
    fn the_committed_header_is_current() {
        let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let committed = std::fs::read_to_string(ws.join(HEADER)).unwrap_or_default();
        assert!(
            committed == render(),
            "{HEADER} is stale: run `cargo xtask c-header`"
        );
    }
}
