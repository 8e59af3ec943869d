// Software float64 math functions on tt_double (soft_f64_core.metal): exp, exp2, log, log2, pow, sin, cos,
// tanh, erf, evaluated in double-double arithmetic on top of the core's exact operations; faithful (< 1 ulp).
//
// Max error measured against an exact reference (Python `decimal` at 60 digits; sin/cos reduced with a
// 1400-bit pi) in units in the last place of the exact value, 2*10^5 cases each (1.75*10^5 for sin/cos;
// uniform over the whole range, around 1, tiny and huge magnitudes, subnormal results, |x| up to 1e300 for
// sin/cos):
//     exp 0.536   exp2 0.542   log 0.500   log2 0.500   pow 0.541
//     sin 0.560   cos 0.555    tanh 0.576  erf 0.558
// (0.5 is correct rounding.) Special values follow C99 Annex F (pow's special cases, log(-x) = NaN,
// log(0) = -inf, sin(inf) = NaN, ...). sin/cos reduce their argument exactly for every finite double:
// Cody-Waite with pi/2 in four parts below 2^20, Payne-Hanek with 1216 bits of 2/pi above.
//
// Speed: a math function is 50 to 150 soft operations (erf: up to 240 series terms for |x| near 6).
//
// Constants: every `tt_f64_from_bits(0x...ul)` of an irrational or rational constant (ln 2 and 1/ln 2 split
// into two or three doubles, pi/2 in two and four parts, 2/pi, 2/sqrt(pi), -1/6, 1/3), the Taylor
// coefficients of exp, log, sin and cos and the 2/pi bit table of the Payne-Hanek reduction are literals
// here. test/lowering/test_msl_library.py derives each of them again with exact integer arithmetic (pi by
// Machin's formula, ln 2 by its series, at 1400 bits) and checks the literal at each place it is used.

// @helper tt_f64_math
// @requires tt_f64_core
// ---- tt_double math functions (double-double evaluation) ----
struct tt_f64dd {
    tt_double hi;
    tt_double lo;
};
static inline tt_f64dd tt_f64x_dd(tt_double hi, tt_double lo) {
    tt_f64dd r;
    r.hi = hi;
    r.lo = lo;
    return r;
}
static inline tt_double tt_f64x_k(ulong b) { return tt_f64_from_bits(b); }
static inline tt_f64dd tt_f64x_two_sum(tt_double a, tt_double b) {
    const tt_double s = a + b;
    const tt_double bb = s - a;
    return tt_f64x_dd(s, (a - (s - bb)) + (b - bb));
}
static inline tt_f64dd tt_f64x_fast_two_sum(tt_double a, tt_double b) {
    const tt_double s = a + b;
    return tt_f64x_dd(s, b - (s - a));
}
static inline tt_f64dd tt_f64x_two_prod(tt_double a, tt_double b) {
    const tt_double p = a * b;
    return tt_f64x_dd(p, tt_f64_fma(a, b, -p));
}
static inline tt_f64dd tt_f64x_dd_add(tt_f64dd x, tt_f64dd y) {
    tt_f64dd s = tt_f64x_two_sum(x.hi, y.hi);
    const tt_f64dd t = tt_f64x_two_sum(x.lo, y.lo);
    s = tt_f64x_fast_two_sum(s.hi, s.lo + t.hi);
    return tt_f64x_fast_two_sum(s.hi, s.lo + t.lo);
}
static inline tt_f64dd tt_f64x_dd_add_d(tt_f64dd x, tt_double d) {
    const tt_f64dd s = tt_f64x_two_sum(x.hi, d);
    return tt_f64x_fast_two_sum(s.hi, s.lo + x.lo);
}
static inline tt_f64dd tt_f64x_dd_mul(tt_f64dd x, tt_f64dd y) {
    const tt_f64dd p = tt_f64x_two_prod(x.hi, y.hi);
    return tt_f64x_fast_two_sum(p.hi, p.lo + (x.hi * y.lo + x.lo * y.hi));
}
static inline tt_f64dd tt_f64x_dd_mul_d(tt_f64dd x, tt_double d) {
    const tt_f64dd p = tt_f64x_two_prod(x.hi, d);
    return tt_f64x_fast_two_sum(p.hi, p.lo + x.lo * d);
}
static inline tt_f64dd tt_f64x_dd_div(tt_f64dd x, tt_f64dd y) {
    const tt_double q1 = x.hi / y.hi;
    const tt_f64dd r = tt_f64x_dd_add(x, tt_f64x_dd_mul_d(y, -q1));
    const tt_double q2 = r.hi / y.hi;
    return tt_f64x_fast_two_sum(q1, q2);
}

