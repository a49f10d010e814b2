/* gemm_bench.c: GFLOP/s of each CPU class's GEMM on BF16 and on E4M3 weights
 * (the same matrix quantized as a model load does), and the machine's BF16
 * and FP32 peaks from register-only loops.
 *
 * Build with the library's own flags (kernels pick their ISA by attributes):
 *   gcc -O3 -std=c11 -D_GNU_SOURCE -fno-math-errno -fno-trapping-math -fPIC -Ic/include -Ic/src c/src/core/error.c \
 *       c/src/core/executor.c c/src/core/fp8.c c/src/model/quantize.c c/src/backend/loss_checks.c \
 *       c/src/backend/cpu/\*.c \
 *       bench/gemm_bench.c -lm -lpthread -o /tmp/gemm_bench
 *   /tmp/gemm_bench [class ...]      (default: every class this CPU runs)
 */
#include "backend/cpu/kernels.h"
#include "model/quantize.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#include <x86intrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Repeats fn until `budget` seconds have passed (one warm-up call first) and
 * returns the best seconds per call. */
typedef struct {
    const uform_cpu_kernels_t *kernels;
    uform_executor_t *executor;
    uform_packed_t *packed;
    const float *x, *bias;
    float *y;
    size_t m, n, k;
} gemm_call_t;

static double time_gemm(const gemm_call_t *call, double budget) {
    call->kernels->gemm(call->executor, call->packed, call->x, call->k, call->m, call->bias,
                        UFORM_GEMM_STORE, call->y, call->n);
    double best = 1e30, start = now();
    do {
        double t0 = now();
        call->kernels->gemm(call->executor, call->packed, call->x, call->k, call->m, call->bias,
                            UFORM_GEMM_STORE, call->y, call->n);
        double t = now() - t0;
        if (t < best) best = t;
    } while (now() - start < budget);
    return best;
}

#if defined(__x86_64__)
#define PEAK_ITERATIONS 20000000ull

/* 16 independent accumulators hide the latency; no loads. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), noinline)) static float
peak_bf16(void) {
    __m512 acc[16];
    for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80), b = (__m512bh)_mm512_set1_epi32(0x00010001);
    for (unsigned long long it = 0; it < PEAK_ITERATIONS; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
        __asm__ volatile("" : "+v"(a), "+v"(b));
    }
    __m512 sum = acc[0];
    for (int i = 1; i < 16; i++) sum = _mm512_add_ps(sum, acc[i]);
    return _mm512_reduce_add_ps(sum);
}

__attribute__((target("avx512f"), noinline)) static float peak_fp32(void) {
    __m512 acc[16];
    for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(1e-30f);
    for (unsigned long long it = 0; it < PEAK_ITERATIONS; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) acc[i] = _mm512_fmadd_ps(a, b, acc[i]);
        __asm__ volatile("" : "+v"(a), "+v"(b));
    }
    __m512 sum = acc[0];
    for (int i = 1; i < 16; i++) sum = _mm512_add_ps(sum, acc[i]);
    return _mm512_reduce_add_ps(sum);
}

/* The AMX peak: TDPBF16PS on four independent sum tiles (16 x 16 FP32 each,
 * 16 x 32 BF16 products per instruction), no loads in the loop. The tile
 * configuration is loaded as amx.c loads it (an asm that reads all 64 bytes). */
#define PEAK_AMX_ITERATIONS 2000000ull
__attribute__((target("amx-tile,amx-bf16"), noinline)) static float peak_amx(void) {
    _Alignas(64) struct {
        uint8_t palette, start_row, reserved[14];
        uint16_t bytes_per_row[16];
        uint8_t rows[16];
    } config;
    memset(&config, 0, sizeof(config));
    config.palette = 1;
    for (int t = 0; t < 7; t++) {
        config.rows[t] = 16;
        config.bytes_per_row[t] = 64;
    }
    __asm__ volatile("ldtilecfg %0" : : "m"(config));
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    for (unsigned long long it = 0; it < PEAK_AMX_ITERATIONS; it++) {
        _tile_dpbf16ps(0, 4, 5);
        _tile_dpbf16ps(1, 4, 6);
        _tile_dpbf16ps(2, 4, 5);
        _tile_dpbf16ps(3, 4, 6);
    }
    _Alignas(64) float sums[256];
    _tile_stored(0, sums, 64);
    __asm__ volatile("" ::: "memory");
    _tile_release();
    return sums[0];
}

