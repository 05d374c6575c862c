// An IPv4/UDP checksum verifier: every packet is checked as it streams in (64 bytes a cycle),
// IPv4 header checksum (RFC 791) and, for an unfragmented UDP datagram with a non-zero
// checksum, the UDP checksum over the pseudo-header and the datagram (RFC 768); packets that
// pass go back out of Tx queue 0 with their Ethernet addresses swapped, packets that fail are
// discarded and counted. Frames that are not IPv4 pass unchecked. The verdict is known with
// the last beat, so the packet buffer is store-and-forward.
`include "fld_accel.vh"

module fld_csum (`FLD_ACCEL_PORTS);
    assign rx_tready = 1'b1;

    // ---- header fields: from the first beat as it passes, held for the beats after it ----
    reg        in_packet;
    reg [15:0] beat_no;
    wire       first = rx_tvalid && !in_packet;
    function [7:0] byte_at(input [`FLD_DATA_W-1:0] d, input integer i);
        byte_at = d[8*i +: 8];
    endfunction
    wire [7:0]  ver_ihl   = byte_at(rx_tdata, 14);
    // More fragments (MF) or a fragment offset: bits 13..0 of bytes 20-21.
    wire        fragment  = ((byte_at(rx_tdata, 20) & 8'h3f) | byte_at(rx_tdata, 21)) != 8'd0;
    wire        ipv4_now  = byte_at(rx_tdata, 12) == 8'h08 && byte_at(rx_tdata, 13) == 8'h00
                            && ver_ihl[7:4] == 4'd4;
    wire [5:0]  ihl_now   = {ver_ihl[3:0], 2'b00};   // header bytes
    // UDP, and neither more fragments (MF) nor a fragment offset: the datagram is all here.
    wire        udp_now   = byte_at(rx_tdata, 23) == 8'd17
                            && !fragment;
    // The UDP header follows a 20-byte IPv4 header in the first beat; with options, the fields
    // are read from wherever IHL puts them (IHL <= 15 keeps them inside the first beat).
    wire [7:0]  l4_now    = 8'd14 + {2'b00, ihl_now};
    wire [15:0] udp_len_now  = {byte_at(rx_tdata, {24'd0, l4_now} + 4), byte_at(rx_tdata, {24'd0, l4_now} + 5)};
    wire [15:0] udp_csum_now = {byte_at(rx_tdata, {24'd0, l4_now} + 6), byte_at(rx_tdata, {24'd0, l4_now} + 7)};
    // Pseudo-header: source and destination address, protocol, UDP length.
    wire [31:0] pseudo_now = {16'd0, byte_at(rx_tdata, 26), byte_at(rx_tdata, 27)}
                           + {16'd0, byte_at(rx_tdata, 28), byte_at(rx_tdata, 29)}
                           + {16'd0, byte_at(rx_tdata, 30), byte_at(rx_tdata, 31)}
                           + {16'd0, byte_at(rx_tdata, 32), byte_at(rx_tdata, 33)}
                           + 32'd17 + {16'd0, udp_len_now};

    reg        ipv4_r, check_udp_r;
    reg [5:0]  ihl_r;
    reg [15:0] udp_len_r;
    reg [31:0] ip_acc, udp_acc;
    wire       ipv4      = first ? ipv4_now : ipv4_r;
    wire [5:0] ihl       = first ? ihl_now : ihl_r;
    wire       check     = ipv4_now && udp_now && udp_csum_now != 16'd0;
    wire       check_udp = first ? check : check_udp_r;
    wire [15:0] udp_len  = first ? udp_len_now : udp_len_r;
    wire [15:0] l4       = 16'd14 + {10'd0, ihl};
    wire [15:0] covers   = check_udp ? l4 + udp_len : l4;

    // ---- this beat's contribution: 16-bit words in network order, bytes masked by range ----
    reg [31:0] ip_beat, udp_beat;
    reg        short;   // the frame ends before the header or datagram it announced
    integer j;
    reg [15:0] off;
    reg        hi_ip, lo_ip, hi_udp, lo_udp;
    always @* begin
        ip_beat = 32'd0;
        udp_beat = 32'd0;
        for (j = 0; j < 32; j = j + 1) begin
            off = {beat_no[9:0], 6'd0} + {j[14:0], 1'b0};
            hi_ip  = rx_tkeep[2*j]     && off >= 16'd14 && off < l4;
            lo_ip  = rx_tkeep[2*j + 1] && off + 1 >= 16'd14 && off + 1 < l4;
            hi_udp = rx_tkeep[2*j]     && off >= l4 && off < l4 + udp_len;
            lo_udp = rx_tkeep[2*j + 1] && off + 1 >= l4 && off + 1 < l4 + udp_len;
            ip_beat  = ip_beat  + {16'd0, hi_ip  ? rx_tdata[16*j +: 8] : 8'd0,
                                          lo_ip  ? rx_tdata[16*j + 8 +: 8] : 8'd0};
            udp_beat = udp_beat + {16'd0, hi_udp ? rx_tdata[16*j +: 8] : 8'd0,
                                          lo_udp ? rx_tdata[16*j + 8 +: 8] : 8'd0};
        end
        // Bytes seen up to the end of this beat must cover the header and the datagram.
        short = rx_tlast && ({beat_no[9:0], 6'd0} + {9'd0, popcount(rx_tkeep)}) < covers;
    end
    function [6:0] popcount(input [`FLD_KEEP_W-1:0] k);
        integer b;
        begin
            popcount = 7'd0;
            for (b = 0; b < `FLD_KEEP_W; b = b + 1) popcount = popcount + {6'd0, k[b]};
        end
    endfunction
    function [15:0] fold(input [31:0] s);
        reg [31:0] t;
        begin
            t = {16'd0, s[15:0]} + {16'd0, s[31:16]};
            t = {16'd0, t[15:0]} + {16'd0, t[31:16]};
            fold = t[15:0];
        end
    endfunction
    wire [31:0] ip_total  = (first ? 32'd0 : ip_acc) + ip_beat;
    wire [31:0] udp_total = (first ? pseudo_now : udp_acc) + udp_beat;
    wire        ip_ok     = !ipv4 || (ihl >= 6'd20 && fold(ip_total) == 16'hffff);
    wire        udp_ok    = !ipv4 || !check_udp || fold(udp_total) == 16'hffff;
    wire        bad       = ipv4 && (short || !ip_ok || !udp_ok);

    always @(posedge clk) begin
        if (rst) begin
            in_packet <= 1'b0;
            beat_no <= 16'd0;
        end else if (rx_tvalid) begin
            in_packet <= !rx_tlast;
            beat_no <= rx_tlast ? 16'd0 : beat_no + 16'd1;
            ip_acc <= ip_total;
            udp_acc <= udp_total;
            if (first) begin
                ipv4_r <= ipv4_now;
                ihl_r <= ihl_now;
                check_udp_r <= check;
                udp_len_r <= udp_len_now;
            end
        end
    end

    /* verilator lint_off UNUSEDSIGNAL */
    wire [31:0] stored, dropped_full, discarded_bad;
    /* verilator lint_on UNUSEDSIGNAL */
    fld_pkt_fifo #(.LOG_BEATS(11), .LOG_PACKETS(8), .SWAP_MACS(1)) fifo (
        .clk(clk), .rst(rst),
        .rx_tdata(rx_tdata), .rx_tkeep(rx_tkeep), .rx_tvalid(rx_tvalid), .rx_tlast(rx_tlast),
        .rx_tuser(rx_tuser), .rx_bad(bad),
        .tx_tdata(tx_tdata), .tx_tkeep(tx_tkeep), .tx_tvalid(tx_tvalid), .tx_tready(tx_tready),
        .tx_tlast(tx_tlast), .tx_tuser(tx_tuser),
        .credit_queue(credit_queue), .credit_packets(credit_packets), .credit_bytes(credit_bytes),
        .stored(stored), .dropped_full(dropped_full), .discarded_bad(discarded_bad)
    );
endmodule