// round(2^n * (v.hi + v.lo)) with a single rounding (also into the subnormal range)
static inline tt_double tt_f64x_dd_ldexp(tt_f64dd v, int n) {
    const ulong h = v.hi.bits;
    const ulong ah = h & TT_F64_ABS;
    const ulong al = v.lo.bits & TT_F64_ABS;
    if (ah == 0ul || ah >= TT_F64_INF || al >= TT_F64_INF) {
        return tt_f64_ldexp(v.hi + v.lo, n);
    }
    ulong sig = tt_f64x_sig(ah) << 10;
    const int lsb = tt_f64x_exp1(ah) - 1085;
    if (al != 0ul) {
        const int sh = (tt_f64x_exp1(al) - 1075) - lsb;
        if (sh > 0) {
            return tt_f64_ldexp(v.hi + v.lo, n);
        }
        const ulong li = tt_f64x_shr_jam(tt_f64x_sig(al), uint(-sh));
        sig = ((v.lo.bits ^ h) >> 63) != 0ul ? sig - li : sig + li;
    }
    n = clamp(n, -4000, 4000);
    return tt_f64_from_bits(tt_f64x_pack(h & TT_F64_SIGN, lsb + n, sig));
}

// exp(r) as a double-double, |r| <= ~0.36: 1 + r + r^2/2 (exact) + r^3 P(r), P = 1/3! + r/4! + ... + r^10/13!
static inline tt_f64dd tt_f64x_exp_dd(tt_f64dd r) {
    const ulong c[11] = {0x3DE6124613A86D09ul, 0x3E21EED8EFF8D898ul, 0x3E5AE64567F544E4ul, 0x3E927E4FB7789F5Cul, 0x3EC71DE3A556C734ul, 0x3EFA01A01A01A01Aul, 0x3F2A01A01A01A01Aul, 0x3F56C16C16C16C17ul, 0x3F81111111111111ul, 0x3FA5555555555555ul, 0x3FC5555555555555ul};
    tt_double p = tt_f64x_k(c[0]);
    for (int i = 1; i < 11; ++i) {
        p = tt_f64_fma(p, r.hi, tt_f64x_k(c[i]));
    }
    const tt_f64dd rr = tt_f64x_two_prod(r.hi, r.hi);
    const tt_double half_ = tt_f64x_k(0x3FE0000000000000ul);
    const tt_double h = rr.hi * half_;  // exact: r^2/2 = h + rr.lo/2
    const tt_double cube = rr.hi * r.hi * p;  // ~r^3/6: its rounding errors are far below 1 ulp of the sum
    const tt_f64dd s1 = tt_f64x_two_sum(h, cube);
    const tt_f64dd s2 = tt_f64x_two_sum(r.hi, s1.hi);
    const tt_double lo = ((s1.lo + s2.lo) + rr.lo * half_) + (r.lo + r.lo * r.hi);
    const tt_f64dd u = tt_f64x_two_sum(tt_f64x_k(0x3FF0000000000000ul), s2.hi);
    return tt_f64x_fast_two_sum(u.hi, u.lo + lo);
}

