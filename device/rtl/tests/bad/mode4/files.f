--top-module fld_bad
-GMODE=4
../fld_bad.v
