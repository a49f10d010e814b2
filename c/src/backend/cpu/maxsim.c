/* maxsim.c: the CPU backend's MaxSim (backend.h: maxsim), the work of
 * uform_late_interaction_scores once its inputs are checked.
 * *
 * Items are grouped into blocks of whole items: a query block holds at most
 * UFORM_LI_QUERY_ROWS rows and as many items, a document block at most
 * UFORM_LI_DOCUMENT_ROWS of each; an item longer than that is a block of its
 * own, walked in chunks of that many rows. One task scores one query block
 * against one document block: for each pair of chunks the rows are converted
 * to FP32 (aligned F32 rows are read in place), S = Q D^T comes from
 * uform_sgemm, and each query row keeps a running maximum per document; after
 * the document block's last chunk the maxima are added into double sums, query
 * row by query row in order. Tasks write disjoint scores and run on the pool in
 * any order. Scratch is per pool thread and bounded by the block sizes, however
 * many rows the items hold.
 *
 * Determinism: an element of S depends only on its two rows (uform_sgemm's
 * contract), a maximum is a selection, and the sums run in row order, so the
 * scores do not depend on the thread count nor on the blocking. A NaN among
 * a query row's products with a document makes that pair's score NaN.
 *
 * I8 rows enter the product as their integers (exact in FP32) and each I8
 * side's 1/127 is applied once to the mean, in double: the products of two I8
 * sides are then exact integers up to width 1024. E4M3 and E5M2 rows (unit
 * vectors, no scale) enter as their exact FP32 values.
 */
#include "backend/cpu/rows.h"
#include "backend/cpu/sgemm.h"
#include "core/f16_widen.h"
#include "core/fp8.h"

#include <math.h>
#include <stdlib.h>

/* Rows per query and document chunk. S is 256 x 1024 floats (1 MiB) per task;
 * a chunk of documents is converted once per chunk of queries, so conversion
 * costs 1/256 of the multiply-adds and S's write and read 2/width of them. */
#define UFORM_LI_QUERY_ROWS 256
#define UFORM_LI_DOCUMENT_ROWS 1024
/* Blocks per side per parallel loop: bounds the boundary arrays, however many
 * items there are. */
#define UFORM_LI_BLOCKS 1024

static size_t uform_li_min(size_t a, size_t b) { return a < b ? a : b; }


/* ---- reading rows as FP32 ------------------------------------------------------ */

/* Rows [begin, begin + rows) of a side as FP32 values in dst (rows x width,
 * dense); I8 as its integers (the 1/127 is applied to the mean), E4M3 and
 * E5M2 as their values. */
static void uform_li_convert(const uform_token_rows_t *side, size_t begin, size_t rows,
                             float *dst) {
    size_t width = side->width;
    float fp8[256];   /* each FP8 code's value, exact in FP32 */
    if (side->scalar == UFORM_SCALAR_E4M3 || side->scalar == UFORM_SCALAR_E5M2)
        for (unsigned code = 0; code < 256; code++)
            fp8[code] = side->scalar == UFORM_SCALAR_E4M3 ? uform_e4m3_to_f32((uint8_t)code)
                                                           : uform_e5m2_to_f32((uint8_t)code);
    for (size_t r = 0; r < rows; r++) {
        const uint8_t *row = (const uint8_t *)side->data + (begin + r) * side->row_bytes;
        float *out = dst + r * width;
        switch (side->scalar) {
        case UFORM_SCALAR_F32: memcpy(out, row, width * sizeof(float)); break;
        case UFORM_SCALAR_BF16:
            for (size_t i = 0; i < width; i++) {
                uint16_t bits;
                memcpy(&bits, row + 2 * i, sizeof(bits));
                out[i] = uform_bf16_to_f32(bits);
            }
            break;
        case UFORM_SCALAR_F16:
            for (size_t i = 0; i < width; i++) {
                uint16_t bits;
                memcpy(&bits, row + 2 * i, sizeof(bits));
                out[i] = uform_f16_widen(bits);
            }
            break;
        case UFORM_SCALAR_I8:
            for (size_t i = 0; i < width; i++) out[i] = (float)(int8_t)row[i];
            break;
        case UFORM_SCALAR_E4M3:
        case UFORM_SCALAR_E5M2:
            for (size_t i = 0; i < width; i++) out[i] = fp8[row[i]];
            break;
        default: break;
        }
    }
}

