// Store-and-forward packet buffer between FLD's rx and tx streams, shared by the example
// accelerators. Rx never backpressures (§5.5): a packet that does not fit when its first beat
// arrives is dropped whole and counted. A stored packet goes back out on the queue it came in
// on once that queue's credits cover it, or is discarded if the checker upstream marked it bad.
// An FLD-E packet has its Ethernet addresses swapped (SWAP_MACS); an FLD-R packet (a whole
// message of one packet, up to the path MTU) is returned as a SEND, with its immediate data if
// it carried some.
`include "fld_accel.vh"

module fld_pkt_fifo #(
    parameter LOG_BEATS   = 9,   // 512 beats = 32 KiB of packet data
    parameter LOG_PACKETS = 6,   // 64 packets
    parameter SWAP_MACS   = 1    // swap Ethernet source and destination of FLD-E packets
) (
    input  wire                       clk,
    input  wire                       rst,
    input  wire [`FLD_DATA_W-1:0]     rx_tdata,
    input  wire [`FLD_KEEP_W-1:0]     rx_tkeep,
    input  wire                       rx_tvalid,
    input  wire                       rx_tlast,
    /* verilator lint_off UNUSEDSIGNAL */
    input  wire [`FLD_RX_TUSER_W-1:0] rx_tuser,  // all but context, csum, RSS and RDMA first/last
    /* verilator lint_on UNUSEDSIGNAL */
    // With the last beat: discard this packet instead of sending it.
    input  wire                       rx_bad,
    output wire [`FLD_DATA_W-1:0]     tx_tdata,
    output wire [`FLD_KEEP_W-1:0]     tx_tkeep,
    output wire                       tx_tvalid,
    input  wire                       tx_tready,
    output wire                       tx_tlast,
    output wire [`FLD_TX_TUSER_W-1:0] tx_tuser,
    output wire [`FLD_CREDIT_QUEUE_W-1:0]   credit_queue,
    input  wire [`FLD_CREDIT_PACKETS_W-1:0] credit_packets,
    input  wire [`FLD_CREDIT_BYTES_W-1:0]   credit_bytes,
    output reg  [31:0]                stored,
    output reg  [31:0]                dropped_full,
    output reg  [31:0]                discarded_bad
);
    localparam BEATS   = 1 << LOG_BEATS;
    localparam PACKETS = 1 << LOG_PACKETS;
    localparam BEAT_W  = `FLD_DATA_W + `FLD_KEEP_W + 1;
    // Per packet: bad, RDMA, immediate valid, immediate, queue, resume valid, resume table,
    // length.
    localparam META_W  = 1 + 1 + 1 + 32 + 16 + 1 + 8 + 16;

    reg [BEAT_W-1:0] beats [0:BEATS-1];
    reg [META_W-1:0] metas [0:PACKETS-1];
    reg [LOG_BEATS:0]   wr_beat, rd_beat;
    reg [LOG_PACKETS:0] wr_meta, rd_meta;

    // ---- rx: decide on the first beat, store the packet's beats, its metadata on the last ----
    reg in_packet;   // between a first and a last beat
    reg storing;     // the current packet is being stored
    wire        first    = rx_tvalid && !in_packet;
    wire [15:0] len      = rx_tuser[`FLD_RX_LEN];
    wire [LOG_BEATS:0] used_beats = wr_beat - rd_beat;
    wire [31:0] need       = ({16'd0, len} + 32'd63) >> 6;
    wire [31:0] free_beats = BEATS - {{(31 - LOG_BEATS){1'b0}}, used_beats};
    wire meta_full = (wr_meta - rd_meta) == PACKETS[LOG_PACKETS:0];
    wire fits      = need <= free_beats && !meta_full;
    wire store     = rx_tvalid && (first ? fits : storing);

    wire        rdma     = rx_tuser[`FLD_RX_RDMA];
    wire [`FLD_DATA_W-1:0] swapped = {rx_tdata[`FLD_DATA_W-1:96], rx_tdata[47:0], rx_tdata[95:48]};
    wire [`FLD_DATA_W-1:0] in_data = (first && SWAP_MACS != 0 && !rdma) ? swapped : rx_tdata;

    always @(posedge clk) begin
        if (rst) begin
            in_packet <= 1'b0;
            storing <= 1'b0;
            wr_beat <= 0;
            wr_meta <= 0;
            stored <= 0;
            dropped_full <= 0;
        end else if (rx_tvalid) begin
            in_packet <= !rx_tlast;
            if (first) storing <= fits;
            if (first && !fits) dropped_full <= dropped_full + 1;
            if (store) begin
                beats[wr_beat[LOG_BEATS-1:0]] <= {rx_tlast, rx_tkeep, in_data};
                wr_beat <= wr_beat + 1;
                if (rx_tlast) begin
                    metas[wr_meta[LOG_PACKETS-1:0]] <= {rx_bad, rdma, rx_tuser[`FLD_RX_IMM_V],
                                                        rx_tuser[`FLD_RX_IMM],
                                                        rx_tuser[`FLD_RX_QUEUE],
                                                        rx_tuser[`FLD_RX_RESUME_V],
                                                        rx_tuser[`FLD_RX_RESUME], len};
                    wr_meta <= wr_meta + 1;
                    stored <= stored + 1;
                end
            end
        end
    end

    // ---- tx: wait for credits covering the head packet, then stream it ----
    localparam IDLE = 2'd0, SEND = 2'd1, DISCARD = 2'd2;
    reg [1:0] state;
    wire [META_W-1:0] head      = metas[rd_meta[LOG_PACKETS-1:0]];
    wire [BEAT_W-1:0] beat      = beats[rd_beat[LOG_BEATS-1:0]];
    wire              have      = wr_meta != rd_meta;
    wire              head_bad  = head[75];
    wire              head_rdma = head[74];
    wire              head_imm_v = head[73];
    wire [31:0]       head_imm  = head[72:41];
    wire [15:0]       head_queue = head[40:25];
    wire              head_resume_v = head[24];
    wire [7:0]        head_resume = head[23:16];
    wire [15:0]       head_len  = head[15:0];
    // The credit port answers a cycle later: the credits shown are the head queue's only when
    // that queue was named in the cycle before.
    reg  [15:0]       asked;
    wire              covered   = asked == head_queue && credit_packets != 0
                                  && credit_bytes >= {16'd0, head_len};
    wire              beat_last = beat[BEAT_W-1];
    wire [2:0]        op        = !head_rdma ? `FLD_TX_OP_NONE
                                : head_imm_v ? `FLD_TX_OP_SEND_IMM : `FLD_TX_OP_SEND;

    assign credit_queue = head_queue;
    assign tx_tvalid = state == SEND;
    assign tx_tdata  = beat[`FLD_DATA_W-1:0];
    assign tx_tkeep  = beat[BEAT_W-2:`FLD_DATA_W];
    assign tx_tlast  = beat_last;
    // FLD-E: back to the table the rule resumes at; FLD-R: a SEND, with the immediate.
    assign tx_tuser  = {96'd0, head_rdma ? head_imm : 32'd0, 28'd0, op,
                        head_resume_v && !head_rdma, head_resume, 8'd0, head_queue};

    always @(posedge clk) asked <= credit_queue;

    always @(posedge clk) begin
        if (rst) begin
            state <= IDLE;
            rd_beat <= 0;
            rd_meta <= 0;
            discarded_bad <= 0;
        end else begin
            case (state)
                IDLE:
                    if (have && head_bad) state <= DISCARD;
                    else if (have && covered) state <= SEND;
                SEND:
                    if (tx_tready) begin
                        rd_beat <= rd_beat + 1;
                        if (beat_last) begin
                            rd_meta <= rd_meta + 1;
                            state <= IDLE;
                        end
                    end
                default: begin  // DISCARD
                    rd_beat <= rd_beat + 1;
                    if (beat_last) begin
                        rd_meta <= rd_meta + 1;
                        discarded_bad <= discarded_bad + 1;
                        state <= IDLE;
                    end
                end
            endcase
        end
    end
endmodule
