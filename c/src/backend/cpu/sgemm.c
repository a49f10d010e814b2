/* sgemm.c: the FP32 GEMM of the CPU trainer (see sgemm.h): packing, tiling,
 * threads and edges, the portable microkernels, and the choice of path.
 *
 * A task owns a rectangle of c, rows [i0, i1) x columns [j0, j1), and runs
 * all of k for it, so no two tasks write one element and no element's chain
 * depends on the split. Inside a task, for each chunk of `nb` columns and
 * each block of kc steps of k: op(b)[kc, nb] is packed into panels of nr
 * columns (k contiguous inside a panel, the last panel padded with zero
 * columns); then, a block of up to 8 groups of mr rows at a time, op(a) is
 * packed group by group (p-major inside a group) and each group is swept
 * across the panels: the group's panel stays in L1, the A and B blocks in
 * L2. A row group of fewer than mr rows has its own kernel (no padding rows);
 * a partial last column panel is computed full width in a scratch tile. The
 * partial sums go through c between k blocks (FP32 stores and loads: exact).
 *
 * Blocks come from one workspace allocated per call (a slice per pool
 * thread). If that allocation fails, tasks use small blocks on their stack
 * instead (one panel, shorter k blocks): slower, same bits. */
#include "backend/cpu/sgemm.h"

#include "backend/cpu/kernels.h"

#include <stdatomic.h>
#include <stdlib.h>

/* k per block and columns per packed B block with the workspace: a B block
 * of 256 x 512 floats (512 KiB) sits in L2; one row group's A panel
 * (<= 14 KiB) in L1. */
#define UFORM_SGEMM_KC 256
#define UFORM_SGEMM_NC 512
/* kernel row groups per packed A block: 8 x 14 rows x 256 x 4 bytes = 112 KiB,
 * beside the B block in L2. Packing several groups at once reads a transposed
 * op(a) in runs of 112 floats rather than 14. */
#define UFORM_SGEMM_MB_GROUPS 8
/* k per block of the stack fallback: 7 KiB of A and 16 KiB of B. */
#define UFORM_SGEMM_SMALL_KC 128

static size_t uform_sgemm_min(size_t a, size_t b) { return a < b ? a : b; }
static size_t uform_sgemm_round_up(size_t a, size_t b) { return (a + b - 1) / b * b; }

/* ---- portable microkernels: 6 x 8, multiply then add -------------------------
 * Built for the baseline target. The product and the sum are separate
 * statements, so no compiler contracts them into an FMA (GCC under -std=c11
 * does not contract at all; Clang's default contracts only within one
 * expression): every step is one multiply and one add in every element. */

#define UFORM_SGEMM_PORTABLE_MR 6
#define UFORM_SGEMM_PORTABLE_NR 8

/* GNU C generic vectors (GCC and Clang lower them to the target's SIMD or to
 * scalars); element-wise, so each lane is still one multiply and one add. */
typedef float uform_sgemm_v4_t __attribute__((vector_size(16)));
#define UFORM_SGEMM_PORTABLE_NV (UFORM_SGEMM_PORTABLE_NR / 4)

static inline __attribute__((always_inline)) void
uform_sgemm_portable_kernel(size_t rows, size_t kc, const float *a, const float *b, float *c,
                            size_t c_stride, bool load, const float *bias) {
    uform_sgemm_v4_t acc[UFORM_SGEMM_PORTABLE_MR][UFORM_SGEMM_PORTABLE_NV];
    for (size_t r = 0; r < rows; r++)
        for (size_t v = 0; v < UFORM_SGEMM_PORTABLE_NV; v++) {
            uform_sgemm_v4_t zero = {0.0f, 0.0f, 0.0f, 0.0f};
            if (load) memcpy(&acc[r][v], c + r * c_stride + 4 * v, sizeof(acc[r][v]));
            else acc[r][v] = zero;
        }
    for (size_t p = 0; p < kc; p++) {
        uform_sgemm_v4_t bv[UFORM_SGEMM_PORTABLE_NV];
        memcpy(bv, b + p * UFORM_SGEMM_PORTABLE_NR, sizeof(bv));
        for (size_t r = 0; r < rows; r++) {
            float x = a[p * rows + r];
            uform_sgemm_v4_t xv = {x, x, x, x};
            for (size_t v = 0; v < UFORM_SGEMM_PORTABLE_NV; v++) {
                uform_sgemm_v4_t product = xv * bv[v];
                acc[r][v] = acc[r][v] + product;
            }
        }
    }
    if (bias) {
        uform_sgemm_v4_t bias_v[UFORM_SGEMM_PORTABLE_NV];
        memcpy(bias_v, bias, sizeof(bias_v));
        for (size_t r = 0; r < rows; r++)
            for (size_t v = 0; v < UFORM_SGEMM_PORTABLE_NV; v++)
                acc[r][v] = acc[r][v] + bias_v[v];
    }
    for (size_t r = 0; r < rows; r++)
        memcpy(c + r * c_stride, acc[r], sizeof(acc[r]));
}

