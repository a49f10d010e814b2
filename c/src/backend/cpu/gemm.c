/* gemm.c: packing of W and the tiled, threaded GEMM loop shared by the CPU
 * classes (see gemm.h). Compiled for the baseline target: it only moves data
 * and calls the class's kernels through pointers. */
#include "backend/cpu/gemm.h"

static size_t uform_min(size_t a, size_t b) { return a < b ? a : b; }
static size_t uform_round_up(size_t a, size_t b) { return (a + b - 1) / b * b; }

uform_status_t uform_gemm_pack(const uform_gemm_class_t *gemm_class, const uint16_t *weights,
                               size_t n, size_t k, uform_packed_t *packed) {
    if (!packed) return uform_fail(UFORM_INVALID_ARGUMENT, "pack: the packed matrix is NULL");
    memset(packed, 0, sizeof(*packed));
    if (!weights) return uform_fail(UFORM_INVALID_ARGUMENT, "pack: the weights are NULL");
    if (n == 0 || k == 0)
        return uform_fail(UFORM_INVALID_ARGUMENT, "pack: empty matrix %zu x %zu", n, k);
    size_t nr = gemm_class->nr;
    if (nr == 0 || nr > UFORM_GEMM_NR_MAX || gemm_class->mr > UFORM_GEMM_MR_MAX)
        return uform_fail(UFORM_UNSUPPORTED, "pack: a %zu x %zu kernel tile is too large",
                          gemm_class->mr, nr);
    size_t panels = n / nr + (n % nr != 0);
    size_t kp = gemm_class->layout == UFORM_GEMM_PAIRS ? k + (k & 1) : k;
    size_t elements, bytes;
    if (k > SIZE_MAX - 1 || !uform_mul_ok(panels * nr, kp, &elements) ||
        !uform_mul_ok(elements, sizeof(uint16_t), &bytes))
        return uform_fail(UFORM_OUT_OF_MEMORY, "pack: %zu x %zu weights overflow", n, k);
    uint16_t *data = uform_alloc_aligned(elements, sizeof(uint16_t), "packed weights");
    if (!data) return UFORM_OUT_OF_MEMORY;
    memset(data, 0, bytes); /* padding columns and the odd-k pair stay zero */

    for (size_t panel = 0; panel < panels; panel++) {
        uint16_t *dst = data + panel * kp * nr;
        for (size_t c = 0; c < nr && panel * nr + c < n; c++) {
            const uint16_t *row = weights + (panel * nr + c) * k;
            switch (gemm_class->layout) {
            case UFORM_GEMM_PLAIN:
                for (size_t p = 0; p < k; p++) dst[p * nr + c] = row[p];
                break;
            case UFORM_GEMM_HALVES: {
                size_t slot = c < nr / 2 ? 2 * c : 2 * (c - nr / 2) + 1;
                for (size_t p = 0; p < k; p++) dst[p * nr + slot] = row[p];
                break;
            }
            case UFORM_GEMM_PAIRS:
                for (size_t p = 0; p < k; p++) dst[(p / 2) * 2 * nr + 2 * c + (p & 1)] = row[p];
                break;
            }
        }
    }
    packed->n = n;
    packed->k = k;
    packed->data = data;
    packed->bytes = bytes;
    return UFORM_OK;
}

void uform_gemm_pack_a_f32(const float *x, size_t x_stride, size_t rows, size_t kc, void *a) {
    float *dst = a;
    for (size_t r = 0; r < rows; r++)
        for (size_t p = 0; p < kc; p++) dst[p * rows + r] = x[r * x_stride + p];
}

void uform_gemm_pack_a_bf16_pairs(const float *x, size_t x_stride, size_t rows, size_t kc,
                                  void *a) {
    uint32_t *dst = a;
    for (size_t r = 0; r < rows; r++) {
        const float *row = x + r * x_stride;
        for (size_t p = 0; p < kc; p += 2) {
            uint32_t low = uform_f32_to_bf16(row[p]);
            uint32_t high = p + 1 < kc ? uform_f32_to_bf16(row[p + 1]) : 0;
            dst[p / 2 * rows + r] = low | high << 16;
        }
    }
}

typedef struct {
    const uform_gemm_class_t *gemm_class;
    const uform_packed_t *w;
    const float *x;
    size_t x_stride, m;
    const float *bias;
    bool accumulate;    /* the first k block starts from y instead of 0 */
    float *y;
    size_t y_stride;
    size_t mc;          /* rows per task, a multiple of mr */
    size_t nc_panels;   /* W panels per task */
    size_t n_blocks;    /* tasks across n */
} uform_gemm_job_t;

/* One task: rows [i0, i1) x panels [q0, q1). For each k block, each group of
 * mr rows is packed once and swept across the task's panels, so the A panel
 * stays in L1 while W streams from L2. */
