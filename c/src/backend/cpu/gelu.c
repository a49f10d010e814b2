/* gelu.c: GELU's forward, y = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
 * (the tanh form: 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u))), for the separate
 * pass (the trainer) and the GEMM's epilogue (inference, gemm.c).
 *
 * uform_gelu_value is the definition: one chain of IEEE operations per
 * element, its fused multiply-adds written as fmaf (-std=c11 contracts
 * nothing else). e^(-2u) is taken in base 2: t = (x K) (1 + 0.044715 x^2)
 * with K = -2 sqrt(2/pi) log2 e, clamped to [-126, 126], n = t rounded to
 * nearest even, 2^(t - n) by the degree-5 polynomial of BF16 attention's
 * softmax (fast_exp.h's UFORM_EXP2_P*: relative error at most 2e-7, p(0) = 1) and 2^n
 * exactly, then x / (1 + 2^t). Where t > 126 (x below -10.001) the clamp
 * would leave x / (1 + 2^126), so 0 is taken: the exact GELU is smaller than
 * 1.3e-37 there. Against the tanh form in float64 it is as close as the
 * natural-base chain it replaced (both within 16-17 ulps below |x| = 3, both
 * 5.2e-7 at most absolute on [-12, 12]) at 18 vector operations instead of
 * 35: 2.2x faster (0.55 -> 0.25 ns an element on a Zen 4, one core), the
 * GELU of an encode at batch 256 3.2% -> 1.5% of its time (docs/profiles.md).
 *
 * The AVX-512 and AVX2 loops below are that chain written out in intrinsics
 * (test_kernels checks them bit for bit against it): the rounding by
 * vroundscaleps / vroundps gives the integer the scalar's 1.5 * 2^23 trick
 * gives (only a zero's sign may differ, which no later value sees), and
 * vscalefps, or the multiplication by 2^n, is the scalar's one rounding of
 * p 2^n (a subnormal only where n = -126, and then 1 + 2^t = 1 either way). */
#include "backend/cpu/rows.h"
#include "core/fast_exp.h"

#include <math.h>
#include <string.h>

#define UFORM_GELU_GRAIN 4096 /* elements per task of the separate pass */
#define UFORM_GELU_A 0.044715f
/* -2 sqrt(2/pi) log2 e, rounded to float: t = -2u in base-2 units */
#define UFORM_GELU_K (-2.302208185f)
#define UFORM_GELU_LIMIT 126.0f /* |t| clamp: 2^t stays a finite float */

float uform_gelu_value(float v) {
    float w = fmaf(v * v, UFORM_GELU_A, 1.0f);
    float t = (v * UFORM_GELU_K) * w;
    /* the clamps as the vector max then min: a NaN t passes through */
    float x = t < -UFORM_GELU_LIMIT ? -UFORM_GELU_LIMIT : t;
    x = x > UFORM_GELU_LIMIT ? UFORM_GELU_LIMIT : x;
    const float round_magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to integer */
    float shifted = x + round_magic;
    float n = shifted - round_magic;
    float f = x - n;
    float p = fmaf(UFORM_EXP2_P5, f, UFORM_EXP2_P4);
    p = fmaf(p, f, UFORM_EXP2_P3);
    p = fmaf(p, f, UFORM_EXP2_P2);
    p = fmaf(p, f, UFORM_EXP2_P1);
    p = fmaf(p, f, UFORM_EXP2_P0);
    /* 2^n from the low bits of shifted (fast_exp.h's way: no float-to-int
     * conversion of a NaN) */
    uint32_t shifted_bits;
    memcpy(&shifted_bits, &shifted, sizeof(shifted_bits));
    uint32_t exponent = (shifted_bits - 0x4B400000u + 127u) << 23;
    float scale;
    memcpy(&scale, &exponent, sizeof(scale));
    float y = v / (1.0f + p * scale);
    uint32_t bits, keep = t > UFORM_GELU_LIMIT ? 0u : ~0u;
    memcpy(&bits, &y, sizeof(bits));
    bits &= keep;
    memcpy(&y, &bits, sizeof(y));
    return y;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

static inline __attribute__((always_inline, target("avx512f"))) __m512 uform_gelu512(__m512 v) {
    __m512 w = _mm512_fmadd_ps(_mm512_mul_ps(v, v), _mm512_set1_ps(UFORM_GELU_A), _mm512_set1_ps(1.0f));
    __m512 t = _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(UFORM_GELU_K)), w);
    __m512 x = _mm512_max_ps(_mm512_set1_ps(-UFORM_GELU_LIMIT), t); /* NaN: t */
    x = _mm512_min_ps(_mm512_set1_ps(UFORM_GELU_LIMIT), x);
    __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(x, n);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(UFORM_EXP2_P5), f, _mm512_set1_ps(UFORM_EXP2_P4));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(UFORM_EXP2_P3));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(UFORM_EXP2_P2));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(UFORM_EXP2_P1));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(UFORM_EXP2_P0));
    __m512 y = _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_scalef_ps(p, n)));
    __mmask16 clamped = _mm512_cmp_ps_mask(t, _mm512_set1_ps(UFORM_GELU_LIMIT), _CMP_GT_OQ);
    return _mm512_mask_mov_ps(y, clamped, _mm512_setzero_ps());
}

