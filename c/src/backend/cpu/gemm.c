/* gemm.c: packing of W and the tiled, threaded GEMM loop shared by the CPU
 * classes (see gemm.h). Compiled for the baseline target: it only moves data
 * and calls the class's kernels through pointers. */
#include "backend/cpu/gemm.h"
#include "backend/cpu/e4m3_decode.h"
#include "backend/cpu/rows.h"

#include <stdlib.h>

static size_t uform_min(size_t a, size_t b) { return a < b ? a : b; }
static size_t uform_round_up(size_t a, size_t b) { return (a + b - 1) / b * b; }

/* Where element (column c of its panel, k index p) sits in a panel, in
 * elements: the layouts of gemm.h. */
static size_t uform_gemm_slot(uform_gemm_layout_t layout, size_t nr, size_t c, size_t p) {
    switch (layout) {
    case UFORM_GEMM_HALVES: return p * nr + (c < nr / 2 ? 2 * c : 2 * (c - nr / 2) + 1);
    case UFORM_GEMM_PAIRS: return (p / 2) * 2 * nr + 2 * c + (p & 1);
    case UFORM_GEMM_PLAIN: break;
    }
    return p * nr + c;
}

/* k padded as the layout needs: PAIRS to even. */
static size_t uform_gemm_padded_k(uform_gemm_layout_t layout, size_t k) {
    return layout == UFORM_GEMM_PAIRS ? k + (k & 1) : k;
}

/* The layout an E4M3 matrix takes for a class: codes are decoded into a tile
 * before the kernels see them, PLAIN for the FP32 classes. */
static uform_gemm_layout_t uform_gemm_e4m3_layout(const uform_gemm_class_t *gemm_class) {
    return gemm_class->layout == UFORM_GEMM_PAIRS ? UFORM_GEMM_PAIRS : UFORM_GEMM_PLAIN;
}

/* k as a class packs a matrix in `layout` (its BF16 layout, or its E4M3 one,
 * whose decoded panels hold the same k): the layout's padding, or k_align's
 * (zero weights, zero codes). */
static size_t uform_gemm_class_k(const uform_gemm_class_t *gemm_class, uform_gemm_layout_t layout,
                                 size_t k) {
    return gemm_class->k_align ? uform_round_up(k, gemm_class->k_align)
                               : uform_gemm_padded_k(layout, k);
}

/* Slots per panel row of an E4M3 matrix (a scale each): 2 nr for PAIRS. */
static size_t uform_gemm_slots(uform_gemm_layout_t layout, size_t nr) {
    return layout == UFORM_GEMM_PAIRS ? 2 * nr : nr;
}

/* Bytes of an E4M3 matrix's codes, rounded up so its scales start aligned. */
static size_t uform_gemm_codes_bytes(size_t panels, size_t nr, size_t kp) {
    return (panels * nr * kp + 63) / 64 * 64;
}

/* Checks the class and shape; `panels` of nr columns hold n. */
static uform_status_t uform_gemm_check(const uform_gemm_class_t *gemm_class, size_t n, size_t k,
                                       uform_packed_t *packed, size_t *panels) {
    if (!packed) return uform_fail(UFORM_INVALID_ARGUMENT, "pack: the packed matrix is NULL");
    memset(packed, 0, sizeof(*packed));
    if (n == 0 || k == 0)
        return uform_fail(UFORM_INVALID_ARGUMENT, "pack: empty matrix %zu x %zu", n, k);
    size_t nr = gemm_class->nr, elements, bytes;
    if (nr == 0 || nr > UFORM_GEMM_NR_MAX || gemm_class->mr > UFORM_GEMM_MR_MAX)
        return uform_fail(UFORM_UNSUPPORTED, "pack: a %zu x %zu kernel tile is too large",
                          gemm_class->mr, nr);
    *panels = n / nr + (n % nr != 0);
    /* the largest packing: 2 bytes per element, k + 1, and 64 bytes of alignment */
    if (k > SIZE_MAX / 4 || !uform_mul_ok(*panels * nr, k + 1, &elements) ||
        !uform_mul_ok(elements, 8, &bytes))
        return uform_fail(UFORM_OUT_OF_MEMORY, "pack: %zu x %zu weights overflow", n, k);
    packed->n = n;
    packed->k = k;
    packed->panel_columns = nr;
    return UFORM_OK;
}

/* Zeroed storage for a packed matrix (padding columns and the odd-k pair stay zero). */
static uform_status_t uform_gemm_allocate(uform_packed_t *packed, size_t bytes) {
    packed->data = uform_alloc_aligned(bytes, 1, "packed weights");
    if (!packed->data) return UFORM_OUT_OF_MEMORY;
    memset(packed->data, 0, bytes);
    packed->bytes = bytes;
    return UFORM_OK;
}

