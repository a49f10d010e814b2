/* test_late_interaction.c: uform_late_interaction_scores (MaxSim) against a
 * brute-force float64 double loop written from the definition, for every pair
 * of the scalars it reads; the conversions of all BF16, F16 and I8 values;
 * empty items, long items and many items (past the scorer's blocks); bit-equal
 * scores on 1, 2 and 3 threads; and bad input.
 *
 *   make c/build/tests/test_late_interaction && c/build/tests/test_late_interaction
 *
 * Error bound (u = 2^-24). The scorer multiplies in FP32 and keeps the rest
 * exact or in double: each product <q_i, d_j> is one chain of `width`
 * FP32 steps from +0, within gamma(width + 2) S_ij of the exact value, where
 * S_ij = sum_p |q_ip d_jp| and gamma(n) = n u / (1 - n u) (the bound of
 * uform_sgemm, see test_sgemm.c); a maximum moves by at most the largest of
 * its terms' errors, and so does a mean; the mean and the 1/127 scales are
 * taken in double (relative 2^-50 here) and rounded once to FP32 (2^-24
 * relative). So
 *   |score - exact| <= (gamma(width + 2) + 2^-50) mean_i max_j S_ij + 2^-24 |exact|.
 * The oracle decodes stored bits on its own (ldexp for F16, a shift for BF16,
 * v / 127 for I8) and sums in double; its own error is far below 2^-50 S. */
#include "core/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static const uform_scalar_t SCALARS[] = {UFORM_SCALAR_F32, UFORM_SCALAR_BF16, UFORM_SCALAR_F16,
                                         UFORM_SCALAR_I8};
static const char *scalar_name(uform_scalar_t s) {
    switch (s) {
    case UFORM_SCALAR_F32: return "F32";
    case UFORM_SCALAR_BF16: return "BF16";
    case UFORM_SCALAR_F16: return "F16";
    case UFORM_SCALAR_I8: return "I8";
    default: return "?";
    }
}
static size_t scalar_bytes(uform_scalar_t s) {
    return s == UFORM_SCALAR_F32 ? 4 : s == UFORM_SCALAR_I8 ? 1 : 2;
}

static void *xmalloc(size_t bytes) {
    void *p = calloc(bytes ? bytes : 1, 1);
    if (!p) {
        printf("out of memory\n");
        exit(2);
    }
    return p;
}

/* ---- the oracle's decoding, independent of the library ------------------------ */

static double decode_f16(uint16_t h) {
    int sign = h >> 15, exponent = (h >> 10) & 31, mantissa = h & 1023;
    double magnitude;
    if (exponent == 0) magnitude = ldexp(mantissa, -24);
    else if (exponent == 31) magnitude = mantissa ? NAN : INFINITY;
    else magnitude = ldexp(1024 + mantissa, exponent - 25);
    return sign ? -magnitude : magnitude;
}

static double decode(uform_scalar_t scalar, const uint8_t *at) {
    switch (scalar) {
    case UFORM_SCALAR_F32: {
        float f;
        memcpy(&f, at, 4);
        return f;
    }
    case UFORM_SCALAR_BF16: {
        uint16_t h;
        memcpy(&h, at, 2);
        uint32_t bits = (uint32_t)h << 16;
        float f;
        memcpy(&f, &bits, 4);
        return f;
    }
    case UFORM_SCALAR_F16: {
        uint16_t h;
        memcpy(&h, at, 2);
        return decode_f16(h);
    }
    case UFORM_SCALAR_I8: return (int8_t)at[0] / 127.0;
    default: return NAN;
    }
}

static double value(const uform_token_rows_t *side, size_t row, size_t i) {
    return decode(side->scalar, (const uint8_t *)side->data + row * side->row_bytes +
                                    i * scalar_bytes(side->scalar));
}

/* exact[q * D + d] and bound[q * D + d], from the definition. The bound is
 * the one above with each query row's own largest S (the mean of those), so
 * it stays tight when rows differ in scale. */
