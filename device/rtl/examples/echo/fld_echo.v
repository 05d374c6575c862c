// The echo accelerator (paper §8.1) in RTL. FLD-E: every packet goes back out of the queue it
// came in on (0) with its Ethernet source and destination swapped, resuming steering where its
// rule said. FLD-R: a message of one packet (up to the path MTU) goes back to its queue pair as
// a SEND, with its immediate data.
`include "fld_accel.vh"

module fld_echo (`FLD_ACCEL_PORTS);
    // Never backpressure rx (§5.5): a packet the buffer cannot hold is dropped inside.
    assign rx_tready = 1'b1;

    // The buffer's counters, for a waveform viewer.
    /* verilator lint_off UNUSEDSIGNAL */
    wire [31:0] stored, dropped_full, discarded_bad;
    /* verilator lint_on UNUSEDSIGNAL */
    // 256 packets or 128 KiB, as the Rust echo model holds 256 frames.
    fld_pkt_fifo #(.LOG_BEATS(11), .LOG_PACKETS(8), .SWAP_MACS(1)) fifo (
        .clk(clk), .rst(rst),
        .rx_tdata(rx_tdata), .rx_tkeep(rx_tkeep), .rx_tvalid(rx_tvalid), .rx_tlast(rx_tlast),
        .rx_tuser(rx_tuser), .rx_bad(1'b0),
        .tx_tdata(tx_tdata), .tx_tkeep(tx_tkeep), .tx_tvalid(tx_tvalid), .tx_tready(tx_tready),
        .tx_tlast(tx_tlast), .tx_tuser(tx_tuser),
        .credit_queue(credit_queue), .credit_packets(credit_packets), .credit_bytes(credit_bytes),
        .stored(stored), .dropped_full(dropped_full), .discarded_bad(discarded_bad)
    );
endmodule
