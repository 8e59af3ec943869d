// fp8 <-> float, parameterised at the call by the format (elementwise_ops.FP8_FORMATS: e5m2 and e4m3fn):
// mantissa bits, exponent bias, largest finite value, NaN code, whether it has infinities. float -> fp8 rounds
// to nearest even (or toward zero) and saturates at the largest finite value; NaN stays NaN.

// @helper tt_to_fp8
static inline uchar tt_to_fp8(float x, uint mbits, int bias, float max_finite, uchar nan_code, bool toward_zero) {
    if (isnan(x)) {
        return nan_code;
    }
    const uchar sign = uchar((as_type<uint>(x) >> 24) & 0x80u);
    const float a = fmin(fabs(x), max_finite);
    const float min_normal = as_type<float>(uint(1 - bias + 127) << 23);
    const float scale = float(1u << mbits);
    if (a < min_normal) {
        const float step = as_type<float>(uint(1 - bias - int(mbits) + 127) << 23);
        return sign | uchar(toward_zero ? trunc(a / step) : rint(a / step));
    }
    const uint bits = as_type<uint>(a);
    int e = int((bits >> 23) & 0xFFu) - 127;
    const float m = as_type<float>((bits & 0x7FFFFFu) | 0x3F800000u);
    uint q = uint(toward_zero ? trunc((m - 1.0f) * scale) : rint((m - 1.0f) * scale));
    if (q == (1u << mbits)) {
        q = 0u;
        e += 1;
    }
    return sign | uchar((uint(e + bias) << mbits) | q);
}

// @helper tt_from_fp8
static inline float tt_from_fp8(uchar c, uint mbits, int bias, bool has_inf) {
    const uint ebits = 7u - mbits;
    const uint emax = (1u << ebits) - 1u;
    const uint e = (uint(c) >> mbits) & emax;
    const uint q = uint(c) & ((1u << mbits) - 1u);
    const float sign = (c & 0x80) ? -1.0f : 1.0f;
    if (has_inf && e == emax) {
        return q == 0u ? sign * INFINITY : NAN;
    }
    if (!has_inf && e == emax && q == (1u << mbits) - 1u) {
        return NAN;
    }
    if (e == 0u) {
        return sign * float(q) * as_type<float>(uint(1 - bias - int(mbits) + 127) << 23);
    }
    const float frac = 1.0f + float(q) / float(1u << mbits);
    return sign * frac * as_type<float>(uint(int(e) - bias + 127) << 23);
}
