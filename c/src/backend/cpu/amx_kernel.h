/* amx_kernel.h: the AMX class's GEMM pieces (amx.c): the activation packing,
 * the tile kernels and the gemm class of the shared driver (gemm.h).
 *
 * Written once over four tile operations, so the same source builds twice:
 * amx.c with the instructions (tileloadd, tilestored, tilezero, tdpbf16ps)
 * and tests/c/test_kernels.c with UFORM_AMX_EMULATE defined, where they are
 * C functions over a thread-local tile file. The emulated build runs the
 * class's packing, layouts, edges and the driver's tiling on any AVX-512 BF16
 * machine; only the four instructions themselves need an AMX machine.
 *
 * Layouts. W is packed as SAPPHIRE packs it (PAIRS, 32 columns per panel: row
 * p2 of a panel holds the pairs (W[c][2 p2], W[c][2 p2 + 1]) of its 32
 * columns, 128 bytes), k padded with zeros to a multiple of 32: 16 pair rows
 * of a panel's first or last 16 columns are exactly one B tile (16 rows of 64
 * bytes, 128 bytes apart). A is packed row-major, as an A tile wants it: up to
 * 16 rows, each the row's BF16 pairs along k (rounded as uform_f32_to_bf16),
 * zero-padded to a multiple of 32 k and to 16 rows.
 *
 * Arithmetic. TDPBF16PS adds to each FP32 sum, pair after pair of k in order,
 * the two products of a pair (each product of two BF16 is exact in FP32):
 * every output is one chain over k in order whatever its row's slot in a
 * tile, stored and reloaded between k blocks (exact), the bias added once at
 * the end, so the determinism contract of kernels.h holds. The instructions
 * treat subnormal inputs and results as zero, which SAPPHIRE does not: the two
 * classes agree within the BF16 tolerance, not bit for bit. */
#ifndef UFORM_CPU_AMX_KERNEL_H
#define UFORM_CPU_AMX_KERNEL_H

#if defined(__x86_64__)
#include "backend/cpu/bf16_avx512.h"
#include "backend/cpu/e4m3_decode.h"
#include "backend/cpu/gemm.h"

#include <immintrin.h>
#include <string.h>

#define UFORM_AMX_MR 16          /* rows of a tile */
#define UFORM_AMX_NR 32          /* columns per W panel: two 16-column C tiles */
#define UFORM_AMX_K_STEP 32      /* k per tile step: 16 pairs, 64 bytes of a tile row */
#define UFORM_AMX_WIDE 2         /* panels per wide kernel call: 4 C tiles */
#define UFORM_AMX_TILE_BYTES 64  /* bytes per tile row (every tile: 16 rows of 64 bytes) */

/* Tiles: 0-3 the sums (two per panel), 4 the A step, 5 and 6 a panel's B step;
 * the pair kernel's second A step in 7. */
#define UFORM_AMX_A_TILE 4
#define UFORM_AMX_B0_TILE 5
#define UFORM_AMX_B1_TILE 6
#define UFORM_AMX_A1_TILE 7

#if defined(UFORM_AMX_EMULATE)
/* ---- the tile instructions in C (tests only) ----------------------------- */

#include <math.h>

#define UFORM_AMX_TARGET UFORM_SAPPHIRE_TARGET
static _Thread_local unsigned char uform_amx_tile_file[8][UFORM_AMX_MR][UFORM_AMX_TILE_BYTES];
/* Rows of the kernel call's A tile that hold activations: the emulated
 * TDPBF16PS skips the padding rows past them, whose sums no kernel keeps (a
 * row alone would otherwise cost the tests 16 rows of scalar products). */
static _Thread_local size_t uform_amx_emulated_rows = UFORM_AMX_MR;