static void oracle(const uform_token_rows_t *queries, const uform_token_rows_t *documents,
                   double *exact, double *bound) {
    size_t width = queries->width, D = documents->count;
    double u = 0x1p-24, gamma = (width + 2) * u / (1 - (width + 2) * u);
    for (size_t q = 0; q < queries->count; q++)
        for (size_t d = 0; d < D; d++) {
            size_t q0 = queries->offsets[q], q1 = queries->offsets[q + 1];
            size_t d0 = documents->offsets[d], d1 = documents->offsets[d + 1];
            double sum = 0, s_sum = 0;
            for (size_t i = q0; i < q1 && d0 < d1; i++) {
                double best = -INFINITY, row_s = 0;
                for (size_t j = d0; j < d1; j++) {
                    double dot = 0, s = 0;
                    for (size_t p = 0; p < width; p++) {
                        double x = value(queries, i, p), y = value(documents, j, p);
                        dot += x * y;
                        s += fabs(x * y);
                    }
                    if (dot > best) best = dot;
                    if (s > row_s) row_s = s;
                }
                sum += best;
                s_sum += row_s;
            }
            bool empty = q0 == q1 || d0 == d1;
            double score = empty ? 0.0 : sum / (double)(q1 - q0);
            double s_mean = empty ? 0.0 : s_sum / (double)(q1 - q0);
            exact[q * D + d] = score;
            bound[q * D + d] = (gamma + 0x1p-50) * s_mean + u * fabs(score);
        }
}

/* ---- random token rows ------------------------------------------------------------ */

typedef struct {
    uform_token_rows_t rows;
    uint8_t *memory;   /* what to free: data may start past it */
    size_t *offsets;
} side_t;

static size_t rng_below(size_t n) { return (size_t)(rng_next() % n); }

/* Uniform in [-1, 1). */
static float rng_unit(void) { return (float)((double)(rng_next() >> 11) * 0x1p-52 - 1.0); }

/* count items of [min_rows, max_rows] rows (empty ones among them when min_rows
 * is 0), random values stored as `scalar`, rows `pad` bytes longer than
 * needed, data `shift` bytes past an aligned allocation and offsets starting at
 * `first` (rows before it hold garbage the scorer must not read). */
static side_t make_side(uform_scalar_t scalar, size_t count, size_t min_rows, size_t max_rows,
                        size_t width, size_t pad, size_t shift, size_t first) {
    side_t side;
    side.offsets = xmalloc((count + 1) * sizeof(size_t));
    side.offsets[0] = first;
    for (size_t i = 0; i < count; i++)
        side.offsets[i + 1] = side.offsets[i] + min_rows + rng_below(max_rows - min_rows + 1);
    size_t rows = side.offsets[count], row_bytes = width * scalar_bytes(scalar) + pad;
    side.memory = xmalloc(rows * row_bytes + shift);
    uint8_t *data = side.memory + shift;
    for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < width; i++) {
            uint8_t *at = data + r * row_bytes + i * scalar_bytes(scalar);
            float x = rng_unit();
            if (scalar == UFORM_SCALAR_F32) {
                memcpy(at, &x, 4);   /* normalised below */
            } else if (scalar == UFORM_SCALAR_I8) {
                at[0] = (uint8_t)rng_next();   /* every byte, -128 included */
            } else {
                /* Random bit patterns of magnitude below 4: F16 with every
                 * exponent (zeros and subnormals too), BF16 with exponents
                 * 2^-15 to 2^1 (so that no FP32 product underflows, which the
                 * bound leaves out); test_every_value covers every pattern. */
                uint16_t bits = (uint16_t)rng_next();
                if (scalar == UFORM_SCALAR_F16 && ((bits >> 10) & 31) > 16) bits &= 0xbfff;
                if (scalar == UFORM_SCALAR_BF16)
                    bits = (uint16_t)((bits & 0x807f) | ((112 + ((bits >> 7) & 255) % 17) << 7));
                memcpy(at, &bits, 2);
            }
        }
    /* F32 rows as unit vectors, like the encoder's: every row a plausible
     * maximum, so a row the scorer skipped would change the scores. */
    if (scalar == UFORM_SCALAR_F32)
        for (size_t r = 0; r < rows; r++) {
            uint8_t *row = data + r * row_bytes;
            float values[256], norm = 0;   /* widths here are at most 256 */
            memcpy(values, row, width * sizeof(float));
            for (size_t i = 0; i < width; i++) norm += values[i] * values[i];
            for (size_t i = 0; i < width; i++) values[i] /= sqrtf(norm);
            memcpy(row, values, width * sizeof(float));
        }
    side.rows = (uform_token_rows_t){.data = data, .offsets = side.offsets, .count = count,
                                     .width = width, .row_bytes = row_bytes, .scalar = scalar};
    return side;
}