/* F32 rows sgemm can read where they are: float-aligned rows and stride. */
static bool uform_li_in_place(const uform_token_rows_t *side) {
    return side->scalar == UFORM_SCALAR_F32 && side->row_bytes % sizeof(float) == 0 &&
           (uintptr_t)side->data % _Alignof(float) == 0;
}

/* Rows [begin, begin + rows) as an sgemm operand: in place, or converted into scratch. */
static uform_matrix_t uform_li_rows(const uform_token_rows_t *side, bool in_place, size_t begin,
                                    size_t rows, float *scratch, bool transposed) {
    if (in_place)
        return (uform_matrix_t){(const float *)((const uint8_t *)side->data +
                                                begin * side->row_bytes),
                                side->row_bytes / sizeof(float), transposed};
    uform_li_convert(side, begin, rows, scratch);
    return (uform_matrix_t){scratch, side->width, transposed};
}

/* The largest of x[0, n), n >= 1, or NaN when any is NaN (so a NaN input
 * gives a NaN score, whatever the order): 16 running maxima (the compiler's
 * vector max) and an unordered flag, combined in a fixed order. */
static float uform_li_max(const float *x, size_t n) {
    float lanes[16];
    int unordered[16];
    for (size_t l = 0; l < 16; l++) lanes[l] = -INFINITY, unordered[l] = 0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (size_t l = 0; l < 16; l++) {
            lanes[l] = x[i + l] > lanes[l] ? x[i + l] : lanes[l];
            unordered[l] |= x[i + l] != x[i + l];
        }
    for (; i < n; i++) {
        lanes[0] = x[i] > lanes[0] ? x[i] : lanes[0];
        unordered[0] |= x[i] != x[i];
    }
    float best = lanes[0];
    int any_unordered = unordered[0];
    for (size_t l = 1; l < 16; l++) {
        best = lanes[l] > best ? lanes[l] : best;
        any_unordered |= unordered[l];
    }
    return any_unordered ? NAN : best;
}

/* ---- blocks ---------------------------------------------------------------------- */

/* Splits items [begin, count) into at most UFORM_LI_BLOCKS blocks of whole
 * items, each at most `limit` rows and `limit` items unless it is one longer
 * item; bounds[0 .. blocks] are the item boundaries. Returns the blocks made. */
static size_t uform_li_blocks(const size_t *offsets, size_t count, size_t begin, size_t limit,
                              size_t *bounds) {
    size_t blocks = 0;
    bounds[0] = begin;
    while (begin < count && blocks < UFORM_LI_BLOCKS) {
        size_t end = begin + 1;
        while (end < count && end - begin < limit && offsets[end + 1] - offsets[begin] <= limit)
            end++;
        bounds[++blocks] = end;
        begin = end;
    }
    return blocks;
}

/* ---- the scorer -------------------------------------------------------------------- */

typedef struct {
    float *query_rows;      /* query chunk rows x width, for converted queries */
    float *document_rows;   /* document chunk rows x width, for converted documents */
    float *products;        /* query chunk rows x document chunk rows: S */
    float *maxima;          /* query chunk rows x document block items: running maxima */
    double *sums;           /* query block items x document block items */
} uform_li_scratch_t;

typedef struct {
    const uform_token_rows_t *queries, *documents;
    bool queries_in_place, documents_in_place;
    double scale;                   /* 1/127 per I8 side */
    float *scores;
    const size_t *query_bounds, *document_bounds;  /* item boundaries of this loop's blocks */
    size_t document_blocks;
    uform_li_scratch_t *scratch;    /* one per pool thread */
    uform_executor_t *gemm_executor; /* the executor when the loop is one task, else NULL */
} uform_li_job_t;

