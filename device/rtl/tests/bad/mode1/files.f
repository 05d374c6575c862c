--top-module fld_bad
-GMODE=1
../fld_bad.v
