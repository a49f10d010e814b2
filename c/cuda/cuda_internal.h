/* cuda_internal.h: what the CUDA backend's files share (c/cuda/ only).
 *
 * Operations return nothing (backend.h): a failed launch or runtime call is
 * recorded as the backend's first failure, with its message kept here, and
 * reported by synchronize. Every kernel computes each output element by one
 * fixed chain of operations (no atomics on floats), so results do not depend
 * on launch geometry or timing: the determinism contract of backend.h. */
#ifndef UFORM_CUDA_INTERNAL_H
#define UFORM_CUDA_INTERNAL_H

extern "C" {
#include "cuda_backend.h"
}

#ifdef UFORM_CUDA_EMULATION   /* the backend's code run on the CPU (emulation.h) */
#include "emulation.h"
#define UFORM_LAUNCH(kernel, grid, threads, stream) \
    uform_emulated_launcher<decltype(&kernel)>{dim3(grid), (unsigned)(threads), &kernel, (stream)}
#else
#include <cublasLt.h>
#include <cuda_runtime.h>
/* kernel<<<grid, threads, 0, stream>>>: written UFORM_LAUNCH(kernel, grid,
 * threads, stream)(arguments...) so that the emulation can run it too. */
#define UFORM_LAUNCH(kernel, grid, threads, stream) kernel<<<(grid), (threads), 0, (stream)>>>
#endif
#include <math.h>
#include <pthread.h>

#define UFORM_CUDA_GEMM_PLANS 64
#define UFORM_CUDA_WORKSPACE_BYTES ((size_t)32 << 20)

/* Device scratch an operation grows to what it needs (uform_cuda_grow). */
typedef struct {
    void *data;
    size_t bytes;
} uform_cuda_buffer_t;

/* What the operands of a product hold: FP32; BF16 (packed weights, the
 * trainer's rounded operands); E4M3 codes with a scale per row of A and per
 * column of B (gemm_fp8.cu). */
typedef enum {
    UFORM_OPERANDS_F32,
    UFORM_OPERANDS_BF16,
    UFORM_OPERANDS_E4M3,
    UFORM_OPERANDS_E4M3_SCALED   /* E4M3, both scales applied by cuBLASLt (outer vectors), a BF16 bias */
} uform_cuda_operands_t;

/* What a cuBLASLt product writes: FP32 (C and D), or BF16 (C and D, the bias
 * BF16: cuBLASLt takes a bias of D's type), after GELU or not. */
typedef enum {
    UFORM_OUTPUT_F32,
    UFORM_OUTPUT_BF16,        /* linear_qkv_bf16 */
    UFORM_OUTPUT_GELU_BF16    /* the GELU epilogue: linear_gelu_bf16 */
} uform_cuda_output_t;

#ifndef UFORM_CUDA_EMULATION
/* One cached cuBLASLt plan: a product's shape and the algorithm chosen for it once. */
typedef struct {
    bool used;
    size_t m, n, k, lda, ldb, ldc;
    bool transpose_a, transpose_b, bias;
    uform_cuda_operands_t operands;  /* what A and B hold */
    /* The alignments (bytes, at most 256) of A's, B's and C's addresses the
     * algorithm was chosen for: cuBLASLt assumes 256 unless told, and the
     * trainer's parameter slices can be 4-byte aligned. */
    uint32_t align_a, align_b, align_c;
    uint32_t align_bias;   /* of the bias the heuristic saw (0: no bias) */
    uform_cuda_output_t output;
    cublasLtMatmulDesc_t operation;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algorithm;
} uform_cuda_plan_t;
#endif