static void uform_amx_emulated_zero(int t) { memset(uform_amx_tile_file[t], 0, sizeof(uform_amx_tile_file[t])); }
static void uform_amx_emulated_load(int t, const void *base, size_t stride) {
    for (size_t r = 0; r < UFORM_AMX_MR; r++)
        memcpy(uform_amx_tile_file[t][r], (const unsigned char *)base + r * stride, UFORM_AMX_TILE_BYTES);
}
static void uform_amx_emulated_store(int t, void *base, size_t stride) {
    for (size_t r = 0; r < UFORM_AMX_MR; r++)
        memcpy((unsigned char *)base + r * stride, uform_amx_tile_file[t][r], UFORM_AMX_TILE_BYTES);
}
static float uform_amx_emulated_bf16(const unsigned char *row, size_t index) {
    uint16_t bits;
    memcpy(&bits, row + 2 * index, sizeof(bits));
    return uform_bf16_to_f32(bits);
}
/* The SDM's TDPBF16PS: for each row m, pair k in order, column n:
 * c[m][n] += a[m][2k] b[k][2n], then += a[m][2k + 1] b[k][2n + 1]. */
/* (with the class's target, so fmaf is the instruction, not a libm call: the
 * emulation runs only where SAPPHIRE's packing runs) */
static UFORM_SAPPHIRE_TARGET void uform_amx_emulated_dp(int c, int a, int b) {
    float bs[16][32]; /* b's tile widened once (the emulation's cost is the tests' time) */
    for (size_t k = 0; k < 16; k++)
        for (size_t e = 0; e < 32; e++) bs[k][e] = uform_amx_emulated_bf16(uform_amx_tile_file[b][k], e);
    for (size_t m = 0; m < uform_amx_emulated_rows; m++) {
        float sums[16], as[32];
        memcpy(sums, uform_amx_tile_file[c][m], sizeof(sums));
        for (size_t e = 0; e < 32; e++) as[e] = uform_amx_emulated_bf16(uform_amx_tile_file[a][m], e);
        for (size_t k = 0; k < 16; k++)
            for (size_t n = 0; n < 16; n++) {
                sums[n] = fmaf(as[2 * k], bs[k][2 * n], sums[n]);
                sums[n] = fmaf(as[2 * k + 1], bs[k][2 * n + 1], sums[n]);
            }
        memcpy(uform_amx_tile_file[c][m], sums, sizeof(sums));
    }
}
#define UFORM_AMX_ZERO(t) uform_amx_emulated_zero(t)
#define UFORM_AMX_LOAD(t, base, stride) uform_amx_emulated_load(t, base, stride)
#define UFORM_AMX_STORE(t, base, stride) uform_amx_emulated_store(t, base, stride)
#define UFORM_AMX_DP(c, a, b) uform_amx_emulated_dp(c, a, b)
#define UFORM_AMX_EMULATED_ROWS(rows) (uform_amx_emulated_rows = (rows))
#define UFORM_AMX_CONFIGURE() ((void)0)
#define UFORM_AMX_RELEASE() ((void)0)
#else
/* ---- the instructions ------------------------------------------------------ */

#define UFORM_AMX_TARGET \
    __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")))
#define UFORM_AMX_ZERO(t) _tile_zero(t)
#define UFORM_AMX_LOAD(t, base, stride) _tile_loadd(t, base, (long)(stride))
#define UFORM_AMX_STORE(t, base, stride) _tile_stored(t, base, (long)(stride))
#define UFORM_AMX_DP(c, a, b) _tile_dpbf16ps(c, a, b)
#define UFORM_AMX_EMULATED_ROWS(rows) ((void)(rows))

/* LDTILECFG's 64 bytes: palette 1, every tile 16 rows of 64 bytes. */
typedef struct {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t bytes_per_row[16];
    uint8_t rows[16];
} uform_amx_config_t;

static inline __attribute__((always_inline)) UFORM_AMX_TARGET void uform_amx_configure(void) {
    _Alignas(64) uform_amx_config_t config;
    memset(&config, 0, sizeof(config));
    config.palette = 1;
    for (size_t t = 0; t < 8; t++) {
        config.rows[t] = UFORM_AMX_MR;
        config.bytes_per_row[t] = UFORM_AMX_TILE_BYTES;
    }
    /* Not _tile_loadconfig: GCC 12 took its builtin to read only what it
     * can see, dropped the row and width stores above at -O2 and loaded an
     * all-zero configuration, so the first tileloadd raised #UD (SIGILL).
     * The "m" operand says the instruction reads all 64 bytes. */
    __asm__ volatile("ldtilecfg %0" : : "m"(config));
}
#define UFORM_AMX_CONFIGURE() uform_amx_configure()
#define UFORM_AMX_RELEASE() _tile_release()
#endif

