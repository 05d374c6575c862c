--top-module fld_bad
-GMODE=3
../fld_bad.v