typedef struct {
    int device;
    int multiprocessors;             /* the GPU's SMs: grids sized to fill it */
    bool simple_attention;           /* run attention.cu's FP32 kernels (uform_cuda_attention_simple) */
    size_t attention_query_rows;     /* the forward's query rows a block, 64 or 0: 128 (attention_mma.cu) */
    size_t attention_backward_parts; /* the backward's parts a tile pair, 1, 2 or 0: 4 (attention_mma.cuh) */
    size_t attention_dq_rows;        /* dq's query rows a block with 4 parts, 64 or 0: 128 (attention_mma.cu) */
    size_t attention_dkv_rows;       /* dk, dv's keys a block, 128 (with dq's 128) or 0: 64 (attention_mma.cu) */
    size_t column_lanes;             /* columns a thread of the column sums, 1 or 0: 4 where aligned (columns.cu) */
    size_t column_lanes_last;        /* the columns a thread the last column sums ran with */
    pthread_mutex_t lock;            /* held by one verb at a time (acquire, release) */
    cudaStream_t stream;
    void *workspace;                 /* UFORM_CUDA_WORKSPACE_BYTES of device memory */
#ifndef UFORM_CUDA_EMULATION   /* the emulation multiplies on the host (gemm.cu) */
    cublasLtHandle_t lt;
    uform_cuda_plan_t plans[UFORM_CUDA_GEMM_PLANS];
    size_t plans_next;               /* the slot the next new plan replaces when all are used */
#endif
    /* The first failure since synchronize and its words: here rather than in
     * the uform_backend_t, which callers copy by value. */
    uform_status_t failure;
    char failure_message[512];
    /* Growable scratch, used inside one operation at a time (a verb holds
     * the backend: acquire): activations rounded to BF16 for products on
     * packed weights, the choices head's pairs and scores, and rows
     * converted for download_rows (convert_rows.cu). */
    uform_cuda_buffer_t bf16_rows, choices;
    /* the trainer's dense products: its FP32 weights and gradients dy rounded
     * to BF16 (gemm.cu) */
    uform_cuda_buffer_t bf16_weights, bf16_gradients;
    /* FP8 products (gemm_fp8.cu): on GPUs with FP8 tensor cores (ADA and
     * later), until cuBLASLt finds no algorithm for one (then `fp8_refused`:
     * E4M3 weights are decoded to BF16 instead, as on AMPERE); the
     * activations' codes and row scales, and the product before the bias.
     * fp8_refusal says why, plan_refusal why the last quiet plan was not made
     * (uform_cuda_plan). */
    bool fp8_products, fp8_refused;
    char fp8_refusal[256], plan_refusal[128];
    uform_cuda_buffer_t fp8_rows, fp8_product;
    /* FP8 products whose scales and bias cuBLASLt applies itself (outer-vector
     * scaling), by output (uform_cuda_output_t): the FP32 form (y (+)= ...),
     * BF16 out (linear_qkv_bf16) and the GELU form (BF16 out): refused for the backend's life once cuBLASLt had no algorithm or
     * turned the call down, and why; fp8_scaled_off, the tests' switch back
     * to our scales' pass; fp8_scaled, whether the last FP8 product ran so */
    bool fp8_scaled_refused[3], fp8_scaled_off, fp8_scaled;
    char fp8_scaled_refusal[3][320];
    /* BF16 operands (backend.h, inference): gelu_epilogue, whether the last
     * linear_gelu_bf16 ran cuBLASLt's GELU epilogue; refused for the
     * backend's life once cuBLASLt had no algorithm for it, and why; the FP32
     * rows a BF16 operand is rounded from where no kernel writes it directly */
    bool gelu_epilogue, gelu_epilogue_refused;
    char gelu_epilogue_refusal[128];
    /* linear_qkv_bf16 (gemm.cu): whether cuBLASLt wrote the product in BF16
     * last time (else the FP32 product and the staging pass ran), whether
     * and why it refused that (for the backend's life) */
    bool bf16_out, bf16_out_refused;
    char bf16_out_refusal[128];
    uform_cuda_buffer_t operand_f32, rotated_qkv, bias_bf16;
    uform_cuda_buffer_t column_partials;   /* columns.cu's per-chunk sums */
    uform_cuda_buffer_t loss_rows;         /* reconstruction_loss.cu's row means and total */
    uform_cuda_buffer_t choices_loss;      /* choices_loss.cu's layout and per-choice values */
    uform_cuda_buffer_t pair_loss;         /* contrastive_loss.cu's and late_interaction_loss.cu's layouts */
    uform_cuda_buffer_t converted_rows;
    uform_cuda_buffer_t attention_deltas;  /* attention_mma.cu's D per (row, head) in a backward */
    uform_cuda_buffer_t attention_bf16;    /* attention_mma.cu: qkv rounded to BF16 once */
    uform_cuda_buffer_t attention_dout_bf16;  /* attention_mma.cu's backward: dout rounded to BF16 once */
} uform_cuda_context_t;

