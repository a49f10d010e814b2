/* cuda_backend.h: what the rest of libuform sees of the CUDA backend (c/cuda/).
 *
 * The backend implements the operations of backend.h on one GPU: its memory,
 * a stream, a cuBLASLt handle with a workspace, and hand-written kernels. The
 * library is built with it when nvcc and cuBLASLt (the PyPI wheel nvidia-cublas)
 * are found (UFORM_HAVE_CUDA); without them none of this is compiled and every
 * VRAM call answers UFORM_UNSUPPORTED.
 *
 * Status: compiled (sm_80, sm_89, sm_90a, sm_100a); run on one H200
 * (2026-12-04: every test of tests/gpu/ passed but the FP8 products, which
 * cuBLASLt refused, gemm_fp8.cu); every hand-written kernel also runs on the
 * CPU under an emulation of CUDA (emulation.h, `make test-cuda-emulated`),
 * cuBLASLt does not.
 * Built so far: device discovery and classes, memory, FP32 products through
 * cuBLASLt (gemm; linear, linear_gelu, linear_backward on dense weights in
 * BF16),
 * packed BF16 weights and their products, E4M3 weights (FP8 tensor-core
 * products on ADA and later, the activations quantized per row; decoded to
 * BF16 at each product on AMPERE), download_rows, acquire/release,
 * the choices head (choice_probabilities), every training loss
 * (reconstruction, choices, contrastive, late interaction; float64 where the
 * CPU's are), the row-wise layers and their backwards, the heads' row
 * operations, attention forward and backward (flash-style on BF16 tensor
 * cores, and the first, simple FP32 kernel), AdamW and the global
 * norm, MaxSim (maxsim.cu); beside the table, a mesh's gradient sums
 * through NCCL (collectives.h). tests/gpu/test_cuda_ops.c lists what it
 * checked. */
#ifndef UFORM_CUDA_BACKEND_H
#define UFORM_CUDA_BACKEND_H

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GPUs the CUDA runtime sees. No driver or no GPU: UFORM_DEVICE "no GPU found"
 * with the runtime's words. */
UFORM_INTERNAL uform_status_t uform_cuda_devices(size_t *count);
/* The class device dispatches as (by compute capability: 8.0-8.8 AMPERE, 8.9
 * ADA, 9.x HOPPER, 10.x and later BLACKWELL; below 8.0 UFORM_UNSUPPORTED) and
 * its name. */
UFORM_INTERNAL uform_status_t uform_cuda_device_class(uint32_t device, uform_gpu_class_t *gpu_class,
                                                      char *name, size_t name_bytes);
/* A backend on `device`: its stream, cuBLASLt handle and workspace; free with
 * uform_cuda_backend_free. */
UFORM_INTERNAL uform_status_t uform_cuda_backend_init(uint32_t device, uform_backend_t *backend);
UFORM_INTERNAL void uform_cuda_backend_free(uform_backend_t *backend);

/* Memory of GPU `device` for a device arena (core/arena.c), from any thread:
 * the calling thread's current device is set for the call and put back.
 * NULL with the error set (OUT_OF_MEMORY naming `what`). */
UFORM_INTERNAL void *uform_cuda_arena_alloc(uint32_t device, size_t bytes, const char *what);
UFORM_INTERNAL void uform_cuda_arena_free(uint32_t device, void *memory);

/* Attention on this backend from now on: attention.cu's simple FP32 kernels
 * (true) or the BF16 tensor-core ones (false, the default). For tests, which
 * check both against the CPU backend. */
UFORM_INTERNAL void uform_cuda_attention_simple(uform_backend_t *backend, bool simple);
/* The tensor-core forward's query rows a block from now on: 64 (one tile a
 * block, the kernel as first run on a GPU) or 128 (two tiles, the default
 * where the longest segment is longer than 64). The same bits either way;
 * for the tests, which check that, and bench/gpu_attention_bench.c, which
 * times both. */
UFORM_INTERNAL void uform_cuda_attention_query_rows(uform_backend_t *backend, size_t rows);
/* The tensor-core backward's parts a tile pair from now on: 1 (the kernels as
 * first run on a GPU), 2, or 0 for the default, 4 (the scores made and used a
 * quarter of a tile at a time: fewer registers, 3 blocks an SM;
 * attention_mma.cuh). The
 * same bits either way; for the tests, which check that, and
 * bench/gpu_attention_bench.c, which times both. */