/* GCC's tileloadd is an asm statement that does not say it reads memory:
 * this orders the stores that fill a buffer before the loads that read it. */
#define UFORM_AMX_MEMORY_BARRIER() __asm__ volatile("" ::: "memory")

/* k rounded up to whole tile steps. */
static inline size_t uform_amx_padded_k(size_t kc) {
    return (kc + UFORM_AMX_K_STEP - 1) / UFORM_AMX_K_STEP * UFORM_AMX_K_STEP;
}

/* a[r * padded / 2 + p2] = bf16(x[r, 2 p2]) | bf16(x[r, 2 p2 + 1]) << 16 for
 * r < 16 and k padded to whole steps; rows past `rows` and k past kc zero. */
static UFORM_SAPPHIRE_TARGET void uform_amx_pack_a(const float *x, size_t x_stride, size_t rows,
                                                   size_t kc, void *a) {
    size_t words = uform_amx_padded_k(kc) / 2;
    uint32_t *dst = a;
    for (size_t r = 0; r < UFORM_AMX_MR; r++) {
        uint32_t *row = dst + r * words;
        if (r >= rows) {
            memset(row, 0, words * sizeof(uint32_t));
            continue;
        }
        const float *source = x + r * x_stride;
        size_t p = 0;
        for (; p + 32 <= kc; p += 32) _mm512_storeu_si512(row + p / 2, uform_bf16_pairs32(source + p));
        for (; p < 2 * words; p += 2) {
            uint32_t low = p < kc ? uform_f32_to_bf16(source[p]) : 0;
            uint32_t high = p + 1 < kc ? uform_f32_to_bf16(source[p + 1]) : 0;
            row[p / 2] = low | high << 16;
        }
    }
}

/* One panel's tile step s: its two B tiles (columns 0-15 and 16-31 of 16 pair
 * rows) against the A tile, into sum tiles C0 and C1 (literal numbers: the
 * instructions name their tiles in the asm text). */
#define UFORM_AMX_PANEL_STEP(panel, s, C0, C1)                                                  \
    do {                                                                                        \
        const uint16_t *step_b = (panel) + (s) * 16 * 2 * UFORM_AMX_NR;                        \
        UFORM_AMX_LOAD(UFORM_AMX_B0_TILE, step_b, 2 * UFORM_AMX_NR * sizeof(uint16_t));       \
        UFORM_AMX_LOAD(UFORM_AMX_B1_TILE, step_b + UFORM_AMX_NR, 2 * UFORM_AMX_NR * sizeof(uint16_t)); \
        UFORM_AMX_DP(C0, UFORM_AMX_A_TILE, UFORM_AMX_B0_TILE);                                  \
        UFORM_AMX_DP(C1, UFORM_AMX_A_TILE, UFORM_AMX_B1_TILE);                              \
    } while (0)

/* OP(tile, column) for each accumulator tile of c: tiles 0 and 1 (columns 0
 * and 16), then 2 and 3 (columns 32 and 48) when the kernel is 4 tiles wide.
 * The tile numbers stay literals: the instructions take them as immediates. */
#define UFORM_AMX_EACH_C_TILE(tiles, OP)                                                        \
    do {                                                                                        \
        OP(0, 0);                                                                               \
        OP(1, 16);                                                                              \
        if ((tiles) > 2) {                                                                      \
            OP(2, 32);                                                                          \
            OP(3, 48);                                                                          \
        }                                                                                       \
    } while (0)

/* c[rows, 32 panels] = (first ? 0 : c) + a . b over kc (whole steps: the
 * padding adds zeros); no bias: the class's add_bias adds it after each
 * sweep, so bias is always NULL here. Full tiles of 16 rows load and store c
 * in place; fewer rows go through a 16-row buffer. The tile configuration is
 * the driver's (amx.c, uform_amx_tasks_begin). */