static inline uform_cuda_context_t *uform_cuda_context(uform_backend_t *b) {
    return (uform_cuda_context_t *)b->device;
}

/* Records the first failure of the backend (kept until synchronize). */
void uform_cuda_record(uform_backend_t *b, uform_status_t status, const char *what, const char *detail);

/* Records a CUDA runtime error; true when the call succeeded. A failed call is
 * also the runtime's last error: reset here, or the next launch's check
 * (cudaGetLastError) would report it again as that kernel's own failure. */
static inline bool uform_cuda_ok(uform_backend_t *b, cudaError_t error, const char *what) {
    if (error == cudaSuccess) return true;
    (void)cudaGetLastError();
    uform_cuda_record(b, UFORM_DEVICE, what, cudaGetErrorString(error));
    return false;
}

/* The buffer grown to at least `bytes` (contents not kept): the stream is
 * synchronized before the old memory goes, so operations still queued on it
 * finish first; NULL on failure (recorded). Plain cudaMalloc, not the
 * stream-ordered allocator, which a GPU without memory pools (some virtual
 * GPUs) refuses; growing is rare. */
void *uform_cuda_grow(uform_backend_t *b, uform_cuda_buffer_t *buffer, size_t bytes, const char *what);
/* x [rows, k] (row stride `stride`) rounded to BF16, nearest even, into
 * `buffer` (gemm.cu's kernels); NULL on failure (recorded). */
const uint16_t *uform_cuda_bf16_copy(uform_backend_t *b, uform_cuda_buffer_t *buffer, const float *x, size_t stride,
                                     size_t rows, size_t k);
/* The same into `out` [rows, k] (gemm.cu). */
void uform_cuda_round_bf16(uform_backend_t *b, const float *x, size_t stride, size_t rows, size_t k, uint16_t *out);
void uform_cuda_buffer_free(uform_cuda_buffer_t *buffer);

/* Checks the launch just made. */
static inline void uform_cuda_launched(uform_backend_t *b, const char *what) {
    uform_cuda_ok(b, cudaGetLastError(), what);
}

/* bytes rounded up to a multiple of 8 (the offsets of a layout's doubles) */
static inline size_t uform_cuda_align8(size_t bytes) { return (bytes + 7) & ~(size_t)7; }

static inline unsigned uform_cuda_blocks(size_t count, unsigned threads) {
    size_t blocks = (count + threads - 1) / threads;
    return (unsigned)(blocks < 65535u * 32u ? (blocks ? blocks : 1) : 65535u * 32u);
}

/* Section 3's relations of one loss call, laid out in device memory by
 * pair_rules.cu for pair_loss.cuh's kernels: the host's size_t offsets as
 * uint32 (a call holds fewer than 2^32 edges of each kind). */
enum { UFORM_PAIR_RULES_ATTRACT = 0, UFORM_PAIR_RULES_REPEL = 1, UFORM_PAIR_RULES_IGNORE = 2 };
typedef struct {
    const uint32_t *bags;            /* [n], or NULL: no bag positives */
    const uint32_t *offsets[3];      /* attract, repel, ignore: [n + 1] each, or NULL: none of that kind */
    const uint32_t *ids[3];
    const float *weights[3];         /* NULL: every edge of that kind weighs 1 */
    bool ambient;                    /* AMBIENT negatives */
    double ambient_weight;
} uform_pair_rules_t;

