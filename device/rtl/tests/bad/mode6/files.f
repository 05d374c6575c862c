--top-module fld_bad
-GMODE=6
../fld_bad.v
