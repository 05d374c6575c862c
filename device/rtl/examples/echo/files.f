--top-module fld_echo
fld_echo.v
../common/fld_pkt_fifo.v
