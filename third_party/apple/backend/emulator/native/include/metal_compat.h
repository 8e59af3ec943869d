/*
 * metal_compat.h — a host C++ stand-in for <metal_stdlib>, used by the Metal-on-CPU emulator.
 *
 * MSL source is compiled as C++17 by clang (>= 17) with this header in place of <metal_stdlib>
 * (the emulator's include directory has a `metal_stdlib` file that includes this one). Kernels then
 * run on fibers driven by lib/emulator_runtime.cpp through the hooks in emulator_runtime.h.
 *
 * The goal is *strictness*: code that Apple's compiler would reject should fail here too, and
 * behaviour Metal defines should be reproduced, not inherited from the host.
 *
 * What this header maps and how
 *   - Address spaces: `device`, `constant`, `threadgroup` are clang address spaces 1, 2, 3, so mixing
 *     pointers of different address spaces (or passing them to `thread`/generic pointers) is a compile
 *     error, as in Metal. `constant` also implies `const`. `thread` is the generic address space.
 *   - `kernel` functions are ordinary static functions called by a generated trampoline; attributes
 *     such as [[buffer(0)]] are ignored by the host compiler (-Wno-unknown-attributes).
 *   - half is _Float16 and bfloat is __bf16, both rounded after every operation
 *     (-fexcess-precision=16); math functions on them compute in float and round back.
 *   - Vectors are clang ext_vector_type vectors (swizzles work). Differences from Metal:
 *       * `float4(a, b, c, d)` does not compile: use `float4{a, b, c, d}` (valid MSL too);
 *       * `floatN(intN_value)` / `(floatN)v` is a BIT-CAST here but an element-wise conversion in
 *         Metal, and `static_cast<floatN>(intN)` does not compile: convert vectors element by element;
 *       * comparisons of vectors yield integer masks (0 / -1), not boolN; `select`, `all`, `any` accept
 *         both; boolN vectors support indexing (b[0]) but not swizzles, and sizeof(bool4) differs.
 *   - Metal defined results where host C++ has undefined behaviour (see also the compile flags in
 *     emulator/toolchain.py):
 *       * signed integer overflow wraps (-fwrapv);
 *       * float -> integer conversion of NaN gives 0 and out-of-range values saturate
 *         (-fno-strict-float-cast-overflow; MSL leaves out-of-range results unspecified);
 *       * integer division / remainder by zero and INT_MIN / -1 do not trap: they give AArch64's
 *         results (x/0 == 0, x%0 == x, INT_MIN/-1 == INT_MIN) and are reported as a warning with the MSL
 *         line (TRITON_APPLE_EMULATOR_UB=error makes them fatal, =ignore silences them);
 *       * shifts by >= the bit width or by a negative count are reported the same way (the value is
 *         whatever the host computes: MSL inherits C++'s undefined behaviour here);
 *       * indexing a fixed-size array (thread-local arrays, threadgroup arrays) out of bounds aborts the
 *         launch with the MSL line (-fsanitize=array-bounds);
 *       * clz(0) / ctz(0) return the bit width, abs(INT_MIN) == INT_MIN, rotate() takes the count modulo
 *         the width.
 *   - SIMD-group functions (width 32) are rendezvous of the live lanes of a simdgroup (strict: all
 *     live lanes must call the same function at the same call site; reading a lane that has exited or
 *     does not exist is an error). 64-bit and bool shuffles/reductions do not compile (Metal has none).
 *   - threadgroup_barrier() must be reached by every live thread of the threadgroup at the same call
 *     site; threads that have returned no longer count.
 *   - Atomics: atomic_int / atomic_uint (device + threadgroup), atomic_bool, atomic_float (device only),
 *     atomic_ulong (device, min/max only, where the family has it); memory_order_relaxed only (others fail
 *     to compile); atomic_thread_fence from MSL 3.2 (metal_version.h says which MSL and family this is).
 *   - simdgroup_matrix<T, 8, 8>: metal_simdgroup_matrix.h.
 *   - Not provided: textures, samplers, matrices, packed_* types, metal::array,
 *     quad-group functions, threadgroup memory passed as kernel arguments, erf/erfc/log1p/expm1
 *     (not in Metal).
 */
#ifndef TT_METAL_COMPAT_H
#define TT_METAL_COMPAT_H

#ifndef __clang__
#error "metal_compat.h needs clang (address spaces, ext_vector_type, _Float16, __bf16)"
#endif

#include <stddef.h>
#include <stdint.h>

#include "emulator_runtime.h"
#include "metal_version.h" /* the MSL version and GPU family stood for */
#include "sanitizer.h"      /* the emulator tools' hooks: nothing unless built with TT_EMU_TOOLS */

#define __TT_DEV __attribute__((address_space(1)))
#define __TT_CONSTANT __attribute__((address_space(2)))
#define __TT_TG __attribute__((address_space(3)))
#define __TT_SITE_PARAMS unsigned __tt_line = __builtin_LINE(), unsigned __tt_col = __builtin_COLUMN()
#define __TT_SITE_ARGS __tt_line, __tt_col

/* ============================================================================================== */
/* Scalar and vector types                                                                        */
/* ============================================================================================== */

typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
typedef _Float16 half;
typedef __bf16 bfloat;

#define __TT_VECTORS(T, NAME)                                                                          \
  typedef T NAME##2 __attribute__((ext_vector_type(2)));                                             \
  typedef T NAME##3 __attribute__((ext_vector_type(3)));                                             \
  typedef T NAME##4 __attribute__((ext_vector_type(4)));
__TT_VECTORS(bool, bool)
__TT_VECTORS(char, char)
__TT_VECTORS(uchar, uchar)
__TT_VECTORS(short, short)
__TT_VECTORS(ushort, ushort)
__TT_VECTORS(int, int)
__TT_VECTORS(uint, uint)
__TT_VECTORS(long, long)
__TT_VECTORS(ulong, ulong)
__TT_VECTORS(half, half)
__TT_VECTORS(float, float)
__TT_VECTORS(bfloat, bfloat)
#undef __TT_VECTORS

/* ============================================================================================== */
/* Internal type traits (no C++ standard library on purpose: compile speed and no name clashes)   */
/* ============================================================================================== */

