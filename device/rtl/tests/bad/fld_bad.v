// Accelerators that break FLD's interface contract, one way per MODE, for the bridge's tests:
//   1 holds rx_tready low;            2 sends without looking at credits;
//   3 sends a beat with a hole in TKEEP; 4 drops TVALID while TREADY is low;
//   5 streams one endless packet (never TLAST); 6 changes TUSER inside a packet.
// Modes 2-6 send a 2-beat packet (3 for mode 6) for every packet received.
`include "fld_accel.vh"

/* verilator lint_off UNUSEDSIGNAL */
module fld_bad #(parameter MODE = 1) (`FLD_ACCEL_PORTS);
/* verilator lint_on UNUSEDSIGNAL */
    reg [15:0] owed;      // packets to send
    reg [1:0]  beat;      // beat of the packet being sent
    reg        dropped;   // mode 4: TVALID already dropped once in this packet
    wire       sending = owed != 0;
    wire [1:0] beats = MODE == 6 ? 2'd3 : 2'd2;

    assign rx_tready    = MODE != 1;
    assign credit_queue = 16'd0;
    assign tx_tdata     = {{(`FLD_DATA_W - 2){1'b0}}, beat};
    assign tx_tlast     = MODE == 5 ? 1'b0 : beat == beats - 2'd1;
    assign tx_tkeep     = MODE == 3 && beat == 2'd0 ? 64'hffff_ffff_ffff_fff0
                        : tx_tlast ? 64'h0000_0000_0000_ffff : {64{1'b1}};
    // Mode 4: the first beat is withdrawn when FLD does not take it.
    assign tx_tvalid    = sending && !(MODE == 4 && dropped);
    assign tx_tuser     = {{(`FLD_TX_TUSER_W - 16){1'b0}}, MODE == 6 ? {14'd0, beat} : 16'd0};

    always @(posedge clk) begin
        if (rst) begin
            owed <= 16'd0;
            beat <= 2'd0;
            dropped <= 1'b0;
        end else begin
            dropped <= 1'b0;
            if (sending && !tx_tready && MODE == 4) dropped <= 1'b1;
            if (tx_tvalid && tx_tready) begin
                beat <= tx_tlast ? 2'd0 : beat + 2'd1;
            end
            owed <= owed + {15'd0, rx_tvalid && rx_tlast && MODE != 1}
                         - {15'd0, tx_tvalid && tx_tready && tx_tlast};
        end
    end
endmodule