/* ---- the operations, by file ---- */
/* memory.cu */
void *uform_cuda_alloc(uform_backend_t *b, size_t bytes);
void uform_cuda_free(uform_backend_t *b, void *memory);
void uform_cuda_upload(uform_backend_t *b, void *device, const void *host, size_t bytes);
void uform_cuda_download(uform_backend_t *b, void *host, const void *device, size_t bytes);
void uform_cuda_copy(uform_backend_t *b, void *destination, const void *source, size_t bytes);
void uform_cuda_zero(uform_backend_t *b, void *memory, size_t bytes);
uform_status_t uform_cuda_synchronize(uform_backend_t *b);
/* convert_rows.cu */
void uform_cuda_download_rows(uform_backend_t *b, const float *rows_f32, size_t rows, size_t width,
                              uform_scalar_t scalar, void *host, size_t row_bytes);
void uform_cuda_convert_rows(uform_backend_t *b, const float *rows_f32, size_t rows, size_t width,
                             uform_scalar_t scalar, void *rows_out, size_t row_bytes);
/* pair_rules.cu: the bytes the relations of n items take in a layout
 * (SIZE_MAX: more edges of one kind than uint32 offsets hold), and the layout
 * written at host, the rules naming the same offsets from device. */
size_t uform_cuda_pair_rules_bytes(size_t n, const uint32_t *bags, const uform_relations_t *relations);
uform_pair_rules_t uform_cuda_pair_rules_layout(const uform_contrastive_config_t *config, size_t n,
                                                const uint32_t *bags, const uform_relations_t *relations,
                                                uint8_t *host, uint8_t *device);
/* contrastive_loss.cu, late_interaction_loss.cu (backend.h; `loss` is host memory) */
uform_status_t uform_cuda_contrastive_loss(uform_backend_t *b, const uform_contrastive_config_t *config,
                                           const uform_contrastive_batch_t *batch,
                                           const float *log_inverse_temperature, const float *bias, float *loss,
                                           float *d_embeddings, float *d_log_inverse_temperature, float *d_bias);
uform_status_t uform_cuda_late_interaction_loss(uform_backend_t *b, const uform_contrastive_config_t *relations_config,
                                                uform_pair_loss_form_t form, const uform_late_batch_t *batch,
                                                float log_inverse_temperature, float bias, float weight, float *loss,
                                                float *d_vectors, float *d_log_inverse_temperature, float *d_bias);
/* maxsim.cu (backend.h: maxsim; the rows, offsets and scores are host memory) */
uform_status_t uform_cuda_maxsim(uform_backend_t *b, const uform_token_rows_t *queries,
                                 const uform_token_rows_t *documents, float *scores);
/* choices.cu */
void uform_cuda_choice_probabilities(uform_backend_t *b, const float *states, size_t hidden,
                                     const uform_segment_t *segments, size_t count, const uform_tape_t *choices,
                                     size_t first_entry, const uint32_t *groups, const float *table,
                                     const float *bias, const float *log_temperature, const size_t *offsets,
                                     float *probabilities);
/* choices_loss.cu */
void uform_cuda_choices_loss(uform_backend_t *b, const uform_choices_batch_t *batch, const float *bytes_table,
                             const float *bytes_bias, const float *log_temperature, float scale, double *loss_sum,
                             float *d_states, float *d_bytes_table, float *d_bytes_bias, float *d_log_temperature);
/* columns.cu: sums[c] += the column sums of dy [rows, width]; a layer norm's
 * dweight += column sums of dy xhat and dbias += those of dy (either NULL) */
void uform_cuda_column_sums(uform_backend_t *b, const float *dy, size_t rows, size_t width, float *sums);
/* What a product's backward receives in place of dy (NULL: dy itself): GELU's
 * backward of dy at its input gelu_pre [rows, width] (gelu_backward's values),
 * or, with cosines and sines [rows][32], rope_backward's rotation of dy, qkv's
 * gradient [rows, 3H] (rope_backward's values); the same bits either way. */
