/* amx_loop_bench.c: TSC cycles per tile product (TDPBF16PS, 16 x 16 x 32) of the
 * AMX GEMM's inner loops alone, the question docs/profiles.md asks of them: what
 * do the tile loads cost against the products?
 *
 *   registers  four sum tiles, A and B loaded once: the products alone
 *   wide       the one-group kernel's step (amx_kernel.h, uform_amx_kernel):
 *              one A tile and two panels' four B tiles for four products
 *   pair       the pair kernel's step (uform_amx_pair_kernel): two A tiles
 *              and one panel's two B tiles for four products
 *
 * B walks a buffer of the given size (as W's panels do), A stays in L1. The
 * tiles hold BF16 values of ordinary size (data of zeros runs faster on this
 * unit). Only where AMX runs (it exits 0 with a message elsewhere).
 *
 *   gcc -O2 -std=c11 -D_GNU_SOURCE bench/amx_loop_bench.c -o /tmp/amx_loop_bench
 *   /tmp/amx_loop_bench
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <x86intrin.h>

#define TARGET __attribute__((target("amx-tile,amx-bf16,avx512f")))
#define STEPS 16         /* tile steps of 32 k per kernel call: k block 512 */
#define PANEL_STEP 2048  /* bytes of one panel per step: 16 pair rows x 128 bytes */
#define A_ROW 1024       /* bytes per A row: 512 k of BF16 */

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t bytes_per_row[16];
    uint8_t rows[16];
} config_t;

static TARGET void configure(void) {
    _Alignas(64) config_t config;
    memset(&config, 0, sizeof(config));
    config.palette = 1;
    for (int t = 0; t < 8; t++) {
        config.rows[t] = 16;
        config.bytes_per_row[t] = 64;
    }
    __asm__ volatile("ldtilecfg %0" : : "m"(config));
}

typedef enum { REGISTERS, WIDE, PAIR } loop_t;

/* TSC cycles per product over `reps` sweeps of the B buffer. */
static TARGET double run(loop_t loop, const unsigned char *a, const unsigned char *b, size_t bytes,
                         int reps) {
    size_t calls = bytes / (2 * STEPS * PANEL_STEP); /* two panels' k block per call */
    uint64_t start = __rdtsc();
    for (int r = 0; r < reps; r++)
        for (size_t c = 0; c < calls; c++) {
            const unsigned char *b0 = b + 2 * c * STEPS * PANEL_STEP, *b1 = b0 + STEPS * PANEL_STEP;
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            if (loop == REGISTERS) {
                _tile_loadd(4, a, A_ROW);
                _tile_loadd(7, a + 16 * A_ROW, A_ROW);
                _tile_loadd(5, b0, 128);
                _tile_loadd(6, b0 + 64, 128);
            }
            for (size_t s = 0; s < STEPS; s++) {
                if (loop == WIDE) {
                    _tile_loadd(4, a + s * 64, A_ROW);
                    _tile_loadd(5, b0 + s * PANEL_STEP, 128);
                    _tile_loadd(6, b0 + s * PANEL_STEP + 64, 128);
                    _tile_dpbf16ps(0, 4, 5);
                    _tile_dpbf16ps(1, 4, 6);
                    _tile_loadd(5, b1 + s * PANEL_STEP, 128);
                    _tile_loadd(6, b1 + s * PANEL_STEP + 64, 128);
                    _tile_dpbf16ps(2, 4, 5);
                    _tile_dpbf16ps(3, 4, 6);
                    continue;
                }
                for (int half = 0; half < 2; half++) { /* the pair kernel over both panels */
                    const unsigned char *panel = (half ? b1 : b0) + s * PANEL_STEP;
                    if (loop == PAIR) {
                        _tile_loadd(4, a + s * 64, A_ROW);
                        _tile_loadd(5, panel, 128);
                        _tile_loadd(6, panel + 64, 128);
                        _tile_loadd(7, a + 16 * A_ROW + s * 64, A_ROW);
                    }
                    _tile_dpbf16ps(0, 4, 5);
                    _tile_dpbf16ps(1, 4, 6);
                    _tile_dpbf16ps(2, 7, 5);
                    _tile_dpbf16ps(3, 7, 6);
                }
            }
        }
    uint64_t cycles = __rdtsc() - start;
    double products = (double)reps * (double)calls * STEPS * (loop == WIDE ? 4 : 8);
    return (double)cycles / products;
}

int main(void) {
    /* ARCH_REQ_XCOMP_PERM for XTILEDATA: without it the first tile load faults */
    if (!__builtin_cpu_supports("avx512f") || syscall(SYS_arch_prctl, 0x1023, 18) != 0) {
        printf("amx_loop_bench: no AMX here (or the OS refused the tile state)\n");
        return 0;
    }
    configure();
    unsigned char *a = aligned_alloc(64, 32 * A_ROW);
    for (size_t i = 0; i < 16 * A_ROW; i++)
        ((uint16_t *)a)[i] = (uint16_t)(0xbf00 | ((i * 2654435761u >> 7) & 0xff));
    static const size_t sizes[] = {64 << 10, 512 << 10, 1 << 20, 4 << 20};
    static const char *names[] = {"registers", "wide", "pair"};
    printf("%-10s %10s %22s\n", "loop", "B bytes", "TSC cycles per product");
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        unsigned char *b = aligned_alloc(64, sizes[i]);
        for (size_t j = 0; j < sizes[i] / 2; j++) ((uint16_t *)b)[j] = (uint16_t)(0x3f00 | ((j * 40503u) & 0xff));
        int reps = (int)(64e6 / (double)sizes[i]) + 1;
        for (int loop = REGISTERS; loop <= PAIR; loop++) {
            if (loop == REGISTERS && i > 0) continue; /* no B traffic: one size says it */
            run((loop_t)loop, a, b, sizes[i], reps / 4 + 1); /* warm-up */
            printf("%-10s %9zuK %22.1f\n", names[loop], sizes[i] >> 10, run((loop_t)loop, a, b, sizes[i], reps));
        }
        free(b);
    }
    free(a);
    return 0;
}