static void free_side(side_t *side) {
    free(side->memory);
    free(side->offsets);
}

/* Scores on `executor` against the oracle; returns the worst error / bound. */
static double check_against_oracle(uform_executor_t *executor, const side_t *queries,
                                   const side_t *documents, const char *what) {
    size_t Q = queries->rows.count, D = documents->rows.count;
    float *scores = xmalloc(Q * D * sizeof(float));
    double *exact = xmalloc(Q * D * sizeof(double)), *bound = xmalloc(Q * D * sizeof(double));
    uform_status_t status = uform_late_interaction_scores(executor, &queries->rows,
                                                          &documents->rows, scores);
    CHECK(status == UFORM_OK, "%s: status %d (%s)", what, status, uform_last_error());
    oracle(&queries->rows, &documents->rows, exact, bound);
    double worst = 0;
    size_t bad = 0;
    for (size_t k = 0; k < Q * D; k++) {
        double error = fabs((double)scores[k] - exact[k]);
        double ratio = bound[k] > 0 ? error / bound[k] : (error == 0 ? 0 : INFINITY);
        if (ratio > worst) worst = ratio;
        if (!(error <= bound[k]) && bad++ < 3)
            printf("  %s: score[%zu] = %.9g, exact %.17g, bound %.3g\n", what, k, scores[k],
                   exact[k], bound[k]);
    }
    CHECK(bad == 0, "%s: %zu of %zu scores outside the bound", what, bad, Q * D);
    free(scores);
    free(exact);
    free(bound);
    return worst;
}

/* ---- tests -------------------------------------------------------------------------- */

/* Every pair of scalars, several widths, padded rows, unaligned F32 data
 * (converted) and offsets not starting at 0. */
static void test_scalar_pairs(uform_executor_t *executor) {
    static const size_t widths[] = {1, 3, 16, 37, 128};
    double worst = 0;
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 4; b++)
            for (size_t w = 0; w < sizeof(widths) / sizeof(widths[0]); w++) {
                size_t width = widths[w];
                bool odd = (a + b + w) % 2;   /* half the cases padded, shifted, offset */
                side_t queries = make_side(SCALARS[a], 6, 0, 5, width, odd ? 3 : 0, odd ? 1 : 0,
                                           odd ? 2 : 0);
                side_t documents = make_side(SCALARS[b], 9, 0, 12, width, odd ? 0 : 5,
                                             odd ? 0 : 2, odd ? 0 : 3);
                char what[96];
                snprintf(what, sizeof(what), "%s queries x %s documents, width %zu%s",
                         scalar_name(SCALARS[a]), scalar_name(SCALARS[b]), width,
                         odd ? " (padded, unaligned, offset)" : "");
                double ratio = check_against_oracle(executor, &queries, &documents, what);
                if (ratio > worst) worst = ratio;
                free_side(&queries);
                free_side(&documents);
            }
    printf("scalar pairs: worst error %.3f of the bound\n", worst);
}

/* Maxima planted at the edges of the scorer's chunks, with exact expected
 * scores (width 1, every product exact): query 0 has 300 rows (two query
 * chunks), +1 where i % 3 == 0 and -1 elsewhere; query 1 has no rows; query 2
 * is the one row +1. Document 0 is 5 rows of 0; document 1 is 2100 rows of
 * 0.25 (three document chunks) with +1 planted at row p and -1 at row
 * 2099 - p; document 2 is 3 rows of -0.5. So every row of query 0 finds 1 in
 * document 1 only if no row is skipped: score 1; against document 2 its
 * 100 rows of +1 find -0.5 and its 200 rows of -1 find 0.5: 50 / 300. */