typedef struct {
    const float *gelu_pre;
    const float *cosines, *sines;
} uform_cuda_dy_form_t;
/* The same while dy [rows, width] is rounded to BF16 into `buffer` (one read of
 * dy for a linear_backward's bias gradient and its products): the rounded rows,
 * NULL on failure (recorded). sums may be NULL (the rounding alone). form, when
 * not NULL, says what is summed and rounded instead of dy itself. */
const uint16_t *uform_cuda_bf16_column_sums(uform_backend_t *b, uform_cuda_buffer_t *buffer, const float *dy,
                                            const uform_cuda_dy_form_t *form, size_t rows, size_t width,
                                            float *sums);
void uform_cuda_layer_norm_columns(uform_backend_t *b, const float *dy, const float *x, const float *mean,
                                   const float *rstd, size_t rows, size_t width, float *dweight, float *dbias);
/* (and the table entries embedding_backward and sum_rows, declared below with rows.cu's) */
/* gemm.cu */
uform_status_t uform_cuda_pack(uform_backend_t *b, const uint16_t *weights, size_t n, size_t k,
                               uform_packed_t *packed);
uform_status_t uform_cuda_pack_e4m3(uform_backend_t *b, const uint8_t *codes, const float *scales, size_t n,
                                    size_t k, uform_packed_t *packed);
uform_status_t uform_cuda_unpack_e4m3(uform_backend_t *b, const uform_packed_t *packed, uint8_t *codes,
                                      float *scales);
void uform_cuda_packed_free(uform_backend_t *b, uform_packed_t *packed);
void uform_cuda_gemm(uform_backend_t *b, size_t m, size_t n, size_t k, uform_matrix_t a, uform_matrix_t bm,
                     const float *bias, bool accumulate, float *c, size_t c_stride);
void uform_cuda_linear(uform_backend_t *b, const uform_weight_t *w, const float *x, size_t x_stride,
                       size_t rows, const float *bias, bool accumulate, float *y, size_t y_stride);
void uform_cuda_linear_gelu(uform_backend_t *b, const uform_weight_t *w, const float *x, size_t x_stride,
                            size_t rows, const float *bias, float *pre, float *y);
void uform_cuda_linear_bf16(uform_backend_t *b, const uform_weight_t *w, const uint16_t *x, size_t x_stride,
                            size_t rows, const float *bias, bool accumulate, float *y, size_t y_stride);
void uform_cuda_linear_gelu_bf16(uform_backend_t *b, const uform_weight_t *w, const uint16_t *x, size_t x_stride,
                                 size_t rows, const float *bias, uint16_t *y);
void uform_cuda_linear_qkv_bf16(uform_backend_t *b, const uform_weight_t *w, const uint16_t *x, size_t x_stride,
                                size_t rows, const float *bias, const float *cosines, const float *sines,
                                uint16_t *qkv16);
void uform_cuda_linear_backward(uform_backend_t *b, const uform_weight_t *w, const float *x,
                                const float *dy, size_t rows, float *dweight, float *dbias, float *dx,
                                bool accumulate_dx);
void uform_cuda_linear_backward_bf16(uform_backend_t *b, const uform_weight_t *w, const uint16_t *x,
                                     const float *dy, size_t rows, float *dweight, float *dbias, float *dx,
                                     bool accumulate_dx);
void uform_cuda_gelu_linear_backward_bf16(uform_backend_t *b, const uform_weight_t *w, const uint16_t *x,
                                          const float *pre, const float *dy, size_t rows, float *dweight,
                                          float *dbias, float *dx);
void uform_cuda_rope_linear_backward_bf16(uform_backend_t *b, const uform_weight_t *w, const uint16_t *x,
                                          const float *dqkv, const float *cosines, const float *sines, size_t rows,
                                          float *dweight, float *dbias, float *dx);