/* Scores query items [qa, qb) against document items [da, db). */
static void uform_li_block(const uform_li_job_t *job, size_t qa, size_t qb, size_t da, size_t db,
                           const uform_li_scratch_t *scratch) {
    const uform_token_rows_t *queries = job->queries, *documents = job->documents;
    const size_t *q_offsets = queries->offsets, *d_offsets = documents->offsets;
    size_t width = queries->width, documents_here = db - da;
    size_t q_rows_begin = q_offsets[qa], q_rows_end = q_offsets[qb];
    size_t d_rows_begin = d_offsets[da], d_rows_end = d_offsets[db];
    double *sums = scratch->sums;
    for (size_t i = 0; i < (qb - qa) * documents_here; i++) sums[i] = 0.0;

    size_t item = qa; /* the query item of the next row to fold */
    for (size_t r0 = q_rows_begin; r0 < q_rows_end; r0 += UFORM_LI_QUERY_ROWS) {
        size_t rows = uform_li_min(UFORM_LI_QUERY_ROWS, q_rows_end - r0);
        uform_matrix_t q = uform_li_rows(queries, job->queries_in_place, r0, rows,
                                         scratch->query_rows, false);
        float *maxima = scratch->maxima;
        for (size_t i = 0; i < rows * documents_here; i++) maxima[i] = -INFINITY;

        size_t document = da; /* the first document overlapping the chunk */
        for (size_t c0 = d_rows_begin; c0 < d_rows_end; c0 += UFORM_LI_DOCUMENT_ROWS) {
            size_t columns = uform_li_min(UFORM_LI_DOCUMENT_ROWS, d_rows_end - c0);
            uform_matrix_t d = uform_li_rows(documents, job->documents_in_place, c0, columns,
                                             scratch->document_rows, true);
            uform_sgemm(job->gemm_executor, rows, columns, width, q, d, NULL, false,
                        scratch->products, columns);
            while (d_offsets[document + 1] <= c0) document++;
            for (size_t i = 0; i < rows; i++) {
                const float *s = scratch->products + i * columns;
                float *row_maxima = maxima + i * documents_here;
                for (size_t j = document; j < db && d_offsets[j] < c0 + columns; j++) {
                    size_t begin = d_offsets[j] > c0 ? d_offsets[j] : c0;
                    size_t end = uform_li_min(d_offsets[j + 1], c0 + columns);
                    if (begin == end) continue; /* no rows */
                    float best = uform_li_max(s + (begin - c0), end - begin);
                    float *kept = row_maxima + (j - da);
                    if (best > *kept || best != best) *kept = best; /* NaN stays */
                }
            }
        }

        /* Fold the chunk's rows into their items' sums, in row order. */
        for (size_t i = 0; i < rows; i++) {
            while (q_offsets[item + 1] <= r0 + i) item++;
            double *item_sums = sums + (item - qa) * documents_here;
            const float *row_maxima = maxima + i * documents_here;
            for (size_t j = 0; j < documents_here; j++) item_sums[j] += row_maxima[j];
        }
    }

    size_t document_count = documents->count;
    for (size_t q = qa; q < qb; q++) {
        size_t q_rows = q_offsets[q + 1] - q_offsets[q];
        float *out = job->scores + q * document_count;
        for (size_t j = da; j < db; j++) {
            bool empty = q_rows == 0 || d_offsets[j + 1] == d_offsets[j];
            double mean = empty ? 0.0 : sums[(q - qa) * documents_here + (j - da)] / (double)q_rows;
            out[j] = (float)(mean * job->scale);
        }
    }
}

static void uform_li_task(void *context, size_t begin, size_t end, size_t thread) {
    const uform_li_job_t *job = context;
    for (size_t task = begin; task < end; task++) {
        size_t qi = task / job->document_blocks, di = task % job->document_blocks;
        uform_li_block(job, job->query_bounds[qi], job->query_bounds[qi + 1],
                       job->document_bounds[di], job->document_bounds[di + 1],
                       &job->scratch[thread]);
    }
}

static void uform_li_free_scratch(uform_li_scratch_t *scratch, size_t threads) {
    if (!scratch) return;
    for (size_t t = 0; t < threads; t++) {
        uform_free_aligned(scratch[t].query_rows);
        uform_free_aligned(scratch[t].document_rows);
        uform_free_aligned(scratch[t].products);
        uform_free_aligned(scratch[t].maxima);
        uform_free_aligned(scratch[t].sums);
    }
    free(scratch);
}

/* The most a task can need: chunks and blocks are no larger than the call's own rows and
 * items, so small calls take small scratch. */
