--top-module fld_csum
fld_csum.v
../common/fld_pkt_fifo.v