static inline __attribute__((always_inline)) UFORM_AMX_TARGET void
uform_amx_kernel(size_t rows, size_t panels, size_t kc, const void *a_panel, const void *b_panel,
                 size_t b_stride, float *c, size_t c_stride, int first, const float *bias) {
    const unsigned char *a = a_panel;
    const uint16_t *b = b_panel;
    size_t steps = uform_amx_padded_k(kc) / UFORM_AMX_K_STEP, a_row_bytes = steps * UFORM_AMX_TILE_BYTES;
    size_t cols = UFORM_AMX_NR * panels, tiles = 2 * panels;
    _Alignas(64) float buffer[UFORM_AMX_MR * UFORM_AMX_NR * UFORM_AMX_WIDE];
    bool in_place = rows == UFORM_AMX_MR;
    float *out = in_place ? c : buffer;
    size_t out_stride = in_place ? c_stride : UFORM_AMX_NR * UFORM_AMX_WIDE;
    if (!in_place)
        for (size_t r = 0; r < UFORM_AMX_MR; r++)
            for (size_t j = 0; j < cols; j++)
                buffer[r * out_stride + j] = !first && r < rows ? c[r * c_stride + j] : 0.0f;
    UFORM_AMX_MEMORY_BARRIER();
    UFORM_AMX_EMULATED_ROWS(rows);
    size_t row_bytes = out_stride * sizeof(float);
#define UFORM_AMX_ZERO_C(tile, column) UFORM_AMX_ZERO(tile)
#define UFORM_AMX_LOAD_C(tile, column) UFORM_AMX_LOAD(tile, out + (column), row_bytes)
#define UFORM_AMX_STORE_C(tile, column) UFORM_AMX_STORE(tile, out + (column), row_bytes)
    if (in_place && first) UFORM_AMX_EACH_C_TILE(tiles, UFORM_AMX_ZERO_C);
    else UFORM_AMX_EACH_C_TILE(tiles, UFORM_AMX_LOAD_C);
    for (size_t s = 0; s < steps; s++) {
        UFORM_AMX_LOAD(UFORM_AMX_A_TILE, a + s * UFORM_AMX_TILE_BYTES, a_row_bytes);
        UFORM_AMX_PANEL_STEP(b, s, 0, 1);
        if (tiles > 2) UFORM_AMX_PANEL_STEP(b + b_stride, s, 2, 3);
    }
    UFORM_AMX_EACH_C_TILE(tiles, UFORM_AMX_STORE_C);
#undef UFORM_AMX_ZERO_C
#undef UFORM_AMX_LOAD_C
#undef UFORM_AMX_STORE_C
    UFORM_AMX_MEMORY_BARRIER();
    (void)bias;
    if (!in_place)
        for (size_t r = 0; r < rows; r++)
            memcpy(c + r * c_stride, buffer + r * out_stride, cols * sizeof(float));
}

/* The pair kernel: c[32 rows, one panel] = (first ? 0 : c) + a . b over kc
 * (the bias comes after, from add_bias), for two full row groups at once (a0
 * rows 0-15, a1 rows 16-31), in place. Each step loads two A tiles and the
 * panel's two B tiles for four products: one tile load a product where the
 * wide kernel (one A tile, four B tiles) needs 1.25, and the loads bound both
 * (bench/amx_loop_bench.c, W in L2: the wide step 22-26.5 TSC cycles a
 * product, this one 19-21.6, the products alone 11.7; docs/profiles.md).
 * The same chains over k, so the same bits as the one-group kernels. */