// x = k ln2 + r, |r| <= ~0.35 as a double-double (|x| < 2^11 ln2)
static inline tt_f64dd tt_f64x_exp_reduce(tt_double x, thread int& k) {
    const tt_double kd = tt_f64_rint(x * tt_f64_from_bits(0x3FF71547652B82FEul));
    k = int(tt_f64_to_i64(kd));
    const tt_double nk = -kd;
    tt_f64dd r = tt_f64x_dd(tt_f64_fma(nk, tt_f64_from_bits(0x3FE62E42FEFA3800ul), x), tt_f64x_k(0ul));
    r = tt_f64x_dd_add(r, tt_f64x_two_prod(nk, tt_f64_from_bits(0x3D2EF35793C76000ul)));
    return tt_f64x_dd_add_d(r, nk * tt_f64_from_bits(0x3A8CC01F97B57A08ul));
}

static inline tt_double tt_f64_exp(tt_double x) {
    const ulong ax = x.bits & TT_F64_ABS;
    if (ax >= TT_F64_INF) {
        return ax > TT_F64_INF ? tt_f64_from_bits(x.bits | TT_F64_QUIET) : tt_f64_from_bits((x.bits >> 63) != 0ul ? 0ul : TT_F64_INF);
    }
    if ((x.bits >> 63) == 0ul ? ax > 0x4086300000000000ul : ax > 0x4087500000000000ul) {  // x > 710 or x < -746
        return tt_f64_from_bits((x.bits >> 63) != 0ul ? 0ul : TT_F64_INF);
    }
    int k;
    const tt_f64dd r = tt_f64x_exp_reduce(x, k);
    return tt_f64x_dd_ldexp(tt_f64x_exp_dd(r), k);
}

static inline tt_double tt_f64_exp2(tt_double x) {
    const ulong ax = x.bits & TT_F64_ABS;
    if (ax >= TT_F64_INF) {
        return ax > TT_F64_INF ? tt_f64_from_bits(x.bits | TT_F64_QUIET) : tt_f64_from_bits((x.bits >> 63) != 0ul ? 0ul : TT_F64_INF);
    }
    if (ax > 0x4091000000000000ul) {  // |x| > 1088
        return tt_f64_from_bits((x.bits >> 63) != 0ul ? 0ul : TT_F64_INF);
    }
    const tt_double kd = tt_f64_rint(x);
    const tt_double f = x - kd;
    const tt_f64dd r = tt_f64x_dd_mul_d(tt_f64x_dd(tt_f64_from_bits(0x3FE62E42FEFA39EFul), tt_f64_from_bits(0x3C7ABC9E3B39803Ful)), f);
    return tt_f64x_dd_ldexp(tt_f64x_exp_dd(r), int(tt_f64_to_i64(kd)));
}

// log(x) = k ln2 + L for finite x > 0; L = log(m), m in [sqrt(1/2), sqrt(2)), as a double-double
static inline tt_f64dd tt_f64x_log_dd(tt_double x, thread int& k) {
    int e;
    const ulong m = tt_f64x_norm_sig(x.bits & TT_F64_ABS, e);
    k = e - 1023;
    ulong mb = (m & TT_F64_FRAC) | 0x3FF0000000000000ul;
    if ((m & TT_F64_FRAC) > 0x6A09E667F3BCCul) {
        mb = (m & TT_F64_FRAC) | 0x3FE0000000000000ul;
        k += 1;
    }
    const tt_double two = tt_f64x_k(0x4000000000000000ul);
    const tt_double f = tt_f64x_k(mb) - tt_f64x_k(0x3FF0000000000000ul);
    // s = f / (2 + f), 2 + f = u + ue exactly
    const tt_double u = two + f;
    const tt_double ue = f - (u - two);
    const tt_double sh = f / u;
    const tt_double sl = (tt_f64_fma(-sh, u, f) - sh * ue) / u;
    const tt_f64dd s = tt_f64x_dd(sh, sl);
    const tt_f64dd z = tt_f64x_dd_mul(s, s);
    const ulong c[12] = {0x3FA2F684BDA12F68ul, 0x3FA47AE147AE147Bul, 0x3FA642C8590B2164ul, 0x3FA8618618618618ul, 0x3FAAF286BCA1AF28ul, 0x3FAE1E1E1E1E1E1Eul, 0x3FB1111111111111ul, 0x3FB3B13B13B13B14ul, 0x3FB745D1745D1746ul, 0x3FBC71C71C71C71Cul, 0x3FC2492492492492ul, 0x3FC999999999999Aul};
    tt_double q = tt_f64x_k(c[0]);
    for (int i = 1; i < 12; ++i) {
        q = tt_f64_fma(q, z.hi, tt_f64x_k(c[i]));
    }
    const tt_f64dd a = tt_f64x_dd_add_d(tt_f64x_dd(tt_f64_from_bits(0x3FD5555555555555ul), tt_f64_from_bits(0x3C75555555555555ul)), z.hi * q);
    const tt_f64dd l = tt_f64x_dd_add(s, tt_f64x_dd_mul(tt_f64x_dd_mul(s, z), a));
    const tt_double two_ = two;
    return tt_f64x_dd(l.hi * two_, l.lo * two_);
}

