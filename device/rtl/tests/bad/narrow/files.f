--top-module fld_narrow
fld_narrow.v
