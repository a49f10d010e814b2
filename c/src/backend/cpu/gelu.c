/* gelu.c: GELU's forward, y = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
 * (the tanh form: 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u))), for the separate
 * pass (the trainer) and the GEMM's epilogue (inference, gemm.c).
 *
 * uform_gelu_value is the definition: one chain of IEEE operations per
 * element, no FMA (-std=c11 contracts nothing), the exp of fast_exp.h. The
 * AVX-512 and AVX2 loops below are that chain written out in intrinsics
 * (test_kernels checks them bit for bit against it): GCC's own vectorisation
 * of it computed the division twice (once for the lanes fast_exp clamps) and
 * spent 11% of an encode there. Where -2u > 88 (x < -9.9) fast_exp's clamp
 * would leave x / (1 + e^88) (|y| up to 2 for x near -FLT_MAX), so 0 is taken:
 * the difference from the exact GELU is below 1e-37 for |x| < 10. */
#include "backend/cpu/rows.h"

#include "core/fast_exp.h"

#define UFORM_GELU_GRAIN 4096 /* elements per task of the separate pass */
#define UFORM_GELU_C 0.7978845608028654f /* sqrt(2 / pi) */
#define UFORM_GELU_A 0.044715f

float uform_gelu_value(float v) {
    float u = UFORM_GELU_C * (v + UFORM_GELU_A * v * v * v);
    float t = -2.0f * u;
    float y = v / (1.0f + uform_fast_exp(t));
    uint32_t bits, keep = t > UFORM_EXP_HIGH ? 0u : ~0u;
    memcpy(&bits, &y, sizeof(bits));
    bits &= keep;
    memcpy(&y, &bits, sizeof(y));
    return y;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* The scalar chain step for step: (((a v) v) v), the clamps as max then min
 * (each returns x itself for a NaN x, as the scalar ifs do), the power of two
 * from the bits of the rounded sum, the mask from t > 88. */
#define UFORM_GELU_VECTOR(W, ps, si, ATTR)                                                       \
    static inline __attribute__((always_inline, target(ATTR))) __m##W uform_gelu##W(__m##W v) {  \
        __m##W cube = _mm##ps##_mul_ps(                                                           \
            _mm##ps##_mul_ps(_mm##ps##_mul_ps(_mm##ps##_set1_ps(UFORM_GELU_A), v), v), v);         \
        __m##W u = _mm##ps##_mul_ps(_mm##ps##_set1_ps(UFORM_GELU_C), _mm##ps##_add_ps(v, cube));  \
        __m##W t = _mm##ps##_mul_ps(_mm##ps##_set1_ps(-2.0f), u);                                 \
        __m##W x = _mm##ps##_max_ps(_mm##ps##_set1_ps(UFORM_EXP_LOW), t);                         \
        x = _mm##ps##_min_ps(_mm##ps##_set1_ps(UFORM_EXP_HIGH), x);                               \
        __m##W magic = _mm##ps##_set1_ps(12582912.0f);                                            \
        __m##W shifted =                                                                          \
            _mm##ps##_add_ps(_mm##ps##_mul_ps(x, _mm##ps##_set1_ps(UFORM_EXP_LOG2E)), magic);     \
        __m##W n = _mm##ps##_sub_ps(shifted, magic);                                              \
        __m##W r = _mm##ps##_sub_ps(x, _mm##ps##_mul_ps(n, _mm##ps##_set1_ps(UFORM_EXP_LN2_HIGH))); \
        r = _mm##ps##_sub_ps(r, _mm##ps##_mul_ps(n, _mm##ps##_set1_ps(UFORM_EXP_LN2_LOW)));       \
        __m##W p = _mm##ps##_set1_ps(UFORM_EXP_P0);                                               \
        p = _mm##ps##_add_ps(_mm##ps##_mul_ps(p, r), _mm##ps##_set1_ps(UFORM_EXP_P1));            \
        p = _mm##ps##_add_ps(_mm##ps##_mul_ps(p, r), _mm##ps##_set1_ps(UFORM_EXP_P2));            \
        p = _mm##ps##_add_ps(_mm##ps##_mul_ps(p, r), _mm##ps##_set1_ps(UFORM_EXP_P3));            \
        p = _mm##ps##_add_ps(_mm##ps##_mul_ps(p, r), _mm##ps##_set1_ps(UFORM_EXP_P4));            \
        p = _mm##ps##_add_ps(_mm##ps##_mul_ps(p, r), _mm##ps##_set1_ps(UFORM_EXP_P5));            \
        p = _mm##ps##_add_ps(_mm##ps##_add_ps(_mm##ps##_mul_ps(_mm##ps##_mul_ps(p, r), r), r),    \
                             _mm##ps##_set1_ps(1.0f));                                            \
        __m##W##i exponent = _mm##ps##_slli_epi32(                                                \
            _mm##ps##_add_epi32(_mm##ps##_sub_epi32(_mm##ps##_castps_##si(shifted),               \
                                                    _mm##ps##_set1_epi32(0x4B400000)),            \
                                _mm##ps##_set1_epi32(127)),                                       \
            23);                                                                                  \
        __m##W e = _mm##ps##_mul_ps(p, _mm##ps##_castsi##W##_ps(exponent));                       \
        __m##W y = _mm##ps##_div_ps(v, _mm##ps##_add_ps(_mm##ps##_set1_ps(1.0f), e));             \
        return uform_gelu_mask##W(y, t);                                                          \
    }