uform_status_t uform_gemm_pack(const uform_gemm_class_t *gemm_class, const uint16_t *weights,
                               size_t n, size_t k, uform_packed_t *packed) {
    size_t panels, nr = gemm_class->nr;
    UFORM_TRY(uform_gemm_check(gemm_class, n, k, packed, &panels));
    if (!weights) return uform_fail(UFORM_INVALID_ARGUMENT, "pack: the weights are NULL");
    uform_gemm_layout_t layout = gemm_class->layout;
    size_t kp = uform_gemm_class_k(gemm_class, layout, k);
    UFORM_TRY(uform_gemm_allocate(packed, panels * nr * kp * sizeof(uint16_t)));
    uint16_t *data = packed->data;
    for (size_t panel = 0; panel < panels; panel++) {
        uint16_t *dst = data + panel * kp * nr;
        for (size_t c = 0; c < nr && panel * nr + c < n; c++) {
            const uint16_t *row = weights + (panel * nr + c) * k;
            for (size_t p = 0; p < k; p++) dst[uform_gemm_slot(layout, nr, c, p)] = row[p];
        }
    }
    packed->scalar = UFORM_SCALAR_BF16;
    packed->layout = (int)layout;
    packed->padded_k = kp;
    return UFORM_OK;
}

/* E4M3: the codes in the class's E4M3 layout, then per panel the scale of
 * each slot (the column's; padding columns keep 0, their codes are 0 too). */
uform_status_t uform_gemm_pack_e4m3(const uform_gemm_class_t *gemm_class, const uint8_t *codes,
                                    const float *scales, size_t n, size_t k,
                                    uform_packed_t *packed) {
    size_t panels, nr = gemm_class->nr;
    UFORM_TRY(uform_gemm_check(gemm_class, n, k, packed, &panels));
    if (!codes || !scales)
        return uform_fail(UFORM_INVALID_ARGUMENT, "pack: the codes or scales are NULL");
    uform_gemm_layout_t layout = uform_gemm_e4m3_layout(gemm_class);
    size_t kp = uform_gemm_class_k(gemm_class, layout, k), slots = uform_gemm_slots(layout, nr);
    size_t codes_bytes = uform_gemm_codes_bytes(panels, nr, kp);
    UFORM_TRY(uform_gemm_allocate(packed, codes_bytes + panels * slots * sizeof(float)));
    uint8_t *data = packed->data;
    float *slot_scales = (float *)(data + codes_bytes);
    for (size_t panel = 0; panel < panels; panel++) {
        uint8_t *dst = data + panel * kp * nr;
        for (size_t c = 0; c < nr && panel * nr + c < n; c++) {
            const uint8_t *row = codes + (panel * nr + c) * k;
            for (size_t p = 0; p < k; p++) dst[uform_gemm_slot(layout, nr, c, p)] = row[p];
            float scale = scales[panel * nr + c];
            if (layout == UFORM_GEMM_PAIRS) {
                slot_scales[panel * slots + 2 * c] = scale;
                slot_scales[panel * slots + 2 * c + 1] = scale;
            } else {
                slot_scales[panel * slots + c] = scale;
            }
        }
    }
    packed->scalar = UFORM_SCALAR_E4M3;
    packed->layout = (int)layout;
    packed->padded_k = kp;
    return UFORM_OK;
}

