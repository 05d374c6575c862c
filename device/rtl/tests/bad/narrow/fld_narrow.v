// The template with a 256-bit rx_tdata: the build must refuse it, naming the port.
`include "fld_accel.vh"

module fld_narrow (
    input  wire                             clk,
    input  wire                             rst,           // synchronous, active high
    // rx stream, FLD -> accelerator: never backpressure it (§5.5)
    input  wire [255:0]                      rx_tdata,  // half the contract's width
    input  wire [`FLD_KEEP_W-1:0]           rx_tkeep,
    input  wire                             rx_tvalid,
    output wire                             rx_tready,
    input  wire                             rx_tlast,
    input  wire [`FLD_RX_TUSER_W-1:0]       rx_tuser,
    // tx stream, accelerator -> FLD: send a packet only when its queue's credits cover it
    output wire [`FLD_DATA_W-1:0]           tx_tdata,
    output wire [`FLD_KEEP_W-1:0]           tx_tkeep,
    output wire                             tx_tvalid,
    input  wire                             tx_tready,
    output wire                             tx_tlast,
    output wire [`FLD_TX_TUSER_W-1:0]       tx_tuser,
    // credits: name a queue, read its credits on the next cycle
    output wire [`FLD_CREDIT_QUEUE_W-1:0]   credit_queue,
    input  wire [`FLD_CREDIT_PACKETS_W-1:0] credit_packets,
    input  wire [`FLD_CREDIT_BYTES_W-1:0]   credit_bytes
);
    assign rx_tready    = 1'b1;
    assign tx_tdata     = {`FLD_DATA_W{1'b0}};
    assign tx_tkeep     = {`FLD_KEEP_W{1'b0}};
    assign tx_tvalid    = 1'b0;
    assign tx_tlast     = 1'b0;
    assign tx_tuser     = {`FLD_TX_TUSER_W{1'b0}};
    assign credit_queue = 16'd0;

    // Unused inputs of this empty design.
    wire unused = &{1'b0, clk, rst, rx_tdata, rx_tkeep, rx_tvalid, rx_tlast, rx_tuser,
                    tx_tready, credit_packets, credit_bytes};
endmodule