namespace __tt {
template <bool B, class T = int> struct enable_if {};
template <class T> struct enable_if<true, T> { using type = T; };
template <bool B, class T = int> using enable_if_t = typename enable_if<B, T>::type;
template <class A, class B> struct is_same { static constexpr bool value = false; };
template <class A> struct is_same<A, A> { static constexpr bool value = true; };
template <class T> struct identity { using type = T; };
template <class T> using identity_t = typename identity<T>::type;

template <class T> struct vec_traits {
  static constexpr bool is_vec = false;
  static constexpr int n = 1;
  using elem = T;
};
template <class T, int N> struct vec_traits<T __attribute__((ext_vector_type(N)))> {
  static constexpr bool is_vec = true;
  static constexpr int n = N;
  using elem = T;
};
template <class T> using elem_t = typename vec_traits<T>::elem;

template <class T> struct is_int_scalar { static constexpr bool value = false; };
#define __TT_INT(T, S, U, BITS)                                                                        \
  template <> struct is_int_scalar<T> {                                                                \
    static constexpr bool value = true;                                                                \
    static constexpr bool is_signed = S;                                                               \
    static constexpr int bits = BITS;                                                                  \
    using unsigned_t = U;                                                                              \
  };
__TT_INT(char, true, uchar, 8)
__TT_INT(signed char, true, uchar, 8)
__TT_INT(uchar, false, uchar, 8)
__TT_INT(short, true, ushort, 16)
__TT_INT(ushort, false, ushort, 16)
__TT_INT(int, true, uint, 32)
__TT_INT(uint, false, uint, 32)
__TT_INT(long, true, ulong, 64)
__TT_INT(ulong, false, ulong, 64)
__TT_INT(long long, true, unsigned long long, 64)
__TT_INT(unsigned long long, false, unsigned long long, 64)
#undef __TT_INT

template <class T> struct is_float_scalar { static constexpr bool value = false; };
template <> struct is_float_scalar<float> { static constexpr bool value = true; };
template <> struct is_float_scalar<half> { static constexpr bool value = true; };
template <> struct is_float_scalar<bfloat> { static constexpr bool value = true; };

template <class T> struct is_int { static constexpr bool value = is_int_scalar<elem_t<T>>::value; };
template <class T> struct is_float { static constexpr bool value = is_float_scalar<elem_t<T>>::value; };
template <class T> struct is_ivec { static constexpr bool value = vec_traits<T>::is_vec && is_int<T>::value; };
template <class T> struct is_fvec { static constexpr bool value = vec_traits<T>::is_vec && is_float<T>::value; };
template <class T> struct is_iscalar { static constexpr bool value = is_int_scalar<T>::value; };

template <class T> using unsigned_of = typename is_int_scalar<T>::unsigned_t;

/* Same shape as T with element type E. */
template <class T, class E, bool V = vec_traits<T>::is_vec> struct rebind { using type = E; };
template <class T, class E> struct rebind<T, E, true> {
  using type = E __attribute__((ext_vector_type(vec_traits<T>::n)));
};
template <class T, class E> using rebind_t = typename rebind<T, E>::type;

/* Types the SIMD-group functions accept: 8/16/32-bit integer or half/float/bfloat scalars and
   vectors of up to 4 elements. */
template <class T> struct simd_ok {
  using E = elem_t<T>;
  static constexpr bool value = vec_traits<T>::n <= 4 &&
                                ((is_int_scalar<E>::value && sizeof(E) <= 4) || is_float_scalar<E>::value);
};
#define __TT_SIMD_TYPE_CHECK(T)                                                                        \
  static_assert(!__tt::is_same<__tt::elem_t<T>, bool>::value,                                         \
                "Metal has no SIMD-group shuffles or reductions of bool: convert to ushort/uint first");     \
  static_assert(sizeof(__tt::elem_t<T>) < 8,                                                           \
                "Metal has no 64-bit SIMD-group shuffles or reductions: split the value with "              \
                "as_type<uint2>(x) and shuffle the halves");                                                \
  static_assert(__tt::is_same<__tt::elem_t<T>, bool>::value || sizeof(__tt::elem_t<T>) >= 8 ||           \
                    __tt::simd_ok<T>::value,                                                           \
                "unsupported type for a Metal SIMD-group function")

/* Optimisation barrier for float values (an empty asm the optimiser cannot see through).
   Works around an LLVM 22 x86 backend bug: integer compares of the bit pattern of a bfloat that lives
   in a register (`icmp slt (bitcast bfloat %x to i16), 0`) are folded to false, and shifts of it crash
   llc. Clang folds `signbit(float(b))` and `as_type<int>(float(b)) < 0` down to exactly that shape, so
   signbit and as_type take the float's bits only after this barrier. */
template <class F> inline F opaque(F x) {
#if defined(__x86_64__)
  __asm__("" : "+x"(x));
#elif defined(__aarch64__)
  __asm__("" : "+w"(x));
#else
  __asm__("" : "+r"(x));
#endif
  return x;
}
inline ushort bfloat_bits(bfloat b) { return (ushort)(__builtin_bit_cast(uint, opaque((float)b)) >> 16); }

template <class T> inline T load_lane(const tt_simd_xchg *x, uint lane) {
  T r;
  __builtin_memcpy(&r, x->val[lane], sizeof(T));
  return r;
}
} // namespace __tt

/* ============================================================================================== */
/* as_type<T>(x): reinterpret the bits of a value of the same size                              */
/* ============================================================================================== */

template <class T, class U> inline T as_type(U x) {
  static_assert(sizeof(T) == sizeof(U), "as_type: source and destination types must have the same size");
  static_assert(!__is_pointer(T) && !__is_pointer(U),
                "as_type reinterprets scalars and vectors, not pointers (MSL specification 2.21)");
  using E = __tt::elem_t<U>;
  if constexpr (__tt::is_same<E, bfloat>::value) { /* see __tt::opaque */
    __tt::rebind_t<U, ushort> bits;
    if constexpr (__tt::vec_traits<U>::is_vec) {
      for (int i = 0; i < __tt::vec_traits<U>::n; ++i)
        bits[i] = __tt::bfloat_bits(x[i]);
    } else {
      bits = __tt::bfloat_bits(x);
    }
    return __builtin_bit_cast(T, bits);
  } else if constexpr (__tt::is_same<E, float>::value) {
    return __builtin_bit_cast(T, __tt::opaque(x));
  } else {
    return __builtin_bit_cast(T, x);
  }
}

/* ============================================================================================== */
/* Constants (as in <metal_math> / <metal_integer>)                                              */
/* ============================================================================================== */

#ifndef INFINITY
#define INFINITY __builtin_inff()
#endif
#ifndef NAN
#define NAN __builtin_nanf("")
#endif
#define MAXFLOAT 0x1.fffffep+127f
#define HUGE_VALF __builtin_huge_valf()
#define FLT_MAX 0x1.fffffep+127f
#define FLT_MIN 0x1p-126f
#define FLT_EPSILON 0x1p-23f
#define FLT_DIG 6
#define FLT_MANT_DIG 24
#define HALF_MAX ((half)65504.0f)
#define HALF_MIN ((half)0x1p-14f)
#define HALF_EPSILON ((half)0x1p-10f)
#define MAXHALF HALF_MAX
#define M_E_F 2.71828182845904523536f
#define M_LOG2E_F 1.44269504088896340736f
#define M_LOG10E_F 0.434294481903251827651f
#define M_LN2_F 0.693147180559945309417f
#define M_LN10_F 2.30258509299404568402f
#define M_PI_F 3.14159265358979323846f
#define M_PI_2_F 1.57079632679489661923f
#define M_PI_4_F 0.785398163397448309616f
#define M_1_PI_F 0.318309886183790671538f
#define M_2_PI_F 0.636619772367581343076f
#define M_2_SQRTPI_F 1.12837916709551257390f
#define M_SQRT2_F 1.41421356237309504880f
#define M_SQRT1_2_F 0.707106781186547524401f
#define M_E_H ((half)M_E_F)
#define M_PI_H ((half)M_PI_F)
#define M_LN2_H ((half)M_LN2_F)
#define M_LOG2E_H ((half)M_LOG2E_F)
#define CHAR_BIT 8
#define SCHAR_MAX 127
#define SCHAR_MIN (-128)
#define UCHAR_MAX 255
#define CHAR_MAX SCHAR_MAX
#define CHAR_MIN SCHAR_MIN
#define SHRT_MAX 32767
#define SHRT_MIN (-32768)
#define USHRT_MAX 65535
#define INT_MAX 2147483647
#define INT_MIN (-2147483647 - 1)
#define UINT_MAX 4294967295u
#define LONG_MAX 9223372036854775807l
#define LONG_MIN (-9223372036854775807l - 1)
#define ULONG_MAX 18446744073709551615ul

