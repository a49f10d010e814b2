/* gemm.h: the blocked GEMM driver every CPU class shares.
 *
 * A class supplies a microkernel (rows x nr outputs, rows <= mr, one function
 * per row count) and a routine that packs a block of x rows into the kernel's
 * A panel; the driver does the packing of W, the tiling, the threads and the
 * edges. W is packed once into panels of nr columns (n padded with zeros to a
 * multiple of nr), k contiguous inside a panel, kept as BF16 bits:
 *
 *   PLAIN   panel[p][c]           = W[c][p]                   (serial)
 *   HALVES  panel[p][2l + h]      = W[l + h * nr/2][p]        (FP32 SIMD: one
 *           32-bit lane holds columns l and l + nr/2, so a shift and a mask
 *           widen a whole vector of BF16 to two vectors of FP32)
 *   PAIRS   panel[p/2][c][p & 1]  = W[c][p], k padded to even (vdpbf16ps)
 *
 * E4M3 matrices (packed by uform_gemm_pack_e4m3) keep one byte per weight,
 * PLAIN for the FP32 classes and PAIRS for the BF16 ones, and per panel the
 * scale of each slot. A product of up to a text's rows (1 to
 * uform_gemm_e4m3_local_rows) takes all its rows in one block: each task
 * decodes its panels, a k block at a time, into its thread's L2 tile, and
 * every row sweeps them; where the class has kernels that read E4M3 panels
 * (kernels_e4m3: SAPPHIRE with VBMI, SKYLAKE), its first row group's kernels
 * do that decoding as they multiply, writing the tile for the rows after it
 * (a short query's products: the codes' trip from memory overlaps the
 * products instead of preceding them). A larger one decodes its panels once, before its tasks,
 * into a buffer of the class's compute type (e4m3_decode.h: the FP32 classes
 * get FP32 in PLAIN order, read by kernels_f32, except HASWELL, whose BF16
 * kernels read BF16 in its HALVES layout (e4m3_halves); the BF16 classes BF16
 * PAIRS, read by their usual kernels), up to uform_gemm_decoded_max bytes at a time
 * (a larger matrix goes in passes of whole panels); the tasks then block and
 * sweep as BF16 ones do. Where no such buffer can be had, each task decodes
 * its panels' k blocks into an L1 tile on its stack instead (slower: narrow
 * tasks, short k blocks; the same bits).
 * The scales are powers of two, so a decoded weight is exactly the
 * dequantized value in BF16 and in FP32: an E4M3 matrix multiplies exactly as
 * the BF16 matrix of its dequantized weights, bit for bit.
 *
 * Determinism: a kernel computes each output as one chain over k in order
 * (FMA or mul+add, the same in every row-count variant), starting from +0,
 * storing and reloading the partial sum between k blocks (exact), adding the
 * bias once at the end. So the bits of y[i, j] do not depend on m, on the
 * row's slot in a tile, on the tiling or on the thread count. */
#ifndef UFORM_CPU_GEMM_H
#define UFORM_CPU_GEMM_H

#include "backend/cpu/e4m3_decode.h"
#include "backend/cpu/kernels.h"

#define UFORM_GEMM_MR_MAX 16
/* Columns per W panel at most: 2 x 64 FP32 lanes of a 2048-bit SVE vector. */
#define UFORM_GEMM_NR_MAX 128
/* Bytes of the A panel buffer each task keeps on its stack. */
#define UFORM_GEMM_A_BYTES 16384
/* Bytes of A packed once before a parallel GEMM's tasks, at most (gemm.c):
 * 1024 panels, e.g. 14336 rows of k = 512 or 3584 of k = 2048. */
#define UFORM_GEMM_PACKED_A_MAX (16u << 20)
/* Bytes of the E4M3 panels a product decodes before its tasks, at most: every
 * matrix of a hidden-512 model in one pass (FP32: 2048 x 512 is 4 MiB). */
#define UFORM_GEMM_DECODED_MAX (8u << 20)
/* That bound as the GEMM reads it; tests lower it to run the passes and the
 * tile fallback (below one panel's bytes). Not for callers. */
UFORM_INTERNAL extern size_t uform_gemm_decoded_max;
/* Bytes of the decoded W tile an E4M3 task of the fallback keeps on its stack
 * (L1-sized). */
#define UFORM_GEMM_TILE_BYTES 32768
/* A fallback E4M3 task's k block, and its rows (each decoded tile is swept by all of
 * them): on the 2-core Zen 3, 64 KiB-256 KiB tiles or other blocks measured
 * within noise of these (docs/benchmarks.md, "E4M3"). */