// NaN, negative, zero and infinite arguments of log/log2; returns true when handled
static inline bool tt_f64x_log_special(tt_double x, thread tt_double& out) {
    if (tt_f64x_isnan(x.bits)) {
        out = tt_f64_from_bits(x.bits | TT_F64_QUIET);
        return true;
    }
    if ((x.bits & TT_F64_ABS) == 0ul) {
        out = tt_f64_from_bits(TT_F64_SIGN | TT_F64_INF);
        return true;
    }
    if ((x.bits >> 63) != 0ul) {
        out = tt_f64_from_bits(TT_F64_DEFAULT_NAN);
        return true;
    }
    if (x.bits == TT_F64_INF) {
        out = x;
        return true;
    }
    return false;
}

static inline tt_double tt_f64_log(tt_double x) {
    tt_double out;
    if (tt_f64x_log_special(x, out)) {
        return out;
    }
    int k;
    const tt_f64dd l = tt_f64x_log_dd(x, k);
    const tt_double kd = tt_f64_from_i32(k);
    tt_f64dd kl = tt_f64x_dd(kd * tt_f64_from_bits(0x3FE62E42FEFA3800ul), tt_f64x_k(0ul));
    kl = tt_f64x_dd_add(kl, tt_f64x_two_prod(kd, tt_f64_from_bits(0x3D2EF35793C76000ul)));
    kl = tt_f64x_dd_add_d(kl, kd * tt_f64_from_bits(0x3A8CC01F97B57A08ul));
    return tt_f64x_dd_add(kl, l).hi;
}

static inline tt_f64dd tt_f64x_log2_dd(tt_double x) {
    int k;
    const tt_f64dd l = tt_f64x_log_dd(x, k);
    return tt_f64x_dd_add_d(tt_f64x_dd_mul(l, tt_f64x_dd(tt_f64_from_bits(0x3FF71547652B82FEul), tt_f64_from_bits(0x3C7777D0FFDA0D24ul))), tt_f64_from_i32(k));
}

static inline tt_double tt_f64_log2(tt_double x) {
    tt_double out;
    if (tt_f64x_log_special(x, out)) {
        return out;
    }
    return tt_f64x_log2_dd(x).hi;
}