void uform_cuda_gemm_plans_free(uform_cuda_context_t *context);
#ifndef UFORM_CUDA_EMULATION
/* The cached plan of one product (cuBLASLt's column-major shape m x n x k,
 * its leading dimensions and transposes, operands, alignments): found or made;
 * NULL on failure, recorded unless quiet. scales: UFORM_OPERANDS_E4M3_SCALED's
 * two scale vectors (A's, B's), which the heuristic must see set (every scale
 * vector is 256-byte aligned, so a plan fits any later pair). */
uform_cuda_plan_t *uform_cuda_plan(uform_backend_t *b, size_t m, size_t n, size_t k, size_t lda, size_t ldb,
                                   size_t ldc, bool transpose_a, bool transpose_b, const void *bias_pointer,
                                   uform_cuda_operands_t operands, uint32_t align_a, uint32_t align_b,
                                   uint32_t align_c, bool quiet, uform_cuda_output_t output,
                                   const float *const *scales = NULL);
/* cuBLASLt's status: true on success, else recorded as the backend's failure. */
bool uform_lt_ok(uform_backend_t *b, cublasStatus_t status, const char *what);
/* The alignment of an address in bytes, at most 256. */
uint32_t uform_cuda_alignment(const void *pointer);
#endif
/* gemm_fp8.cu: y (+)= x W^T (+ bias) for E4M3 weights on the FP8 tensor
 * cores, the activations quantized per row; the scales and the bias (rounded
 * to BF16) applied by cuBLASLt where it accepts that, else by our pass
 * (context->fp8_scaled says which ran). False, with nothing done or
 * recorded, when this GPU cannot (no FP8 tensor cores, or cuBLASLt found no
 * algorithm): the caller decodes the weights to BF16 instead. */
bool uform_cuda_linear_fp8(uform_backend_t *b, const uform_packed_t *packed, const float *x, const uint16_t *x16,
                           size_t x_stride, size_t rows, const float *bias, bool accumulate, float *y,
                           size_t y_stride);
/* The same with y16 [rows, n] = bf16(x W^T + bias), x BF16 (linear_qkv_bf16):
 * only where cuBLASLt applies the FP8 scales and writes BF16 itself; false,
 * nothing written, otherwise (the caller takes the FP32 way). */
bool uform_cuda_linear_bf16_fp8(uform_backend_t *b, const uform_packed_t *packed, const uint16_t *x16,
                                size_t x_stride, size_t rows, const float *bias, uint16_t *y16);
/* The same for linear_gelu_bf16: y [rows, n] = bf16(gelu(x W^T + bias)), x BF16:
 * cuBLASLt's GELU epilogue where it applies the scales, else the GELU and
 * rounding in our scales' pass (the separate passes' bits). */
bool uform_cuda_linear_gelu_fp8(uform_backend_t *b, const uform_packed_t *packed, const uint16_t *x16,
                                size_t x_stride, size_t rows, const float *bias, uint16_t *y);
/* OCP E4M3 (bias 7, no infinities, S.1111.111 NaN) as a float: gemm.cu's
 * decode to BF16 on the device, the emulation's FP8 product on the host. */
__host__ __device__ static inline float uform_e4m3_float(uint8_t code) {
    unsigned exponent = (code >> 3) & 15u, mantissa = code & 7u;
    float magnitude = exponent == 15 && mantissa == 7 ? NAN
                      : exponent == 0                 ? ldexpf((float)mantissa, -9)
                                                      : ldexpf((float)(8 + mantissa), (int)exponent - 10);
    return code & 0x80u ? -magnitude : magnitude;
}
/* A packed E4M3 matrix: codes [n, k], then the row scales from this offset (16-byte aligned). */
static inline size_t uform_cuda_e4m3_scales_at(size_t n, size_t k) { return (n * k + 255) & ~(size_t)255; }
/* layer_norm.cu */
void uform_cuda_layer_norm_forward(uform_backend_t *b, const float *x, size_t rows, size_t width,
                                   const float *weight, const float *bias, float *y, float *mean,
                                   float *rstd);
void uform_cuda_layer_norm_forward_bf16(uform_backend_t *b, const float *x, size_t rows, size_t width,
                                        const float *weight, const float *bias, uint16_t *y, float *mean,
                                        float *rstd);