#define UFORM_GEMM_E4M3_KC 128
#define UFORM_GEMM_E4M3_MC 192
/* Products of 1 to this many rows of E4M3 weights (one text of up to 512
 * tokens) decode per task instead, into a tile of this many bytes per
 * thread (L2-sized: whole k blocks of several panels), with all rows in one
 * block (gemm.c). */
#define UFORM_GEMM_E4M3_LOCAL_ROWS 512
/* That bound as the GEMM reads it; tests set 0 to run the other paths at
 * these sizes. Not for callers. */
UFORM_INTERNAL extern size_t uform_gemm_e4m3_local_rows;
/* Whether those products' first row group runs the class's kernels that
 * read E4M3 panels directly (kernels_e4m3), where it has them; tests turn it
 * off to run the tile decoder there. Not for callers. */
UFORM_INTERNAL extern bool uform_gemm_e4m3_direct_kernels;
#define UFORM_GEMM_E4M3_LOCAL_TILE_BYTES (256u << 10)

typedef enum { UFORM_GEMM_PLAIN, UFORM_GEMM_HALVES, UFORM_GEMM_PAIRS } uform_gemm_layout_t;

/* c[rows, panels * nr] = (first ? 0 : c) + a . b over kc steps of k, then
 * + bias[0 .. panels * nr) when bias is not NULL (the last k block only).
 * a comes from pack_a with the same row count; b points at the first panel's
 * row of k where the block starts, the next panels are b_stride further on.
 * `panels` is 1 for kernels[] and wide_panels for wide[]. b holds BF16 bits in
 * the class's layout, or FP32 in PLAIN order for kernels_f32[] and wide_f32[];
 * b_stride counts its elements. A one-panel kernel (kernels[]) reads no other
 * panel: there b_stride, when not 0, says where the sweep's next panel is, so
 * that the kernel may prefetch it (SAPPHIRE, SKYLAKE and HASWELL do). */
typedef void (*uform_microkernel_fn_t)(size_t kc, const void *a, const void *b,
                                       size_t b_stride, float *c, size_t c_stride, int first,
                                       const float *bias);
/* c[2 mr rows, nr] as a kernel of mr rows would compute it for two full row
 * groups at once, a0 (rows 0 to mr - 1) and a1 (the next mr): one panel,
 * the same chains over k, so the same bits; c_stride apart, in place; no
 * bias (a class with pair kernels has add_bias). */
/* A one-panel kernel that reads the panel's E4M3 codes in the class's E4M3
 * layout (`codes` at the block's first row of the panel: a pair of k for
 * PAIRS, a step of k for PLAIN; `scales` the panel's slot scales) and
 * decodes them in registers as the class's tile decoder does, so it gives
 * exactly the decoded tile's kernel's results; `next`, when not NULL, the
 * sweep's next panel at the same k, to prefetch; `decoded`, when not NULL
 * (64-byte aligned), receives the decoded block as the tile decoder writes
 * it, for the other row groups' usual kernels. */
typedef void (*uform_e4m3_kernel_fn_t)(size_t kc, const void *a, const uint8_t *codes,
                                       const float *scales, const uint8_t *next, void *decoded,
                                       float *c, size_t c_stride, int first, const float *bias);
typedef void (*uform_pair_kernel_fn_t)(size_t kc, const void *a0, const void *a1, const void *b,
                                       float *c, size_t c_stride, int first);
/* Packs x[rows, kc] (rows x_stride floats apart) into the A panel layout of
 * the kernel for `rows` rows; PAIRS classes pad an odd kc with a zero. */
typedef void (*uform_pack_a_fn_t)(const float *x, size_t x_stride, size_t rows, size_t kc, void *a);