/* The AVX2 + FMA peak (ymm, 8 lanes): what the HASWELL class can reach. 12
 * accumulators, not 16: with a and b that is 14 of the 16 ymm registers (16
 * would spill), and 12 still hide a 4-5 cycle FMA latency on 2 pipes. */
#define PEAK_AVX2_ACCUMULATORS 12
__attribute__((target("avx2,fma"), noinline)) static float peak_fp32_avx2(void) {
    __m256 acc[PEAK_AVX2_ACCUMULATORS];
    for (int i = 0; i < PEAK_AVX2_ACCUMULATORS; i++) acc[i] = _mm256_setzero_ps();
    __m256 a = _mm256_set1_ps(1.0f), b = _mm256_set1_ps(1e-30f);
    for (unsigned long long it = 0; it < PEAK_ITERATIONS; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < PEAK_AVX2_ACCUMULATORS; i++) acc[i] = _mm256_fmadd_ps(a, b, acc[i]);
        __asm__ volatile("" : "+x"(a), "+x"(b));
    }
    __m256 sum = acc[0];
    for (int i = 1; i < PEAK_AVX2_ACCUMULATORS; i++) sum = _mm256_add_ps(sum, acc[i]);
    float lanes[8];
    _mm256_storeu_ps(lanes, sum);
    return lanes[0];
}

static void report_peak(const char *what, float (*fn)(void), double flops_per_instruction) {
    double t0 = now();
    unsigned long long c0 = __rdtsc();
    volatile float sink = fn();
    (void)sink;
    unsigned long long c1 = __rdtsc();
    double seconds = now() - t0;
    double iterations = fn == peak_amx ? (double)PEAK_AMX_ITERATIONS : (double)PEAK_ITERATIONS;
    double flops = flops_per_instruction * 16.0 * iterations;
    printf("peak %-5s one core: %7.1f GFLOP/s, %5.1f flops per TSC cycle (TSC %.2f GHz)\n", what,
           flops / seconds * 1e-9, flops / (double)(c1 - c0), (double)(c1 - c0) / seconds * 1e-9);
}
#endif

#if defined(__aarch64__)
#define PEAK_ITERATIONS 20000000ull

/* 24 independent NEON accumulators (4 lanes, FMA latency up to 4 cycles on up
 * to 4 pipes) hide the latency; no loads. An SVE core's FP32 peak per cycle
 * is its vector length over 128 times this on the same pipes, which the NEON
 * loop does not show: the report says so. */
__attribute__((noinline)) static float peak_fp32(void) {
    float32x4_t acc[24];
    for (int i = 0; i < 24; i++) acc[i] = vdupq_n_f32(0.0f);
    float32x4_t a = vdupq_n_f32(1.0f), b = vdupq_n_f32(1e-30f);
    for (unsigned long long it = 0; it < PEAK_ITERATIONS; it++) {
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++) acc[i] = vfmaq_f32(acc[i], a, b);
        __asm__ volatile("" : "+w"(a), "+w"(b));
    }
    float32x4_t sum = acc[0];
    for (int i = 1; i < 24; i++) sum = vaddq_f32(sum, acc[i]);
    return vaddvq_f32(sum);
}

static void report_peak(const char *what, float (*fn)(void), double flops_per_iteration) {
    double t0 = now();
    volatile float sink = fn();
    (void)sink;
    double seconds = now() - t0;
    double flops = flops_per_iteration * (double)PEAK_ITERATIONS;
    printf("peak %-5s one core: %7.1f GFLOP/s (NEON, 128-bit)\n", what, flops / seconds * 1e-9);
}
#endif