static void test_planted(uform_executor_t *executor) {
    static const size_t positions[] = {0, 1, 1023, 1024, 1025, 1048, 2047, 2048, 2098, 2099};
    float query_rows[301], document_rows[5 + 2100 + 3];
    for (size_t i = 0; i < 300; i++) query_rows[i] = i % 3 == 0 ? 1.0f : -1.0f;
    query_rows[300] = 1.0f;
    size_t query_offsets[4] = {0, 300, 300, 301}, document_offsets[4] = {0, 5, 2105, 2108};
    uform_token_rows_t queries = {query_rows, query_offsets, 3, 1, 4, UFORM_SCALAR_F32};
    uform_token_rows_t documents = {document_rows, document_offsets, 3, 1, 4, UFORM_SCALAR_F32};
    const float expected[9] = {0.0f, 1.0f, (float)(50.0 / 300.0), 0, 0, 0, 0.0f, 1.0f, -0.5f};
    for (size_t k = 0; k < sizeof(positions) / sizeof(positions[0]); k++) {
        size_t p = positions[k];
        for (size_t j = 0; j < 5; j++) document_rows[j] = 0.0f;
        for (size_t j = 0; j < 2100; j++) document_rows[5 + j] = 0.25f;
        for (size_t j = 0; j < 3; j++) document_rows[2105 + j] = -0.5f;
        document_rows[5 + p] = 1.0f;
        document_rows[5 + 2099 - p] = -1.0f;
        float scores[9];
        CHECK(uform_late_interaction_scores(executor, &queries, &documents, scores) == UFORM_OK,
              "planted at %zu: %s", p, uform_last_error());
        CHECK(memcmp(scores, expected, sizeof(scores)) == 0,
              "planted at %zu: %g %g %g / %g %g %g / %g %g %g", p, scores[0], scores[1], scores[2],
              scores[3], scores[4], scores[5], scores[6], scores[7], scores[8]);
    }
}

/* Items past the blocks: a query longer than a query chunk, documents longer
 * than a document chunk, more documents than a block's items, more query
 * blocks than one loop's blocks, and runs of empty items. */
static void test_long_and_many(uform_executor_t *executor) {
    side_t long_query = make_side(UFORM_SCALAR_F32, 3, 0, 700, 8, 0, 0, 0);
    side_t long_documents = make_side(UFORM_SCALAR_F32, 4, 900, 2600, 8, 0, 0, 0);
    check_against_oracle(executor, &long_query, &long_documents, "long queries x long documents");
    side_t many_documents = make_side(UFORM_SCALAR_I8, 3000, 0, 2, 8, 0, 0, 0);
    check_against_oracle(executor, &long_query, &many_documents, "long queries x 3000 documents");
    free_side(&long_query);
    free_side(&long_documents);
    free_side(&many_documents);

    /* 1100 queries of 257 rows: one block each, more than a loop's 1024 blocks. */
    side_t queries = make_side(UFORM_SCALAR_F16, 1100, 257, 257, 1, 0, 0, 0);
    side_t documents = make_side(UFORM_SCALAR_F32, 3, 0, 4, 1, 0, 0, 0);
    check_against_oracle(executor, &queries, &documents, "1100 queries of 257 rows");
    free_side(&queries);
    free_side(&documents);
}

/* Every BF16 and F16 bit pattern and every I8 value, as one-row queries of
 * width 1 scored against the one-row document [1.0]: each score is the decoded
 * value itself (the product by 1 and the mean of one row are exact), NaN for NaN. */