/* y where t <= 88 (or t is NaN), else 0. */
static inline __attribute__((always_inline, target("avx512f"))) __m512 uform_gelu_mask512(__m512 y,
                                                                                         __m512 t) {
    __mmask16 clamped = _mm512_cmp_ps_mask(t, _mm512_set1_ps(UFORM_EXP_HIGH), _CMP_GT_OQ);
    return _mm512_mask_mov_ps(y, clamped, _mm512_setzero_ps());
}
static inline __attribute__((always_inline, target("avx2"))) __m256 uform_gelu_mask256(__m256 y,
                                                                                      __m256 t) {
    return _mm256_andnot_ps(_mm256_cmp_ps(t, _mm256_set1_ps(UFORM_EXP_HIGH), _CMP_GT_OQ), y);
}

UFORM_GELU_VECTOR(512, 512, si512, "avx512f")
UFORM_GELU_VECTOR(256, 256, si256, "avx2")

static __attribute__((target("avx512f"))) void uform_gelu_row_avx512(const float *x, float *y,
                                                                     size_t n) {
    size_t c = 0;
    for (; c + 16 <= n; c += 16) _mm512_storeu_ps(y + c, uform_gelu512(_mm512_loadu_ps(x + c)));
    if (c < n) {
        __mmask16 tail = (__mmask16)((1u << (n - c)) - 1);
        _mm512_mask_storeu_ps(y + c, tail, uform_gelu512(_mm512_maskz_loadu_ps(tail, x + c)));
    }
}

static __attribute__((target("avx2"))) void uform_gelu_row_avx2(const float *x, float *y,
                                                                size_t n) {
    size_t c = 0;
    for (; c + 8 <= n; c += 8) _mm256_storeu_ps(y + c, uform_gelu256(_mm256_loadu_ps(x + c)));
    for (; c < n; c++) y[c] = uform_gelu_value(x[c]);
}
#endif

static void uform_gelu_row_scalar(const float *x, float *y, size_t n) {
    for (size_t c = 0; c < n; c++) y[c] = uform_gelu_value(x[c]);
}

typedef void (*uform_gelu_row_fn_t)(const float *x, float *y, size_t n);

/* The widest loop this CPU runs (all give the same bits). */
static uform_gelu_row_fn_t uform_gelu_row(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512f")) return uform_gelu_row_avx512;
    if (__builtin_cpu_supports("avx2")) return uform_gelu_row_avx2;
#endif
    return uform_gelu_row_scalar;
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