static UFORM_AMX_TARGET void uform_amx_pair_kernel(size_t kc, const void *a0_panel, const void *a1_panel,
                                                   const void *b_panel, float *c, size_t c_stride,
                                                   int first) {
    const unsigned char *a0 = a0_panel, *a1 = a1_panel;
    const uint16_t *b = b_panel;
    size_t steps = uform_amx_padded_k(kc) / UFORM_AMX_K_STEP, a_row_bytes = steps * UFORM_AMX_TILE_BYTES;
    size_t row_bytes = c_stride * sizeof(float), b_row_bytes = 2 * UFORM_AMX_NR * sizeof(uint16_t);
    float *c1 = c + UFORM_AMX_MR * c_stride;
    UFORM_AMX_MEMORY_BARRIER();
    UFORM_AMX_EMULATED_ROWS(UFORM_AMX_MR);
    if (first) {
        UFORM_AMX_ZERO(0);
        UFORM_AMX_ZERO(1);
        UFORM_AMX_ZERO(2);
        UFORM_AMX_ZERO(3);
    } else {
        UFORM_AMX_LOAD(0, c, row_bytes);
        UFORM_AMX_LOAD(1, c + 16, row_bytes);
        UFORM_AMX_LOAD(2, c1, row_bytes);
        UFORM_AMX_LOAD(3, c1 + 16, row_bytes);
    }
    for (size_t s = 0; s < steps; s++) {
        const uint16_t *step_b = b + s * 16 * 2 * UFORM_AMX_NR;
        UFORM_AMX_LOAD(UFORM_AMX_A_TILE, a0 + s * UFORM_AMX_TILE_BYTES, a_row_bytes);
        UFORM_AMX_LOAD(UFORM_AMX_B0_TILE, step_b, b_row_bytes);
        UFORM_AMX_LOAD(UFORM_AMX_B1_TILE, step_b + UFORM_AMX_NR, b_row_bytes);
        UFORM_AMX_LOAD(UFORM_AMX_A1_TILE, a1 + s * UFORM_AMX_TILE_BYTES, a_row_bytes);
        UFORM_AMX_DP(0, UFORM_AMX_A_TILE, UFORM_AMX_B0_TILE);
        UFORM_AMX_DP(1, UFORM_AMX_A_TILE, UFORM_AMX_B1_TILE);
        UFORM_AMX_DP(2, UFORM_AMX_A1_TILE, UFORM_AMX_B0_TILE);
        UFORM_AMX_DP(3, UFORM_AMX_A1_TILE, UFORM_AMX_B1_TILE);
    }
    UFORM_AMX_STORE(0, c, row_bytes);
    UFORM_AMX_STORE(1, c + 16, row_bytes);
    UFORM_AMX_STORE(2, c1, row_bytes);
    UFORM_AMX_STORE(3, c1 + 16, row_bytes);
    UFORM_AMX_MEMORY_BARRIER();
}

/* y[r, j] += bias[j] over rows x cols, the driver's pass after a sweep (the
 * class's add_bias): the same sums as the kernels' own epilogue had, whose
 * vector loads right after the tile stores waited for them to reach L1 (a
 * sweep of pair kernels: 27-31 cycles a product with that epilogue, 25-26
 * with this pass, 21-22 with no bias; docs/profiles.md). */
static UFORM_SAPPHIRE_TARGET void uform_amx_add_bias(float *y, size_t rows, size_t cols,
                                                     size_t y_stride, const float *bias) {
    __mmask16 tail = (__mmask16)((1u << (cols % 16)) - 1);
    for (size_t r = 0; r < rows; r++) {
        float *row = y + r * y_stride;
        size_t j = 0;
        for (; j + 16 <= cols; j += 16)
            _mm512_storeu_ps(row + j, _mm512_add_ps(_mm512_loadu_ps(row + j), _mm512_loadu_ps(bias + j)));
        if (tail)
            _mm512_mask_storeu_ps(row + j, tail, _mm512_add_ps(_mm512_maskz_loadu_ps(tail, row + j),
                                                               _mm512_maskz_loadu_ps(tail, bias + j)));
    }
}

#define UFORM_AMX_KERNEL(R, P)                                                                  \
    static UFORM_AMX_TARGET void uform_amx_kernel_##R##x##P(                                    \
        size_t kc, const void *a, const void *b, size_t b_stride, float *c, size_t c_stride,    \
        int first, const float *bias) {                                                         \
        uform_amx_kernel(R, P, kc, a, b, b_stride, c, c_stride, first, bias);                   \
    }
#define UFORM_AMX_KERNELS(R) UFORM_AMX_KERNEL(R, 1) UFORM_AMX_KERNEL(R, 2)
UFORM_AMX_KERNELS(1)
UFORM_AMX_KERNELS(2)
UFORM_AMX_KERNELS(3)
UFORM_AMX_KERNELS(4)
UFORM_AMX_KERNELS(5)
UFORM_AMX_KERNELS(6)
UFORM_AMX_KERNELS(7)
UFORM_AMX_KERNELS(8)
UFORM_AMX_KERNELS(9)
UFORM_AMX_KERNELS(10)
UFORM_AMX_KERNELS(11)
UFORM_AMX_KERNELS(12)
UFORM_AMX_KERNELS(13)
UFORM_AMX_KERNELS(14)
UFORM_AMX_KERNELS(15)
UFORM_AMX_KERNELS(16)

