--top-module fld_bad
-GMODE=2
../fld_bad.v