#define UFORM_SGEMM_PORTABLE_KERNEL(R)                                                          \
    static void uform_sgemm_portable_##R(size_t kc, const float *a, const float *b, float *c,   \
                                         size_t c_stride, bool load, const float *bias) {       \
        uform_sgemm_portable_kernel(R, kc, a, b, c, c_stride, load, bias);                      \
    }
UFORM_SGEMM_PORTABLE_KERNEL(1)
UFORM_SGEMM_PORTABLE_KERNEL(2)
UFORM_SGEMM_PORTABLE_KERNEL(3)
UFORM_SGEMM_PORTABLE_KERNEL(4)
UFORM_SGEMM_PORTABLE_KERNEL(5)
UFORM_SGEMM_PORTABLE_KERNEL(6)

const uform_sgemm_kernels_t uform_sgemm_kernels_portable = {
    .mr = UFORM_SGEMM_PORTABLE_MR,
    .nr = UFORM_SGEMM_PORTABLE_NR,
    .kernels = {NULL, uform_sgemm_portable_1, uform_sgemm_portable_2, uform_sgemm_portable_3,
                uform_sgemm_portable_4, uform_sgemm_portable_5, uform_sgemm_portable_6},
};

/* ---- paths ------------------------------------------------------------------ */

bool uform_sgemm_path_supported(uform_sgemm_path_t path) {
    switch (path) {
    case UFORM_SGEMM_AUTO:
    case UFORM_SGEMM_PORTABLE: return true;
#if defined(__x86_64__)
    case UFORM_SGEMM_AVX2: return uform_cpu_class_supported(UFORM_CPU_CLASS_HASWELL);
    case UFORM_SGEMM_AVX512: return uform_cpu_class_supported(UFORM_CPU_CLASS_SKYLAKE);
    case UFORM_SGEMM_NEON:
    case UFORM_SGEMM_SVE: return false;
#elif defined(__aarch64__)
    case UFORM_SGEMM_NEON: return uform_cpu_class_supported(UFORM_CPU_CLASS_NEON);
    case UFORM_SGEMM_SVE: /* the tiles hold 32 columns: vectors up to 512 bits */
        return uform_cpu_class_supported(UFORM_CPU_CLASS_SVE) &&
               uform_sgemm_sve_width() <= UFORM_SGEMM_NR_MAX;
    case UFORM_SGEMM_AVX2:
    case UFORM_SGEMM_AVX512: return false;
#else
    case UFORM_SGEMM_AVX2:
    case UFORM_SGEMM_AVX512:
    case UFORM_SGEMM_NEON:
    case UFORM_SGEMM_SVE: return false;
#endif
    }
    return false;
}

uform_sgemm_path_t uform_sgemm_best_path(void) {
    static atomic_int cached; /* 0: not chosen yet; the choice is the same in every thread */
    int path = atomic_load_explicit(&cached, memory_order_relaxed);
    if (path == 0) {
        path = uform_sgemm_path_supported(UFORM_SGEMM_AVX512) ? UFORM_SGEMM_AVX512
               : uform_sgemm_path_supported(UFORM_SGEMM_AVX2) ? UFORM_SGEMM_AVX2
               : uform_sgemm_path_supported(UFORM_SGEMM_SVE) ? UFORM_SGEMM_SVE
               : uform_sgemm_path_supported(UFORM_SGEMM_NEON) ? UFORM_SGEMM_NEON
                                                                : UFORM_SGEMM_PORTABLE;
        atomic_store_explicit(&cached, path, memory_order_relaxed);
    }
    return (uform_sgemm_path_t)path;
}

