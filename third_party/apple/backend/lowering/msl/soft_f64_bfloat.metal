// Software float64 <-> bfloat (see soft_f64_core.metal): rounded to nearest even through the core's
// narrowing, NaN keeping its top payload bits; bfloat -> double is exact (through float).

// @helper tt_f64_bfloat
// @requires tt_f64_core
// ---- tt_double <-> bfloat ----
static inline bfloat tt_f64_to_bfloat(tt_double a) { return as_type<bfloat>(ushort(tt_f64x_narrow(a.bits, 7u, 8u))); }
static inline tt_double tt_f64_from_bfloat(bfloat x) { return tt_f64_from_float(float(x)); }
