/* detect.c: which CPU classes this machine and OS can run, and the tables.
 * x86-64 asks cpuid and xgetbv (the OS must save the vector state); aarch64
 * asks the kernel's hardware capability words (getauxval), which the kernel
 * sets only for what it also saves and restores (SVE included). */
#include "backend/cpu/kernels.h"

#include <stdatomic.h>
#include <stdlib.h>

#if defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP_FP
#define HWCAP_FP (1UL << 0)
#endif
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1UL << 1)
#endif
#ifndef HWCAP_SVE
#define HWCAP_SVE (1UL << 22)
#endif
#ifndef HWCAP2_SVEBF16
#define HWCAP2_SVEBF16 (1UL << 12)
#endif
#ifndef HWCAP2_BF16
#define HWCAP2_BF16 (1UL << 14)
#endif
#endif

#if defined(__x86_64__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>

/* Linux: a process asks once for the right to use AMX's tile data. */
#define UFORM_ARCH_REQ_XCOMP_PERM 0x1023
#define UFORM_XFEATURE_XTILEDATA 18
#endif

typedef struct {
    bool avx2_fma;     /* AVX, AVX2, FMA, F16C (every AVX2 CPU has it), and the OS saves YMM */
    bool avx512;       /* AVX512F, and the OS saves ZMM and the mask registers */
    bool avx512_bf16;  /* + AVX512BW, AVX512VL, AVX512_BF16 */
    bool amx;          /* + AMX-TILE, AMX-BF16, and the OS saves the tile state */
} uform_x86_features_t;

static uint64_t uform_xgetbv0(void) {
    uint32_t low, high;
    __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
    return (uint64_t)high << 32 | low;
}

static uform_x86_features_t uform_x86_features(void) {
    uform_x86_features_t features = {false, false, false, false};
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return features;
    bool fma = ecx >> 12 & 1, osxsave = ecx >> 27 & 1, avx = ecx >> 28 & 1, f16c = ecx >> 29 & 1;
    if (!osxsave || !avx) return features; /* xgetbv needs OSXSAVE */
    uint64_t xcr0 = uform_xgetbv0();
    bool os_ymm = (xcr0 & 0x6) == 0x6;    /* SSE and AVX state */
    bool os_zmm = (xcr0 & 0xe6) == 0xe6;  /* + opmask, ZMM0-15 upper halves, ZMM16-31 */
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf < 7) return features;
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    unsigned max_subleaf = eax;
    bool avx2 = ebx >> 5 & 1, avx512f = ebx >> 16 & 1, avx512bw = ebx >> 30 & 1,
         avx512vl = ebx >> 31 & 1;
    bool amx_bf16 = edx >> 22 & 1, amx_tile = edx >> 24 & 1;
    bool os_tiles = (xcr0 & 0x60000) == 0x60000; /* XTILECFG and XTILEDATA */
    bool bf16 = false;
    if (max_subleaf >= 1) {
        __cpuid_count(7, 1, eax, ebx, ecx, edx);
        bf16 = eax >> 5 & 1;
    }
    features.avx2_fma = os_ymm && avx2 && fma && f16c;
    features.avx512 = features.avx2_fma && os_zmm && avx512f;
    features.avx512_bf16 = features.avx512 && avx512bw && avx512vl && bf16;
    features.amx = features.avx512_bf16 && amx_bf16 && amx_tile && os_tiles;
    return features;
}

/* The features, asked once: cpuid and xgetbv trap to the hypervisor in a
 * virtual machine (microseconds each), and a pinned class is checked on every
 * product (sgemm.c). Bit 0 says the word is filled; the answer is the same in
 * every thread, so a race only asks twice. */
static uform_x86_features_t uform_x86_features_once(void) {
    static atomic_uint cached;
    unsigned word = atomic_load_explicit(&cached, memory_order_relaxed);
    if (!word) {
        uform_x86_features_t f = uform_x86_features();
        word = 1u | (unsigned)f.avx2_fma << 1 | (unsigned)f.avx512 << 2 |
               (unsigned)f.avx512_bf16 << 3 | (unsigned)f.amx << 4;
        atomic_store_explicit(&cached, word, memory_order_relaxed);
    }
    return (uform_x86_features_t){word >> 1 & 1, word >> 2 & 1, word >> 3 & 1, word >> 4 & 1};
}
#endif

