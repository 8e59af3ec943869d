// Float -> integer and float -> narrower float conversions with Triton's semantics. Float -> int saturates
// and maps NaN to 0 (what Metal and NVIDIA GPUs do; the interpreter inherits numpy's host-specific value
// instead); downcasts rounded toward zero; integer -> float in the directed rounding modes of libdevice.

// @helper tt_fptosi
template <typename I> static inline I tt_fptosi(float x, float lo, float hi, I imin, I imax) {
    if (isnan(x)) {
        return I(0);
    }
    if (x <= lo) {
        return imin;
    }
    if (x >= hi) {
        return imax;
    }
    return I(x);
}

// @helper tt_fptoui
template <typename I> static inline I tt_fptoui(float x, float hi, I imax) {
    if (isnan(x) || x <= 0.0f) {
        return I(0);
    }
    if (x >= hi) {
        return imax;
    }
    return I(x);
}

// @helper tt_to_half_rtz
/// float -> half / bfloat rounded toward zero (Triton's fp_downcast_rounding="rtz"): the nearest value, one
/// step toward zero where it rounded away from zero; a finite value never becomes infinite
static inline half tt_to_half_rtz(float x) {
    const half h = half(x);
    if (isnan(x) || isinf(x)) {
        return h;
    }
    if (isinf(h) || fabs(float(h)) > fabs(x)) {
        return as_type<half>(ushort(as_type<ushort>(h) - 1));
    }
    return h;
}

// @helper tt_to_bfloat_rtz
static inline bfloat tt_to_bfloat_rtz(float x) {
    if (isnan(x)) {
        return bfloat(x);
    }
    return as_type<bfloat>(ushort(as_type<uint>(x) >> 16));
}

// @helper tt_int_to_float_directed
/// an integer converted to float rounded down / up / toward zero: the nearest float, moved one step where it
/// rounded the other way (compared exactly in 64 bits: every float that a 32-bit integer rounds to fits)
static inline float tt_int_to_float_directed(long x, int mode) {
    float f = float(x);
    const long back = long(f);
    if (mode == 1 && back > x) {
        f = nextafter(f, -INFINITY);
    } else if (mode == 2 && back < x) {
        f = nextafter(f, INFINITY);
    } else if (mode == 3 && (x >= 0 ? back > x : back < x)) {
        f = nextafter(f, 0.0f);
    }
    return f;
}