static void test_every_value(void) {
    static const uform_scalar_t scalars[] = {UFORM_SCALAR_BF16, UFORM_SCALAR_F16, UFORM_SCALAR_I8};
    float one = 1.0f;
    size_t one_offsets[2] = {0, 1};
    uform_token_rows_t document = {&one, one_offsets, 1, 1, 4, UFORM_SCALAR_F32};
    for (size_t s = 0; s < 3; s++) {
        size_t count = scalars[s] == UFORM_SCALAR_I8 ? 256 : 65536, bytes = scalar_bytes(scalars[s]);
        uint8_t *data = xmalloc(count * bytes);
        size_t *offsets = xmalloc((count + 1) * sizeof(size_t));
        for (size_t i = 0; i < count; i++) {
            uint16_t bits = (uint16_t)i;
            memcpy(data + i * bytes, &bits, bytes);   /* little-endian: the low byte for I8 */
            offsets[i] = i;
        }
        offsets[count] = count;
        uform_token_rows_t queries = {data, offsets, count, 1, bytes, scalars[s]};
        float *scores = xmalloc(count * sizeof(float));
        CHECK(uform_late_interaction_scores(NULL, &queries, &document, scores) == UFORM_OK,
              "every %s value: %s", scalar_name(scalars[s]), uform_last_error());
        size_t bad = 0;
        for (size_t i = 0; i < count; i++) {
            double expected = decode(scalars[s], data + i * bytes);
            /* I8: v / 127 rounded once to FP32 */
            float want = (float)expected;
            bool same = isnan(want) ? isnan(scores[i]) : scores[i] == want;
            if (!same && bad++ < 3)
                printf("  %s bits 0x%04zx: %.9g, want %.9g\n", scalar_name(scalars[s]), i,
                       scores[i], want);
        }
        CHECK(bad == 0, "every %s value: %zu decoded wrong", scalar_name(scalars[s]), bad);
        free(data);
        free(offsets);
        free(scores);
    }
}

/* NaN anywhere in a pair's products makes that pair NaN, and only that pair. */
static void test_nan(void) {
    float q[3] = {1.0f, NAN, 2.0f}, d[2] = {1.0f, 3.0f};
    size_t q_offsets[3] = {0, 2, 3}, d_offsets[3] = {0, 1, 2};
    uform_token_rows_t queries = {q, q_offsets, 2, 1, 4, UFORM_SCALAR_F32};
    uform_token_rows_t documents = {d, d_offsets, 2, 1, 4, UFORM_SCALAR_F32};
    float scores[4];
    CHECK(uform_late_interaction_scores(NULL, &queries, &documents, scores) == UFORM_OK, "nan: %s",
          uform_last_error());
    CHECK(isnan(scores[0]) && isnan(scores[1]) && scores[2] == 2.0f && scores[3] == 6.0f,
          "nan: scores %g %g %g %g", scores[0], scores[1], scores[2], scores[3]);
}

/* Bit-equal scores on the calling thread and on pools of 1, 2 and 3 threads,
 * with many blocks (so the pools split the work) and long items. */
static void test_threads(uform_executor_t **executors) {
    side_t queries = make_side(UFORM_SCALAR_F32, 40, 0, 300, 24, 0, 0, 0);
    side_t documents = make_side(UFORM_SCALAR_F16, 300, 0, 120, 24, 0, 0, 0);
    size_t cells = queries.rows.count * documents.rows.count;
    float *base = xmalloc(cells * sizeof(float)), *other = xmalloc(cells * sizeof(float));
    CHECK(uform_late_interaction_scores(NULL, &queries.rows, &documents.rows, base) == UFORM_OK,
          "threads: %s", uform_last_error());
    for (size_t t = 0; t < 3; t++) {
        memset(other, 0xff, cells * sizeof(float));
        CHECK(uform_late_interaction_scores(executors[t], &queries.rows, &documents.rows, other) ==
                  UFORM_OK,
              "threads %zu: %s", t + 1, uform_last_error());
        CHECK(memcmp(base, other, cells * sizeof(float)) == 0,
              "%zu threads: scores differ from the calling thread's", t + 1);
    }
    /* One query against one long document: a single task whose products use the pool. */
    side_t one_query = make_side(UFORM_SCALAR_F32, 1, 600, 600, 24, 0, 0, 0);
    side_t one_document = make_side(UFORM_SCALAR_F32, 1, 3000, 3000, 24, 0, 0, 0);
    float alone, pooled;
    CHECK(uform_late_interaction_scores(NULL, &one_query.rows, &one_document.rows, &alone) ==
              UFORM_OK, "one pair: %s", uform_last_error());
    CHECK(uform_late_interaction_scores(executors[2], &one_query.rows, &one_document.rows,
                                        &pooled) == UFORM_OK, "one pair pooled: %s",
          uform_last_error());
    CHECK(memcmp(&alone, &pooled, sizeof(float)) == 0, "one pair: %.9g alone, %.9g pooled", alone,
          pooled);
    check_against_oracle(executors[2], &one_query, &one_document, "one long pair, pooled");
    free_side(&one_query);
    free_side(&one_document);
    free(base);
    free(other);
    free_side(&queries);
    free_side(&documents);
}

