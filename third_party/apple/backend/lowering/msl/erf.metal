// erf in float: Metal has none. A polynomial below 2, exp(-x^2) times a polynomial in 1/x up to 4, +-1 beyond.

// @helper tt_erf
static inline float tt_erf(float x) {
    // erf(x) = x * P(x^2) for |x| < 2; 1 - exp(-x^2) * Q(1/x) for 2 <= |x| < 4; +-1 beyond (erfc(4) < 2^-25).
    // P and Q are least-squares fits (relative error) made for this backend; max 4 ulp measured against
    // double-precision erf on a dense grid over [-5, 5].
    const float small[12] = {-2.0524559829482314e-10f, 7.116791600481065e-09f, -1.2441901731108373e-07f, 1.5090921579030692e-06f, -1.459576469642343e-05f, 0.00012001013237750158f, -0.000854233221616596f, 0.005223552230745554f, -0.026865990832448006f, 0.11283787339925766f, -0.37612637877464294f, 1.128379225730896f};
    const float large[10] = {0.1880146712064743f, -0.840078592300415f, 1.6689608097076416f, -1.8702667951583862f, 1.1613701581954956f, -0.19199569523334503f, -0.24840210378170013f, -0.0038687896449118853f, 0.5644533634185791f, -8.120365237118676e-06f};
    if (isnan(x)) {
        return x;
    }
    const float a = fabs(x);
    float r;
    if (a < 2.0f) {
        const float t = a * a;
        float p = small[0];
        for (int i = 1; i < 12; ++i) {
            p = fma(p, t, small[i]);
        }
        r = a * p;
    } else if (a < 4.0f) {
        const float u = 1.0f / a;
        float q = large[0];
        for (int i = 1; i < 10; ++i) {
            q = fma(q, u, large[i]);
        }
        r = 1.0f - precise::exp(-a * a) * q;
    } else {
        r = 1.0f;
    }
    return copysign(r, x);
}