static inline __attribute__((always_inline, target("avx2,fma"))) __m256 uform_gelu256(__m256 v) {
    __m256 w = _mm256_fmadd_ps(_mm256_mul_ps(v, v), _mm256_set1_ps(UFORM_GELU_A), _mm256_set1_ps(1.0f));
    __m256 t = _mm256_mul_ps(_mm256_mul_ps(v, _mm256_set1_ps(UFORM_GELU_K)), w);
    __m256 x = _mm256_max_ps(_mm256_set1_ps(-UFORM_GELU_LIMIT), t); /* NaN: t */
    x = _mm256_min_ps(_mm256_set1_ps(UFORM_GELU_LIMIT), x);
    __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(x, n);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(UFORM_EXP2_P5), f, _mm256_set1_ps(UFORM_EXP2_P4));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(UFORM_EXP2_P3));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(UFORM_EXP2_P2));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(UFORM_EXP2_P1));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(UFORM_EXP2_P0));
    /* 2^n, n in [-126, 126] (a NaN n makes some power, times a NaN p) */
    __m256i exponent = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(exponent));
    __m256 y = _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    return _mm256_andnot_ps(_mm256_cmp_ps(t, _mm256_set1_ps(UFORM_GELU_LIMIT), _CMP_GT_OQ), y);
}

static __attribute__((target("avx512f"))) void uform_gelu_row_avx512(const float *x, float *y,
                                                                     size_t n) {
    size_t c = 0;
    for (; c + 16 <= n; c += 16) _mm512_storeu_ps(y + c, uform_gelu512(_mm512_loadu_ps(x + c)));
    if (c < n) {
        __mmask16 tail = (__mmask16)((1u << (n - c)) - 1);
        _mm512_mask_storeu_ps(y + c, tail, uform_gelu512(_mm512_maskz_loadu_ps(tail, x + c)));
    }
}

static __attribute__((target("avx2,fma"))) void uform_gelu_row_avx2(const float *x, float *y,
                                                                size_t n) {
    size_t c = 0;
    for (; c + 8 <= n; c += 8) _mm256_storeu_ps(y + c, uform_gelu256(_mm256_loadu_ps(x + c)));
    for (; c < n; c++) y[c] = uform_gelu_value(x[c]);
}
#endif

static void uform_gelu_row_scalar(const float *x, float *y, size_t n) {
    for (size_t c = 0; c < n; c++) y[c] = uform_gelu_value(x[c]);
}

uform_gelu_row_fn_t uform_gelu_row_named(const char *isa) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (strcmp(isa, "avx512") == 0) return __builtin_cpu_supports("avx512f") ? uform_gelu_row_avx512 : NULL;
    if (strcmp(isa, "avx2") == 0)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? uform_gelu_row_avx2 : NULL;
#endif
    return strcmp(isa, "scalar") == 0 ? uform_gelu_row_scalar : NULL;
}

/* The widest loop this CPU runs (all give the same bits). */
static uform_gelu_row_fn_t uform_gelu_row(void) {
    uform_gelu_row_fn_t row = uform_gelu_row_named("avx512");
    if (!row) row = uform_gelu_row_named("avx2");
    return row ? row : uform_gelu_row_scalar;
}

void uform_gelu_rows(float *y, size_t rows, size_t cols, size_t stride) {
    uform_gelu_row_fn_t row = uform_gelu_row();
    for (size_t r = 0; r < rows; r++) row(y + r * stride, y + r * stride, cols);
}

typedef struct {
    const float *x;
    float *y;
} uform_gelu_task_t;

static void uform_gelu_forward_range(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_gelu_task_t *task = context;
    uform_gelu_row()(task->x + begin, task->y + begin, end - begin);
}

void uform_gelu_forward(uform_executor_t *executor, const float *x, size_t count, float *y) {
    uform_gelu_task_t task = {x, y};
    uform_parallel_for(executor, count, UFORM_GELU_GRAIN, uform_gelu_forward_range, &task);
}
