/* kernels.h: the table of CPU kernels one CPU class provides.
 *
 * A model is packed for one class at load: every weight matrix W [n, k]
 * (row-major, as in the checkpoint: y = W x) becomes a uform_packed_t in the
 * class's own layout. The forward pass then calls the class's GEMM through this
 * table and never looks inside a packed matrix.
 *
 * Determinism contract (the tests rely on it): every output element
 * y[i, j] is computed by the same sequence of operations whatever m, the
 * position of row i in the batch, the thread count or the split of work. So a
 * text encoded alone equals the same text inside a batch bit for bit.
 */
#ifndef UFORM_CPU_KERNELS_H
#define UFORM_CPU_KERNELS_H

#include "backend/backend.h"

/* What a gemm does with its sums (one chain per y element from 0 or y over k,
 * bias added last): STORE y = sums + bias; ACCUMULATE y = y + sums + bias;
 * GELU y = gelu(sums + bias), GELU applied to each row group's finished
 * outputs while they are still in cache (uform_gelu_rows: the same bits as a
 * separate uform_gelu_forward pass). */
typedef enum { UFORM_GEMM_STORE, UFORM_GEMM_ACCUMULATE, UFORM_GEMM_GELU } uform_gemm_epilogue_t;

typedef struct {
    uform_cpu_class_t cpu_class;
    const char *name;                    /* "serial", "haswell", ..., "neon", "sve" */
    /* Packs W [n, k] given as BF16 bits, row-major. */
    uform_status_t (*pack)(const uint16_t *weights, size_t n, size_t k, uform_packed_t *packed);
    /* Packs W [n, k] quantized to E4M3 (backend.h pack_e4m3); the gemm below
     * takes either. */
    uform_status_t (*pack_e4m3)(const uint8_t *codes, const float *scales, size_t n, size_t k,
                                uform_packed_t *packed);
    /* y[m, n] = x[m, k] * W^T + bias (bias may be NULL), stored, added to y or
     * through GELU as `epilogue` says. x rows are x_stride floats apart, y rows
     * y_stride floats apart; runs on the executor. */
    void (*gemm)(uform_executor_t *executor, const uform_packed_t *w, const float *x,
                 size_t x_stride, size_t m, const float *bias, uform_gemm_epilogue_t epilogue,
                 float *y, size_t y_stride);
    /* One head of attention within one item of n tokens, for queries
     * [first, last): out[i] = sum_j softmax_j(q_i . k_j / 8) v_j. q, k and v
     * point at the item's row 0, rows `stride` floats apart, 64 wide (rotary
     * positions applied); out points at row 0 too. scratch holds
     * uform_attention_scratch_floats(n) floats, 64-byte aligned. Each output
     * depends only on the item's own rows, in a fixed order. */
    void (*attention)(const float *q, const float *k, const float *v, size_t stride, size_t n,
                      size_t first, size_t last, float *out, size_t out_stride, float *scratch);
} uform_cpu_kernels_t;

/* Scratch floats any class's attention needs for an item of n tokens; a
 * multiple of 16, so per-thread slices stay 64-byte aligned. */
static inline size_t uform_attention_scratch_floats(size_t n) {
    size_t padded = (n + 31) & ~(size_t)31; /* AMX's whole tile steps; the others pad to 16 */
    return 96 * padded + 2048;
}

/* attention.c, attention_avx512.c, attention_bf16.c: the implementations. */
UFORM_INTERNAL void uform_attention_portable(const float *q, const float *k, const float *v,
                                             size_t stride, size_t n, size_t first, size_t last,
                                             float *out, size_t out_stride, float *scratch);
#if defined(__x86_64__)
UFORM_INTERNAL void uform_attention_avx512(const float *q, const float *k, const float *v,
                                           size_t stride, size_t n, size_t first, size_t last,
                                           float *out, size_t out_stride, float *scratch);
/* attention_avx2.c (HASWELL): attention_avx512.c's bits with 8-lane FMAs. */
UFORM_INTERNAL void uform_attention_avx2(const float *q, const float *k, const float *v,
                                         size_t stride, size_t n, size_t first, size_t last,
                                         float *out, size_t out_stride, float *scratch);
UFORM_INTERNAL void uform_attention_bf16(const float *q, const float *k, const float *v,
                                         size_t stride, size_t n, size_t first, size_t last,
                                         float *out, size_t out_stride, float *scratch);
#endif
#if defined(__aarch64__)
/* attention_neon.c, attention_sve.c: the same bits as each other at every
 * SVE vector length. */
UFORM_INTERNAL void uform_attention_neon(const float *q, const float *k, const float *v,
                                         size_t stride, size_t n, size_t first, size_t last,
                                         float *out, size_t out_stride, float *scratch);
UFORM_INTERNAL void uform_attention_sve(const float *q, const float *k, const float *v,
                                        size_t stride, size_t n, size_t first, size_t last,
                                        float *out, size_t out_stride, float *scratch);
#endif

/* attention_inference.c: every head of every segment on a class's kernel,
 * spread over the executor; scratch of uform_attention_inference_scratch_bytes. */
UFORM_INTERNAL size_t uform_attention_inference_scratch_bytes(size_t threads, size_t segments,
                                                              size_t longest);
UFORM_INTERNAL void uform_attention_inference(const uform_cpu_kernels_t *kernels,
                                              uform_executor_t *executor, const float *qkv,
                                              size_t hidden, const uform_segment_t *segments,
                                              size_t count, float *out, void *scratch);

/* The class tables, each defined in its own file (serial.c, haswell.c, ...).
 * A class whose file was not compiled for this target has no table. */
UFORM_INTERNAL extern const uform_cpu_kernels_t uform_cpu_kernels_serial;
#if defined(__x86_64__)
UFORM_INTERNAL extern const uform_cpu_kernels_t uform_cpu_kernels_haswell;
UFORM_INTERNAL extern const uform_cpu_kernels_t uform_cpu_kernels_skylake;
UFORM_INTERNAL extern const uform_cpu_kernels_t uform_cpu_kernels_sapphire;
UFORM_INTERNAL extern const uform_cpu_kernels_t uform_cpu_kernels_amx;
#endif
#if defined(__aarch64__)
UFORM_INTERNAL extern const uform_cpu_kernels_t uform_cpu_kernels_neon;
UFORM_INTERNAL extern const uform_cpu_kernels_t uform_cpu_kernels_sve;
UFORM_INTERNAL extern const uform_cpu_kernels_t uform_cpu_kernels_neon_bf16;
UFORM_INTERNAL extern const uform_cpu_kernels_t uform_cpu_kernels_sve_bf16;
#endif

/* detect.c: whether this CPU and OS can run a class (cpuid + xgetbv on
 * x86-64, getauxval on aarch64). */
UFORM_INTERNAL bool uform_cpu_class_supported(uform_cpu_class_t cpu_class);
/* The best class this machine runs. */
UFORM_INTERNAL uform_cpu_class_t uform_cpu_class_best(void);
/* The table for a class, or NULL when this build has none (e.g. NEON on x86). */
UFORM_INTERNAL const uform_cpu_kernels_t *uform_cpu_kernels_for(uform_cpu_class_t cpu_class);
UFORM_INTERNAL const char *uform_cpu_class_name(uform_cpu_class_t cpu_class);

/* Frees a packed matrix (any class). */
UFORM_INTERNAL void uform_packed_free(uform_packed_t *packed);

#endif /* UFORM_CPU_KERNELS_H */