static void uform_gemm_task(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_gemm_job_t *job = context;
    const uform_gemm_class_t *gc = job->gemm_class;
    size_t n = job->w->n, k = job->w->k, nr = gc->nr, mr = gc->mr;
    size_t kp = gc->layout == UFORM_GEMM_PAIRS ? k + (k & 1) : k;
    size_t panels = n / nr + (n % nr != 0);
    const uint16_t *data = job->w->data;
    _Alignas(64) unsigned char a_panel[UFORM_GEMM_A_BYTES];
    /* The last panel's partial columns are computed full width into here. */
    _Alignas(64) float edge[UFORM_GEMM_MR_MAX * UFORM_GEMM_NR_MAX];
    _Alignas(64) float edge_bias[UFORM_GEMM_NR_MAX];
    memset(edge, 0, mr * nr * sizeof(float)); /* the part the kernel reads */

    for (size_t task = begin; task < end; task++) {
        size_t i0 = task / job->n_blocks * job->mc, i1 = uform_min(i0 + job->mc, job->m);
        size_t q0 = task % job->n_blocks * job->nc_panels;
        size_t q1 = uform_min(q0 + job->nc_panels, panels);
        for (size_t k0 = 0; k0 < k; k0 += gc->kc) {
            size_t kb = uform_min(gc->kc, k - k0);
            int first = k0 == 0 && !job->accumulate;
            int last = k0 + kb == k;
            for (size_t i = i0; i < i1; i += mr) {
                size_t rows = uform_min(mr, i1 - i);
                gc->pack_a(job->x + i * job->x_stride + k0, job->x_stride, rows, kb, a_panel);
                uform_microkernel_fn_t kernel = gc->kernels[rows], wide = gc->wide[rows];
                size_t q = q0, wide_panels = gc->wide_panels;
                if (wide)
                    for (; q + wide_panels <= q1 && (q + wide_panels) * nr <= n; q += wide_panels)
                        wide(kb, a_panel, data + (q * kp + k0) * nr, kp * nr,
                             job->y + i * job->y_stride + q * nr, job->y_stride, first,
                             last && job->bias ? job->bias + q * nr : NULL);
                for (; q < q1; q++) {
                    size_t j = q * nr, cols = uform_min(nr, n - j);
                    const uint16_t *b = data + (q * kp + k0) * nr;
                    float *c = job->y + i * job->y_stride + j;
                    const float *bias = last && job->bias ? job->bias + j : NULL;
                    if (cols == nr) {
                        kernel(kb, a_panel, b, 0, c, job->y_stride, first, bias);
                        continue;
                    }
                    if (!first)
                        for (size_t r = 0; r < rows; r++)
                            memcpy(edge + r * nr, c + r * job->y_stride, cols * sizeof(float));
                    if (bias) {
                        memset(edge_bias, 0, nr * sizeof(float));
                        memcpy(edge_bias, bias, cols * sizeof(float));
                        bias = edge_bias;
                    }
                    kernel(kb, a_panel, b, 0, edge, nr, first, bias);
                    for (size_t r = 0; r < rows; r++)
                        memcpy(c + r * job->y_stride, edge + r * nr, cols * sizeof(float));
                }
            }
        }
    }
}

void uform_gemm_run(const uform_gemm_class_t *gemm_class, uform_executor_t *executor,
                    const uform_packed_t *w, const float *x, size_t x_stride, size_t m,
                    const float *bias, bool accumulate, float *y, size_t y_stride) {
    if (m == 0 || w->n == 0) return;
    size_t mr = gemm_class->mr, nr = gemm_class->nr;
    size_t panels = w->n / nr + (w->n % nr != 0);
    uform_gemm_job_t job = {gemm_class, w, x, x_stride, m, bias, accumulate, y, y_stride, 0, 0, 0};

    /* Tiles of up to 8 kernel rows x 512 columns keep a task's y block and
     * W block within L2. With several threads, shrink them until there are
     * enough tasks to balance: first across n (down to 4 panels, so a packed
     * A panel is still reused and the wide kernels still apply), then across
     * m, then n down to one panel while threads would idle. */
    size_t threads = executor ? uform_executor_width(executor) : 1;
    size_t want = threads > 1 ? 8 * threads : 1;
    size_t min_panels = gemm_class->wide_panels > 4 ? gemm_class->wide_panels : 4;
    job.mc = uform_min(8 * mr, uform_round_up(m, mr));
    job.nc_panels = uform_min(panels, 512 / nr > 0 ? 512 / nr : 1);
    for (;;) {
        size_t m_blocks = (m + job.mc - 1) / job.mc;
        job.n_blocks = (panels + job.nc_panels - 1) / job.nc_panels;
        if (m_blocks * job.n_blocks >= want) break;
        if (job.nc_panels > min_panels) job.nc_panels = (job.nc_panels + 1) / 2;
        else if (job.mc > mr) job.mc = uform_round_up(job.mc / 2, mr);
        else if (m_blocks * job.n_blocks < threads && job.nc_panels > 1)
            job.nc_panels = (job.nc_panels + 1) / 2;
        else break;
    }
    size_t tasks = (m + job.mc - 1) / job.mc * job.n_blocks;
    /* Waking the pool costs about as much as 1M multiply-adds (tens of us):
     * smaller products run on the calling thread alone. */
    double macs = (double)m * (double)w->n * (double)w->k;
    if (executor && threads > 1 && macs >= 1048576.0)
        uform_parallel_for(executor, tasks, 1, uform_gemm_task, &job);
    else
        uform_gemm_task(&job, 0, tasks, 0);
}