typedef struct {
    size_t mr;                    /* rows per kernel call at most */
    size_t nr;                    /* columns per W panel, <= UFORM_GEMM_NR_MAX */
    size_t kc;                    /* k per block (even for PAIRS) */
    size_t a_bytes;               /* bytes per packed A element per k: 4 FP32, 2 BF16 */
    uform_gemm_layout_t layout;
    uform_pack_a_fn_t pack_a;
    uform_microkernel_fn_t kernels[UFORM_GEMM_MR_MAX + 1];  /* [rows], 1 <= rows <= mr */
    /* For a few rows one panel gives too few independent sums to hide the
     * latency; these kernels sweep wide_panels panels at once (NULL: none). */
    size_t wide_panels;
    uform_microkernel_fn_t wide[UFORM_GEMM_MR_MAX + 1];
    /* Two full row groups per call where the class's W traffic bounds it
     * (AMX; NULL: none), swept across the panels in place of the kernels. */
    uform_pair_kernel_fn_t pair;
    /* y[r, j] += bias[j] over rows x cols, y_stride apart: where set, the
     * kernels get no bias and the driver adds it over each sweep's rows
     * after it (AMX: vector loads of a tile store's result wait for it) */
    void (*add_bias)(float *y, size_t rows, size_t cols, size_t y_stride, const float *bias);
    /* FP32 classes: the same kernels reading a decoded FP32 tile (E4M3). */
    uform_microkernel_fn_t kernels_f32[UFORM_GEMM_MR_MAX + 1];
    uform_microkernel_fn_t wide_f32[UFORM_GEMM_MR_MAX + 1];
    /* The E4M3 tile decoder (e4m3_decode.h): FP32 out for the FP32 classes,
     * BF16 for PAIRS; NULL: the portable one. */
    uform_e4m3_decode_fn_t decode_e4m3;
    /* An FP32 class whose decoder writes BF16 in its HALVES layout instead,
     * read by its BF16 kernels (HASWELL: half the tile's bytes to write and
     * read back). */
    bool e4m3_halves;
    /* BF16 weights are packed with k padded with zeros to a multiple of this
     * (0: what the layout needs, 2 for PAIRS): AMX reads whole tile steps. */
    size_t k_align;
    /* Per-thread state the kernels need (AMX: the tile configuration), set up
     * before a thread runs its tasks of a product and released after; NULL:
     * none. */
    void (*tasks_begin)(void);
    void (*tasks_end)(void);
    /* With several threads and enough rows, a task is one row group swept
     * across every panel of the pass (gemm.c, uform_gemm_blocking): for the
     * classes whose one-panel kernels prefetch the next panel, so that W
     * streams from L3 behind the products; false: tiles that keep a W block
     * in L2 for several row groups (AMX, bounded by its tile loads, and the
     * Arm classes, whose kernels do not prefetch). */
    bool row_group_tasks;
    /* Kernels reading E4M3 panels directly (NULL: none): the first row group
     * of a product of up to uform_gemm_e4m3_local_rows rows runs them,
     * writing the decoded tile for the others as it goes (gemm.c); and
     * whether they take a matrix of these `count` slot scales on this CPU
     * (NULL: always). */
    uform_e4m3_kernel_fn_t kernels_e4m3[UFORM_GEMM_MR_MAX + 1];
    bool (*e4m3_kernels_take)(const float *scales, size_t count);
} uform_gemm_class_t;

/* pack_a for FP32 kernels: a[p * rows + r] = x[r, p]. */
UFORM_INTERNAL void uform_gemm_pack_a_f32(const float *x, size_t x_stride, size_t rows, size_t kc,
                                          void *a);
/* pack_a for PAIRS kernels (portable): a[p2 * rows + r] = bf16(x[r, 2 p2]) |
 * bf16(x[r, 2 p2 + 1]) << 16, rounded as uform_f32_to_bf16, an odd kc padded with 0. */
UFORM_INTERNAL void uform_gemm_pack_a_bf16_pairs(const float *x, size_t x_stride, size_t rows,
                                                 size_t kc, void *a);
UFORM_INTERNAL uform_status_t uform_gemm_pack(const uform_gemm_class_t *gemm_class,
                                              const uint16_t *weights, size_t n, size_t k,
                                              uform_packed_t *packed);
/* E4M3: codes [n, k] and one power-of-two scale per row (backend.h pack_e4m3). */
UFORM_INTERNAL uform_status_t uform_gemm_pack_e4m3(const uform_gemm_class_t *gemm_class,
                                                   const uint8_t *codes, const float *scales,
                                                   size_t n, size_t k, uform_packed_t *packed);
/* Reads them back out of any class's E4M3 packing (codes [n, k], scales [n]). */
UFORM_INTERNAL uform_status_t uform_gemm_unpack_e4m3(const uform_packed_t *packed, uint8_t *codes,
                                                     float *scales);
UFORM_INTERNAL void uform_gemm_run(const uform_gemm_class_t *gemm_class, uform_executor_t *executor,
                                   const uform_packed_t *w, const float *x, size_t x_stride,
                                   size_t m, const float *bias, uform_gemm_epilogue_t epilogue,
                                   float *y, size_t y_stride);

#endif /* UFORM_CPU_GEMM_H */