UFORM_INTERNAL void uform_cuda_attention_backward_parts(uform_backend_t *backend, size_t parts);
/* The tensor-core backward's dq query rows a block from now on, with four
 * parts: 64 (one tile) or 0 for the default, 128 (two tiles, two row groups a
 * warp, as the forward; attention_mma.cuh) where the longest segment spans
 * more than one tile. With 1 or 2 parts dq takes 64. The same bits either
 * way; for the tests and bench/gpu_attention_bench.c. */
UFORM_INTERNAL void uform_cuda_attention_dq_rows(uform_backend_t *backend, size_t rows);
/* The tensor-core backward's dk, dv keys a block from now on: 128 (two
 * tiles, two row groups a warp, with four parts and dq at 128 rows) or 0 for
 * the default, 64. The same bits either way; for the tests and
 * bench/gpu_attention_bench.c. */
UFORM_INTERNAL void uform_cuda_attention_dkv_rows(uform_backend_t *backend, size_t rows);
/* The column sums' (columns.cu) columns a thread from now on: 1, or 0 for
 * the default, 4 wherever the width and pointers allow 16-byte loads. The
 * same bits either way; for the tests, which check that. */
UFORM_INTERNAL void uform_cuda_column_lanes(uform_backend_t *backend, size_t lanes);
/* The columns a thread the last column sums ran with (1 or 4). */
UFORM_INTERNAL size_t uform_cuda_column_lanes_last(uform_backend_t *backend);
/* The column sums' pass alone, for bench/gpu_columns_bench.c: the column
 * sums of dy [rows, width] added into sums; with `rounded`, dy is also
 * rounded to BF16 into the backend's gradient buffer, as linear_backward's
 * pass does, taken as GELU's output gradient at pre when pre is not NULL
 * (gelu_linear_backward_bf16's), or turned back by the rotary tables when
 * cosines is not NULL (rope_linear_backward_bf16's: width 3H). */
UFORM_INTERNAL void uform_cuda_column_pass(uform_backend_t *backend, const float *dy, const float *pre,
                                           const float *cosines, const float *sines, size_t rows,
                                           size_t width, bool rounded, float *sums);

/* Why this backend's E4M3 products are decoded to BF16 on a GPU with FP8
 * tensor cores (cuBLASLt refused an FP8 product: gemm_fp8.cu), or NULL while
 * they run on the FP8 tensor cores (or never ran). For tests and benchmarks,
 * which must know which rule the outputs follow. */
UFORM_INTERNAL const char *uform_cuda_fp8_refusal(uform_backend_t *backend);
/* Whether the last FP8 product had cuBLASLt apply both scales and the bias
 * (outer-vector scaling, the bias rounded to BF16: gemm_fp8.cu), and why
 * cuBLASLt refused that for a form (0: FP32 out, 1: BF16 out, 2: GELU with
 * BF16 out; NULL: not refused). uform_cuda_fp8_scaled_off(backend, true) makes FP8
 * products take our scales' pass instead, as where cuBLASLt refuses. For
 * the tests, which check both ways. */
UFORM_INTERNAL bool uform_cuda_fp8_scaled(uform_backend_t *backend);
UFORM_INTERNAL const char *uform_cuda_fp8_scaled_refusal(uform_backend_t *backend, int form);
UFORM_INTERNAL void uform_cuda_fp8_scaled_off(uform_backend_t *backend, bool off);
/* Whether the last linear_gelu_bf16 ran cuBLASLt's GELU epilogue (gemm.cu),
 * and, once cuBLASLt refused it, why (NULL: not refused). For the tests. */
UFORM_INTERNAL bool uform_cuda_gelu_epilogue(uform_backend_t *backend);
UFORM_INTERNAL const char *uform_cuda_gelu_epilogue_refusal(uform_backend_t *backend);
/* Whether the last linear_qkv_bf16 had cuBLASLt write its product in BF16
 * (then rotated in place: gemm.cu), and, once cuBLASLt refused that, why
 * (NULL: not refused). For the tests. */
UFORM_INTERNAL bool uform_cuda_bf16_out(uform_backend_t *backend);
UFORM_INTERNAL const char *uform_cuda_bf16_out_refusal(uform_backend_t *backend);

UFORM_INTERNAL extern const uform_backend_ops_t uform_cuda_backend_ops;

#ifdef __cplusplus
}
#endif

#endif /* UFORM_CUDA_BACKEND_H */