bool uform_cpu_class_supported(uform_cpu_class_t cpu_class) {
    if (cpu_class == UFORM_CPU_CLASS_SERIAL) return true;
#if defined(__x86_64__)
    uform_x86_features_t features = uform_x86_features_once();
    switch (cpu_class) {
    case UFORM_CPU_CLASS_HASWELL: return features.avx2_fma;
    case UFORM_CPU_CLASS_SKYLAKE: return features.avx512;
    case UFORM_CPU_CLASS_SAPPHIRE: return features.avx512_bf16;
    case UFORM_CPU_CLASS_AMX:
#if defined(__linux__)
        /* the permission is per process and asking again is harmless */
        return features.amx &&
               syscall(SYS_arch_prctl, UFORM_ARCH_REQ_XCOMP_PERM, UFORM_XFEATURE_XTILEDATA) == 0;
#else
        return false; /* how another OS grants the tile state is not written yet */
#endif
    default: return false;
    }
#elif defined(__aarch64__)
    unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
    bool neon = (hwcap & HWCAP_FP) && (hwcap & HWCAP_ASIMD);
    bool sve = neon && (hwcap & HWCAP_SVE);
    switch (cpu_class) {
    case UFORM_CPU_CLASS_NEON: return neon;
    case UFORM_CPU_CLASS_SVE: return sve;
    case UFORM_CPU_CLASS_NEON_BF16: return neon && (hwcap2 & HWCAP2_BF16);
    case UFORM_CPU_CLASS_SVE_BF16: return sve && (hwcap2 & HWCAP2_SVEBF16);
    default: return false;
    }
#else
    return false;
#endif
}

uform_cpu_class_t uform_cpu_class_best(void) {
    /* BF16 products first where the CPU has them (AMX's tiles before
     * SAPPHIRE's vdpbf16ps: 3.8x its text_encode on a 2-core Xeon with AMX,
     * docs/benchmarks-amx.md); on Arm SVE before NEON: at 128 bits as fast,
     * wider where the machine has more, and the same bits (neon.c,
     * neon_bf16.c). */
    static const uform_cpu_class_t order[] = {
        UFORM_CPU_CLASS_AMX,       UFORM_CPU_CLASS_SAPPHIRE,  UFORM_CPU_CLASS_SKYLAKE,
        UFORM_CPU_CLASS_HASWELL,
        UFORM_CPU_CLASS_SVE_BF16,  UFORM_CPU_CLASS_NEON_BF16, UFORM_CPU_CLASS_SVE,
        UFORM_CPU_CLASS_NEON};
    for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++)
        if (uform_cpu_class_supported(order[i]) && uform_cpu_kernels_for(order[i])) return order[i];
    return UFORM_CPU_CLASS_SERIAL;
}

const uform_cpu_kernels_t *uform_cpu_kernels_for(uform_cpu_class_t cpu_class) {
    switch (cpu_class) {
    case UFORM_CPU_CLASS_SERIAL: return &uform_cpu_kernels_serial;
#if defined(__x86_64__)
    case UFORM_CPU_CLASS_HASWELL: return &uform_cpu_kernels_haswell;
    case UFORM_CPU_CLASS_SKYLAKE: return &uform_cpu_kernels_skylake;
    case UFORM_CPU_CLASS_SAPPHIRE: return &uform_cpu_kernels_sapphire;
    case UFORM_CPU_CLASS_AMX: return &uform_cpu_kernels_amx;
#endif
#if defined(__aarch64__)
    case UFORM_CPU_CLASS_NEON: return &uform_cpu_kernels_neon;
    case UFORM_CPU_CLASS_SVE: return &uform_cpu_kernels_sve;
    case UFORM_CPU_CLASS_NEON_BF16: return &uform_cpu_kernels_neon_bf16;
    case UFORM_CPU_CLASS_SVE_BF16: return &uform_cpu_kernels_sve_bf16;
#endif
    default: return NULL;
    }
}

const char *uform_cpu_class_name(uform_cpu_class_t cpu_class) {
    switch (cpu_class) {
    case UFORM_CPU_CLASS_AUTO: return "auto";
    case UFORM_CPU_CLASS_SERIAL: return "serial";
    case UFORM_CPU_CLASS_HASWELL: return "haswell";
    case UFORM_CPU_CLASS_SKYLAKE: return "skylake";
    case UFORM_CPU_CLASS_SAPPHIRE: return "sapphire";
    case UFORM_CPU_CLASS_NEON: return "neon";
    case UFORM_CPU_CLASS_SVE: return "sve";
    case UFORM_CPU_CLASS_NEON_BF16: return "neon_bf16";
    case UFORM_CPU_CLASS_SVE_BF16: return "sve_bf16";
    case UFORM_CPU_CLASS_AMX: return "amx";
    }
    return "unknown";
}

void uform_packed_free(uform_packed_t *packed) {
    if (!packed) return;
    uform_free_aligned(packed->data);
    memset(packed, 0, sizeof(*packed));
}