namespace metal {

/* ============================================================================================== */
/* numeric_limits                                                                                 */
/* ============================================================================================== */

template <class T> struct numeric_limits {
  static constexpr bool is_specialized = false;
};
#define __TT_ILIMITS(T, LO, HI)                                                                        \
  template <> struct numeric_limits<T> {                                                               \
    static constexpr bool is_specialized = true;                                                       \
    static constexpr bool is_integer = true;                                                           \
    static constexpr bool is_signed = __tt::is_int_scalar<T>::is_signed;                               \
    static constexpr int digits = __tt::is_int_scalar<T>::bits - (is_signed ? 1 : 0);                   \
    static constexpr T min() { return LO; }                                                            \
    static constexpr T lowest() { return LO; }                                                         \
    static constexpr T max() { return HI; }                                                            \
  };
__TT_ILIMITS(char, (char)-128, (char)127)
__TT_ILIMITS(uchar, (uchar)0, (uchar)255)
__TT_ILIMITS(short, (short)-32768, (short)32767)
__TT_ILIMITS(ushort, (ushort)0, (ushort)65535)
__TT_ILIMITS(int, INT_MIN, INT_MAX)
__TT_ILIMITS(uint, 0u, UINT_MAX)
__TT_ILIMITS(long, LONG_MIN, LONG_MAX)
__TT_ILIMITS(ulong, 0ul, ULONG_MAX)
#undef __TT_ILIMITS
#define __TT_FLIMITS(T, DIGITS, MINV, MAXV, EPS, DENORM)                                               \
  template <> struct numeric_limits<T> {                                                               \
    static constexpr bool is_specialized = true;                                                       \
    static constexpr bool is_integer = false;                                                          \
    static constexpr bool is_signed = true;                                                            \
    static constexpr bool has_infinity = true;                                                         \
    static constexpr bool has_quiet_NaN = true;                                                        \
    static constexpr int digits = DIGITS;                                                              \
    static constexpr T min() { return (T)(MINV); }                                                     \
    static constexpr T max() { return (T)(MAXV); }                                                     \
    static constexpr T lowest() { return (T)(-(MAXV)); }                                               \
    static constexpr T epsilon() { return (T)(EPS); }                                                  \
    static constexpr T denorm_min() { return (T)(DENORM); }                                            \
    static constexpr T infinity() { return (T)__builtin_inff(); }                                      \
    static constexpr T quiet_NaN() { return (T)__builtin_nanf(""); }                                   \
  };
__TT_FLIMITS(float, 24, 0x1p-126f, 0x1.fffffep+127f, 0x1p-23f, 0x1p-149f)
__TT_FLIMITS(half, 11, 0x1p-14f, 65504.0f, 0x1p-10f, 0x1p-24f)
__TT_FLIMITS(bfloat, 8, 0x1p-126f, 0x1.fep+127f, 0x1p-7f, 0x1p-133f)
#undef __TT_FLIMITS

/* ============================================================================================== */
/* Element-wise helpers for vectors                                                               */
/* ============================================================================================== */

#define __TT_VN(V) __tt::vec_traits<V>::n
/* vector version of a unary/binary/ternary function F whose element type satisfies TRAIT */
#define __TT_VMAP1(F, TRAIT)                                                                           \
  template <class V, __tt::enable_if_t<__tt::vec_traits<V>::is_vec && __tt::TRAIT<V>::value> = 0>     \
  inline V F(V a) {                                                                                    \
    V r = a;                                                                                           \
    for (int i = 0; i < __TT_VN(V); ++i)                                                               \
      r[i] = F(a[i]);                                                                                  \
    return r;                                                                                          \
  }
#define __TT_VMAP2(F, TRAIT)                                                                           \
  template <class V, __tt::enable_if_t<__tt::vec_traits<V>::is_vec && __tt::TRAIT<V>::value> = 0>     \
  inline V F(V a, V b) {                                                                               \
    V r = a;                                                                                           \
    for (int i = 0; i < __TT_VN(V); ++i)                                                               \
      r[i] = F(a[i], b[i]);                                                                            \
    return r;                                                                                          \
  }
#define __TT_VMAP3(F, TRAIT)                                                                           \
  template <class V, __tt::enable_if_t<__tt::vec_traits<V>::is_vec && __tt::TRAIT<V>::value> = 0>     \
  inline V F(V a, V b, V c) {                                                                          \
    V r = a;                                                                                           \
    for (int i = 0; i < __TT_VN(V); ++i)                                                               \
      r[i] = F(a[i], b[i], c[i]);                                                                      \
    return r;                                                                                          \
  }

/* ============================================================================================== */
/* Floating-point math (float; half and bfloat compute in float and round back)                  */
/* ============================================================================================== */

#define __TT_F1(F, EXPR)                                                                               \
  inline float F(float x) { return EXPR; }                                                             \
  inline half F(half x) { return (half)F((float)x); }                                                  \
  inline bfloat F(bfloat x) { return (bfloat)F((float)x); }                                            \
  __TT_VMAP1(F, is_float)
#define __TT_F2(F, EXPR)                                                                               \
  inline float F(float x, float y) { return EXPR; }                                                    \
  inline half F(half x, half y) { return (half)F((float)x, (float)y); }                                \
  inline bfloat F(bfloat x, bfloat y) { return (bfloat)F((float)x, (float)y); }                        \
  __TT_VMAP2(F, is_float)
#define __TT_F3(F, EXPR)                                                                               \
  inline float F(float x, float y, float z) { return EXPR; }                                           \
  inline half F(half x, half y, half z) { return (half)F((float)x, (float)y, (float)z); }              \
  inline bfloat F(bfloat x, bfloat y, bfloat z) { return (bfloat)F((float)x, (float)y, (float)z); }    \
  __TT_VMAP3(F, is_float)

#if __has_builtin(__builtin_exp10f)
#define __TT_EXP10F(x) __builtin_exp10f(x)
#else
#define __TT_EXP10F(x) __builtin_powf(10.0f, x)
#endif

__TT_F1(fabs, __builtin_fabsf(x))
__TT_F1(abs, __builtin_fabsf(x))
__TT_F1(sqrt, __builtin_sqrtf(x))
__TT_F1(rsqrt, 1.0f / __builtin_sqrtf(x))
__TT_F1(exp, __builtin_expf(x))
__TT_F1(exp2, __builtin_exp2f(x))
__TT_F1(exp10, __TT_EXP10F(x))
__TT_F1(log, __builtin_logf(x))
__TT_F1(log2, __builtin_log2f(x))
__TT_F1(log10, __builtin_log10f(x))
__TT_F1(sin, __builtin_sinf(x))
__TT_F1(cos, __builtin_cosf(x))
__TT_F1(tan, __builtin_tanf(x))
__TT_F1(asin, __builtin_asinf(x))
__TT_F1(acos, __builtin_acosf(x))
__TT_F1(atan, __builtin_atanf(x))
__TT_F1(sinh, __builtin_sinhf(x))
__TT_F1(cosh, __builtin_coshf(x))
__TT_F1(tanh, __builtin_tanhf(x))
__TT_F1(asinh, __builtin_asinhf(x))
__TT_F1(acosh, __builtin_acoshf(x))
__TT_F1(atanh, __builtin_atanhf(x))
__TT_F1(sinpi, (float)__builtin_sin(3.14159265358979323846 * (double)x))
__TT_F1(cospi, (float)__builtin_cos(3.14159265358979323846 * (double)x))
__TT_F1(tanpi, (float)__builtin_tan(3.14159265358979323846 * (double)x))
__TT_F1(floor, __builtin_floorf(x))
__TT_F1(ceil, __builtin_ceilf(x))
__TT_F1(trunc, __builtin_truncf(x))
__TT_F1(round, __builtin_roundf(x))
__TT_F1(rint, __builtin_rintf(x))
__TT_F1(fract, __builtin_fminf(x - __builtin_floorf(x), 0x1.fffffep-1f))
__TT_F1(saturate, __builtin_fminf(__builtin_fmaxf(x, 0.0f), 1.0f))
__TT_F1(sign, x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : (x == x ? x : 0.0f))
__TT_F2(fmin, __builtin_fminf(x, y))
__TT_F2(fmax, __builtin_fmaxf(x, y))
__TT_F2(min, __builtin_fminf(x, y))
__TT_F2(max, __builtin_fmaxf(x, y))
__TT_F2(fdim, __builtin_fdimf(x, y))
__TT_F2(fmod, __builtin_fmodf(x, y))
__TT_F2(copysign, __builtin_copysignf(x, y))
__TT_F2(pow, __builtin_powf(x, y))
__TT_F2(powr, x < 0.0f ? __builtin_nanf("") : __builtin_powf(x, y))
__TT_F2(atan2, __builtin_atan2f(x, y))
__TT_F2(nextafter, __builtin_nextafterf(x, y))
__TT_F2(step, y < x ? 0.0f : 1.0f)
__TT_F2(divide, x / y)
__TT_F3(fma, __tt_tools::fma(x, y, z))
__TT_F3(mix, x + (y - x) * z)
__TT_F3(clamp, __builtin_fminf(__builtin_fmaxf(x, y), z))
__TT_F3(fmin3, __builtin_fminf(__builtin_fminf(x, y), z))
__TT_F3(fmax3, __builtin_fmaxf(__builtin_fmaxf(x, y), z))
__TT_F3(min3, __builtin_fminf(__builtin_fminf(x, y), z))
__TT_F3(max3, __builtin_fmaxf(__builtin_fmaxf(x, y), z))
__TT_F3(fmedian3, __builtin_fmaxf(__builtin_fminf(x, y), __builtin_fminf(__builtin_fmaxf(x, y), z)))
__TT_F3(median3, __builtin_fmaxf(__builtin_fminf(x, y), __builtin_fminf(__builtin_fmaxf(x, y), z)))
__TT_F3(smoothstep, (__builtin_fminf(__builtin_fmaxf((z - x) / (y - x), 0.0f), 1.0f)) *
                        (__builtin_fminf(__builtin_fmaxf((z - x) / (y - x), 0.0f), 1.0f)) *
                        (3.0f - 2.0f * __builtin_fminf(__builtin_fmaxf((z - x) / (y - x), 0.0f), 1.0f)))

inline float ldexp(float x, int k) { return __builtin_ldexpf(x, k); }
inline half ldexp(half x, int k) { return (half)__builtin_ldexpf((float)x, k); }
inline float frexp(float x, int &e) { return __builtin_frexpf(x, &e); }
inline half frexp(half x, int &e) { return (half)__builtin_frexpf((float)x, &e); }
inline float modf(float x, float &ip) { return __builtin_modff(x, &ip); }
inline half modf(half x, half &ip) {
  float f;
  float r = __builtin_modff((float)x, &f);
  ip = (half)f;
  return (half)r;
}
inline int ilogb(float x) { return __builtin_ilogbf(x); }
inline int ilogb(half x) { return __builtin_ilogbf((float)x); }
inline float sincos(float x, float &c) {
  c = __builtin_cosf(x);
  return __builtin_sinf(x);
}
inline half sincos(half x, half &c) {
  c = (half)__builtin_cosf((float)x);
  return (half)__builtin_sinf((float)x);
}

/* classification: scalars return bool, vectors return boolN */
#define __TT_FCLASS(F, EXPR)                                                                           \
  inline bool F(float x) { return EXPR; }                                                              \
  inline bool F(half x) { return F((float)x); }                                                        \
  inline bool F(bfloat x) { return F((float)x); }                                                      \
  template <class V, __tt::enable_if_t<__tt::is_fvec<V>::value> = 0>                                  \
  inline __tt::rebind_t<V, bool> F(V a) {                                                              \
    __tt::rebind_t<V, bool> r;                                                                         \
    for (int i = 0; i < __TT_VN(V); ++i)                                                               \
      r[i] = F(a[i]);                                                                                  \
    return r;                                                                                          \
  }
__TT_FCLASS(isnan, __builtin_isnan(x))
__TT_FCLASS(isinf, __builtin_isinf(x))
__TT_FCLASS(isfinite, __builtin_isfinite(x))
__TT_FCLASS(isnormal, __builtin_isnormal(x))
__TT_FCLASS(signbit, (__builtin_bit_cast(uint, __tt::opaque(x)) >> 31) != 0) /* see __tt::opaque */
#undef __TT_FCLASS
inline bool isordered(float x, float y) { return x == x && y == y; }
inline bool isunordered(float x, float y) { return !(x == x && y == y); }
inline bool isordered(half x, half y) { return x == x && y == y; }
inline bool isunordered(half x, half y) { return !(x == x && y == y); }

/* ============================================================================================== */
/* Integer functions (all widths, scalars and vectors)                                           */
/* ============================================================================================== */

#define __TT_ITEMPLATE template <class T, __tt::enable_if_t<__tt::is_iscalar<T>::value> = 0>
#define __TT_IBITS(T) (__tt::is_int_scalar<T>::bits)
#define __TT_ISIGNED(T) (__tt::is_int_scalar<T>::is_signed)

__TT_ITEMPLATE inline T min(T a, T b) { return b < a ? b : a; }
__TT_ITEMPLATE inline T max(T a, T b) { return a < b ? b : a; }
__TT_ITEMPLATE inline T clamp(T x, T lo, T hi) { return min(max(x, lo), hi); }
__TT_ITEMPLATE inline T min3(T a, T b, T c) { return min(min(a, b), c); }
__TT_ITEMPLATE inline T max3(T a, T b, T c) { return max(max(a, b), c); }
__TT_ITEMPLATE inline T median3(T a, T b, T c) { return max(min(a, b), min(max(a, b), c)); }
__TT_ITEMPLATE inline T abs(T x) {
  using U = __tt::unsigned_of<T>;
  return x < 0 ? (T)(U)(0 - (U)x) : x;
}
__TT_ITEMPLATE inline __tt::unsigned_of<T> absdiff(T x, T y) {
  using U = __tt::unsigned_of<T>;
  return x > y ? (U)((U)x - (U)y) : (U)((U)y - (U)x);
}
__TT_ITEMPLATE inline T clz(T x) {
  using U = __tt::unsigned_of<T>;
  U u = (U)x;
  return u == 0 ? (T)__TT_IBITS(T) : (T)(__builtin_clzll((unsigned long long)u) - (64 - __TT_IBITS(T)));
}
__TT_ITEMPLATE inline T ctz(T x) {
  using U = __tt::unsigned_of<T>;
  U u = (U)x;
  return u == 0 ? (T)__TT_IBITS(T) : (T)__builtin_ctzll((unsigned long long)u);
}
__TT_ITEMPLATE inline T popcount(T x) {
  return (T)__builtin_popcountll((unsigned long long)(__tt::unsigned_of<T>)x);
}
__TT_ITEMPLATE inline T reverse_bits(T x) {
  using U = __tt::unsigned_of<T>;
  if constexpr (__TT_IBITS(T) == 8)
    return (T)__builtin_bitreverse8((U)x);
  else if constexpr (__TT_IBITS(T) == 16)
    return (T)__builtin_bitreverse16((U)x);
  else if constexpr (__TT_IBITS(T) == 32)
    return (T)__builtin_bitreverse32((U)x);
  else
    return (T)__builtin_bitreverse64((U)x);
}
__TT_ITEMPLATE inline T rotate(T v, T i) {
  using U = __tt::unsigned_of<T>;
  const unsigned w = __TT_IBITS(T);
  unsigned s = (unsigned)((U)i % w);
  U u = (U)v;
  return s == 0 ? v : (T)(U)((U)(u << s) | (U)(u >> (w - s)));
}
__TT_ITEMPLATE inline T mulhi(T x, T y) {
  if constexpr (__TT_IBITS(T) == 64) {
    if constexpr (__TT_ISIGNED(T))
      return (T)(((__int128)x * (__int128)y) >> 64);
    else
      return (T)(((unsigned __int128)x * (unsigned __int128)y) >> 64);
  } else {
    if constexpr (__TT_ISIGNED(T))
      return (T)(((long)x * (long)y) >> __TT_IBITS(T));
    else
      return (T)(((ulong)x * (ulong)y) >> __TT_IBITS(T));
  }
}
__TT_ITEMPLATE inline T madhi(T a, T b, T c) { return (T)(mulhi(a, b) + c); }
__TT_ITEMPLATE inline T mul24(T a, T b) { return (T)(a * b); }
__TT_ITEMPLATE inline T mad24(T a, T b, T c) { return (T)(a * b + c); }
__TT_ITEMPLATE inline T hadd(T x, T y) { return (T)((x >> 1) + (y >> 1) + (x & y & 1)); }
__TT_ITEMPLATE inline T rhadd(T x, T y) { return (T)((x >> 1) + (y >> 1) + ((x | y) & 1)); }
/* The saturated result of x + y or x - y that overflowed: for signed T the overflow goes the way of x's sign
   (y has x's sign in an overflowing add, the opposite one in a subtract); unsigned T saturates to `limit`. */
__TT_ITEMPLATE inline T __tt_saturated(T x, T limit) {
  if constexpr (__TT_ISIGNED(T))
    return x < 0 ? numeric_limits<T>::min() : numeric_limits<T>::max();
  else
    return limit;
}
__TT_ITEMPLATE inline T addsat(T x, T y) {
  T r;
  return __builtin_add_overflow(x, y, &r) ? __tt_saturated(x, numeric_limits<T>::max()) : r;
}
__TT_ITEMPLATE inline T subsat(T x, T y) {
  T r;
  return __builtin_sub_overflow(x, y, &r) ? __tt_saturated(x, (T)0) : r;
}
__TT_ITEMPLATE inline T madsat(T a, T b, T c) {
  T p;
  if (__builtin_mul_overflow(a, b, &p)) {
    if constexpr (__TT_ISIGNED(T))
      return ((a < 0) != (b < 0)) ? numeric_limits<T>::min() : numeric_limits<T>::max();
    else
      return numeric_limits<T>::max();
  }
  return addsat(p, c);
}
__TT_ITEMPLATE inline T extract_bits(T x, uint offset, uint bits) {
  using U = __tt::unsigned_of<T>;
  const uint w = __TT_IBITS(T);
  if (bits == 0)
    return (T)0;
  U u = (U)((U)x >> (offset % w));
  if (bits < w) {
    U m = (U)(((U)1 << bits) - 1);
    u &= m;
    if constexpr (__TT_ISIGNED(T))
      if ((u >> (bits - 1)) & 1)
        u |= (U)~m;
  }
  return (T)u;
}
__TT_ITEMPLATE inline T insert_bits(T base, T insert, uint offset, uint bits) {
  using U = __tt::unsigned_of<T>;
  const uint w = __TT_IBITS(T);
  if (bits == 0)
    return base;
  U m = bits >= w ? (U)~(U)0 : (U)(((U)1 << bits) - 1);
  m = (U)(m << (offset % w));
  return (T)(U)(((U)base & (U)~m) | (((U)insert << (offset % w)) & m));
}

__TT_VMAP2(min, is_int)
__TT_VMAP2(max, is_int)
__TT_VMAP3(clamp, is_int)
__TT_VMAP3(min3, is_int)
__TT_VMAP3(max3, is_int)
__TT_VMAP3(median3, is_int)
__TT_VMAP1(abs, is_int)
__TT_VMAP1(clz, is_int)
__TT_VMAP1(ctz, is_int)
__TT_VMAP1(popcount, is_int)
__TT_VMAP1(reverse_bits, is_int)
__TT_VMAP2(rotate, is_int)
__TT_VMAP2(mulhi, is_int)
__TT_VMAP3(madhi, is_int)
__TT_VMAP2(hadd, is_int)
__TT_VMAP2(rhadd, is_int)
__TT_VMAP2(addsat, is_int)
__TT_VMAP2(subsat, is_int)
__TT_VMAP3(madsat, is_int)
template <class V, __tt::enable_if_t<__tt::is_ivec<V>::value> = 0>
inline __tt::rebind_t<V, __tt::unsigned_of<__tt::elem_t<V>>> absdiff(V a, V b) {
  __tt::rebind_t<V, __tt::unsigned_of<__tt::elem_t<V>>> r;
  for (int i = 0; i < __TT_VN(V); ++i)
    r[i] = absdiff(a[i], b[i]);
  return r;
}

/* ============================================================================================== */
/* Relational: select, all, any                                                                  */
/* ============================================================================================== */

template <class T, __tt::enable_if_t<!__tt::vec_traits<T>::is_vec> = 0> inline T select(T a, T b, bool c) {
  return c ? b : a;
}
/* c may be a boolN or the integer mask a vector comparison yields on the host */
template <class V, class C,
          __tt::enable_if_t<__tt::vec_traits<V>::is_vec && __tt::vec_traits<C>::is_vec &&
                            __tt::vec_traits<V>::n == __tt::vec_traits<C>::n> = 0>
inline V select(V a, V b, C c) {
  V r = a;
  for (int i = 0; i < __TT_VN(V); ++i)
    r[i] = c[i] ? b[i] : a[i];
  return r;
}
inline bool all(bool x) { return x; }
inline bool any(bool x) { return x; }
template <class V, __tt::enable_if_t<__tt::vec_traits<V>::is_vec> = 0> inline bool all(V v) {
  for (int i = 0; i < __TT_VN(V); ++i)
    if (!v[i])
      return false;
  return true;
}
template <class V, __tt::enable_if_t<__tt::vec_traits<V>::is_vec> = 0> inline bool any(V v) {
  for (int i = 0; i < __TT_VN(V); ++i)
    if (v[i])
      return true;
  return false;
}

/* geometric helpers that are cheap to provide */
template <class V, __tt::enable_if_t<__tt::is_fvec<V>::value> = 0> inline __tt::elem_t<V> dot(V a, V b) {
  float s = 0.0f;
  for (int i = 0; i < __TT_VN(V); ++i)
    s += (float)a[i] * (float)b[i];
  return (__tt::elem_t<V>)s;
}

/* ============================================================================================== */
/* fast:: and precise:: variants (the emulator computes both the same, at host libm accuracy)    */
/* ============================================================================================== */

#define __TT_MATH_NAMES                                                                                \
  using metal::fabs;                                                                                   \
  using metal::abs;                                                                                    \
  using metal::sqrt;                                                                                   \
  using metal::rsqrt;                                                                                  \
  using metal::exp;                                                                                    \
  using metal::exp2;                                                                                   \
  using metal::exp10;                                                                                  \
  using metal::log;                                                                                    \
  using metal::log2;                                                                                   \
  using metal::log10;                                                                                  \
  using metal::sin;                                                                                    \
  using metal::cos;                                                                                    \
  using metal::tan;                                                                                    \
  using metal::asin;                                                                                   \
  using metal::acos;                                                                                   \
  using metal::atan;                                                                                   \
  using metal::sinh;                                                                                   \
  using metal::cosh;                                                                                   \
  using metal::tanh;                                                                                   \
  using metal::asinh;                                                                                  \
  using metal::acosh;                                                                                  \
  using metal::atanh;                                                                                  \
  using metal::sinpi;                                                                                  \
  using metal::cospi;                                                                                  \
  using metal::tanpi;                                                                                  \
  using metal::floor;                                                                                  \
  using metal::ceil;                                                                                   \
  using metal::trunc;                                                                                  \
  using metal::round;                                                                                  \
  using metal::rint;                                                                                   \
  using metal::fract;                                                                                  \
  using metal::saturate;                                                                               \
  using metal::sign;                                                                                   \
  using metal::fmin;                                                                                   \
  using metal::fmax;                                                                                   \
  using metal::min;                                                                                    \
  using metal::max;                                                                                    \
  using metal::fdim;                                                                                   \
  using metal::fmod;                                                                                   \
  using metal::copysign;                                                                               \
  using metal::pow;                                                                                    \
  using metal::powr;                                                                                   \
  using metal::atan2;                                                                                  \
  using metal::nextafter;                                                                              \
  using metal::step;                                                                                   \
  using metal::divide;                                                                                 \
  using metal::fma;                                                                                    \
  using metal::mix;                                                                                    \
  using metal::clamp;                                                                                  \
  using metal::fmin3;                                                                                  \
  using metal::fmax3;                                                                                  \
  using metal::fmedian3;                                                                               \
  using metal::min3;                                                                                   \
  using metal::max3;                                                                                   \
  using metal::median3;                                                                                \
  using metal::smoothstep;                                                                             \
  using metal::ldexp;                                                                                  \
  using metal::frexp;                                                                                  \
  using metal::modf;                                                                                   \
  using metal::ilogb;                                                                                  \
  using metal::sincos;                                                                                 \
  using metal::isnan;                                                                                  \
  using metal::isinf;                                                                                  \
  using metal::isfinite;                                                                               \
  using metal::isnormal;                                                                               \
  using metal::signbit;                                                                                \
  using metal::dot;
namespace fast {
__TT_MATH_NAMES
}
namespace precise {
__TT_MATH_NAMES
}
#undef __TT_MATH_NAMES

/* ============================================================================================== */
/* Memory flags, barriers, fences                                                                 */
/* ============================================================================================== */

enum class mem_flags : uint {
  mem_none = 0,
  mem_device = 1,
  mem_threadgroup = 2,
  mem_texture = 4,
  mem_threadgroup_imageblock = 8,
  mem_object_data = 16,
};
inline constexpr mem_flags operator|(mem_flags a, mem_flags b) { return (mem_flags)((uint)a | (uint)b); }
inline constexpr mem_flags operator&(mem_flags a, mem_flags b) { return (mem_flags)((uint)a & (uint)b); }

/* Metal's only memory orders (specification 6.15.1): atomic functions take relaxed only (a clear error below),
   seq_cst is for atomic_thread_fence */
enum memory_order {
  memory_order_relaxed = 0,
  memory_order_seq_cst __TT_SINCE_MSL_3_2("memory_order_seq_cst") = 5,
};
enum thread_scope {
  thread_scope_thread __TT_SINCE_MSL_3_2("thread_scope") = 0,
  thread_scope_simdgroup __TT_SINCE_MSL_3_2("thread_scope") = 1,
  thread_scope_threadgroup __TT_SINCE_MSL_3_2("thread_scope") = 2,
  thread_scope_device __TT_SINCE_MSL_3_2("thread_scope") = 3,
};

/* Every live thread of the threadgroup must reach the same threadgroup_barrier call. Fibers of a
   threadgroup share one host thread, so memory is coherent across the barrier. */
inline void threadgroup_barrier(mem_flags flags, __TT_SITE_PARAMS) {
  __tt_barrier((uint)flags, __TT_SITE_ARGS);
}
/* A rendezvous of the live lanes of the simdgroup (strict: same call site for every lane). */
inline void simdgroup_barrier(mem_flags flags, __TT_SITE_PARAMS) {
  uint lane; /* the flags go to the runtime: racecheck orders threadgroup memory only with mem_threadgroup */
  __tt_simd("simdgroup_barrier", nullptr, 0, (uint)flags, __TT_SITE_ARGS, &lane);
}
inline void atomic_thread_fence(mem_flags flags, memory_order order, thread_scope scope = thread_scope_device)
    __TT_SINCE_MSL_3_2("atomic_thread_fence") {
  (void)flags;
  (void)order;
  (void)scope;
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

/* ============================================================================================== */
/* Atomics                                                                                        */
/* ============================================================================================== */

template <class T> struct atomic {
  static_assert(__tt::is_same<T, int>::value || __tt::is_same<T, uint>::value || __tt::is_same<T, bool>::value ||
                    __tt::is_same<T, float>::value || __tt::is_same<T, ulong>::value,
                "Metal atomics exist for int, uint, bool, float (device memory) and ulong (min/max) only");
  T __tt_value;
};
using atomic_int = atomic<int>;
using atomic_uint = atomic<uint>;
using atomic_bool = atomic<bool>;
using atomic_float = atomic<float>;
using atomic_ulong = atomic<ulong>;

#define __TT_RELAXED(o)                                                                                \
  __attribute__((diagnose_if(o != memory_order_relaxed,                                                \
                             "Metal atomic functions support memory_order_relaxed only", "error")))

namespace __atomic_impl {
template <class T, bool TG> constexpr void check_basic() {
  static_assert(!(TG && __tt::is_same<T, float>::value),
                "Metal: atomic_float is only supported in device memory, not in threadgroup memory");
  static_assert(!__tt::is_same<T, ulong>::value,
                "Metal: 64-bit atomics (atomic_ulong) support only atomic_max_explicit/atomic_min_explicit "
                "on device memory");
}
template <class T, bool TG> constexpr void check_rmw() {
  check_basic<T, TG>();
  static_assert(!__tt::is_same<T, bool>::value,
                "Metal: atomic_bool supports load, store, exchange and compare-exchange only");
}
template <class T, bool TG> constexpr void check_int_rmw() {
  check_rmw<T, TG>();
  static_assert(__tt::is_same<T, int>::value || __tt::is_same<T, uint>::value,
                "Metal: this atomic operation exists for atomic_int and atomic_uint only");
}
template <class T> inline T *ptr(atomic<T> *a) { return &a->__tt_value; }
template <class T> inline bool cas(T *p, T *expected, T desired) {
  if constexpr (__tt::is_same<T, float>::value) {
    /* Metal compares float atomics as floats (so -0.0 == 0.0 and NaN never matches); the exchange
       itself is on the bit pattern. */
    uint *u = (uint *)p;
    for (;;) {
      uint cur = __tt_tools::load(u);
      float fcur = __builtin_bit_cast(float, cur);
      if (!(fcur == *expected)) {
        *expected = fcur;
        return false;
      }
      if (__atomic_compare_exchange_n(u, &cur, __builtin_bit_cast(uint, desired), false, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED))
        return true;
    }
  } else {
    return __atomic_compare_exchange_n(p, expected, desired, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  }
}
template <class T> inline T fetch_minmax(T *p, T v, bool is_max) {
  T cur = __tt_tools::load(p);
  for (;;) {
    bool replace = is_max ? (cur < v) : (v < cur);
    if (!replace)
      return cur;
    if (__atomic_compare_exchange_n(p, &cur, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
      return cur;
  }
}
} // namespace __atomic_impl

#define __TT_ATOMIC_PTR __tt_tools::rmw(__atomic_impl::ptr((atomic<T> *)obj))
/* compare_exchange_weak: strong here (a host CAS never fails spuriously). */
#define __TT_ATOMIC_CAS(AS, TG, KIND)                                                                  \
  template <class T>                                                                                   \
  inline bool atomic_compare_exchange_##KIND##_explicit(volatile AS atomic<T> *obj,                   \
                                                        __tt::identity_t<T> *expected,                 \
                                                        __tt::identity_t<T> desired, memory_order succ, \
                                                        memory_order fail) __TT_RELAXED(succ) __TT_RELAXED(fail) { \
    __atomic_impl::check_basic<T, TG>();                                                               \
    return __atomic_impl::cas(__TT_ATOMIC_PTR, expected, desired);                                     \
  }
/* atomic_fetch_<NAME>_explicit: CHECK restricts the types, EXPR computes the result from obj and v. */
#define __TT_ATOMIC_RMW(AS, TG, NAME, CHECK, EXPR)                                                     \
  template <class T>                                                                                   \
  inline T atomic_fetch_##NAME##_explicit(volatile AS atomic<T> *obj, __tt::identity_t<T> v, memory_order order) \
      __TT_RELAXED(order) {                                                                            \
    __atomic_impl::CHECK<T, TG>();                                                                     \
    return EXPR;                                                                                       \
  }
#define __TT_ATOMIC_FUNCS(AS, TG)                                                                      \
  template <class T>                                                                                   \
  inline void atomic_store_explicit(volatile AS atomic<T> *obj, __tt::identity_t<T> desired, memory_order order)     \
      __TT_RELAXED(order) {                                                                            \
    __atomic_impl::check_basic<T, TG>();                                                               \
    __tt_tools::atomic_store(__atomic_impl::ptr((atomic<T> *)obj), (T)desired); /* any 32-bit T */      \
  }                                                                                                    \
  template <class T>                                                                                   \
  inline T atomic_load_explicit(const volatile AS atomic<T> *obj, memory_order order) __TT_RELAXED(order) {          \
    __atomic_impl::check_basic<T, TG>();                                                               \
    return __tt_tools::atomic_load(__atomic_impl::ptr((atomic<T> *)obj));                              \
  }                                                                                                    \
  template <class T>                                                                                   \
  inline T atomic_exchange_explicit(volatile AS atomic<T> *obj, __tt::identity_t<T> desired, memory_order order)     \
      __TT_RELAXED(order) {                                                                            \
    __atomic_impl::check_basic<T, TG>();                                                               \
    T previous;                                                                                        \
    __atomic_exchange(__TT_ATOMIC_PTR, &desired, &previous, __ATOMIC_RELAXED);                         \
    return previous;                                                                                   \
  }                                                                                                    \
  __TT_ATOMIC_CAS(AS, TG, weak) /* Metal has no _strong (specification 6.15.4.4) */                    \
  __TT_ATOMIC_RMW(AS, TG, add, check_rmw, __atomic_fetch_add(__TT_ATOMIC_PTR, v, __ATOMIC_RELAXED))    \
  __TT_ATOMIC_RMW(AS, TG, sub, check_rmw, __atomic_fetch_sub(__TT_ATOMIC_PTR, v, __ATOMIC_RELAXED))    \
  __TT_ATOMIC_RMW(AS, TG, and, check_int_rmw, __atomic_fetch_and(__TT_ATOMIC_PTR, v, __ATOMIC_RELAXED)) \
  __TT_ATOMIC_RMW(AS, TG, or, check_int_rmw, __atomic_fetch_or(__TT_ATOMIC_PTR, v, __ATOMIC_RELAXED))  \
  __TT_ATOMIC_RMW(AS, TG, xor, check_int_rmw, __atomic_fetch_xor(__TT_ATOMIC_PTR, v, __ATOMIC_RELAXED)) \
  __TT_ATOMIC_RMW(AS, TG, min, check_int_rmw, __atomic_impl::fetch_minmax(__TT_ATOMIC_PTR, v, false))  \
  __TT_ATOMIC_RMW(AS, TG, max, check_int_rmw, __atomic_impl::fetch_minmax(__TT_ATOMIC_PTR, v, true))
__TT_ATOMIC_FUNCS(__TT_DEV, false)
__TT_ATOMIC_FUNCS(__TT_TG, true)
#undef __TT_ATOMIC_FUNCS
#undef __TT_ATOMIC_RMW
#undef __TT_ATOMIC_CAS
#undef __TT_ATOMIC_PTR

/* 64-bit atomics (MSL 2.4, Apple9): only max/min on device memory, no return value. */
inline void atomic_max_explicit(volatile __TT_DEV atomic_ulong *obj, ulong v, memory_order order) __TT_RELAXED(order)
    __TT_ATOMIC_ULONG_FAMILY {
  __atomic_impl::fetch_minmax(__atomic_impl::ptr((atomic_ulong *)obj), v, true);
}
inline void atomic_min_explicit(volatile __TT_DEV atomic_ulong *obj, ulong v, memory_order order) __TT_RELAXED(order)
    __TT_ATOMIC_ULONG_FAMILY {
  __atomic_impl::fetch_minmax(__atomic_impl::ptr((atomic_ulong *)obj), v, false);
}
#undef __TT_RELAXED

/* ============================================================================================== */
/* SIMD-group functions (width 32)                                                               */
/* ============================================================================================== */

class simd_vote {
public:
  using vote_t = ulong;
  constexpr simd_vote() : __v(0), __active(0xffffffffu) {}
  explicit constexpr simd_vote(vote_t v) : __v(v), __active(0xffffffffu) {}
  constexpr simd_vote(vote_t v, vote_t active) : __v(v), __active(active) {}
  explicit constexpr operator vote_t() const { return __v; }
  constexpr bool all() const { return (__v & __active) == __active; }
  constexpr bool any() const { return __v != 0; }

private:
  vote_t __v, __active;
};

namespace __simd {
template <class T> inline tt_simd_xchg *arrive(const char *op, const T &v, uint param, uint line, uint col,
                                                     uint *lane) {
  return __tt_simd(op, &v, sizeof(T), param, line, col, lane);
}
[[noreturn]] inline void bad_lane(const char *op, uint lane, uint src, const tt_simd_xchg *x, uint line, uint col) {
  char msg[200];
  const char *why = src >= TT_EMU_SIMD_WIDTH ? "is not a lane of a 32-wide simdgroup"
                    : src >= x->nlanes       ? "does not exist (partial simdgroup)"
                                             : "is not active (it has returned or is not participating)";
  __builtin_snprintf(msg, sizeof(msg), "%s: lane %u reads lane %u, which %s", op, lane, src, why);
  __tt_fail(TT_ERR_SIMD, msg, line, col);
}
inline void check_src(const char *op, uint lane, uint src, const tt_simd_xchg *x, uint line, uint col) {
  if (src >= TT_EMU_SIMD_WIDTH || !((x->active >> src) & 1))
    bad_lane(op, lane, src, x, line, col);
}
inline uint first_active(const tt_simd_xchg *x) { return (uint)__builtin_ctz(x->active); }
inline void check_uniform(const char *op, const tt_simd_xchg *x, uint line, uint col) {
  uint f = first_active(x);
  for (uint l = 0; l < TT_EMU_SIMD_WIDTH; ++l)
    if (((x->active >> l) & 1) && x->param[l] != x->param[f]) {
      char msg[200];
      __builtin_snprintf(msg, sizeof(msg), "%s: the lane argument must be uniform, but lane %u passes %u and lane %u passes %u",
                         op, f, x->param[f], l, x->param[l]);
      __tt_fail(TT_ERR_SIMD, msg, line, col);
    }
}
template <class T> struct op_add { static T apply(T a, T b) { return (T)(a + b); } };
template <class T> struct op_mul { static T apply(T a, T b) { return (T)(a * b); } };
template <class T> struct op_and { static T apply(T a, T b) { return (T)(a & b); } };
template <class T> struct op_or { static T apply(T a, T b) { return (T)(a | b); } };
template <class T> struct op_xor { static T apply(T a, T b) { return (T)(a ^ b); } };
template <class T> struct op_min { static T apply(T a, T b) { return metal::min(a, b); } };
template <class T> struct op_max { static T apply(T a, T b) { return metal::max(a, b); } };
/* Reductions and scans run once per simdgroup, on the lane that runs first after the rendezvous
   (x->first, see tt_simd_xchg), before any other lane resumes: a reduction leaves its result in x->res, a
   scan rewrites each lane's value in x->val with that lane's result. Active lanes are folded in lane order. */
template <class T, template <class> class OP> inline void reduce_all(tt_simd_xchg *x) {
  uint32_t m = x->active;
  T acc = __tt::load_lane<T>(x, (uint)__builtin_ctz(m));
  for (m &= m - 1; m; m &= m - 1)
    acc = OP<T>::apply(acc, __tt::load_lane<T>(x, (uint)__builtin_ctz(m)));
  __builtin_memcpy(x->res, &acc, sizeof(T));
}
template <class T, template <class> class OP> inline void scan_all(tt_simd_xchg *x, bool exclusive, T identity) {
  T acc = identity;
  bool have = false;
  for (uint32_t m = x->active; m; m &= m - 1) {
    uint l = (uint)__builtin_ctz(m);
    T v = __tt::load_lane<T>(x, l);
    T before = acc;
    acc = have ? OP<T>::apply(acc, v) : v;
    have = true;
    T r = exclusive ? before : acc;
    __builtin_memcpy(x->val[l], &r, sizeof(T));
  }
}
template <class T> inline T load_res(const tt_simd_xchg *x) {
  T r;
  __builtin_memcpy(&r, x->res, sizeof(T));
  return r;
}
} // namespace __simd

#define __TT_SIMD_ARRIVE(NAME, V, PARAM)                                                               \
  uint __lane;                                                                                         \
  tt_simd_xchg *__x = __simd::arrive(NAME, V, PARAM, __TT_SITE_ARGS, &__lane)

template <class T> inline T simd_shuffle(T data, ushort simd_lane_id, __TT_SITE_PARAMS) {
  __TT_SIMD_TYPE_CHECK(T);
  __TT_SIMD_ARRIVE("simd_shuffle", data, simd_lane_id);
  __simd::check_src("simd_shuffle", __lane, simd_lane_id, __x, __TT_SITE_ARGS);
  return __tt::load_lane<T>(__x, simd_lane_id);
}
template <class T> inline T simd_shuffle_xor(T data, ushort mask, __TT_SITE_PARAMS) {
  __TT_SIMD_TYPE_CHECK(T);
  __TT_SIMD_ARRIVE("simd_shuffle_xor", data, mask);
  uint src = __lane ^ mask;
  __simd::check_src("simd_shuffle_xor", __lane, src, __x, __TT_SITE_ARGS);
  return __tt::load_lane<T>(__x, src);
}
/* lanes below `delta` keep their own value (Metal semantics) */
template <class T> inline T simd_shuffle_up(T data, ushort delta, __TT_SITE_PARAMS) {
  __TT_SIMD_TYPE_CHECK(T);
  __TT_SIMD_ARRIVE("simd_shuffle_up", data, delta);
  if (__lane < delta)
    return data;
  uint src = __lane - delta;
  __simd::check_src("simd_shuffle_up", __lane, src, __x, __TT_SITE_ARGS);
  return __tt::load_lane<T>(__x, src);
}
/* lanes whose source would be >= 32 keep their own value (Metal semantics) */
template <class T> inline T simd_shuffle_down(T data, ushort delta, __TT_SITE_PARAMS) {
  __TT_SIMD_TYPE_CHECK(T);
  __TT_SIMD_ARRIVE("simd_shuffle_down", data, delta);
  uint src = __lane + delta;
  if (src >= TT_EMU_SIMD_WIDTH)
    return data;
  __simd::check_src("simd_shuffle_down", __lane, src, __x, __TT_SITE_ARGS);
  return __tt::load_lane<T>(__x, src);
}
template <class T> inline T simd_shuffle_rotate_up(T data, ushort delta, __TT_SITE_PARAMS) {
  __TT_SIMD_TYPE_CHECK(T);
  __TT_SIMD_ARRIVE("simd_shuffle_rotate_up", data, delta);
  uint src = (__lane + TT_EMU_SIMD_WIDTH - (delta % TT_EMU_SIMD_WIDTH)) % TT_EMU_SIMD_WIDTH;
  __simd::check_src("simd_shuffle_rotate_up", __lane, src, __x, __TT_SITE_ARGS);
  return __tt::load_lane<T>(__x, src);
}
template <class T> inline T simd_shuffle_rotate_down(T data, ushort delta, __TT_SITE_PARAMS) {
  __TT_SIMD_TYPE_CHECK(T);
  __TT_SIMD_ARRIVE("simd_shuffle_rotate_down", data, delta);
  uint src = (__lane + delta) % TT_EMU_SIMD_WIDTH;
  __simd::check_src("simd_shuffle_rotate_down", __lane, src, __x, __TT_SITE_ARGS);
  return __tt::load_lane<T>(__x, src);
}
template <class T> inline T simd_broadcast(T data, ushort broadcast_lane_id, __TT_SITE_PARAMS) {
  __TT_SIMD_TYPE_CHECK(T);
  __TT_SIMD_ARRIVE("simd_broadcast", data, broadcast_lane_id);
  __simd::check_uniform("simd_broadcast", __x, __TT_SITE_ARGS);
  __simd::check_src("simd_broadcast", __lane, broadcast_lane_id, __x, __TT_SITE_ARGS);
  return __tt::load_lane<T>(__x, broadcast_lane_id);
}
template <class T> inline T simd_broadcast_first(T data, __TT_SITE_PARAMS) {
  __TT_SIMD_TYPE_CHECK(T);
  __TT_SIMD_ARRIVE("simd_broadcast_first", data, 0);
  return __tt::load_lane<T>(__x, __simd::first_active(__x));
}

#define __TT_SIMD_REDUCE(NAME, OP, IDENTITY, INT_ONLY)                                                 \
  template <class T> inline T NAME(T data, __TT_SITE_PARAMS) {                                         \
    __TT_SIMD_TYPE_CHECK(T);                                                                           \
    static_assert(!(INT_ONLY) || __tt::is_int<T>::value, #NAME " exists for integer types only");      \
    __TT_SIMD_ARRIVE(#NAME, data, 0);                                                                  \
    if (__lane == __x->first)                                                                          \
      __simd::reduce_all<T, __simd::OP>(__x);                                                          \
    return __simd::load_res<T>(__x);                                                                   \
  }
__TT_SIMD_REDUCE(simd_sum, op_add, 0, false)
__TT_SIMD_REDUCE(simd_product, op_mul, 1, false)
__TT_SIMD_REDUCE(simd_min, op_min, 0, false)
__TT_SIMD_REDUCE(simd_max, op_max, 0, false)
__TT_SIMD_REDUCE(simd_and, op_and, 0, true)
__TT_SIMD_REDUCE(simd_or, op_or, 0, true)
__TT_SIMD_REDUCE(simd_xor, op_xor, 0, true)
#undef __TT_SIMD_REDUCE

#define __TT_SIMD_SCAN(NAME, OP, IDENTITY, EXCLUSIVE)                                                  \
  template <class T> inline T NAME(T data, __TT_SITE_PARAMS) {                                         \
    __TT_SIMD_TYPE_CHECK(T);                                                                           \
    __TT_SIMD_ARRIVE(#NAME, data, 0);                                                                  \
    if (__lane == __x->first)                                                                          \
      __simd::scan_all<T, __simd::OP>(__x, EXCLUSIVE, (T)(IDENTITY));                                  \
    return __tt::load_lane<T>(__x, __lane);                                                            \
  }
__TT_SIMD_SCAN(simd_prefix_inclusive_sum, op_add, 0, false)
__TT_SIMD_SCAN(simd_prefix_exclusive_sum, op_add, 0, true)
__TT_SIMD_SCAN(simd_prefix_inclusive_product, op_mul, 1, false)
__TT_SIMD_SCAN(simd_prefix_exclusive_product, op_mul, 1, true)
#undef __TT_SIMD_SCAN

namespace __simd {
/* The ballot of the active lanes (computed once, by x->first, into x->res). */
inline uint32_t ballot(tt_simd_xchg *x, uint lane) {
  if (lane == x->first) {
    uint32_t v = 0;
    for (uint32_t m = x->active; m; m &= m - 1)
      if (x->param[__builtin_ctz(m)])
        v |= m & -m;
    __builtin_memcpy(x->res, &v, sizeof(v));
  }
  return load_res<uint32_t>(x);
}
} // namespace __simd
inline simd_vote simd_ballot(bool expr, __TT_SITE_PARAMS) {
  __TT_SIMD_ARRIVE("simd_ballot", expr, expr ? 1u : 0u);
  return simd_vote(__simd::ballot(__x, __lane), __x->active);
}
inline bool simd_all(bool expr, __TT_SITE_PARAMS) {
  __TT_SIMD_ARRIVE("simd_all", expr, expr ? 1u : 0u);
  return __simd::ballot(__x, __lane) == __x->active;
}
inline bool simd_any(bool expr, __TT_SITE_PARAMS) {
  __TT_SIMD_ARRIVE("simd_any", expr, expr ? 1u : 0u);
  return __simd::ballot(__x, __lane) != 0;
}
inline simd_vote simd_active_threads_mask(__TT_SITE_PARAMS) {
  __TT_SIMD_ARRIVE("simd_active_threads_mask", 0, 0);
  (void)__lane;
  return simd_vote(__x->active, __x->active);
}
inline bool simd_is_first(__TT_SITE_PARAMS) {
  __TT_SIMD_ARRIVE("simd_is_first", 0, 0);
  return __lane == __simd::first_active(__x);
}
inline bool simd_is_helper_thread() { return false; }
#undef __TT_SIMD_ARRIVE

} // namespace metal

/* ============================================================================================== */
/* Threadgroup memory and the kernel trampoline helpers                                           */
/* ============================================================================================== */

/* Storage for a `threadgroup` variable: shared by the threads of the running threadgroup. */
template <class T> inline __TT_TG T &__tt_tg_var(unsigned site, const char *name) {
  return *(__TT_TG T *)__tt_tg_alloc(site, sizeof(T), alignof(T), name);
}

/* The Triton lowering declares its kernel-scope shared buffer with this macro; on Metal it is a plain
   `threadgroup alignas(16) uchar name[nbytes]` (the MSL prelude defines that version only when this
   header has not defined it). Out-of-range constant-size indexing of `name` is caught by the bounds
   sanitizer; pointer arithmetic past its end hits a guard page when it is the first (topmost)
   threadgroup allocation. */
#define TT_THREADGROUP_BUFFER(name, nbytes)                                                            \
  __TT_TG uchar(&name)[nbytes] = __tt_tg_var<uchar[nbytes]>(__COUNTER__ + 1u, #name)

/* Builtin values for the trampoline: scalar forms take the x component. */
template <class T> inline T __tt_builtin(const uint32_t *v) {
  if constexpr (__tt::vec_traits<T>::is_vec) {
    T r;
    for (int i = 0; i < __tt::vec_traits<T>::n; ++i)
      r[i] = (__tt::elem_t<T>)v[i];
    return r;
  } else {
    return (T)v[0];
  }
}

#include "metal_simdgroup_matrix.h"

/* ============================================================================================== */
/* Metal keywords (defined last so that the header itself never depends on them)                  */
/* ============================================================================================== */

#define device __TT_DEV
#define constant const __TT_CONSTANT
#define threadgroup __TT_TG
#define thread
#define kernel static

#endif /* TT_METAL_COMPAT_H */