/* The driver's view of the class, less the tile configuration hooks (amx.c
 * sets them; the emulation needs none). */
#define UFORM_AMX_GEMM_CLASS(BEGIN, END)                                                        \
    {                                                                                           \
        .mr = UFORM_AMX_MR,                                                                     \
        .nr = UFORM_AMX_NR,                                                                     \
        .kc = 512, /* 16 rows x 512 k of BF16: the 16 KiB A panel of gemm.h */                  \
        .a_bytes = 2,                                                                           \
        .layout = UFORM_GEMM_PAIRS,                                                             \
        .k_align = UFORM_AMX_K_STEP,                                                            \
        .pack_a = uform_amx_pack_a,                                                             \
        .kernels = {NULL, uform_amx_kernel_1x1, uform_amx_kernel_2x1, uform_amx_kernel_3x1,     \
                    uform_amx_kernel_4x1, uform_amx_kernel_5x1, uform_amx_kernel_6x1,           \
                    uform_amx_kernel_7x1, uform_amx_kernel_8x1, uform_amx_kernel_9x1,           \
                    uform_amx_kernel_10x1, uform_amx_kernel_11x1, uform_amx_kernel_12x1,        \
                    uform_amx_kernel_13x1, uform_amx_kernel_14x1, uform_amx_kernel_15x1,        \
                    uform_amx_kernel_16x1},                                                     \
        .wide_panels = UFORM_AMX_WIDE,                                                          \
        .wide = {NULL, uform_amx_kernel_1x2, uform_amx_kernel_2x2, uform_amx_kernel_3x2,        \
                 uform_amx_kernel_4x2, uform_amx_kernel_5x2, uform_amx_kernel_6x2,              \
                 uform_amx_kernel_7x2, uform_amx_kernel_8x2, uform_amx_kernel_9x2,              \
                 uform_amx_kernel_10x2, uform_amx_kernel_11x2, uform_amx_kernel_12x2,           \
                 uform_amx_kernel_13x2, uform_amx_kernel_14x2, uform_amx_kernel_15x2,           \
                 uform_amx_kernel_16x2},                                                        \
        .pair = uform_amx_pair_kernel,                                                          \
        .add_bias = uform_amx_add_bias,                                                         \
        .decode_e4m3 = uform_e4m3_decode_bf16_avx512, /* E4M3 panels in BF16 PAIRS, as SAPPHIRE */ \
        .tasks_begin = BEGIN,                                                                   \
        .tasks_end = END,                                                                       \
    }

/* The class table's pack, pack_e4m3 and gemm over a gemm class (amx.c's, or
 * the test's emulated one): BF16 matrices, and E4M3 matrices decoded to BF16
 * panels by the driver (k padded to whole steps with zero codes), on the
 * tiles. */
#define UFORM_AMX_TABLE_FUNCTIONS(GEMM_CLASS)                                                   \
    static uform_status_t uform_amx_pack(const uint16_t *weights, size_t n, size_t k,           \
                                         uform_packed_t *packed) {                              \
        return uform_gemm_pack(&(GEMM_CLASS), weights, n, k, packed);                           \
    }                                                                                           \
    static uform_status_t uform_amx_pack_e4m3(const uint8_t *codes, const float *scales,        \
                                              size_t n, size_t k, uform_packed_t *packed) {     \
        return uform_gemm_pack_e4m3(&(GEMM_CLASS), codes, scales, n, k, packed);                \
    }                                                                                           \
    static void uform_amx_gemm_run(uform_executor_t *executor, const uform_packed_t *w,         \
                                   const float *x, size_t x_stride, size_t m,                   \
                                   const float *bias, uform_gemm_epilogue_t epilogue, float *y, \
                                   size_t y_stride) {                                           \
        uform_gemm_run(&(GEMM_CLASS), executor, w, x, x_stride, m, bias, epilogue, y, y_stride); \
    }

#endif /* __x86_64__ */
#endif /* UFORM_CPU_AMX_KERNEL_H */