/* No items on a side: nothing written, scores may be NULL. Items without rows
 * score 0, data may be NULL when no item has rows. */
static void test_empty(void) {
    size_t zero[1] = {0};
    float row[2] = {0.6f, 0.8f};
    size_t one_row[2] = {0, 1};
    uform_token_rows_t none = {NULL, zero, 0, 2, 8, UFORM_SCALAR_F32};
    uform_token_rows_t none_null_offsets = {NULL, NULL, 0, 2, 8, UFORM_SCALAR_F32};
    uform_token_rows_t one = {row, one_row, 1, 2, 8, UFORM_SCALAR_F32};
    CHECK(uform_late_interaction_scores(NULL, &none, &one, NULL) == UFORM_OK, "no queries: %s",
          uform_last_error());
    CHECK(uform_late_interaction_scores(NULL, &one, &none_null_offsets, NULL) == UFORM_OK,
          "no documents: %s", uform_last_error());

    size_t empties[4] = {0, 0, 0, 0};
    uform_token_rows_t rowless = {NULL, empties, 3, 2, 8, UFORM_SCALAR_BF16};
    float scores[3] = {7, 7, 7};
    CHECK(uform_late_interaction_scores(NULL, &rowless, &one, scores) == UFORM_OK,
          "rowless queries: %s", uform_last_error());
    CHECK(scores[0] == 0 && scores[1] == 0 && scores[2] == 0, "rowless queries score %g %g %g",
          scores[0], scores[1], scores[2]);
    scores[0] = scores[1] = scores[2] = 7;
    CHECK(uform_late_interaction_scores(NULL, &one, &rowless, scores) == UFORM_OK,
          "rowless documents: %s", uform_last_error());
    CHECK(scores[0] == 0 && scores[1] == 0 && scores[2] == 0, "rowless documents score %g %g %g",
          scores[0], scores[1], scores[2]);
    /* The one row with itself: 0.36 + 0.64 in FP32. */
    CHECK(uform_late_interaction_scores(NULL, &one, &one, scores) == UFORM_OK, "one x one: %s",
          uform_last_error());
    CHECK(fabs(scores[0] - 1.0) < 1e-6, "one x one: %g", scores[0]);
}

static void expect_failure(uform_status_t got, uform_status_t want, const char *needle,
                           const char *what) {
    const char *message = uform_last_error();
    CHECK(got == want, "%s: status %d, want %d (%s)", what, got, want, message);
    CHECK(strstr(message, needle) != NULL, "%s: message \"%s\" does not name \"%s\"", what,
          message, needle);
}