static inline tt_double tt_f64_pow(tt_double x, tt_double y) {
    const ulong one = 0x3FF0000000000000ul;
    const ulong ax = x.bits & TT_F64_ABS;
    const ulong ay = y.bits & TT_F64_ABS;
    if (ay == 0ul || x.bits == one) {
        return tt_f64x_k(one);
    }
    if (tt_f64x_isnan(x.bits) || tt_f64x_isnan(y.bits)) {
        return tt_f64_from_bits(tt_f64x_nan2(x.bits, y.bits));
    }
    const bool yneg = (y.bits >> 63) != 0ul;
    if (ay == TT_F64_INF) {
        if (ax == one) {
            return tt_f64x_k(one);
        }
        return tt_f64x_k((ax > one) != yneg ? TT_F64_INF : 0ul);
    }
    const bool yint = tt_f64_trunc(y) == y;
    const bool yodd = yint && ay < 0x4340000000000000ul && (tt_f64_to_u64(tt_f64_fabs(y)) & 1ul) != 0ul;
    const ulong rsign = ((x.bits >> 63) != 0ul && yodd) ? TT_F64_SIGN : 0ul;
    if (ax == 0ul) {
        return tt_f64x_k(yneg ? (rsign | TT_F64_INF) : rsign);
    }
    if (ax == TT_F64_INF) {
        return tt_f64x_k(yneg ? rsign : (rsign | TT_F64_INF));
    }
    if ((x.bits >> 63) != 0ul && !yint) {
        return tt_f64x_k(TT_F64_DEFAULT_NAN);
    }
    const tt_f64dd l2 = tt_f64x_log2_dd(tt_f64x_k(ax));
    const tt_double th = l2.hi * y;  // y log2|x|: beyond +-1120 the result overflows or underflows
    if (th > tt_f64x_k(0x4091800000000000ul)) {
        return tt_f64x_k(rsign | TT_F64_INF);
    }
    if (th < tt_f64x_k(0xC091800000000000ul)) {
        return tt_f64x_k(rsign);
    }
    const tt_f64dd t = tt_f64x_dd_mul_d(l2, y);
    const tt_double kd = tt_f64_rint(t.hi);
    const tt_f64dd f = tt_f64x_dd_add_d(t, -kd);
    const tt_f64dd r = tt_f64x_dd_mul(f, tt_f64x_dd(tt_f64_from_bits(0x3FE62E42FEFA39EFul), tt_f64_from_bits(0x3C7ABC9E3B39803Ful)));
    const tt_double v = tt_f64x_dd_ldexp(tt_f64x_exp_dd(r), int(tt_f64_to_i64(kd)));
    return tt_f64_from_bits(v.bits | rsign);
}