void uform_cuda_layer_norm_backward(uform_backend_t *b, const float *dy, const float *x,
                                    const float *weight, const float *mean, const float *rstd,
                                    size_t rows, size_t width, float *dx, float *dweight, float *dbias);
/* pointwise.cu */
void uform_cuda_gelu_forward(uform_backend_t *b, const float *x, size_t count, float *y);
void uform_cuda_gelu_backward(uform_backend_t *b, const float *x, const float *dy, size_t count, float *dx);
/* y = bf16(gelu(x)) */
void uform_cuda_gelu_bf16(uform_backend_t *b, const float *x, size_t count, uint16_t *y);
void uform_cuda_rope_tables(uform_backend_t *b, const uform_segment_t *segments, size_t count,
                            const uint32_t *positions, float *cosines, float *sines);
void uform_cuda_rope_forward(uform_backend_t *b, float *qkv, size_t rows, size_t hidden,
                             const float *cosines, const float *sines);
void uform_cuda_rope_backward(uform_backend_t *b, float *dqkv, size_t rows, size_t hidden,
                              const float *cosines, const float *sines);
/* reconstruction_loss.cu */
double uform_cuda_reconstruction_loss(uform_backend_t *b, const float *predictions, const float *targets,
                                      size_t rows, size_t width, float scale, float *d_predictions);
/* rows.cu */
void uform_cuda_embedding_forward(uform_backend_t *b, const float *table, const float *modality,
                                  const uint32_t *ids, size_t rows, size_t width, float *y);
void uform_cuda_embedding_backward(uform_backend_t *b, const float *dy, const uint32_t *ids, size_t rows,
                                   size_t width, float *dtable, float *dmodality);
void uform_cuda_mean_pool_forward(uform_backend_t *b, const float *x, size_t width,
                                  const uform_segment_t *segments, size_t count, float *pooled);
void uform_cuda_mean_pool_backward(uform_backend_t *b, const float *dpooled, size_t width,
                                   const uform_segment_t *segments, size_t count, float *dx);
void uform_cuda_normalize_forward(uform_backend_t *b, const float *x, size_t rows, size_t width, float *y,
                                  float *norms);
void uform_cuda_normalize_backward(uform_backend_t *b, const float *dy, const float *y, const float *norms,
                                   size_t rows, size_t width, float *dx);
void uform_cuda_cross_entropy_forward(uform_backend_t *b, const float *logits, size_t rows, size_t classes,
                                      const uint32_t *targets, float *losses);
void uform_cuda_cross_entropy_backward(uform_backend_t *b, const float *logits, size_t rows, size_t classes,
                                       const uint32_t *targets, const float *scale, float *dlogits);
void uform_cuda_gather_rows(uform_backend_t *b, const float *src, size_t width, const size_t *rows,
                            size_t count, float *dst);
void uform_cuda_scatter_add_rows(uform_backend_t *b, const float *src, size_t width, const size_t *rows,
                                 size_t count, float *dst);
void uform_cuda_scatter_rows(uform_backend_t *b, const float *src, size_t src_stride, const float *add,
                             size_t width, const size_t *rows, size_t count, float *dst);
void uform_cuda_sum_rows(uform_backend_t *b, const float *src, size_t width, const size_t *rows,
                         size_t count, float *sums);
/* attention.cu */
size_t uform_cuda_attention_scratch_bytes(uform_backend_t *b, size_t hidden, size_t segments, size_t longest);
void uform_cuda_attention_forward(uform_backend_t *b, const float *qkv, size_t hidden,
                                  const uform_segment_t *segments, size_t count, size_t rows, size_t longest,
                                  float *out, float *logsumexp, void *scratch);
void uform_cuda_attention_backward(uform_backend_t *b, const float *qkv, const float *out, const float *dout,
                                   const float *logsumexp, size_t hidden, const uform_segment_t *segments,
                                   size_t count, size_t rows, size_t longest, float *dqkv);