static void test_bad_input(void) {
    float rows[6] = {1, 0, 0, 1, 1, 1};
    size_t offsets[3] = {0, 2, 3}, decreasing[3] = {0, 2, 1};
    uform_token_rows_t good = {rows, offsets, 2, 2, 8, UFORM_SCALAR_F32};
    float scores[4];
    uform_token_rows_t bad;

    expect_failure(uform_late_interaction_scores(NULL, NULL, &good, scores),
                   UFORM_INVALID_ARGUMENT, "queries", "NULL queries");
    expect_failure(uform_late_interaction_scores(NULL, &good, NULL, scores),
                   UFORM_INVALID_ARGUMENT, "documents", "NULL documents");
    expect_failure(uform_late_interaction_scores(NULL, &good, &good, NULL),
                   UFORM_INVALID_ARGUMENT, "scores", "NULL scores");

    bad = good, bad.offsets = NULL;
    expect_failure(uform_late_interaction_scores(NULL, &good, &bad, scores),
                   UFORM_INVALID_ARGUMENT, "documents.offsets", "NULL offsets");
    bad = good, bad.offsets = decreasing;
    expect_failure(uform_late_interaction_scores(NULL, &bad, &good, scores),
                   UFORM_INVALID_ARGUMENT, "queries.offsets[2]", "decreasing offsets");
    bad = good, bad.data = NULL;
    expect_failure(uform_late_interaction_scores(NULL, &good, &bad, scores),
                   UFORM_INVALID_ARGUMENT, "documents.data", "NULL data with rows");
    bad = good, bad.width = 0, bad.row_bytes = 0;
    expect_failure(uform_late_interaction_scores(NULL, &bad, &bad, scores),
                   UFORM_INVALID_ARGUMENT, "queries.width", "zero width");
    bad = good, bad.width = 1, bad.row_bytes = 4;
    expect_failure(uform_late_interaction_scores(NULL, &good, &bad, scores),
                   UFORM_INVALID_ARGUMENT, "documents.width", "width mismatch");
    bad = good, bad.row_bytes = 7;
    expect_failure(uform_late_interaction_scores(NULL, &bad, &good, scores),
                   UFORM_INVALID_ARGUMENT, "queries.row_bytes", "rows too short");
    bad = good, bad.scalar = UFORM_SCALAR_BF16, bad.row_bytes = 3;
    expect_failure(uform_late_interaction_scores(NULL, &good, &bad, scores),
                   UFORM_INVALID_ARGUMENT, "documents.row_bytes", "BF16 rows too short");
    bad = good, bad.scalar = UFORM_SCALAR_B1;   /* E4M3 and E5M2 are scored: tests/test_fp8_outputs.py */
    expect_failure(uform_late_interaction_scores(NULL, &bad, &good, scores),
                   UFORM_INVALID_ARGUMENT, "queries.scalar", "a scalar without a dot product");
    bad = good, bad.scalar = (uform_scalar_t)99;
    expect_failure(uform_late_interaction_scores(NULL, &good, &bad, scores),
                   UFORM_INVALID_ARGUMENT, "documents.scalar", "unknown scalar");
    bad = good, bad.width = SIZE_MAX / 2, bad.row_bytes = SIZE_MAX;
    expect_failure(uform_late_interaction_scores(NULL, &bad, &good, scores),
                   UFORM_INVALID_ARGUMENT, "queries.width", "width overflow");
    size_t huge[2] = {0, SIZE_MAX / 4};
    bad = good, bad.offsets = huge, bad.count = 1;
    expect_failure(uform_late_interaction_scores(NULL, &good, &bad, scores),
                   UFORM_INVALID_ARGUMENT, "documents.offsets", "rows past the address space");
    bad = good, bad.count = SIZE_MAX;
    expect_failure(uform_late_interaction_scores(NULL, &bad, &good, scores),
                   UFORM_INVALID_ARGUMENT, "queries.count", "count overflow");
    /* The scores' own overflow check (Q x D x 4 bytes) is not reached here: it needs
     * 2^31 items on a side, whose offsets alone would fill 16 GiB. */
}

int main(void) {
    uform_executor_t *executors[3] = {NULL, NULL, NULL};
    for (size_t t = 0; t < 3; t++)
        if (uform_executor_for_ram(t + 1, NULL, 0, &executors[t]) != UFORM_OK) {
            printf("cannot start an executor of %zu threads\n", t + 1);
            return 2;
        }
    test_scalar_pairs(NULL);
    test_scalar_pairs(executors[2]);
    test_planted(NULL);
    test_planted(executors[2]);
    test_long_and_many(executors[1]);
    test_every_value();
    test_nan();
    test_threads(executors);
    test_empty();
    test_bad_input();
    for (size_t t = 0; t < 3; t++) uform_executor_free(executors[t]);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
