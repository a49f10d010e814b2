/* amx.c: the AMX class: SAPPHIRE's arithmetic (BF16 products of activations
 * rounded to nearest even, FP32 sums) with the GEMMs on AMX tiles
 * (TDPBF16PS, amx_kernel.h); attention and everything else as SAPPHIRE.
 *
 * Run and measured on a 2-core Xeon with AMX (docs/benchmarks-amx.md), where it
 * is the automatic choice. test_kernels also runs its packing, layouts and
 * edges under a C model of the four tile instructions (UFORM_AMX_EMULATE) on
 * any AVX-512 BF16 machine; that model is the SDM's pseudo-code, which the
 * hardware's rounding inside a tile step does not follow bit for bit, so the
 * emulated runs are held to the BF16 bounds, as the real ones are.
 *
 * Each thread loads the tile configuration before its tasks of a product and
 * releases the tiles after (uform_gemm_class_t's hooks): one LDTILECFG per
 * thread and product, not one per kernel call. E4M3 matrices are decoded to
 * BF16 panels by the shared driver (gemm.c) and run on the tiles too. */
#include "backend/cpu/amx_kernel.h"
#include "backend/cpu/kernels.h"

#if defined(__x86_64__)

/* LDTILECFG's 64 bytes: palette 1, every tile 16 rows of 64 bytes. */
typedef struct {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t bytes_per_row[16];
    uint8_t rows[16];
} uform_amx_config_t;

static UFORM_AMX_TARGET void uform_amx_tasks_begin(void) {
    _Alignas(64) uform_amx_config_t config;
    memset(&config, 0, sizeof(config));
    config.palette = 1;
    for (size_t t = 0; t <= UFORM_AMX_B1_TILE; t++) {
        config.rows[t] = UFORM_AMX_MR;
        config.bytes_per_row[t] = UFORM_AMX_TILE_BYTES;
    }
    /* Not _tile_loadconfig: GCC 12 took its builtin to read only what it
     * can see, dropped the row and width stores above at -O2 and loaded an
     * all-zero configuration, so the first tileloadd raised #UD (SIGILL).
     * The "m" operand says the instruction reads all 64 bytes. */
    __asm__ volatile("ldtilecfg %0" : : "m"(config));
}

static UFORM_AMX_TARGET void uform_amx_tasks_end(void) { _tile_release(); }

static const uform_gemm_class_t uform_amx_gemm =
    UFORM_AMX_GEMM_CLASS(uform_amx_tasks_begin, uform_amx_tasks_end);

UFORM_AMX_TABLE_FUNCTIONS(uform_amx_gemm)

const uform_cpu_kernels_t uform_cpu_kernels_amx = {
    .cpu_class = UFORM_CPU_CLASS_AMX,
    .name = "amx",
    .pack = uform_amx_pack,
    .pack_e4m3 = uform_amx_pack_e4m3,
    .gemm = uform_amx_gemm_run,
    .attention = uform_attention_bf16,
};

#endif /* __x86_64__ */