static uform_status_t uform_li_alloc_scratch(const uform_li_job_t *job, size_t threads,
                                             uform_li_scratch_t **out) {
    const uform_token_rows_t *queries = job->queries, *documents = job->documents;
    size_t width = queries->width;
    size_t query_rows = uform_li_min(UFORM_LI_QUERY_ROWS,
                                     queries->offsets[queries->count] - queries->offsets[0]);
    size_t query_items = uform_li_min(UFORM_LI_QUERY_ROWS, queries->count);
    size_t document_rows = uform_li_min(UFORM_LI_DOCUMENT_ROWS,
                                        documents->offsets[documents->count] - documents->offsets[0]);
    size_t document_items = uform_li_min(UFORM_LI_DOCUMENT_ROWS, documents->count);
    uform_li_scratch_t *scratch = uform_alloc_zeroed(threads, sizeof(*scratch),
                                                     "late_interaction_scores scratch");
    if (!scratch) return UFORM_OUT_OF_MEMORY;
    for (size_t t = 0; t < threads; t++) {
        uform_li_scratch_t *s = &scratch[t];
        bool ok = true;
        if (!job->queries_in_place) {
            s->query_rows = uform_alloc_aligned(query_rows * sizeof(float), width,
                                                "late_interaction_scores query rows");
            ok = ok && s->query_rows;
        }
        if (ok && !job->documents_in_place) {
            s->document_rows = uform_alloc_aligned(document_rows * sizeof(float), width,
                                                   "late_interaction_scores document rows");
            ok = ok && s->document_rows;
        }
        if (ok) {
            s->products = uform_alloc_aligned(query_rows * document_rows, sizeof(float),
                                              "late_interaction_scores products");
            s->maxima = uform_alloc_aligned(query_rows * document_items, sizeof(float),
                                            "late_interaction_scores maxima");
            s->sums = uform_alloc_aligned(query_items * document_items, sizeof(double),
                                          "late_interaction_scores sums");
            ok = s->products && s->maxima && s->sums;
        }
        if (!ok) {
            uform_li_free_scratch(scratch, threads);
            return UFORM_OUT_OF_MEMORY;
        }
    }
    *out = scratch;
    return UFORM_OK;
}

uform_status_t uform_cpu_maxsim(uform_backend_t *b, const uform_token_rows_t *queries,
                                const uform_token_rows_t *documents, float *scores) {
    uform_executor_t *executor = b->executor;
    size_t query_count = queries->count, document_count = documents->count;
    uform_li_job_t job = {
        .queries = queries,
        .documents = documents,
        .queries_in_place = uform_li_in_place(queries),
        .documents_in_place = uform_li_in_place(documents),
        .scale = (queries->scalar == UFORM_SCALAR_I8 ? 1.0 / 127.0 : 1.0) *
                 (documents->scalar == UFORM_SCALAR_I8 ? 1.0 / 127.0 : 1.0),
        .scores = scores,
    };
    size_t threads = executor ? uform_executor_width(executor) : 1;
    size_t *bounds = uform_alloc(2 * (UFORM_LI_BLOCKS + 1), sizeof(size_t),
                                 "late_interaction_scores blocks");
    if (!bounds) return UFORM_OUT_OF_MEMORY;
    size_t *query_bounds = bounds, *document_bounds = bounds + UFORM_LI_BLOCKS + 1;
    uform_li_scratch_t *scratch = NULL;
    uform_status_t status = uform_li_alloc_scratch(&job, threads, &scratch);
    if (status != UFORM_OK) {
        free(bounds);
        return status;
    }
    job.scratch = scratch;
    job.query_bounds = query_bounds;
    job.document_bounds = document_bounds;

    for (size_t qs = 0; qs < query_count;) {
        size_t query_blocks = uform_li_blocks(queries->offsets, query_count, qs,
                                              UFORM_LI_QUERY_ROWS, query_bounds);
        for (size_t ds = 0; ds < document_count;) {
            job.document_blocks = uform_li_blocks(documents->offsets, document_count, ds,
                                                  UFORM_LI_DOCUMENT_ROWS, document_bounds);
            size_t tasks = query_blocks * job.document_blocks;
            if (tasks == 1 || threads == 1) {
                /* One task: its products may use the pool instead. */
                job.gemm_executor = tasks == 1 ? executor : NULL;
                uform_li_task(&job, 0, tasks, 0);
            } else {
                job.gemm_executor = NULL;
                uform_parallel_for(executor, tasks, 1, uform_li_task, &job);
            }
            ds = document_bounds[job.document_blocks];
        }
        qs = query_bounds[query_blocks];
    }
    uform_li_free_scratch(scratch, threads);
    free(bounds);
    return UFORM_OK;
}
