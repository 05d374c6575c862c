--top-module fld_bad
-GMODE=5
../fld_bad.v