// x = n (pi/2) + r for finite x, |r| <= ~pi/4 as a double-double; returns n mod 4
static inline int tt_f64x_rem_pio2(tt_double x, thread tt_f64dd& r) {
    const ulong ax = x.bits & TT_F64_ABS;
    if (ax < 0x4130000000000000ul) {  // |x| < 2^20: Cody-Waite with pi/2 in four parts
        const tt_double kd = tt_f64_rint(x * tt_f64_from_bits(0x3FE45F306DC9C883ul));
        const tt_double nk = -kd;
        r = tt_f64x_dd(tt_f64_fma(nk, tt_f64_from_bits(0x3FF921FB54400000ul), x), tt_f64x_k(0ul));
        r = tt_f64x_dd_add(r, tt_f64x_two_prod(nk, tt_f64_from_bits(0x3DD0B4611A600000ul)));
        r = tt_f64x_dd_add(r, tt_f64x_two_prod(nk, tt_f64_from_bits(0x3BA3198A2E000000ul)));
        r = tt_f64x_dd_add(r, tt_f64x_two_prod(nk, tt_f64_from_bits(0x397B839A252049C1ul)));
        return int(tt_f64_to_i64(kd) & 3l);
    }
    // Payne-Hanek: |x| = m 2^E; x (2/pi) mod 4 from the 192 bits b_{E-1} .. b_{E+190} of 2/pi
    const ulong tbl[21] = {0x0000000000000000ul, 0xA2F9836E4E441529ul, 0xFC2757D1F534DDC0ul, 0xDB6295993C439041ul, 0xFE5163ABDEBBC561ul, 0xB7246E3A424DD2E0ul, 0x06492EEA09D1921Cul, 0xFE1DEB1CB129A73Eul, 0xE88235F52EBB4484ul, 0xE99C7026B45F7E41ul, 0x3991D639835339F4ul, 0x9C845F8BBDF9283Bul, 0x1FF897FFDE05980Ful, 0xEF2F118B5A0A6D1Ful, 0x6D367ECF27CB09B7ul, 0x4F463F669E5FEA2Dul, 0x7527BAC7EBE5F17Bul, 0x3D0739F78A5292EAul, 0x6BFB5FB11F8D5D08ul, 0x56033046FC7B6BABul, 0xF0CFBC209AF4361Dul};
    int e;
    const ulong m = tt_f64x_norm_sig(ax, e);
    const int q0 = (e - 1075) - 1 + 63;
    const int w = q0 >> 6;
    const uint o = uint(q0 & 63);
    ulong win[3];
    for (int i = 0; i < 3; ++i) {
        win[i] = o != 0u ? ((tbl[w + i] << o) | (tbl[w + i + 1] >> (64u - o))) : tbl[w + i];
    }
    const ulong h2 = mulhi(m, win[2]), l2 = m * win[2];
    const ulong h1 = mulhi(m, win[1]), l1 = m * win[1];
    const ulong l0 = m * win[0];
    const ulong r0 = l2;
    const ulong r1 = h2 + l1;
    const ulong c1 = r1 < h2 ? 1ul : 0ul;
    const ulong r2 = h1 + l0 + c1;
    int n = int(r2 >> 62);
    // fraction: 190 bits (x2:x1:x0), value * 2^-190
    ulong x2 = r2 & 0x3FFFFFFFFFFFFFFFul, x1 = r1, x0 = r0;
    bool neg = false;
    if ((x2 >> 61) != 0ul) {  // >= 1/2: take 1 - fraction, next quadrant
        n += 1;
        neg = true;
        x0 = ~x0 + 1ul;
        const ulong b0 = x0 != 0ul ? 1ul : 0ul;
        x1 = ~x1 + (1ul - b0);
        const ulong b1 = (x1 != 0ul || b0 != 0ul) ? 1ul : 0ul;
        x2 = ((~x2) + (1ul - b1)) & 0x3FFFFFFFFFFFFFFFul;
    }
    int lsb = -190;
    // normalise to a leading one at bit 63 of x2
    if (x2 == 0ul) {
        x2 = x1;
        x1 = x0;
        x0 = 0ul;
        lsb -= 64;
    }
    const uint s = uint(clz(x2));
    if (s != 0u) {
        x2 = (x2 << s) | (x1 >> (64u - s));
        x1 = (x1 << s) | (x0 >> (64u - s));
        x0 <<= s;
        lsb -= int(s);
    }
    const tt_double fh = tt_f64_from_bits(tt_f64x_pack(0ul, lsb + 128 + 11, x2 >> 11));
    const ulong rest = ((x2 & 0x7FFul) << 53) | (x1 >> 11) | (((x1 & 0x7FFul) | x0) != 0ul ? 1ul : 0ul);
    const tt_double fl = tt_f64_from_bits(tt_f64x_pack(0ul, lsb + 64 + 11, rest));
    r = tt_f64x_dd_mul(tt_f64x_dd(fh, fl), tt_f64x_dd(tt_f64_from_bits(0x3FF921FB54442D18ul), tt_f64_from_bits(0x3C91A62633145C07ul)));
    if (neg != ((x.bits >> 63) != 0ul)) {
        r = tt_f64x_dd(-r.hi, -r.lo);
    }
    if ((x.bits >> 63) != 0ul) {
        n = -n;
    }
    return n & 3;
}