uform_sgemm_path_t uform_sgemm_path_of_class(uform_cpu_class_t cpu_class) {
    uform_sgemm_path_t path = UFORM_SGEMM_AUTO;
    switch (cpu_class) {
    case UFORM_CPU_CLASS_SERIAL: path = UFORM_SGEMM_PORTABLE; break;
    case UFORM_CPU_CLASS_HASWELL: path = UFORM_SGEMM_AVX2; break;
    case UFORM_CPU_CLASS_SKYLAKE:
    case UFORM_CPU_CLASS_SAPPHIRE:
    case UFORM_CPU_CLASS_AMX: path = UFORM_SGEMM_AVX512; break;
    case UFORM_CPU_CLASS_NEON:
    case UFORM_CPU_CLASS_NEON_BF16: path = UFORM_SGEMM_NEON; break;
    case UFORM_CPU_CLASS_SVE:
    case UFORM_CPU_CLASS_SVE_BF16:
        path = uform_sgemm_path_supported(UFORM_SGEMM_SVE) ? UFORM_SGEMM_SVE : UFORM_SGEMM_NEON;
        break;
    default: break;
    }
    return uform_sgemm_path_supported(path) ? path : UFORM_SGEMM_AUTO;
}

static const uform_sgemm_kernels_t *uform_sgemm_kernels_for(uform_sgemm_path_t path) {
    /* AUTO uses the cached choice: cpuid traps to the hypervisor in a VM */
    if (path == UFORM_SGEMM_AUTO) path = uform_sgemm_best_path();
    else if (!uform_sgemm_path_supported(path)) path = UFORM_SGEMM_PORTABLE;
    switch (path) {
#if defined(__x86_64__)
    case UFORM_SGEMM_AVX512: return &uform_sgemm_kernels_avx512;
    case UFORM_SGEMM_AVX2: return &uform_sgemm_kernels_avx2;
#endif
#if defined(__aarch64__)
    case UFORM_SGEMM_NEON: return &uform_sgemm_kernels_neon;
    case UFORM_SGEMM_SVE: return uform_sgemm_kernels_sve();
#endif
    default: return &uform_sgemm_kernels_portable;
    }
}

/* ---- packing ---------------------------------------------------------------- */

/* dst[p * rows + r] = src[r * stride + p]; 16 steps of k at a time, so the
 * rows are read in runs while the destination lines stay in L1. */
static void uform_sgemm_pack_rows(const float *src, size_t stride, size_t rows, size_t kb,
                                  float *dst) {
    for (size_t p0 = 0; p0 < kb; p0 += 16) {
        size_t pb = uform_sgemm_min(16, kb - p0);
        for (size_t r = 0; r < rows; r++)
            for (size_t p = 0; p < pb; p++) dst[(p0 + p) * rows + r] = src[r * stride + p0 + p];
    }
}

/* dst[r] = src[r] for r < rows: a copy of constant size for the paths' full
 * groups (6, 10 and 14 rows), which the compiler turns into a few vector
 * moves; the element loop it replaces was ~11% of the weight gradient's time. */
static inline void uform_sgemm_copy_run(float *dst, const float *src, size_t rows) {
    switch (rows) {
    case 6: memcpy(dst, src, 6 * sizeof(float)); return;
    case 10: memcpy(dst, src, 10 * sizeof(float)); return;
    case 14: memcpy(dst, src, 14 * sizeof(float)); return;
    default:
        for (size_t r = 0; r < rows; r++) dst[r] = src[r];
    }
}

/* Packs op(a)[i0..i1, k0..k0 + kb) as groups of mr rows (the last may be
 * shorter), group g at dst + g * mr * kb, laid out dst[p * rows + r]. */