void uform_cuda_attention_forward_bf16(uform_backend_t *b, const float *qkv, size_t hidden,
                                       const uform_segment_t *segments, size_t count, size_t rows, size_t longest,
                                       const float *cosines, const float *sines, uint16_t *out, void *scratch);
void uform_cuda_attention_forward_train_bf16(uform_backend_t *b, const float *qkv, size_t hidden,
                                             const uform_segment_t *segments, size_t count, size_t rows,
                                             size_t longest, const float *cosines, const float *sines,
                                             uint16_t *qkv16, float *out, float *logsumexp);
void uform_cuda_attention_forward_staged_bf16(uform_backend_t *b, const uint16_t *qkv16, size_t hidden,
                                              const uform_segment_t *segments, size_t count, size_t rows,
                                              size_t longest, uint16_t *out, void *scratch);
void uform_cuda_attention_backward_bf16(uform_backend_t *b, const uint16_t *qkv16, const float *out,
                                        const float *dout, const float *logsumexp, size_t hidden,
                                        const uform_segment_t *segments, size_t count, size_t rows,
                                        size_t longest, float *dqkv);
/* attention_mma.cu: the tensor-core kernels (16-byte aligned operands) */
void uform_cuda_attention_forward_mma(uform_backend_t *b, const float *qkv, size_t hidden,
                                      const uform_segment_t *segments, size_t count, size_t rows, size_t longest,
                                      float *out, float *logsumexp);
void uform_cuda_attention_forward_mma_bf16(uform_backend_t *b, const float *qkv, size_t hidden,
                                           const uform_segment_t *segments, size_t count, size_t rows,
                                           size_t longest, const float *cosines, const float *sines,
                                           uint16_t *out);
void uform_cuda_attention_backward_mma(uform_backend_t *b, const float *qkv, const float *out, const float *dout,
                                       const float *logsumexp, size_t hidden, const uform_segment_t *segments,
                                       size_t count, size_t rows, size_t longest, float *dqkv);
void uform_cuda_attention_forward_mma_staged(uform_backend_t *b, const uint16_t *qkv16, size_t hidden,
                                             const uform_segment_t *segments, size_t count, size_t longest,
                                             uint16_t *out);
/* linear_qkv_bf16's two ways (gemm.cu): the FP32 product staged (16-byte
 * aligned operands), or the BF16 product's q and k rotated in place */
void uform_cuda_qkv_stage_bf16(uform_backend_t *b, const float *qkv, size_t rows, size_t hidden,
                               const float *cosines, const float *sines, uint16_t *qkv16);
void uform_cuda_rope_bf16_in_place(uform_backend_t *b, uint16_t *qkv16, size_t rows, size_t hidden,
                                   const float *cosines, const float *sines);
void uform_cuda_attention_forward_mma_train(uform_backend_t *b, const float *qkv, size_t hidden,
                                            const uform_segment_t *segments, size_t count, size_t rows,
                                            size_t longest, const float *cosines, const float *sines,
                                            uint16_t *qkv16, float *out, float *logsumexp);
void uform_cuda_attention_backward_mma_bf16(uform_backend_t *b, const uint16_t *qkv16, const float *out,
                                            const float *dout, const float *logsumexp, size_t hidden,
                                            const uform_segment_t *segments, size_t count, size_t rows,
                                            size_t longest, float *dqkv);
/* adamw.cu */
double uform_cuda_sum_squares(uform_backend_t *b, const float *values, size_t count);
void uform_cuda_adamw(uform_backend_t *b, float *parameters, const float *gradients, float gradient_scale,
                      float *first_moment, float *second_moment, const uint8_t *decay, size_t count,
                      uint64_t step, float learning_rate);
size_t uform_cuda_adamw_first_non_finite(uform_backend_t *b, const float *parameters,
                                         const float *gradients, float gradient_scale,
                                         const float *first_moment, const float *second_moment,
                                         const uint8_t *decay, size_t count, uint64_t step,
                                         float learning_rate);

#endif /* UFORM_CUDA_INTERNAL_H */