// sin(r) = r - r^3/6 (double-double) + r^5 S(z), S = 1/5! - z/7! + ... + z^7/19!, z = r^2
static inline tt_double tt_f64x_sin_kernel(tt_f64dd r) {
    const ulong c[8] = {0xBC62F49B46814157ul, 0x3CE952C77030AD4Aul, 0xBD6AE7F3E733B81Ful, 0x3DE6124613A86D09ul, 0xBE5AE64567F544E4ul, 0x3EC71DE3A556C734ul, 0xBF2A01A01A01A01Aul, 0x3F81111111111111ul};
    const tt_f64dd zz = tt_f64x_two_prod(r.hi, r.hi);
    const tt_double z = zz.hi;
    tt_double p = tt_f64x_k(c[0]);
    for (int i = 1; i < 8; ++i) {
        p = tt_f64_fma(p, z, tt_f64x_k(c[i]));
    }
    const tt_f64dd r3 = tt_f64x_dd_mul_d(zz, r.hi);
    const tt_f64dd t3 = tt_f64x_dd_mul(r3, tt_f64x_dd(tt_f64_from_bits(0xBFC5555555555555ul), tt_f64_from_bits(0xBC65555555555555ul)));
    const tt_double c5 = r3.hi * z * p;
    const tt_f64dd s1 = tt_f64x_two_sum(t3.hi, c5);
    const tt_f64dd s2 = tt_f64x_two_sum(r.hi, s1.hi);
    const tt_double lo = ((s1.lo + s2.lo) + t3.lo) + r.lo * (tt_f64x_k(0x3FF0000000000000ul) - tt_f64x_k(0x3FE0000000000000ul) * z);
    return s2.hi + lo;
}

static inline tt_double tt_f64x_cos_kernel(tt_f64dd r) {
    const ulong c[9] = {0x3C1E542BA4020225ul, 0xBCA6827863B97D97ul, 0x3D2AE7F3E733B81Ful, 0xBDA93974A8C07C9Dul, 0x3E21EED8EFF8D898ul, 0xBE927E4FB7789F5Cul, 0x3EFA01A01A01A01Aul, 0xBF56C16C16C16C17ul, 0x3FA5555555555555ul};
    const tt_f64dd zz = tt_f64x_two_prod(r.hi, r.hi);
    const tt_double z = zz.hi;
    tt_double p = tt_f64x_k(c[0]);
    for (int i = 1; i < 9; ++i) {
        p = tt_f64_fma(p, z, tt_f64x_k(c[i]));
    }
    const tt_double one = tt_f64x_k(0x3FF0000000000000ul);
    const tt_double half_ = tt_f64x_k(0x3FE0000000000000ul);
    const tt_double hz = half_ * z;
    const tt_double w = one - hz;
    const tt_double err = (one - w) - hz;
    return w + (((err - half_ * zz.lo) + z * z * p) - r.hi * r.lo);
}

static inline tt_double tt_f64_sin(tt_double x) {
    const ulong ax = x.bits & TT_F64_ABS;
    if (ax >= TT_F64_INF) {
        return tt_f64_from_bits(ax > TT_F64_INF ? (x.bits | TT_F64_QUIET) : TT_F64_DEFAULT_NAN);
    }
    if (ax < 0x3E50000000000000ul) {  // |x| < 2^-26: sin x rounds to x
        return x;
    }
    tt_f64dd r;
    const int n = tt_f64x_rem_pio2(x, r);
    const tt_double v = (n & 1) != 0 ? tt_f64x_cos_kernel(r) : tt_f64x_sin_kernel(r);
    return (n & 2) != 0 ? -v : v;
}

static inline tt_double tt_f64_cos(tt_double x) {
    const ulong ax = x.bits & TT_F64_ABS;
    if (ax >= TT_F64_INF) {
        return tt_f64_from_bits(ax > TT_F64_INF ? (x.bits | TT_F64_QUIET) : TT_F64_DEFAULT_NAN);
    }
    if (ax < 0x3E40000000000000ul) {  // |x| < 2^-27: cos x rounds to 1
        return tt_f64x_k(0x3FF0000000000000ul);
    }
    tt_f64dd r;
    const int n = tt_f64x_rem_pio2(x, r);
    const tt_double v = (n & 1) != 0 ? tt_f64x_sin_kernel(r) : tt_f64x_cos_kernel(r);
    return ((n + 1) & 2) != 0 ? -v : v;
}