static void uform_sgemm_pack_a(const uform_sgemm_kernels_t *ks, uform_matrix_t a, size_t i0,
                               size_t i1, size_t k0, size_t kb, float *dst) {
    size_t mr = ks->mr;
    if (a.transposed && mr * sizeof(float) < 64) {
        /* op(a)[i, p] = a.data[p * stride + i] (the weight gradient's A),
         * groups whose runs are shorter than a cache line (the AVX2, NEON and
         * portable paths' 6 rows: 24 bytes): one group at a time, its destination written in
         * order while the rows' lines it reads stay in L1 for the next group
         * (bench/sgemm_bench.c on the 2-core Zen 4, AVX2 path: the weight
         * gradients 6-9% faster than k step by k step across the groups
         * below; the AVX-512 path's 14 rows, 56 bytes, 1-3% slower so) */
        for (size_t i = i0; i < i1; i += mr) {
            size_t rows = uform_sgemm_min(mr, i1 - i);
            const float *src = a.data + k0 * a.stride + i;
            float *group = dst + (i - i0) * kb;
            for (size_t p = 0; p < kb; p++) uform_sgemm_copy_run(group + p * rows, src + p * a.stride, rows);
        }
        return;
    }
    if (a.transposed) {
        /* op(a)[i, p] = a.data[p * stride + i]: one run of i1 - i0 floats per
         * p, cut into the groups' runs of mr (the weight gradient's A) */
        for (size_t p = 0; p < kb; p++) {
            const float *src = a.data + (k0 + p) * a.stride + i0;
            for (size_t i = i0; i < i1; i += mr) {
                size_t rows = uform_sgemm_min(mr, i1 - i);
                uform_sgemm_copy_run(dst + (i - i0) * kb + p * rows, src + (i - i0), rows);
            }
        }
        return;
    }
    uform_sgemm_pack_rows_fn_t pack = ks->pack_rows ? ks->pack_rows : uform_sgemm_pack_rows;
    for (size_t i = i0; i < i1; i += mr)
        pack(a.data + i * a.stride + k0, a.stride, uform_sgemm_min(mr, i1 - i), kb,
             dst + (i - i0) * kb);
}

/* One row of a B panel, cols floats: the kernels' widths (8, 16, 32) at a
 * constant size, which the compiler turns into a few vector moves (the weight
 * gradient copies one such row per k step and panel: millions of calls to
 * memcpy per training step otherwise, ~2% of it). */
static inline void uform_sgemm_copy_panel_row(float *dst, const float *src, size_t cols) {
    switch (cols) {
    case 8: memcpy(dst, src, 8 * sizeof(float)); return;
    case 16: memcpy(dst, src, 16 * sizeof(float)); return;
    case 32: memcpy(dst, src, 32 * sizeof(float)); return;
    default: memcpy(dst, src, cols * sizeof(float));
    }
}

/* Panels of nr columns: dst[q * kb * nr + p * nr + col] = op(b)[k0 + p, j + q * nr + col],
 * zero for columns at or past j + jb. */
static void uform_sgemm_pack_b(const uform_sgemm_kernels_t *ks, uform_matrix_t b, size_t k0,
                               size_t kb, size_t j, size_t jb, float *dst) {
    size_t nr = ks->nr;
    for (size_t q = 0; q * nr < jb; q++, dst += kb * nr) {
        size_t j1 = j + q * nr, cols = uform_sgemm_min(nr, jb - q * nr);
        if (b.transposed && cols == nr && ks->pack_rows) {
            /* a full panel of op(b) is nr rows of b turned into columns: the
             * path's register transposes (attention's K^T and V^T, 3% of a
             * training step in the scalar loop below) */
            ks->pack_rows(b.data + j1 * b.stride + k0, b.stride, nr, kb, dst);
        } else if (b.transposed) {
            /* op(b)[p, col] = b.data[col * stride + p]: transpose 8 steps of k
             * at a time, so each source row is read in runs and each
             * destination line is written by consecutive stores. */
            for (size_t p0 = 0; p0 < kb; p0 += 8) {
                size_t pb = uform_sgemm_min(8, kb - p0);
                for (size_t col = 0; col < cols; col++) {
                    const float *src = b.data + (j1 + col) * b.stride + k0 + p0;
                    for (size_t p = 0; p < pb; p++) dst[(p0 + p) * nr + col] = src[p];
                }
            }
        } else {
            for (size_t p = 0; p < kb; p++)
                uform_sgemm_copy_panel_row(dst + p * nr, b.data + (k0 + p) * b.stride + j1, cols);
        }
        if (cols < nr)
            for (size_t p = 0; p < kb; p++)
                memset(dst + p * nr + cols, 0, (nr - cols) * sizeof(float));
    }
}

/* ---- the tiled loop ----------------------------------------------------------- */

typedef struct {
    const uform_sgemm_kernels_t *kernels;
    size_t m, n, k;
    uform_matrix_t a, b;
    const float *bias;
    bool accumulate;
    float *c;
    size_t c_stride;
    size_t mc, nc;          /* rows and columns per task (multiples of mr and nr) */
    size_t mb;              /* rows per packed A block with the workspace (multiple of mr) */
    size_t n_blocks;        /* tasks across n */
    float *workspace;       /* per thread: an A block, then a B block; NULL: stack blocks */
    size_t workspace_floats;
    size_t kc;              /* k per block with the workspace */
} uform_sgemm_job_t;

/* c[i0..i1, j0..j1) over all of k, with B blocks of kc x nb (nb a multiple
 * of nr) and A blocks of mb x kc (mb a multiple of mr). */