uform_status_t uform_gemm_unpack_e4m3(const uform_packed_t *packed, uint8_t *codes,
                                      float *scales) {
    if (!packed || !packed->data || packed->scalar != UFORM_SCALAR_E4M3)
        return uform_fail(UFORM_INVALID_ARGUMENT, "unpack: the matrix is not E4M3");
    uform_gemm_layout_t layout = (uform_gemm_layout_t)packed->layout;
    size_t n = packed->n, k = packed->k, nr = packed->panel_columns;
    size_t kp = packed->padded_k, slots = uform_gemm_slots(layout, nr);
    size_t panels = n / nr + (n % nr != 0);
    const uint8_t *data = packed->data;
    const float *slot_scales = (const float *)(data + uform_gemm_codes_bytes(panels, nr, kp));
    for (size_t i = 0; i < n; i++) {
        size_t panel = i / nr, c = i % nr;
        for (size_t p = 0; p < k; p++)
            codes[i * k + p] = data[panel * kp * nr + uform_gemm_slot(layout, nr, c, p)];
        scales[i] = slot_scales[panel * slots + (layout == UFORM_GEMM_PAIRS ? 2 * c : c)];
    }
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

/* The panels a sweep reads: panel q at base + (q - first) * stride elements of
 * `size` bytes, read by `kernels` and `wide`, and by `pair` (NULL: none) two
 * row groups at a time. */
typedef struct {
    const unsigned char *base;
    size_t first, stride, size;
    const uform_microkernel_fn_t *kernels, *wide;
    uform_pair_kernel_fn_t pair;
} uform_gemm_panels_t;

/* An E4M3 matrix's codes and how one of its panels decodes (gemm.h): `rows`
 * rows of `slots` codes (pairs of k for PAIRS), a scale per slot. */
typedef struct {
    const uint8_t *codes;
    const float *slot_scales;
    size_t kp, slots, rows;
    size_t size; /* bytes per decoded weight: 2 BF16 (PAIRS), 4 FP32 */
    uform_e4m3_decode_fn_t decode;
} uform_gemm_codes_t;

typedef struct {
    const uform_gemm_class_t *gemm_class;
    const uform_packed_t *w;
    const float *x;
    size_t x_stride, m;
    const float *bias;
    bool accumulate;    /* the first k block starts from y instead of 0 */
    bool gelu;          /* the last k block's tiles go through GELU in place */
    float *y;
    size_t y_stride;
    size_t mc;          /* rows per task, a multiple of mr */
    size_t nc_panels;   /* W panels per task */
    size_t n_blocks;    /* tasks across n */
    size_t kc;          /* k per block */
    /* W as the kernels read it, from k = 0: the BF16 packing, or the E4M3
     * panels of this pass decoded before its tasks. */
    uform_gemm_panels_t b;
    size_t q_begin, q_end; /* the panels of this pass */
    /* Every A panel packed once before the tasks (NULL: each task packs its
     * own): row group g, k block b at slot g * k_blocks + b, A_BYTES each. */
    unsigned char *packed_a;
    size_t k_blocks;
    /* The pass's preparation (uform_gemm_prepare_task): decode_panels E4M3
     * panels from q_begin into b, then pack_slots A panels. */
    uform_gemm_codes_t codes;
    unsigned char *decoded; /* b's panels, when they are decoded E4M3 */
    size_t decode_panels, pack_slots;
    /* The tile tasks' decoded tiles, UFORM_GEMM_E4M3_LOCAL_TILE_BYTES per
     * pool thread (NULL: a UFORM_GEMM_TILE_BYTES tile on each task's stack). */
    unsigned char *tiles;
    /* The tile tasks' first row group decodes the panels in its kernels
     * (uform_gemm_e4m3_direct). */
    bool direct;
} uform_gemm_job_t;

/* Per-task stack buffers: the packed A panels (a row group's, and the next
 * group's for a pair kernel) and the last panel's partial columns, computed
 * full width. */
typedef struct {
    _Alignas(64) unsigned char a_panel[UFORM_GEMM_A_BYTES];
    _Alignas(64) unsigned char a_next[UFORM_GEMM_A_BYTES];
    _Alignas(64) float edge[UFORM_GEMM_MR_MAX * UFORM_GEMM_NR_MAX];
    _Alignas(64) float edge_bias[UFORM_GEMM_NR_MAX];
} uform_gemm_buffers_t;

size_t uform_gemm_decoded_max = UFORM_GEMM_DECODED_MAX;
size_t uform_gemm_e4m3_local_rows = UFORM_GEMM_E4M3_LOCAL_ROWS;
bool uform_gemm_e4m3_direct_kernels = true;

/* Bytes of one panel's decoded k block of the class's kc, as the L2 tiles
 * hold it. */
static size_t uform_gemm_local_panel_bytes(const uform_gemm_class_t *gc, const uform_packed_t *w,
                                           size_t decoded_size) {
    return uform_gemm_class_k(gc, w->layout, gc->kc) * gc->nr * decoded_size;
}

static uform_gemm_codes_t uform_gemm_codes_of(const uform_gemm_class_t *gemm_class,
                                              const uform_packed_t *w) {
    size_t nr = gemm_class->nr, panels = w->n / nr + (w->n % nr != 0);
    bool pairs = w->layout == UFORM_GEMM_PAIRS;
    uform_gemm_codes_t codes;
    codes.codes = w->data;
    codes.kp = w->padded_k;
    codes.slots = uform_gemm_slots(w->layout, nr);
    codes.rows = pairs ? codes.kp / 2 : codes.kp;
    codes.slot_scales = (const float *)(codes.codes + uform_gemm_codes_bytes(panels, nr, codes.kp));
    codes.size = pairs || gemm_class->e4m3_halves ? 2 : 4;
    codes.decode = gemm_class->decode_e4m3 ? gemm_class->decode_e4m3
                   : pairs                 ? uform_e4m3_decode_bf16_portable
                                           : uform_e4m3_decode_f32_portable;
    return codes;
}

/* A partial last panel (cols < nr) is computed full width in buffers->edge:
 * its rows of c copied in unless the block is the first, its bias padded
 * with zeros (the bias the kernel gets, NULL without one); then copied out. */
static const float *uform_gemm_edge_in(const uform_gemm_job_t *job, const float *c, size_t rows,
                                       size_t cols, int first, const float *bias,
                                       uform_gemm_buffers_t *buffers) {
    size_t nr = job->gemm_class->nr;
    if (!first)
        for (size_t r = 0; r < rows; r++)
            memcpy(buffers->edge + r * nr, c + r * job->y_stride, cols * sizeof(float));
    if (!bias) return NULL;
    memset(buffers->edge_bias, 0, nr * sizeof(float));
    memcpy(buffers->edge_bias, bias, cols * sizeof(float));
    return buffers->edge_bias;
}

static void uform_gemm_edge_out(const uform_gemm_job_t *job, float *c, size_t rows, size_t cols,
                                const uform_gemm_buffers_t *buffers) {
    size_t nr = job->gemm_class->nr;
    for (size_t r = 0; r < rows; r++)
        memcpy(c + r * job->y_stride, buffers->edge + r * nr, cols * sizeof(float));
}

/* After the last k block of rows [i, i + rows) over panels [q0, q1): the
 * bias (add_bias) and GELU over them, while they are in L1/L2 (one call per
 * sweep: per kernel tile, HASWELL's 6 x 16, the calls cost more than they
 * saved). */
static void uform_gemm_finish_rows(const uform_gemm_job_t *job, size_t i, size_t rows, size_t q0,
                                   size_t q1) {
    const uform_gemm_class_t *gc = job->gemm_class;
    size_t nr = gc->nr;
    float *swept = job->y + i * job->y_stride + q0 * nr;
    size_t swept_cols = uform_min(q1 * nr, job->w->n) - q0 * nr;
    if (job->bias && gc->add_bias) gc->add_bias(swept, rows, swept_cols, job->y_stride, job->bias + q0 * nr);
    if (job->gelu) uform_gelu_rows(swept, rows, swept_cols, job->y_stride);
}

/* Rows [i, i + rows) of k block [k0, k0 + kb), packed into buffers->a_panel,
 * swept over panels [q0, q1): the wide kernel where whole groups of panels
 * fit, then one panel at a time, a partial last panel through the edge. */
static void uform_gemm_sweep(const uform_gemm_job_t *job, const uform_gemm_panels_t *panels,
                             const void *a_panel, size_t i, size_t rows, size_t kb, int first,
                             int last, size_t q0, size_t q1, bool prefetch, uform_gemm_buffers_t *buffers) {
    const uform_gemm_class_t *gc = job->gemm_class;
    size_t n = job->w->n, nr = gc->nr;
    uform_microkernel_fn_t kernel = panels->kernels[rows], wide = panels->wide[rows];
    size_t q = q0, wide_panels = gc->wide_panels;
    /* the bias in the kernels' epilogue, or after the sweep (add_bias) */
    const float *kernel_bias = gc->add_bias ? NULL : job->bias;
#define UFORM_GEMM_B(q) (panels->base + ((q) - panels->first) * panels->stride * panels->size)
    if (wide)
        for (; q + wide_panels <= q1 && (q + wide_panels) * nr <= n; q += wide_panels)
            wide(kb, a_panel, UFORM_GEMM_B(q), panels->stride,
                 job->y + i * job->y_stride + q * nr, job->y_stride, first,
                 last && kernel_bias ? kernel_bias + q * nr : NULL);
    for (; q < q1; q++) {
        size_t j = q * nr, cols = uform_min(nr, n - j);
        float *c = job->y + i * job->y_stride + j;
        const float *bias = last && kernel_bias ? kernel_bias + j : NULL;
        if (cols == nr) {
            /* b_stride: where the next panel is, for a kernel that prefetches it (gemm.h) */
            kernel(kb, a_panel, UFORM_GEMM_B(q), prefetch && q + 1 < q1 ? panels->stride : 0, c, job->y_stride,
                   first, bias);
            continue;
        }
        bias = uform_gemm_edge_in(job, c, rows, cols, first, bias, buffers);
        kernel(kb, a_panel, UFORM_GEMM_B(q), 0, buffers->edge, nr, first, bias);
        uform_gemm_edge_out(job, c, rows, cols, buffers);
    }
#undef UFORM_GEMM_B
}

/* Two full row groups, rows [i, i + 2 mr), swept over panels [q0, q1) by the
 * pair kernel; a partial last panel goes through each group's edge. */
static void uform_gemm_sweep_pair(const uform_gemm_job_t *job, const uform_gemm_panels_t *panels,
                                  const void *a0, const void *a1, size_t i, size_t kb, int first,
                                  int last, size_t q0, size_t q1, uform_gemm_buffers_t *buffers) {
    size_t n = job->w->n, nr = job->gemm_class->nr, mr = job->gemm_class->mr;
    size_t q = q0;
    for (; q < q1 && (q + 1) * nr <= n; q++)
        panels->pair(kb, a0, a1, panels->base + (q - panels->first) * panels->stride * panels->size,
                     job->y + i * job->y_stride + q * nr, job->y_stride, first);
    if (q < q1) {
        uform_gemm_sweep(job, panels, a0, i, mr, kb, first, last, q, q1, false, buffers);
        uform_gemm_sweep(job, panels, a1, i + mr, mr, kb, first, last, q, q1, false, buffers);
    }
}

/* The A panel of rows [i, i + rows) and k block [k0, k0 + kb): packed before
 * the tasks, or packed here into `buffer`. */
static const void *uform_gemm_a_panel(const uform_gemm_job_t *job, size_t i, size_t rows, size_t k0,
                                      size_t kb, unsigned char *buffer) {
    const uform_gemm_class_t *gc = job->gemm_class;
    if (job->packed_a)
        return job->packed_a + (i / gc->mr * job->k_blocks + k0 / job->kc) * UFORM_GEMM_A_BYTES;
    gc->pack_a(job->x + i * job->x_stride + k0, job->x_stride, rows, kb, buffer);
    return buffer;
}

/* Rows [i0, i1) of k block [k0, k0 + kb), mr at a time: each group's A
 * panel (packed before the tasks, or here into the task's buffer) swept over
 * panels [q0, q1). */
static void uform_gemm_row_groups(const uform_gemm_job_t *job, const uform_gemm_panels_t *panels,
                                  size_t i0, size_t i1, size_t k0, size_t kb, int first, int last,
                                  size_t q0, size_t q1, uform_gemm_buffers_t *buffers) {
    const uform_gemm_class_t *gc = job->gemm_class;
    size_t mr = gc->mr;
    for (size_t i = i0, rows; i < i1; i += rows) {
        if (panels->pair && i + 2 * mr <= i1) {
            rows = 2 * mr;
            const void *a0 = uform_gemm_a_panel(job, i, mr, k0, kb, buffers->a_panel);
            const void *a1 = uform_gemm_a_panel(job, i + mr, mr, k0, kb, buffers->a_next);
            uform_gemm_sweep_pair(job, panels, a0, a1, i, kb, first, last, q0, q1, buffers);
        } else {
            rows = uform_min(mr, i1 - i);
            const void *a_panel = uform_gemm_a_panel(job, i, rows, k0, kb, buffers->a_panel);
            /* the first row group reads the panels from memory: its kernels
             * prefetch the next one; the later row groups find them in L2 */
            uform_gemm_sweep(job, panels, a_panel, i, rows, kb, first, last, q0, q1, i == i0, buffers);
        }
        if (last) uform_gemm_finish_rows(job, i, rows, q0, q1);
    }
}

/* A pass's preparation, one index each: E4M3 panel q_begin + index decoded
 * into b, then A panel `slot` = (row group, k block) packed as row_groups
 * packs it. */
static void uform_gemm_prepare_task(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_gemm_job_t *job = context;
    const uform_gemm_class_t *gc = job->gemm_class;
    const uform_gemm_codes_t *codes = &job->codes;
    size_t nr = gc->nr;
    for (size_t index = begin; index < end; index++) {
        if (index < job->decode_panels) {
            size_t q = job->q_begin + index;
            codes->decode(codes->codes + q * codes->kp * nr, codes->rows, codes->slots,
                          codes->slot_scales + q * codes->slots,
                          job->decoded + index * job->b.stride * job->b.size);
            continue;
        }
        size_t slot = index - job->decode_panels;
        size_t i = slot / job->k_blocks * gc->mr, k0 = slot % job->k_blocks * job->kc;
        gc->pack_a(job->x + i * job->x_stride + k0, job->x_stride, uform_min(gc->mr, job->m - i),
                   uform_min(job->kc, job->w->k - k0), job->packed_a + slot * UFORM_GEMM_A_BYTES);
    }
}

/* The task of a parallel loop index: rows [i0, i1) x panels [q0, q1). The
 * index runs across m first: a thread's next task mostly reads the same W
 * block, still in its L2, rather than the next one from L3 (AMX, 300 x 2048
 * x 512 on one thread: 15% faster; docs/profiles.md). */
static void uform_gemm_task_bounds(const uform_gemm_job_t *job, size_t task, size_t *i0,
                                   size_t *i1, size_t *q0, size_t *q1) {
    size_t m_blocks = (job->m + job->mc - 1) / job->mc;
    *i0 = task % m_blocks * job->mc;
    *i1 = uform_min(*i0 + job->mc, job->m);
    *q0 = job->q_begin + task / m_blocks * job->nc_panels;
    *q1 = uform_min(*q0 + job->nc_panels, job->q_end);
}

/* The tasks of BF16 matrices and of decoded E4M3 panels. For each k block,
 * each group of mr rows is packed once and swept across the task's panels,
 * so the A panel stays in L1 while W streams from L2. */
static void uform_gemm_task(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_gemm_job_t *job = context;
    const uform_gemm_class_t *gc = job->gemm_class;
    size_t k = job->w->k, nr = gc->nr, mr = gc->mr;
    uform_gemm_buffers_t buffers;
    memset(buffers.edge, 0, mr * nr * sizeof(float)); /* the part the kernel reads */
    if (gc->tasks_begin) gc->tasks_begin();

    for (size_t task = begin; task < end; task++) {
        size_t i0, i1, q0, q1;
        uform_gemm_task_bounds(job, task, &i0, &i1, &q0, &q1);
        for (size_t k0 = 0; k0 < k; k0 += job->kc) {
            size_t kb = uform_min(job->kc, k - k0);
            int first = k0 == 0 && !job->accumulate, last = k0 + kb == k;
            uform_gemm_panels_t panels = job->b;
            panels.base += k0 * nr * panels.size;
            uform_gemm_row_groups(job, &panels, i0, i1, k0, kb, first, last, q0, q1, &buffers);
        }
    }
    if (gc->tasks_end) gc->tasks_end();
}

/* Whether the tile tasks' first row group reads the E4M3 panels directly:
 * a class with kernels_e4m3 that takes these scales on this CPU, whose
 * panel blocks fit the tile as the tile decoder would write them. */
static bool uform_gemm_e4m3_direct(const uform_gemm_job_t *job) {
    const uform_gemm_class_t *gc = job->gemm_class;
    size_t panels = job->w->n / gc->nr + (job->w->n % gc->nr != 0);
    return uform_gemm_e4m3_direct_kernels && gc->kernels_e4m3[1] &&
           (!gc->e4m3_kernels_take || gc->e4m3_kernels_take(job->codes.slot_scales, panels * job->codes.slots));
}

/* Rows [i, i + rows) (one row group) of k block [k0, k0 + kb) swept over
 * E4M3 panels [q0, q1) by the class's kernels_e4m3, each panel's decoded
 * block written to decoded + (q - q0) * panel_bytes when `decoded` is not
 * NULL; then the bias (add_bias) and GELU over the rows, as
 * uform_gemm_row_groups does. */
static void uform_gemm_e4m3_sweep(const uform_gemm_job_t *job, size_t i, size_t rows, size_t k0,
                                  size_t kb, int first, int last, size_t q0, size_t q1,
                                  unsigned char *decoded, size_t panel_bytes,
                                  uform_gemm_buffers_t *buffers) {
    const uform_gemm_class_t *gc = job->gemm_class;
    const uform_gemm_codes_t *codes = &job->codes;
    size_t n = job->w->n, nr = gc->nr, panel_codes = codes->kp * nr;
    const float *kernel_bias = gc->add_bias ? NULL : job->bias;
    uform_e4m3_kernel_fn_t kernel = gc->kernels_e4m3[rows];
    const void *a_panel = uform_gemm_a_panel(job, i, rows, k0, kb, buffers->a_panel);
    for (size_t q = q0; q < q1; q++) {
        const uint8_t *panel = codes->codes + q * panel_codes + k0 * nr;
        const uint8_t *next = q + 1 < q1 ? panel + panel_codes : NULL;
        const float *scales = codes->slot_scales + q * codes->slots;
        void *block = decoded ? decoded + (q - q0) * panel_bytes : NULL;
        size_t j = q * nr, cols = uform_min(nr, n - j);
        float *c = job->y + i * job->y_stride + j;
        const float *bias = last && kernel_bias ? kernel_bias + j : NULL;
        if (cols == nr) {
            kernel(kb, a_panel, panel, scales, next, block, c, job->y_stride, first, bias);
            continue;
        }
        bias = uform_gemm_edge_in(job, c, rows, cols, first, bias, buffers);
        kernel(kb, a_panel, panel, scales, NULL, block, buffers->edge, nr, first, bias);
        uform_gemm_edge_out(job, c, rows, cols, buffers);
    }
    if (last) uform_gemm_finish_rows(job, i, rows, q0, q1);
}

/* E4M3 tasks that decode their own panels (uform_gemm_run): for each k
 * block, the task's panels are decoded into a tile, an L1 one on its stack or
 * the thread's L2 one, then every row group sweeps them. */
static void uform_gemm_task_e4m3_tile(void *context, size_t begin, size_t end, size_t thread) {
    const uform_gemm_job_t *job = context;
    const uform_gemm_class_t *gc = job->gemm_class;
    const uform_gemm_codes_t *codes = &job->codes;
    size_t k = job->w->k, nr = gc->nr, mr = gc->mr;
    bool pairs = job->w->layout == UFORM_GEMM_PAIRS;
    size_t kbp_max = uform_gemm_class_k(gc, job->w->layout, job->kc);
    _Alignas(64) unsigned char stack_tile[UFORM_GEMM_TILE_BYTES];
    unsigned char *tile = job->tiles ? job->tiles + thread * UFORM_GEMM_E4M3_LOCAL_TILE_BYTES : stack_tile;
    uform_gemm_buffers_t buffers;
    memset(buffers.edge, 0, mr * nr * sizeof(float));
    if (gc->tasks_begin) gc->tasks_begin();

    for (size_t task = begin; task < end; task++) {
        size_t i0, i1, q0, q1;
        uform_gemm_task_bounds(job, task, &i0, &i1, &q0, &q1);
        for (size_t k0 = 0; k0 < k; k0 += job->kc) {
            size_t kb = uform_min(job->kc, k - k0);
            int first = k0 == 0 && !job->accumulate, last = k0 + kb == k;
            /* rows of the panel this block covers, its padding included
             * (k0 is a multiple of kc, so of k_align): pairs of k for PAIRS */
            size_t kbp = uform_gemm_class_k(gc, job->w->layout, kb), panel_rows = pairs ? kbp / 2 : kbp;
            uform_gemm_panels_t panels = {tile, q0, kbp_max * nr, codes->size, job->b.kernels,
                                          job->b.wide, job->b.pair};
            if (job->direct) {
                /* the first row group's kernels decode the panels as they
                 * multiply, writing the tile only for the rows after them */
                size_t rows = uform_min(mr, i1 - i0);
                uform_gemm_e4m3_sweep(job, i0, rows, k0, kb, first, last, q0, q1,
                                      i1 - i0 > rows ? tile : NULL, kbp_max * nr * codes->size, &buffers);
                if (i0 + rows < i1)
                    uform_gemm_row_groups(job, &panels, i0 + rows, i1, k0, kb, first, last, q0, q1, &buffers);
                continue;
            }
            for (size_t q = q0; q < q1; q++)
                codes->decode(codes->codes + q * codes->kp * nr + k0 * nr, panel_rows, codes->slots,
                              codes->slot_scales + q * codes->slots,
                              tile + (q - q0) * kbp_max * nr * codes->size);
            uform_gemm_row_groups(job, &panels, i0, i1, k0, kb, first, last, q0, q1, &buffers);
        }
    }
    if (gc->tasks_end) gc->tasks_end();
}

/* The blocks of a pass over `panels` panels. A class with row_group_tasks,
 * several threads and at least 4 row groups a thread: each task is one row
 * group across every panel (its A panel packed by the task into its buffer,
 * k block by k block, while it is in L1, and no packing pass before the
 * tasks; each sweep prefetches the next panel, so W comes from L3 behind the
 * products). Measured on the 2-core Zen 4 against the tiles below, the same
 * process alternating the two (text_encode, depth 12, hidden 512, 32-48
 * texts in one call and one text per call): SAPPHIRE +0.7% while the machine was
 * quiet, +5% to +10% while other work loaded its memory (the packing pass
 * and its buffer's round trip through L3 suffer most there); HASWELL +3.5%;
 * SKYLAKE within +-0.6%; one thread within +-0.6% (so left as it was).
 * Otherwise tiles of up to 8 kernel rows x 512 columns keep a task's y
 * block and W block within L2. With several
 * threads, shrink them until there are enough tasks to balance: first across
 * n (down to 4 panels, so a packed A panel is still reused and the wide
 * kernels still apply), then across m, then n down to one panel while
 * threads would idle. Tile tasks with the threads' L2 tiles (job->tiles)
 * take every row in one block, so that each weight is decoded once, and
 * split n alone. */
static void uform_gemm_blocking(uform_gemm_job_t *job, size_t threads, size_t panels, bool tile) {
    const uform_gemm_class_t *gc = job->gemm_class;
    size_t mr = gc->mr, nr = gc->nr, m = job->m;
    size_t want = threads > 1 ? 8 * threads : 1;
    size_t min_panels = gc->wide_panels > 4 ? gc->wide_panels : 4;
    job->kc = gc->kc;
    if (gc->row_group_tasks && !tile && threads > 1 && (m + mr - 1) / mr >= 4 * threads) {
        job->mc = mr;
        job->nc_panels = panels;
        job->n_blocks = 1;
        job->k_blocks = (job->w->k + job->kc - 1) / job->kc;
        return;
    }
    job->mc = uform_min(8 * mr, uform_round_up(m, mr));
    job->nc_panels = uform_min(panels, 512 / nr > 0 ? 512 / nr : 1);
    if (tile && job->tiles) {
        size_t panel_bytes = uform_gemm_local_panel_bytes(gc, job->w, job->codes.size);
        job->mc = uform_round_up(m, mr);
        job->nc_panels = uform_min(job->nc_panels, UFORM_GEMM_E4M3_LOCAL_TILE_BYTES / panel_bytes);
        /* 4 tasks a thread balance well enough; fewer panels than the
         * wide kernels take only where threads would idle */
        while (job->nc_panels > min_panels && (panels + job->nc_panels - 1) / job->nc_panels < 4 * threads)
            job->nc_panels = (job->nc_panels + 1) / 2;
        while (job->nc_panels > 1 && (panels + job->nc_panels - 1) / job->nc_panels < threads)
            job->nc_panels = (job->nc_panels + 1) / 2;
        job->n_blocks = (panels + job->nc_panels - 1) / job->nc_panels;
        job->k_blocks = (job->w->k + job->kc - 1) / job->kc;
        return;
    }
    if (tile) {
        /* The decoded tile holds nc_panels x kc weights of the compute type:
         * min_panels of them and k blocks of 64 at least, else one panel. */
        size_t per_k = nr * job->codes.size;
        size_t tile_panels = UFORM_GEMM_TILE_BYTES / (UFORM_GEMM_E4M3_KC * per_k);
        if (tile_panels == 0) tile_panels = 1;
        size_t k_step = gc->k_align > 2 ? gc->k_align : 2; /* whole pairs, whole AMX steps */
        job->kc = uform_min(gc->kc, UFORM_GEMM_TILE_BYTES / (tile_panels * per_k)) / k_step * k_step;
        job->nc_panels = uform_min(job->nc_panels, tile_panels);
        /* Decoding a tile costs about what one row group's pass over it does:
         * let 192 rows sweep each (about 3% of the time at large m). */
        job->mc = uform_min(uform_round_up(UFORM_GEMM_E4M3_MC, mr), uform_round_up(m, mr));
    }
    for (;;) {
        size_t m_blocks = (m + job->mc - 1) / job->mc;
        job->n_blocks = (panels + job->nc_panels - 1) / job->nc_panels;
        if (m_blocks * job->n_blocks >= want) break;
        if (job->nc_panels > min_panels) job->nc_panels = (job->nc_panels + 1) / 2;
        else if (job->mc > mr) job->mc = uform_round_up(job->mc / 2, mr);
        else if (m_blocks * job->n_blocks < threads && job->nc_panels > 1)
            job->nc_panels = (job->nc_panels + 1) / 2;
        else break;
    }
    job->k_blocks = (job->w->k + job->kc - 1) / job->kc;
}

void uform_gemm_run(const uform_gemm_class_t *gemm_class, uform_executor_t *executor,
                    const uform_packed_t *w, const float *x, size_t x_stride, size_t m,
                    const float *bias, uform_gemm_epilogue_t epilogue, float *y,
                    size_t y_stride) {
    if (m == 0 || w->n == 0) return;
    size_t mr = gemm_class->mr, nr = gemm_class->nr;
    size_t panels = w->n / nr + (w->n % nr != 0);
    bool e4m3 = w->scalar == UFORM_SCALAR_E4M3;
    uform_gemm_job_t job = {.gemm_class = gemm_class, .w = w, .x = x, .x_stride = x_stride,
                            .m = m, .bias = bias, .accumulate = epilogue == UFORM_GEMM_ACCUMULATE,
                            .gelu = epilogue == UFORM_GEMM_GELU, .y = y, .y_stride = y_stride};
    job.b = (uform_gemm_panels_t){w->data, 0, w->padded_k * nr, 2,
                                  gemm_class->kernels, gemm_class->wide, gemm_class->pair};
    size_t threads = executor ? uform_executor_width(executor) : 1;
    /* Waking the pool costs about as much as 1M multiply-adds (tens of us):
     * smaller products run on the calling thread alone. */
    double macs = (double)m * (double)w->n * (double)w->k;
    bool parallel = executor && threads > 1 && macs >= 1048576.0;

    /* E4M3 panels are decoded into the class's compute type (BF16 PAIRS or
     * FP32) before each pass's tasks, up to uform_gemm_decoded_max bytes a
     * pass: the tasks then block and sweep exactly as BF16 ones, the decoding
     * done once per product rather than once per task's rows. Where not even
     * one panel's buffer can be had, each task decodes small tiles instead;
     * so does a product of fewer rows than a kernel call takes when the L2
     * tiles below cannot be had, where each weight is decoded once either
     * way and the tiles spare the buffer's round trip through L2 and a
     * second wake of the pool (gemm_bench, SAPPHIRE, m = 1 to 7: up to 1.7x
     * faster on tiles; equal at m = 14). */
    size_t pass_panels = panels;
    uform_range_fn_t task = uform_gemm_task;
    if (e4m3) {
        job.codes = uform_gemm_codes_of(gemm_class, w);
        bool pairs = w->layout == UFORM_GEMM_PAIRS;
        size_t panel_bytes = job.codes.kp * nr * job.codes.size;
        /* Up to a text's worth of rows, each task decodes its panels into
         * its thread's L2 tile, k block by k block, and all rows sweep
         * them: each weight is still decoded once, and the decoded panels
         * are written where they are read, not through a shared buffer
         * (2 MiB for 2048 x 512) whose lines the other core may hold
         * (AMX, m = 288: the decoding took 10% of the product). Fewer rows
         * than a kernel call takes too: against the small stack tiles (k
         * blocks of 128, partial sums stored and reloaded four times as
         * often), gemm_bench on the Xeon with AMX, two threads, m = 8
         * and 12: AMX +30-60%, HASWELL +30-65%, SKYLAKE +5-40%, SAPPHIRE
         * +5-15%; m = 1 and 4 unchanged to +35% (AMX at 4;
         * docs/benchmarks-e4m3.md). */
        if (m <= uform_gemm_e4m3_local_rows &&
            uform_gemm_local_panel_bytes(gemm_class, w, job.codes.size) <= UFORM_GEMM_E4M3_LOCAL_TILE_BYTES)
            job.tiles = uform_scratch_take(executor, threads * UFORM_GEMM_E4M3_LOCAL_TILE_BYTES);
        pass_panels = m < mr || job.tiles ? 0 : uform_min(panels, uform_gemm_decoded_max / panel_bytes);
        if (pass_panels > 0)
            job.decoded = uform_scratch_take(executor, pass_panels * panel_bytes);
        bool bf16 = job.codes.size == 2; /* the decoded panels in the class's BF16 layout */
        job.b = (uform_gemm_panels_t){job.decoded, 0, job.codes.kp * nr, job.codes.size,
                                      bf16 ? gemm_class->kernels : gemm_class->kernels_f32,
                                      bf16 ? gemm_class->wide : gemm_class->wide_f32,
                                      pairs ? gemm_class->pair : NULL};
        if (!job.decoded) {
            pass_panels = panels;
            task = uform_gemm_task_e4m3_tile;
        }
    }

    for (size_t q_begin = 0; q_begin < panels; q_begin += pass_panels) {
        job.q_begin = job.b.first = q_begin;
        job.q_end = uform_min(panels, q_begin + pass_panels);
        uform_gemm_blocking(&job, threads, job.q_end - q_begin, task == uform_gemm_task_e4m3_tile);
        job.direct = task == uform_gemm_task_e4m3_tile && job.tiles && uform_gemm_e4m3_direct(&job);
        job.decode_panels = job.decoded ? job.q_end - q_begin : 0;
        /* Tasks side by side across n would each pack the same rows of A (3
         * to 8 times for one text's projections, on one thread as on
         * several): pack every panel once first, in parallel when the pool
         * runs the product, where that buffer is small and the product is
         * not. If it cannot be had, the tasks pack their own; the panels and
         * so the results are the same. */
        size_t slots = (m + mr - 1) / mr * job.k_blocks;
        if (q_begin == 0 && job.n_blocks > 1 && macs >= 1048576.0 &&
            slots <= UFORM_GEMM_PACKED_A_MAX / UFORM_GEMM_A_BYTES) {
            job.packed_a = uform_scratch_take(executor, slots * UFORM_GEMM_A_BYTES);
            job.pack_slots = job.packed_a ? slots : 0;
        } else {
            job.pack_slots = 0;
        }
        size_t preparations = job.decode_panels + job.pack_slots;
        if (parallel && preparations > 1)
            uform_parallel_for(executor, preparations, 1, uform_gemm_prepare_task, &job);
        else if (preparations)
            uform_gemm_prepare_task(&job, 0, preparations, 0);
        size_t tasks = (m + job.mc - 1) / job.mc * job.n_blocks;
        if (parallel)
            uform_parallel_for(executor, tasks, 1, task, &job);
        else
            task(&job, 0, tasks, 0);
    }
    uform_scratch_give(executor, job.packed_a);
    uform_scratch_give(executor, job.decoded);
    uform_scratch_give(executor, job.tiles);
}