static inline tt_double tt_f64_tanh(tt_double x) {
    const ulong ax = x.bits & TT_F64_ABS;
    if (ax > TT_F64_INF) {
        return tt_f64_from_bits(x.bits | TT_F64_QUIET);
    }
    if (ax < 0x3E30000000000000ul) {  // |x| < 2^-28: tanh x rounds to x
        return x;
    }
    if (ax > 0x4036000000000000ul) {  // |x| > 22: +-1
        return tt_f64_from_bits((x.bits & TT_F64_SIGN) | 0x3FF0000000000000ul);
    }
    int k;
    const tt_f64dd r = tt_f64x_exp_reduce(tt_f64_from_bits(ax + 0x0010000000000000ul), k);  // 2|x|
    tt_f64dd e = tt_f64x_exp_dd(r);
    e = tt_f64x_dd(tt_f64_ldexp(e.hi, k), tt_f64_ldexp(e.lo, k));
    const tt_double one = tt_f64x_k(0x3FF0000000000000ul);
    const tt_f64dd q = tt_f64x_dd_div(tt_f64x_dd_add_d(e, -one), tt_f64x_dd_add_d(e, one));
    return tt_f64_from_bits(q.hi.bits | (x.bits & TT_F64_SIGN));
}

static inline tt_f64dd tt_f64x_dd_div_d(tt_f64dd x, tt_double d) {
    const tt_double q1 = x.hi / d;
    const tt_f64dd p = tt_f64x_two_prod(q1, d);
    const tt_double r = ((x.hi - p.hi) - p.lo) + x.lo;
    return tt_f64x_fast_two_sum(q1, r / d);
}

// erf(x) = 2/sqrt(pi) exp(-x^2) sum_n (2x^2)^n x / (2n+1)!!  (positive terms: no cancellation), in double-double
static inline tt_double tt_f64_erf(tt_double x) {
    const ulong ax = x.bits & TT_F64_ABS;
    if (ax > TT_F64_INF) {
        return tt_f64_from_bits(x.bits | TT_F64_QUIET);
    }
    if (ax == 0ul) {
        return x;
    }
    if (ax >= 0x4018000000000000ul) {  // |x| >= 6: erfc(6) < 2^-54, erf rounds to +-1
        return tt_f64_from_bits((x.bits & TT_F64_SIGN) | 0x3FF0000000000000ul);
    }
    const tt_double a = tt_f64_from_bits(ax);
    const tt_f64dd xx = tt_f64x_two_prod(a, a);
    const tt_double two = tt_f64x_k(0x4000000000000000ul);
    const tt_f64dd w = tt_f64x_dd(xx.hi * two, xx.lo * two);
    tt_f64dd t = tt_f64x_dd(a, tt_f64x_k(0ul));
    tt_f64dd sum = t;
    tt_double odd = tt_f64x_k(0x3FF0000000000000ul);
    for (int n = 1; n < 240; ++n) {
        odd = odd + two;
        t = tt_f64x_dd_div_d(tt_f64x_dd_mul(t, w), odd);
        sum = tt_f64x_dd_add(sum, t);
        if (tt_f64x_exp(t.hi.bits) + 110 < tt_f64x_exp(sum.hi.bits)) {
            break;
        }
    }
    // exp(-x^2) = 2^k exp(r)
    int k;
    tt_f64dd r = tt_f64x_exp_reduce(-xx.hi, k);
    r = tt_f64x_dd_add_d(r, -xx.lo);
    const tt_f64dd e = tt_f64x_exp_dd(r);
    const tt_f64dd v = tt_f64x_dd_mul(tt_f64x_dd_mul(e, sum), tt_f64x_dd(tt_f64_from_bits(0x3FF20DD750429B6Dul), tt_f64_from_bits(0x3C71AE3A914FED80ul)));
    const tt_double res = tt_f64x_dd_ldexp(v, k);
    return tt_f64_from_bits(res.bits | (x.bits & TT_F64_SIGN));
}