static void uform_sgemm_block(const uform_sgemm_job_t *job, size_t i0, size_t i1, size_t j0,
                              size_t j1, size_t kc, size_t nb, size_t mb, float *a_block,
                              float *b_block) {
    const uform_sgemm_kernels_t *ks = job->kernels;
    size_t mr = ks->mr, nr = ks->nr, k = job->k, c_stride = job->c_stride;
    /* A partial last panel is computed full width here, then copied out. */
    _Alignas(64) float edge[UFORM_SGEMM_MR_MAX * UFORM_SGEMM_NR_MAX];
    _Alignas(64) float edge_bias[UFORM_SGEMM_NR_MAX];
    memset(edge, 0, sizeof(edge));
    memset(edge_bias, 0, sizeof(edge_bias));

    for (size_t j = j0; j < j1; j += nb) {
        size_t jb = uform_sgemm_min(nb, j1 - j);
        for (size_t k0 = 0; k0 < k; k0 += kc) {
            size_t kb = uform_sgemm_min(kc, k - k0);
            bool load = job->accumulate || k0 > 0;
            const float *bias = k0 + kb == k ? job->bias : NULL;
            uform_sgemm_pack_b(ks, job->b, k0, kb, j, jb, b_block);
            for (size_t ib = i0; ib < i1; ib += mb) {
                size_t ie = uform_sgemm_min(ib + mb, i1);
                uform_sgemm_pack_a(ks, job->a, ib, ie, k0, kb, a_block);
                for (size_t i = ib; i < ie; i += mr) {
                    size_t rows = uform_sgemm_min(mr, ie - i);
                    uform_sgemm_kernel_fn_t kernel = ks->kernels[rows];
                    const float *a_panel = a_block + (i - ib) * kb;
                    for (size_t q = 0; q * nr < jb; q++) {
                        size_t jq = j + q * nr, cols = uform_sgemm_min(nr, jb - q * nr);
                        const float *b_panel = b_block + q * kb * nr;
                        float *c = job->c + i * c_stride + jq;
                        if (cols == nr) {
                            kernel(kb, a_panel, b_panel, c, c_stride, load,
                                   bias ? bias + jq : NULL);
                            continue;
                        }
                        if (load)
                            for (size_t r = 0; r < rows; r++)
                                memcpy(edge + r * nr, c + r * c_stride, cols * sizeof(float));
                        if (bias) memcpy(edge_bias, bias + jq, cols * sizeof(float));
                        kernel(kb, a_panel, b_panel, edge, nr, load, bias ? edge_bias : NULL);
                        for (size_t r = 0; r < rows; r++)
                            memcpy(c + r * c_stride, edge + r * nr, cols * sizeof(float));
                    }
                }
            }
        }
    }
}

static void uform_sgemm_task(void *context, size_t begin, size_t end, size_t thread) {
    const uform_sgemm_job_t *job = context;
    for (size_t task = begin; task < end; task++) {
        size_t i0 = task / job->n_blocks * job->mc, i1 = uform_sgemm_min(i0 + job->mc, job->m);
        size_t j0 = task % job->n_blocks * job->nc, j1 = uform_sgemm_min(j0 + job->nc, job->n);
        if (job->workspace) {
            float *a_block = job->workspace + thread * job->workspace_floats;
            float *b_block = a_block + uform_sgemm_round_up(job->mb * job->kc, 16);
            uform_sgemm_block(job, i0, i1, j0, j1, job->kc, job->nc, job->mb, a_block, b_block);
        } else {
            _Alignas(64) float a_panel[UFORM_SGEMM_MR_MAX * UFORM_SGEMM_SMALL_KC];
            _Alignas(64) float b_block[UFORM_SGEMM_SMALL_KC * UFORM_SGEMM_NR_MAX];
            const uform_sgemm_kernels_t *ks = job->kernels;
            uform_sgemm_block(job, i0, i1, j0, j1, UFORM_SGEMM_SMALL_KC, ks->nr, ks->mr, a_panel,
                              b_block);
        }
    }
}

