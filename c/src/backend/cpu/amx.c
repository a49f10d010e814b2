/* amx.c: the AMX class: SAPPHIRE's arithmetic (BF16 products of activations
 * rounded to nearest even, FP32 sums) with the GEMMs on AMX tiles
 * (TDPBF16PS, amx_kernel.h) and attention's two products on them too
 * (attention_amx.h, SAPPHIRE's softmax); everything else as SAPPHIRE.
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
#include "backend/cpu/attention_amx.h"
#include "backend/cpu/kernels.h"

#if defined(__x86_64__)

static UFORM_AMX_TARGET void uform_amx_tasks_begin(void) { UFORM_AMX_CONFIGURE(); }

static UFORM_AMX_TARGET void uform_amx_tasks_end(void) { UFORM_AMX_RELEASE(); }

static const uform_gemm_class_t uform_amx_gemm =
    UFORM_AMX_GEMM_CLASS(uform_amx_tasks_begin, uform_amx_tasks_end);

UFORM_AMX_TABLE_FUNCTIONS(uform_amx_gemm)

const uform_cpu_kernels_t uform_cpu_kernels_amx = {
    .cpu_class = UFORM_CPU_CLASS_AMX,
    .name = "amx",
    .pack = uform_amx_pack,
    .pack_e4m3 = uform_amx_pack_e4m3,
    .gemm = uform_amx_gemm_run,
    .attention = uform_attention_amx,
};

#endif /* __x86_64__ */