int main(int argc, char **argv) {
    static const uform_cpu_class_t all[] = {UFORM_CPU_CLASS_SERIAL, UFORM_CPU_CLASS_HASWELL,
                                            UFORM_CPU_CLASS_SKYLAKE, UFORM_CPU_CLASS_SAPPHIRE,
                                            UFORM_CPU_CLASS_NEON, UFORM_CPU_CLASS_SVE,
                                            UFORM_CPU_CLASS_NEON_BF16, UFORM_CPU_CLASS_SVE_BF16,
                                            UFORM_CPU_CLASS_AMX};
    static const size_t ms[] = {1, 128, 300, 4096}; /* 128: about one text of the benchmark */
    static const size_t nks[][2] = {{1536, 512}, {2048, 512}, {512, 2048}};
    static const size_t threads[] = {1, 2};

#if defined(__x86_64__)
    if (uform_cpu_class_supported(UFORM_CPU_CLASS_SAPPHIRE))
        report_peak("bf16", peak_bf16, 64.0); /* 16 lanes x 2 products x (mul + add) */
    if (uform_cpu_class_supported(UFORM_CPU_CLASS_AMX)) /* 4 tiles x 16 x 16 x 32 x 2, over 16 */
        report_peak("amx", peak_amx, 4.0 * 16.0 * 16.0 * 32.0 * 2.0 / 16.0);
    if (uform_cpu_class_supported(UFORM_CPU_CLASS_SKYLAKE))
        report_peak("fp32", peak_fp32, 32.0); /* 16 lanes x FMA */
    if (uform_cpu_class_supported(UFORM_CPU_CLASS_HASWELL))
        report_peak("avx2", peak_fp32_avx2, 16.0 * PEAK_AVX2_ACCUMULATORS / 16.0); /* 8 lanes x FMA */
#elif defined(__aarch64__)
    report_peak("fp32", peak_fp32, 24.0 * 8.0); /* 24 FMAs x 4 lanes x (mul + add) */
#endif

    uform_executor_t *executors[2];
    for (size_t t = 0; t < 2; t++)
        if (uform_executor_for_ram(threads[t], NULL, 0, &executors[t]) != UFORM_OK) {
            printf("executor: %s\n", uform_last_error());
            return 1;
        }
    size_t max_m = 4096, max_nk = 2048 * 2048;
    float *x = malloc(max_m * 2048 * sizeof(float));
    float *y = malloc(max_m * 2048 * sizeof(float));
    float *bias = malloc(2048 * sizeof(float));
    uint16_t *w = malloc(max_nk * sizeof(uint16_t));
    uint8_t *codes = malloc(max_nk);
    float *scales = malloc(2048 * sizeof(float)), *row = malloc(2048 * sizeof(float));
    if (!x || !y || !bias || !w || !codes || !scales || !row) return 1;
    for (size_t i = 0; i < max_m * 2048; i++) x[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    for (size_t i = 0; i < 2048; i++) bias[i] = 0.01f * (float)i;
    for (size_t i = 0; i < max_nk; i++)
        w[i] = uform_f32_to_bf16((float)((i * 40503u) % 1000) * 1e-3f - 0.5f);

    printf("%-9s %-7s %7s %5s %5s %5s %9s\n", "class", "weights", "threads", "m", "n", "k", "GFLOP/s");
    for (size_t c = 0; c < sizeof(all) / sizeof(all[0]); c++) {
        const char *name = uform_cpu_class_name(all[c]);
        bool wanted = argc < 2;
        for (int a = 1; a < argc; a++) wanted |= strcmp(argv[a], name) == 0;
        const uform_cpu_kernels_t *kernels = uform_cpu_kernels_for(all[c]);
        if (!wanted || !kernels || !uform_cpu_class_supported(all[c])) continue;
        for (size_t s = 0; s < sizeof(nks) / sizeof(nks[0]); s++) {
            size_t n = nks[s][0], k = nks[s][1];
            for (size_t i = 0; i < n; i++) {
                for (size_t p = 0; p < k; p++) row[p] = uform_bf16_to_f32(w[i * k + p]);
                scales[i] = uform_quantize_e4m3_row(row, k, codes + i * k);
            }
            for (int scalar = 0; scalar < 2; scalar++) {
                uform_packed_t packed;
                uform_status_t status = scalar ? kernels->pack_e4m3(codes, scales, n, k, &packed)
                                               : kernels->pack(w, n, k, &packed);
                if (status != UFORM_OK) {
                    printf("pack: %s\n", uform_last_error());
                    return 1;
                }
                for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++)
                    for (size_t t = 0; t < 2; t++) {
                        gemm_call_t call = {kernels, executors[t], &packed, x, bias, y, ms[i], n, k};
                        /* The serial class is slow: one timed call is enough there. */
                        double seconds = time_gemm(&call, all[c] == UFORM_CPU_CLASS_SERIAL ? 0 : 0.3);
                        printf("%-9s %-7s %7zu %5zu %5zu %5zu %9.1f\n", name, scalar ? "e4m3" : "bf16",
                               threads[t], ms[i], n, k,
                               2.0 * (double)ms[i] * (double)n * (double)k / seconds * 1e-9);
                        fflush(stdout);
                    }
                uform_packed_free(&packed);
            }
        }
    }
    for (size_t t = 0; t < 2; t++) uform_executor_free(executors[t]);
    free(x);
    free(y);
    free(bias);
    free(w);
    free(codes);
    free(scales);
    free(row);
    return 0;
}