void uform_sgemm_path(uform_sgemm_path_t path, bool small_blocks, uform_executor_t *executor,
                      size_t m, size_t n, size_t k, uform_matrix_t a, uform_matrix_t b,
                      const float *bias, bool accumulate, float *c, size_t c_stride) {
    if (m == 0 || n == 0) return;
    if (k == 0) {
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < n; j++) {
                float sum = accumulate ? c[i * c_stride + j] : 0.0f;
                c[i * c_stride + j] = bias ? sum + bias[j] : sum;
            }
        return;
    }
    const uform_sgemm_kernels_t *ks = uform_sgemm_kernels_for(path);
    size_t mr = ks->mr, nr = ks->nr;
    uform_sgemm_job_t job = {.kernels = ks, .m = m, .n = n, .k = k, .a = a, .b = b,
                             .bias = bias, .accumulate = accumulate, .c = c,
                             .c_stride = c_stride, .kc = uform_sgemm_min(UFORM_SGEMM_KC, k)};

    /* Waking the pool costs about as much as 1M multiply-adds (tens of us):
     * smaller products run on the calling thread alone. */
    size_t threads = executor ? uform_executor_width(executor) : 1;
    double macs = (double)m * (double)n * (double)k;
    bool parallel = executor && threads > 1 && macs >= 1048576.0;
    if (!parallel) threads = 1;

    /* Tiles: all of m and up to 512 columns. With threads, halve the larger
     * side (rows or columns) until there are 2 tasks per thread, keeping at
     * least 16 row groups and 8 panels per task, then below that only while
     * some thread would have no task. Each task packs its own blocks, so
     * smaller tiles pack more: op(a) once per task column, op(b) once per
     * task row (in dW += dy^T x at 2 threads, 4 tasks per thread cost ~10%).
     * Where k is long against both m and n (the weight gradient: k the
     * tokens), those copies are most of the packing: one task per thread
     * (bench/sgemm_bench.c, 2 threads: the four weight gradients ~10% faster
     * than with two tasks per thread; docs/profiles.md). */
    bool long_k = k >= 4 * (m > n ? m : n);
    size_t want = threads > 1 ? (long_k ? threads : 2 * threads) : 1;
    size_t mc_min = 16 * mr, nc_min = 8 * nr;
    job.mc = uform_sgemm_round_up(m, mr);
    job.nc = uform_sgemm_min(uform_sgemm_round_up(n, nr), UFORM_SGEMM_NC);
    for (;;) {
        size_t tasks = (m + job.mc - 1) / job.mc * ((n + job.nc - 1) / job.nc);
        if (tasks >= want) break;
        bool can_m = job.mc >= 2 * mc_min, can_n = job.nc >= 2 * nc_min;
        if (can_m && (job.mc >= job.nc || !can_n)) job.mc = uform_sgemm_round_up(job.mc / 2, mr);
        else if (can_n) job.nc = uform_sgemm_round_up(job.nc / 2, nr);
        else if (tasks < threads && job.mc > mr) job.mc = uform_sgemm_round_up(job.mc / 2, mr);
        else if (tasks < threads && job.nc > nr) job.nc = uform_sgemm_round_up(job.nc / 2, nr);
        else break;
    }
    job.n_blocks = (n + job.nc - 1) / job.nc;
    size_t tasks = (m + job.mc - 1) / job.mc * job.n_blocks;

    /* The workspace: per thread an A block and a B block, 64-byte aligned.
     * The executor's scratch rather than uform_alloc_aligned: kept between
     * calls (not faulted in again each time), and a failure here is not an
     * error to report (the stack blocks take over), so it must not replace
     * the thread's last error message. */
    void *workspace = NULL;
    if (!small_blocks) {
        job.mb = uform_sgemm_min(job.mc, UFORM_SGEMM_MB_GROUPS * mr);
        size_t per = uform_sgemm_round_up(job.mb * job.kc, 16) + job.kc * job.nc;
        size_t floats, bytes;
        if (uform_mul_ok(per, threads, &floats) && uform_mul_ok(floats, sizeof(float), &bytes)) {
            workspace = uform_scratch_take(executor, bytes);
            job.workspace = workspace;
            job.workspace_floats = per;
        }
    }
    if (parallel)
        uform_parallel_for(executor, tasks, 1, uform_sgemm_task, &job);
    else
        uform_sgemm_task(&job, 0, tasks, 0);
    uform_scratch_give(executor, workspace);
}

void uform_sgemm(uform_executor_t *executor, size_t m, size_t n, size_t k, uform_matrix_t a,
                 uform_matrix_t b, const float *bias, bool accumulate, float *c, size_t c_stride) {
    uform_sgemm_path(UFORM_SGEMM_AUTO, false, executor, m, n, k, a, b, bias, accumulate, c,
                     c_stride);
}
