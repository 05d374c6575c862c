// FLD's accelerator interface (FlexDriver paper §5.5) as signals: widths and the fields of the
// two streams' TUSER buses. `include it in a top module; docs/fld-interface.md §13 describes
// the timing, fld_accel_template.v is a top module to start from.
//
// Conventions: one clock, `clk`, rising edge; `rst` is synchronous and active high. Byte lane i
// of TDATA is TDATA[8*i+7:8*i] and carries byte i of the beat; the first byte of a packet is
// lane 0 of its first beat. TKEEP marks valid lanes: all ones on every beat but the last, which
// keeps lanes 0..n-1 (n >= 1). There is no TSTRB, TID or TDEST: the queue travels in TUSER.
`ifndef FLD_ACCEL_VH
`define FLD_ACCEL_VH

// Data path: 512 bits (64 bytes) per beat; at FLD's 250 MHz that is 128 Gbit/s, above the
// 100 Gbit/s the paper's FLD is clocked for (§9).
`define FLD_DATA_W      512
`define FLD_KEEP_W      64

// ---- rx stream (FLD -> accelerator) TUSER: the packet's metadata, the same on every beat ----
`define FLD_RX_TUSER_W  160
`define FLD_RX_QUEUE    15:0     // FLD receive queue (an FLD-R queue pair's queue on FLD-R)
`define FLD_RX_CONTEXT  31:16    // context ID the `accelerate` rule set (the tenant, §5.4)
`define FLD_RX_LEN      47:32    // packet length in bytes
`define FLD_RX_CSUM     55:48    // NIC parse/checksum results (fld_abi::nic::cqe_csum bits)
`define FLD_RX_RESUME   63:56    // flow table to resume at when the packet comes back ...
`define FLD_RX_RESUME_V 64       // ... valid
`define FLD_RX_RDMA     65       // FLD-R: the packet is part of an RDMA message
`define FLD_RX_FIRST    66       // FLD-R: first packet of its message
`define FLD_RX_LAST     67       // FLD-R: last packet of its message
`define FLD_RX_IMM_V    68       // FLD-R: immediate data below is valid (last packet)
//                      95:69       reserved, 0
`define FLD_RX_RSS      127:96   // the NIC's RSS (Toeplitz) hash
`define FLD_RX_IMM      159:128  // FLD-R immediate data

// ---- tx stream (accelerator -> FLD) TUSER: sampled on a packet's first beat ----
`define FLD_TX_TUSER_W  192
`define FLD_TX_QUEUE    15:0     // FLD transmit queue
`define FLD_TX_CSUM     23:16    // checksum insertion requests (bit 0 L3, bit 1 L4)
`define FLD_TX_RESUME   31:24    // flow table the NIC resumes steering at ...
`define FLD_TX_RESUME_V 32       // ... valid (otherwise the packet enters the eSwitch as usual)
`define FLD_TX_OP       35:33    // FLD-R operation: 0 none (Ethernet queue), 1 SEND,
                                 // 2 SEND with immediate, 3 WRITE, 4 WRITE with immediate
//                      63:36       reserved, 0
`define FLD_TX_IMM      95:64    // immediate data (ops 2 and 4)
`define FLD_TX_RKEY     127:96   // remote key (ops 3 and 4)
`define FLD_TX_RADDR    191:128  // remote address (ops 3 and 4)

`define FLD_TX_OP_NONE      3'd0
`define FLD_TX_OP_SEND      3'd1
`define FLD_TX_OP_SEND_IMM  3'd2
`define FLD_TX_OP_WRITE     3'd3
`define FLD_TX_OP_WRITE_IMM 3'd4

// ---- credits (per Tx queue, §5.5): a registered query port ----
// The accelerator names a queue on credit_queue in cycle k; in cycle k+1 FLD presents that
// queue's credits, counting every packet whose last beat FLD accepted up to cycle k.
`define FLD_CREDIT_QUEUE_W   16
`define FLD_CREDIT_PACKETS_W 32  // descriptors the queue can take
`define FLD_CREDIT_BYTES_W   32  // bytes (whole Tx-buffer chunks) the queue can take

// The whole port list, for a top module that keeps the contract's names:
//   module my_accel (`FLD_ACCEL_PORTS);
// (fld_accel_template.v spells the same ports out, with comments.)
`define FLD_ACCEL_PORTS \
    input  wire                             clk, \
    input  wire                             rst, \
    input  wire [`FLD_DATA_W-1:0]           rx_tdata, \
    input  wire [`FLD_KEEP_W-1:0]           rx_tkeep, \
    input  wire                             rx_tvalid, \
    output wire                             rx_tready, \
    input  wire                             rx_tlast, \
    input  wire [`FLD_RX_TUSER_W-1:0]       rx_tuser, \
    output wire [`FLD_DATA_W-1:0]           tx_tdata, \
    output wire [`FLD_KEEP_W-1:0]           tx_tkeep, \
    output wire                             tx_tvalid, \
    input  wire                             tx_tready, \
    output wire                             tx_tlast, \
    output wire [`FLD_TX_TUSER_W-1:0]       tx_tuser, \
    output wire [`FLD_CREDIT_QUEUE_W-1:0]   credit_queue, \
    input  wire [`FLD_CREDIT_PACKETS_W-1:0] credit_packets, \
    input  wire [`FLD_CREDIT_BYTES_W-1:0]   credit_bytes

`endif
