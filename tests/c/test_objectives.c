/* test_objectives.c: the training objectives (train/objectives.h: random numbers,
 * masking, the contrastive configuration; backend/cpu/losses.h: the contrastive
 * loss) of docs/training.md sections 1-3 against independent references.
 *
 * Build and run (from the repository root, under ASan/UBSan):
 *   make c/build/tests/test_objectives && c/build/tests/test_objectives
 *
 * - Random numbers and one masked item: values hard-coded from a separate
 *   Python implementation of docs/training.md sections 1-2 (see rng_oracle).
 * - Masking statistics over many items: selected fraction, MASK / random /
 *   keep fractions, spans cut at the end, determinism, configuration checks.
 * - Contrastive: a naive float64 reference written here (ref_loss: straight
 *   loops over the formulas of section 3, relations looked up edge by edge)
 *   gives the loss and, by central differences (h = 1e-6), the gradients with
 *   respect to every embedding scalar, log inverse temperature and bias; the
 *   library's FP32 outputs must match for every pair form, AMBIENT and NAMED,
 *   two temperature groups, Matryoshka widths [8, 16] of D = 16, bags, and
 *   weighted attract / repel / ignore edges with conflicts between them.
 *   Tolerance as in test_backward.c: |a - fd| <= 1e-4 max(|fd|, 0.01 max|fd|)
 *   (the library stores the [N, N] score gradients in FP32: ~1e-7 relative
 *   errors summed over N terms; finite differences err by ~1e-9 here).
 *   Hand-written cases pin the precedence rules independently of ref_loss.
 */
#include "train/objectives.h"
#include "backend/cpu/losses.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

/* Uniform in [-1, 1). */
static double rng_double(void) { return (double)(rng_next() >> 11) * 0x1p-52 * 2.0 - 1.0; }

static void *xmalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size);
    if (!p) {
        printf("out of memory\n");
        exit(2);
    }
    return p;
}

/* ==== 1. Random numbers ===================================================== */

/* Produced by this Python 3 program (an independent implementation of
 * docs/training.md section 1, not the code under test):
 *
 *   M = (1 << 64) - 1
 *   def mix(x):
 *       x &= M
 *       x ^= x >> 30; x = (x * 0xbf58476d1ce4e5b9) & M
 *       x ^= x >> 27; x = (x * 0x94d049bb133111eb) & M
 *       x ^= x >> 31
 *       return x
 *   def bits(seed, step, item, pos, stream):
 *       return mix(mix(mix(mix(mix(seed) ^ step) ^ item) ^ pos) ^ stream)
 *   def uniform(*a): return (bits(*a) >> 40) * 2.0**-24
 *   for a in [...]: print(a, hex(bits(*a)), repr(uniform(*a)))
 */
static void test_random(void) {
    static const struct {
        uint64_t seed, step, item, position, stream, bits;
        double uniform;
    } oracle[] = {
        {0, 0, 0, 0, 0, 0x0ull, 0.0},
        {1, 1, 0, 0, 1, 0x847f5cc3552f553bull, 0.5175683498382568},
        {42, 7, 3, 11, 1000, 0x5fe07b407bf878b3ull, 0.3745190501213074},
        {0xdeadbeefcafebabeull, 123456789, 0xffffffffffffffffull, 99, 1001,
         0x66585013d7721f38ull, 0.39978504180908203},
        {2024, 1, 5, 17, 3, 0xceb468e8bf4fcc1full, 0.8074402809143066},
    };
    for (size_t k = 0; k < sizeof(oracle) / sizeof(oracle[0]); k++) {
        uint64_t bits = uform_random_bits(oracle[k].seed, oracle[k].step, oracle[k].item,
                                          oracle[k].position, oracle[k].stream);
        double uniform = uform_random_uniform(oracle[k].seed, oracle[k].step, oracle[k].item,
                                              oracle[k].position, oracle[k].stream);
        CHECK(bits == oracle[k].bits, "random bits %zu: %016llx, Python %016llx", k,
              (unsigned long long)bits, (unsigned long long)oracle[k].bits);
        CHECK(uniform == oracle[k].uniform, "random uniform %zu: %.17g, Python %.17g", k, uniform,
              oracle[k].uniform);
    }
    /* uniform is a multiple of 2^-24 in [0, 1). */
    int ok = 1;
    for (uint64_t p = 0; p < 10000; p++) {
        double u = uform_random_uniform(5, 6, 7, p, 1);
        double scaled = u * 0x1p24;
        if (!(u >= 0 && u < 1) || scaled != floor(scaled)) ok = 0;
    }
    CHECK(ok, "uniform outside [0, 1) or not a multiple of 2^-24");
}

/* ==== 2. Masked text ======================================================== */

static void test_masking_config(void) {
    uform_masking_t resolved;
    uform_masking_resolve(NULL, &resolved);
    CHECK(resolved.token_mask_probability == 0.15f && resolved.token_mean_span == 3.0f &&
              resolved.replace_fraction == 0.8f && resolved.random_fraction == 0.1f &&
              resolved.text_weight == 1.0f,
          "derived text masking");
    CHECK(resolved.image_mask_ratio == 0.75f && resolved.video_mask_ratio == 0.75f &&
              resolved.audio_mask_ratio == 0.75f && resolved.image_weight == 1.0f &&
              resolved.video_weight == 1.0f && resolved.audio_weight == 1.0f,
          "derived media masking placeholders");
    CHECK(uform_masking_check(&resolved) == UFORM_OK, "derived masking passes: %s",
          uform_last_error());

    uform_masking_t given = {0};
    given.token_mask_probability = 0.3f;
    given.random_fraction = 0.2f;
    uform_masking_resolve(&given, &resolved);
    CHECK(resolved.token_mask_probability == 0.3f && resolved.random_fraction == 0.2f &&
              resolved.replace_fraction == 0.8f,
          "given fields kept, zero fields derived");
    CHECK(uform_masking_check(&resolved) == UFORM_OK, "r + q = 1 is allowed: %s",
          uform_last_error());

    static const struct {
        size_t field; /* index of the float in uform_masking_t */
        float value;
        const char *name;
    } bad[] = {
        {0, NAN, "token_mask_probability"}, {0, 1.5f, "token_mask_probability"},
        {0, -0.1f, "token_mask_probability"}, {1, 0.5f, "token_mean_span"},
        {1, INFINITY, "token_mean_span"}, {2, 1.2f, "replace_fraction"},
        {3, 0.3f, "random_fraction"}, /* 0.8 + 0.3 > 1 */
        {3, -1.0f, "random_fraction"}, {4, 2.0f, "image_mask_ratio"},
        {5, NAN, "video_mask_ratio"}, {6, -0.5f, "audio_mask_ratio"},
        {7, -1.0f, "text_weight"}, {8, INFINITY, "image_weight"}, {10, NAN, "audio_weight"},
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        uform_masking_t value = {0};
        float *fields = (float *)&value;
        fields[bad[k].field] = bad[k].value;
        uform_masking_resolve(&value, &resolved);
        uform_status_t status = uform_masking_check(&resolved);
        CHECK(status == UFORM_INVALID_ARGUMENT && strstr(uform_last_error(), bad[k].name),
              "masking field %s = %g: status %d, message '%s'", bad[k].name,
              (double)bad[k].value, (int)status, uform_last_error());
    }
}

/* One item, hard-coded from the Python program of test_random extended with
 * docs/training.md section 2 (float32 fields rounded with struct.pack('f')):
 *
 *   def mask(p, m, r, q, seed, step, item, data):
 *       p, m, r, q = map(f32, (p, m, r, q))
 *       n = len(data); ids = list(data); sel = [0]*n; t = 0
 *       while t < n:
 *           if uniform(seed, step, item, t, 1) < p / (m * (1 - p) + p):
 *               L = 1
 *               while t + L < n and uniform(seed, step, item, t, 2 + L) >= 1 / m: L += 1
 *               for u in range(t, t + L):
 *                   sel[u] = 1
 *                   a = uniform(seed, step, item, u, 1000)
 *                   if a < r: ids[u] = 256
 *                   elif a < r + q: ids[u] = bits(seed, step, item, u, 1001) >> 56
 *               t += L
 *           else: t += 1
 *       return ids, sel
 *   mask(0.5, 2.5, 0.6, 0.3, 7, 3, 11, bytes(range(97, 123)) * 2)
 */
static void test_masking_oracle(void) {
    static const uint32_t expected_ids[52] = {
         97, 256,  99, 100, 256, 102, 103, 104, 105, 106, 256,  22, 256, 256, 141, 112, 256, 206,
        115, 116, 117, 201, 256, 256, 256, 145,  97, 256, 256,  98, 101, 134, 228, 256, 256, 256,
        256,  95, 109, 256,  17, 256, 113, 171, 256, 116, 117, 118, 102, 120,  78, 122};
    static const char expected_selected[] = "0100100000111111110001111101110111111101110110001010";
    uint8_t bytes[52];
    for (size_t t = 0; t < 52; t++) bytes[t] = (uint8_t)('a' + t % 26);
    uform_masking_t given = {0}, resolved;
    given.token_mask_probability = 0.5f;
    given.token_mean_span = 2.5f;
    given.replace_fraction = 0.6f;
    given.random_fraction = 0.3f;
    uform_masking_resolve(&given, &resolved);
    uint32_t *ids = xmalloc(52, sizeof(uint32_t));
    uint8_t *selected = xmalloc(52, 1);
    size_t count = uform_mask_text(&resolved, 7, 3, 11, bytes, 52, ids, selected);
    CHECK(count == 32, "oracle item: %zu selected, Python 32", count);
    int same_ids = 1, same_selected = 1;
    for (size_t t = 0; t < 52; t++) {
        if (ids[t] != expected_ids[t]) same_ids = 0;
        if (selected[t] != (uint8_t)(expected_selected[t] - '0')) same_selected = 0;
    }
    CHECK(same_ids, "oracle item: corrupted ids differ from Python");
    CHECK(same_selected, "oracle item: selected positions differ from Python");
    free(ids);
    free(selected);
}

static void test_masking_statistics(void) {
    uform_masking_t resolved;
    uform_masking_resolve(NULL, &resolved); /* p 0.15, m 3, r 0.8, q 0.1 */
    const size_t items = 2000, n = 300;
    uint8_t *bytes = xmalloc(n, 1);
    uint32_t *ids = xmalloc(n, sizeof(uint32_t));
    uint32_t *again = xmalloc(n, sizeof(uint32_t));
    uint8_t *selected = xmalloc(n, 1), *selected_again = xmalloc(n, 1);
    size_t total = 0, masks = 0, randoms = 0, keeps = 0, counted = 0;
    int consistent = 1, deterministic = 1;
    for (size_t item = 0; item < items; item++) {
        for (size_t t = 0; t < n; t++) bytes[t] = (uint8_t)(rng_next() >> 56);
        size_t count = uform_mask_text(&resolved, 1234, 9, item, bytes, n, ids, selected);
        size_t count_again =
            uform_mask_text(&resolved, 1234, 9, item, bytes, n, again, selected_again);
        if (count != count_again || memcmp(ids, again, n * sizeof(uint32_t)) ||
            memcmp(selected, selected_again, n))
            deterministic = 0;
        total += count;
        for (size_t t = 0; t < n; t++) {
            if (selected[t] > 1 || ids[t] > 256) consistent = 0;
            if (!selected[t]) {
                if (ids[t] != bytes[t]) consistent = 0;
                continue;
            }
            counted++;
            if (ids[t] == 256)
                masks++;
            else if (ids[t] != bytes[t])
                randoms++;
            else
                keeps++;
        }
    }
    CHECK(consistent, "ids/selected inconsistent (unselected changed, or values out of range)");
    CHECK(deterministic, "the same arguments gave different masks");
    CHECK(counted == total, "returned counts %zu, selected flags %zu", total, counted);
    /* The section-2 loop is a renewal process: a cycle is either one unselected
     * position (probability 1 - s) or a span of mean m (probability s), with
     * s = p / (m (1 - p) + p), so the expected selected fraction is
     * s m / (1 - s + s m) = p; the cut at n lowers it by O(m / n). Standard
     * error here ~1e-3. */
    const double p = 0.15;
    double fraction = (double)total / (double)(items * n);
    double expected = p;
    CHECK(fabs(fraction - expected) < 0.004, "selected fraction %.5f, expected %.5f", fraction,
          expected);
    double mask_fraction = (double)masks / (double)total;
    double random_fraction = (double)randoms / (double)total;
    double keep_fraction = (double)keeps / (double)total;
    /* A random byte equals the original with probability 1/256. */
    CHECK(fabs(mask_fraction - 0.8) < 0.006, "MASK fraction %.5f, expected 0.8", mask_fraction);
    CHECK(fabs(random_fraction - 0.1 * 255.0 / 256.0) < 0.004,
          "random fraction %.5f, expected ~0.1", random_fraction);
    CHECK(fabs(keep_fraction - (0.1 + 0.1 / 256.0)) < 0.004, "keep fraction %.5f, expected ~0.1",
          keep_fraction);
    /* Other items, steps and seeds give other masks. */
    for (size_t t = 0; t < n; t++) bytes[t] = (uint8_t)t;
    uform_mask_text(&resolved, 1234, 9, 0, bytes, n, ids, selected);
    uform_mask_text(&resolved, 1234, 9, 1, bytes, n, again, selected_again);
    CHECK(memcmp(selected, selected_again, n) != 0, "items 0 and 1 share a mask");
    uform_mask_text(&resolved, 1234, 10, 0, bytes, n, again, selected_again);
    CHECK(memcmp(selected, selected_again, n) != 0, "steps 9 and 10 share a mask");
    uform_mask_text(&resolved, 1235, 9, 0, bytes, n, again, selected_again);
    CHECK(memcmp(selected, selected_again, n) != 0, "seeds 1234 and 1235 share a mask");
    free(bytes);
    free(ids);
    free(again);
    free(selected);
    free(selected_again);

    /* Long spans on short items: every span is cut at n (ASan would catch a
     * write past the exactly sized buffers), and a span reaching the end is
     * common. p = 1, m = 20: spans start with probability 0.05. */
    uform_masking_t given = {0};
    given.token_mask_probability = 1.0f;
    given.token_mean_span = 20.0f;
    uform_masking_resolve(&given, &resolved);
    size_t ends_selected = 0, over = 0;
    for (size_t item = 0; item < 500; item++) {
        size_t length = 1 + item % 17;
        uint8_t *b = xmalloc(length, 1);
        uint32_t *i2 = xmalloc(length, sizeof(uint32_t));
        uint8_t *s2 = xmalloc(length, 1);
        size_t count = uform_mask_text(&resolved, 77, 1, item, b, length, i2, s2);
        size_t flags = 0;
        for (size_t t = 0; t < length; t++) flags += s2[t];
        if (count != flags || count > length) over++;
        ends_selected += s2[length - 1];
        free(b);
        free(i2);
        free(s2);
    }
    CHECK(over == 0, "%zu items with counts beyond their length", over);
    CHECK(ends_selected > 50, "only %zu spans reached the end of short items", ends_selected);

    /* m = 1: every span has length 1; p = 1 then selects everything. */
    given.token_mean_span = 1.0f;
    uform_masking_resolve(&given, &resolved);
    uint8_t b3[40] = {0};
    uint32_t i3[40];
    uint8_t s3[40];
    CHECK(uform_mask_text(&resolved, 1, 1, 1, b3, 40, i3, s3) == 40, "p = 1, m = 1 selects all");
    CHECK(uform_mask_text(&resolved, 1, 1, 1, b3, 0, i3, s3) == 0, "an empty item selects none");
}

/* ==== 3. Contrastive: the naive float64 reference =========================== */

enum { REF_NONE, REF_POSITIVE, REF_NEGATIVE };

/* Sum of the weights of edges i -> j (found: whether any). */
static double ref_edge(const uform_edges_t *edges, size_t i, size_t j, int *found) {
    double sum = 0;
    *found = 0;
    if (!edges || !edges->offsets) return 0;
    for (size_t e = edges->offsets[i]; e < edges->offsets[i + 1]; e++)
        if (edges->ids[e] == j) {
            *found = 1;
            sum += edges->weights ? (double)edges->weights[e] : 1.0;
        }
    return sum;
}

static int ref_relation(const uform_contrastive_config_t *config, const uint32_t *bags,
                        const uform_relations_t *relations, size_t i, size_t j, double *weight) {
    int found;
    *weight = 0;
    if (i == j) return REF_NONE;
    ref_edge(relations ? &relations->ignore : NULL, i, j, &found);
    if (found) return REF_NONE;
    double w = ref_edge(relations ? &relations->attract : NULL, i, j, &found);
    if (found) {
        *weight = w;
        return REF_POSITIVE;
    }
    if (bags && bags[i] == bags[j]) {
        *weight = 1;
        return REF_POSITIVE;
    }
    w = ref_edge(relations ? &relations->repel : NULL, i, j, &found);
    if (found) {
        *weight = w;
        return REF_NEGATIVE;
    }
    if (config->negatives == UFORM_NEGATIVES_AMBIENT) {
        *weight = config->ambient_repulsion_weight;
        return REF_NEGATIVE;
    }
    return REF_NONE;
}

/* The contrastive term of docs/training.md section 3, straight from the
 * formulas (no log-sum-exp shifts: the scores here are small). */
static double ref_loss(const uform_contrastive_config_t *config, size_t n, size_t d,
                       const double *e, const uint32_t *bags, const uint32_t *groups,
                       const uform_relations_t *relations, const double *tau, const double *bias) {
    double total = 0;
    double *u = xmalloc(n * d, sizeof(double));
    for (size_t k = 0; k < config->widths_count; k++) {
        size_t w = config->widths[k];
        for (size_t i = 0; i < n; i++) {
            double norm = 0;
            for (size_t c = 0; c < w; c++) norm += e[i * d + c] * e[i * d + c];
            norm = sqrt(norm);
            for (size_t c = 0; c < w; c++) u[i * w + c] = e[i * d + c] / fmax(norm, 1e-12);
        }
        double sum = 0;
        size_t anchors = 0;
        for (size_t i = 0; i < n; i++) {
            size_t g = groups ? groups[i] : 0;
            double b = config->pair_loss == UFORM_PAIR_LOSS_SIGMOID ? bias[g] : 0.0;
            double s[64], weight[64];
            int kind[64];
            double positive_weights = 0, denominator_positive = 0, denominator_negative = 0;
            for (size_t j = 0; j < n; j++) {
                kind[j] = ref_relation(config, bags, relations, i, j, &weight[j]);
                double dot = 0;
                for (size_t c = 0; c < w; c++) dot += u[i * w + c] * u[j * w + c];
                s[j] = dot * exp(tau[g]) + b;
                if (kind[j] == REF_POSITIVE) {
                    positive_weights += weight[j];
                    denominator_positive += exp(s[j]);
                }
                if (kind[j] == REF_NEGATIVE) denominator_negative += weight[j] * exp(s[j]);
            }
            double loss = 0;
            if (config->pair_loss == UFORM_PAIR_LOSS_SIGMOID) {
                for (size_t j = 0; j < n; j++) {
                    if (kind[j] == REF_POSITIVE) loss += weight[j] * log(1 + exp(-s[j]));
                    if (kind[j] == REF_NEGATIVE) loss += weight[j] * log(1 + exp(s[j]));
                }
            } else {
                if (!(positive_weights > 0)) continue;
                for (size_t j = 0; j < n; j++) {
                    if (kind[j] != REF_POSITIVE) continue;
                    double t = weight[j] / positive_weights;
                    double denominator = config->pair_loss == UFORM_PAIR_LOSS_BALANCED
                                             ? denominator_positive + denominator_negative
                                             : exp(s[j]) + denominator_negative;
                    loss -= t * (s[j] - log(denominator));
                }
            }
            sum += loss;
            anchors++;
        }
        if (anchors) total += sum / (double)anchors;
    }
    free(u);
    return total / (double)config->widths_count;
}

/* ==== 3. Contrastive: checks ================================================ */

#define N_ITEMS 10
#define DIMS 16

static float fixture_embeddings[N_ITEMS * DIMS];
static const uint32_t fixture_bags[N_ITEMS] = {0, 0, 0, 1, 1, 2, 3, 3, 4, 5};
static const uint32_t fixture_groups[N_ITEMS] = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1};

/* attract: 0->5 (2.5), 3<->9 (1.5), 6->2 (0.7), 4->3 weight 0 (over the bag's
 * 1: anchor 4 has positive weight 0, so it is skipped), 6->7 weight 0 (a
 * zero-weight positive next to a weighted one).
 * repel: 0->1 (3, but the bag wins), 1->0 (loses to the bag too), 2->8 (2),
 * 3->3 (a self edge: dropped), 5->6 (0.25), 6->2 (loses to attract), 8->9 (0).
 * ignore: 1->2 (over the bag), 7->6 (over the bag), 9->3 (over attract). */
static const size_t attract_offsets[N_ITEMS + 1] = {0, 1, 1, 1, 2, 3, 3, 5, 5, 5, 6};
static const uint32_t attract_ids[] = {5, 9, 3, 2, 7, 3};
static const float attract_weights[] = {2.5f, 1.5f, 0.0f, 0.7f, 0.0f, 1.5f};
static const size_t repel_offsets[N_ITEMS + 1] = {0, 1, 2, 3, 4, 4, 5, 6, 6, 7, 7};
static const uint32_t repel_ids[] = {1, 0, 8, 3, 6, 2, 9};
static const float repel_weights[] = {3.0f, 1.0f, 2.0f, 9.0f, 0.25f, 4.0f, 0.0f};
static const size_t ignore_offsets[N_ITEMS + 1] = {0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 3};
static const uint32_t ignore_ids[] = {2, 6, 3};

static uform_relations_t fixture_relations(void) {
    uform_relations_t r;
    r.attract = (uform_edges_t){attract_offsets, attract_ids, attract_weights};
    r.repel = (uform_edges_t){repel_offsets, repel_ids, repel_weights};
    r.ignore = (uform_edges_t){ignore_offsets, ignore_ids, NULL};
    return r;
}

static void make_unit_rows(float *e, size_t n, size_t d) {
    for (size_t i = 0; i < n; i++) {
        double norm = 0;
        for (size_t c = 0; c < d; c++) {
            e[i * d + c] = (float)rng_double();
            norm += (double)e[i * d + c] * e[i * d + c];
        }
        for (size_t c = 0; c < d; c++) e[i * d + c] = (float)(e[i * d + c] / sqrt(norm));
    }
}

static const char *form_name(uform_pair_loss_form_t form) {
    return form == UFORM_PAIR_LOSS_BALANCED ? "BALANCED"
           : form == UFORM_PAIR_LOSS_RANKED ? "RANKED"
                                            : "SIGMOID";
}

static int close_to(double a, double fd, double largest) {
    double scale = fmax(fabs(fd), 0.01 * largest);
    return fabs(a - fd) <= 1e-4 * scale + 1e-12;
}

/* Loss and every gradient against ref_loss and its central differences. */
static void check_against_reference(uform_pair_loss_form_t form, uform_negatives_t negatives,
                                    int with_relations, int with_bags) {
    static const size_t widths[2] = {8, 16};
    uform_contrastive_config_t config = {widths, 2, negatives, 0.8f, form, 2};
    uform_relations_t relations = fixture_relations();
    uform_contrastive_batch_t batch = {N_ITEMS,
                                       DIMS,
                                       fixture_embeddings,
                                       with_bags ? fixture_bags : NULL,
                                       fixture_groups,
                                       with_relations ? &relations : NULL};
    float tau[2] = {logf(6.0f), logf(9.0f)}, bias[2] = {-1.5f, -0.5f};
    float loss = -1;
    float *d_embeddings = xmalloc(N_ITEMS * DIMS, sizeof(float));
    float d_tau[2] = {0, 0}, d_bias[2] = {0, 0};
    uform_status_t status = uform_contrastive(NULL, &config, &batch, tau, bias, &loss,
                                              d_embeddings, d_tau, d_bias);
    const char *name = form_name(form);
    const char *which = negatives == UFORM_NEGATIVES_AMBIENT ? "AMBIENT" : "NAMED";
    CHECK(status == UFORM_OK, "%s %s: status %d (%s)", name, which, (int)status,
          uform_last_error());

    double e[N_ITEMS * DIMS], t[2] = {tau[0], tau[1]}, b[2] = {bias[0], bias[1]};
    for (size_t k = 0; k < N_ITEMS * DIMS; k++) e[k] = fixture_embeddings[k];
    const uint32_t *bags = batch.bags;
    const uform_relations_t *rel = batch.relations;
    double reference = ref_loss(&config, N_ITEMS, DIMS, e, bags, fixture_groups, rel, t, b);
    CHECK(fabs((double)loss - reference) <= 1e-6 * fmax(1.0, fabs(reference)),
          "%s %s relations %d bags %d: loss %.9g, reference %.9g", name, which, with_relations,
          with_bags, (double)loss, reference);
    CHECK(reference > 0.01, "%s %s: the fixture scores something (%g)", name, which, reference);

    const double h = 1e-6;
    double fd[N_ITEMS * DIMS + 4];
    double largest = 0;
    for (size_t k = 0; k < N_ITEMS * DIMS; k++) {
        double saved = e[k];
        e[k] = saved + h;
        double plus = ref_loss(&config, N_ITEMS, DIMS, e, bags, fixture_groups, rel, t, b);
        e[k] = saved - h;
        double minus = ref_loss(&config, N_ITEMS, DIMS, e, bags, fixture_groups, rel, t, b);
        e[k] = saved;
        fd[k] = (plus - minus) / (2 * h);
        largest = fmax(largest, fabs(fd[k]));
    }
    int bad = 0;
    size_t first_bad = 0;
    for (size_t k = 0; k < N_ITEMS * DIMS; k++)
        if (!close_to(d_embeddings[k], fd[k], largest)) {
            if (!bad) first_bad = k;
            bad++;
        }
    CHECK(bad == 0,
          "%s %s relations %d bags %d: %d embedding gradients off, first [%zu][%zu]: %.9g vs "
          "fd %.9g",
          name, which, with_relations, with_bags, bad, first_bad / DIMS, first_bad % DIMS,
          (double)d_embeddings[first_bad], fd[first_bad]);
    for (size_t g = 0; g < 2; g++) {
        double saved = t[g];
        t[g] = saved + h;
        double plus = ref_loss(&config, N_ITEMS, DIMS, e, bags, fixture_groups, rel, t, b);
        t[g] = saved - h;
        double minus = ref_loss(&config, N_ITEMS, DIMS, e, bags, fixture_groups, rel, t, b);
        t[g] = saved;
        double grad = (plus - minus) / (2 * h);
        CHECK(fabs(d_tau[g] - grad) <= 1e-5 * fmax(fabs(grad), 1e-3),
              "%s %s: d log_inverse_temperature[%zu] %.9g vs fd %.9g", name, which, g,
              (double)d_tau[g], grad);
        saved = b[g];
        b[g] = saved + h;
        plus = ref_loss(&config, N_ITEMS, DIMS, e, bags, fixture_groups, rel, t, b);
        b[g] = saved - h;
        minus = ref_loss(&config, N_ITEMS, DIMS, e, bags, fixture_groups, rel, t, b);
        b[g] = saved;
        grad = (plus - minus) / (2 * h);
        CHECK(fabs(d_bias[g] - grad) <= 1e-5 * fmax(fabs(grad), 1e-3),
              "%s %s: d bias[%zu] %.9g vs fd %.9g", name, which, g, (double)d_bias[g], grad);
    }

    /* Gradients accumulate: a second call adds the same values again. */
    float *twice = xmalloc(N_ITEMS * DIMS, sizeof(float));
    memcpy(twice, d_embeddings, N_ITEMS * DIMS * sizeof(float));
    float d_tau2[2] = {d_tau[0], d_tau[1]}, d_bias2[2] = {d_bias[0], d_bias[1]};
    uform_contrastive(NULL, &config, &batch, tau, bias, &loss, twice, d_tau2, d_bias2);
    int doubled = 1;
    for (size_t k = 0; k < N_ITEMS * DIMS; k++)
        if (twice[k] != 2 * d_embeddings[k]) doubled = 0;
    for (size_t g = 0; g < 2; g++)
        if (d_tau2[g] != 2 * d_tau[g] || d_bias2[g] != 2 * d_bias[g]) doubled = 0;
    CHECK(doubled, "%s %s: a second call does not add the same gradients", name, which);
    free(twice);
    free(d_embeddings);
}

/* The same bits from NULL, 1-thread and 3-thread executors. */
static void test_threads(void) {
    const size_t n = 70, d = 24;
    float *e = xmalloc(n * d, sizeof(float));
    make_unit_rows(e, n, d);
    uint32_t *bags = xmalloc(n, sizeof(uint32_t)), *groups = xmalloc(n, sizeof(uint32_t));
    for (size_t i = 0; i < n; i++) bags[i] = (uint32_t)(i / 3), groups[i] = (uint32_t)(i % 3);
    static const size_t widths[3] = {24, 6, 12};
    uform_executor_t *one = NULL, *three = NULL;
    CHECK(uform_executor_for_ram(1, NULL, 0, &one) == UFORM_OK, "executor of 1");
    CHECK(uform_executor_for_ram(3, NULL, 0, &three) == UFORM_OK, "executor of 3");
    const uform_pair_loss_form_t forms[3] = {UFORM_PAIR_LOSS_BALANCED, UFORM_PAIR_LOSS_RANKED,
                                             UFORM_PAIR_LOSS_SIGMOID};
    for (size_t f = 0; f < 3; f++) {
        uform_contrastive_config_t config = {widths, 3, UFORM_NEGATIVES_AMBIENT, 1.0f, forms[f], 3};
        uform_contrastive_batch_t batch = {n, d, e, bags, groups, NULL};
        float tau[3] = {2.0f, 2.3f, 1.5f}, bias[3] = {-3, -2, -4};
        float losses[3];
        float *grads[3];
        float dt[3][3] = {{0}}, db[3][3] = {{0}};
        uform_executor_t *executors[3] = {NULL, one, three};
        for (size_t x = 0; x < 3; x++) {
            grads[x] = xmalloc(n * d, sizeof(float));
            uform_status_t status = uform_contrastive(executors[x], &config, &batch, tau, bias,
                                                      &losses[x], grads[x], dt[x], db[x]);
            CHECK(status == UFORM_OK, "threads: %s", uform_last_error());
        }
        for (size_t x = 1; x < 3; x++) {
            CHECK(memcmp(&losses[0], &losses[x], sizeof(float)) == 0 &&
                      memcmp(grads[0], grads[x], n * d * sizeof(float)) == 0 &&
                      memcmp(dt[0], dt[x], sizeof(dt[0])) == 0 &&
                      memcmp(db[0], db[x], sizeof(db[0])) == 0,
                  "%s: executor %zu gives other bits than the calling thread", form_name(forms[f]),
                  x);
        }
        for (size_t x = 0; x < 3; x++) free(grads[x]);
    }
    uform_executor_free(one);
    uform_executor_free(three);
    free(e);
    free(bags);
    free(groups);
}

static double softplus(double x) { return log1p(exp(x)); }

static double cosine(const float *e, size_t d, size_t i, size_t j) {
    double dot = 0;
    for (size_t c = 0; c < d; c++) dot += (double)e[i * d + c] * e[j * d + c];
    return dot;
}

/* Precedence, pinned by hand-written sums (not ref_loss). */
static void test_precedence(void) {
    const size_t n = 4, d = 8;
    float e[4 * 8];
    make_unit_rows(e, n, d);
    static const size_t widths[1] = {8};
    float tau[1] = {logf(4.0f)}, bias[1] = {-1.0f};
    const double T = exp((double)tau[0]), b = bias[0];
#define S(i, j) (cosine(e, d, i, j) * T + b)

    /* Ignore overrides a bag: bags {0, 0, 1, 1}, ignore 0 <-> 1, SIGMOID NAMED:
     * only the pairs (2, 3) and (3, 2) are scored. */
    {
        static const uint32_t bags[4] = {0, 0, 1, 1};
        static const size_t offsets[5] = {0, 1, 2, 2, 2};
        static const uint32_t ids[2] = {1, 0};
        uform_relations_t relations = {
            {NULL, NULL, NULL}, {NULL, NULL, NULL}, {offsets, ids, NULL}};
        uform_contrastive_config_t config = {widths, 1, UFORM_NEGATIVES_NAMED, 1.0f,
                                             UFORM_PAIR_LOSS_SIGMOID, 1};
        uform_contrastive_batch_t batch = {n, d, e, bags, NULL, &relations};
        float loss, grads[4 * 8] = {0}, dt[1] = {0}, db[1] = {0};
        CHECK(uform_contrastive(NULL, &config, &batch, tau, bias, &loss, grads, dt, db) ==
                  UFORM_OK,
              "ignore over bag: %s", uform_last_error());
        double expected = (softplus(-S(2, 3)) + softplus(-S(3, 2))) / 4;
        CHECK(fabs(loss - expected) < 1e-6, "ignore over bag: loss %.9g, expected %.9g",
              (double)loss, expected);
        int zero = 1;
        for (size_t k = 0; k < 2 * d; k++)
            if (grads[k] != 0) zero = 0;
        CHECK(zero, "ignore over bag: items 0 and 1 received gradients");

        /* BALANCED: anchors 0 and 1 have no positive left; 2 and 3 have one
         * positive and no negative: loss 0 with zero gradients. */
        config.pair_loss = UFORM_PAIR_LOSS_BALANCED;
        float before = 42.0f;
        for (size_t k = 0; k < n * d; k++) grads[k] = before;
        dt[0] = db[0] = before;
        CHECK(uform_contrastive(NULL, &config, &batch, tau, bias, &loss, grads, dt, db) ==
                  UFORM_OK,
              "balanced: %s", uform_last_error());
        CHECK(fabs(loss) < 1e-12, "balanced, positives without negatives: loss %g", (double)loss);
        /* Without any positive at all: loss exactly 0, nothing added. */
        batch.bags = NULL;
        loss = 7;
        CHECK(uform_contrastive(NULL, &config, &batch, tau, bias, &loss, grads, dt, db) ==
                  UFORM_OK,
              "no positives: %s", uform_last_error());
        int untouched = dt[0] == before && db[0] == before;
        for (size_t k = 0; k < n * d; k++)
            if (grads[k] != before) untouched = 0;
        CHECK(loss == 0 && untouched, "no positives: loss %g, gradients touched %d", (double)loss,
              !untouched);
    }

    /* Attract over repel, repel over ambient, ignore over attract, weights:
     * SIGMOID AMBIENT (ambient 0.5), no bags; attract 0->1 (2) and repel 0->1
     * (5), repel 0->2 (3), attract 1->2 (1) with ignore 1->2, repel 2->0 (0).
     *   anchor 0: 2 sp(-s01) + 3 sp(s02) + 0.5 sp(s03)
     *   anchor 1: 0.5 sp(s10) + 0.5 sp(s13)
     *   anchor 2: 0 sp(s20) + 0.5 sp(s21) + 0.5 sp(s23)
     *   anchor 3: 0.5 (sp(s30) + sp(s31) + sp(s32))           all over 4 */
    {
        static const size_t a_offsets[5] = {0, 1, 2, 2, 2};
        static const uint32_t a_ids[2] = {1, 2};
        static const float a_weights[2] = {2.0f, 1.0f};
        static const size_t r_offsets[5] = {0, 2, 2, 3, 3};
        static const uint32_t r_ids[3] = {1, 2, 0};
        static const float r_weights[3] = {5.0f, 3.0f, 0.0f};
        static const size_t i_offsets[5] = {0, 0, 1, 1, 1};
        static const uint32_t i_ids[1] = {2};
        uform_relations_t relations = {{a_offsets, a_ids, a_weights},
                                       {r_offsets, r_ids, r_weights},
                                       {i_offsets, i_ids, NULL}};
        uform_contrastive_config_t config = {widths, 1, UFORM_NEGATIVES_AMBIENT, 0.5f,
                                             UFORM_PAIR_LOSS_SIGMOID, 1};
        uform_contrastive_batch_t batch = {n, d, e, NULL, NULL, &relations};
        float loss;
        CHECK(uform_contrastive(NULL, &config, &batch, tau, bias, &loss, NULL, NULL, NULL) ==
                  UFORM_OK,
              "precedence: %s", uform_last_error());
        double expected = 2 * softplus(-S(0, 1)) + 3 * softplus(S(0, 2)) + 0.5 * softplus(S(0, 3)) +
                          0.5 * softplus(S(1, 0)) + 0.5 * softplus(S(1, 3)) +
                          0.5 * softplus(S(2, 1)) + 0.5 * softplus(S(2, 3)) +
                          0.5 * (softplus(S(3, 0)) + softplus(S(3, 1)) + softplus(S(3, 2)));
        expected /= 4;
        CHECK(fabs(loss - expected) < 1e-6 * expected, "precedence: loss %.9g, expected %.9g",
              (double)loss, expected);

        /* BALANCED of the same relations (no bias): only anchor 0 has a
         * positive, 1 (attract beats the repel edge 0->1), against the
         * negatives 2 (repel 3) and 3 (ambient 0.5); its weight 2 is the
         * whole target. RANKED agrees with one positive. */
        config.pair_loss = UFORM_PAIR_LOSS_BALANCED;
        CHECK(uform_contrastive(NULL, &config, &batch, tau, bias, &loss, NULL, NULL, NULL) ==
                  UFORM_OK,
              "precedence balanced: %s", uform_last_error());
        double s01 = cosine(e, d, 0, 1) * T, s02 = cosine(e, d, 0, 2) * T,
               s03 = cosine(e, d, 0, 3) * T;
        expected = -(s01 - log(exp(s01) + 3 * exp(s02) + 0.5 * exp(s03)));
        CHECK(fabs(loss - expected) < 1e-6 * fmax(1, expected),
              "precedence balanced: loss %.9g, expected %.9g", (double)loss, expected);
        config.pair_loss = UFORM_PAIR_LOSS_RANKED;
        CHECK(uform_contrastive(NULL, &config, &batch, tau, bias, &loss, NULL, NULL, NULL) ==
                  UFORM_OK,
              "precedence ranked: %s", uform_last_error());
        CHECK(fabs(loss - expected) < 1e-6 * fmax(1, expected),
              "ranked with one positive equals balanced: %.9g vs %.9g", (double)loss, expected);
    }
#undef S
}

/* An empty item (zero row) is scored with cosine 0 and gets no gradient. */
static void test_zero_rows(void) {
    float e[N_ITEMS * DIMS];
    memcpy(e, fixture_embeddings, sizeof(e));
    memset(e + 4 * DIMS, 0, DIMS * sizeof(float));
    static const size_t widths[2] = {8, 16};
    const uform_pair_loss_form_t forms[3] = {UFORM_PAIR_LOSS_BALANCED, UFORM_PAIR_LOSS_RANKED,
                                             UFORM_PAIR_LOSS_SIGMOID};
    for (size_t f = 0; f < 3; f++) {
        uform_contrastive_config_t config = {widths, 2, UFORM_NEGATIVES_AMBIENT, 1.0f, forms[f], 2};
        uform_contrastive_batch_t batch = {N_ITEMS, DIMS, e, fixture_bags, fixture_groups, NULL};
        float tau[2] = {2.0f, 1.0f}, bias[2] = {-1, -2}, loss;
        float grads[N_ITEMS * DIMS] = {0};
        CHECK(uform_contrastive(NULL, &config, &batch, tau, bias, &loss, grads, NULL, NULL) ==
                  UFORM_OK,
              "zero row: %s", uform_last_error());
        double de[N_ITEMS * DIMS], t[2] = {2, 1}, b[2] = {-1, -2};
        for (size_t k = 0; k < N_ITEMS * DIMS; k++) de[k] = e[k];
        double reference =
            ref_loss(&config, N_ITEMS, DIMS, de, fixture_bags, fixture_groups, NULL, t, b);
        CHECK(fabs(loss - reference) < 1e-6 * fmax(1, reference), "%s zero row: loss %.9g vs %.9g",
              form_name(forms[f]), (double)loss, reference);
        int zero = 1, finite = 1;
        for (size_t k = 0; k < N_ITEMS * DIMS; k++) {
            if (k / DIMS == 4 && grads[k] != 0) zero = 0;
            if (!isfinite(grads[k])) finite = 0;
        }
        CHECK(zero && finite, "%s zero row: gradient of the empty item %d, finite %d",
              form_name(forms[f]), !zero, finite);
    }
}

/* Large scores: log-sum-exp and softplus stay finite. */
static void test_stability(void) {
    static const size_t widths[1] = {DIMS};
    const uform_pair_loss_form_t forms[3] = {UFORM_PAIR_LOSS_BALANCED, UFORM_PAIR_LOSS_RANKED,
                                             UFORM_PAIR_LOSS_SIGMOID};
    for (size_t f = 0; f < 3; f++) {
        uform_contrastive_config_t config = {widths, 1, UFORM_NEGATIVES_AMBIENT, 1.0f, forms[f], 1};
        uform_contrastive_batch_t batch = {N_ITEMS, DIMS, fixture_embeddings, fixture_bags, NULL,
                                           NULL};
        float tau[1] = {logf(5000.0f)}, bias[1] = {-800.0f}, loss;
        float grads[N_ITEMS * DIMS] = {0}, dt[1] = {0}, db[1] = {0};
        CHECK(uform_contrastive(NULL, &config, &batch, tau, bias, &loss, grads, dt, db) ==
                  UFORM_OK,
              "stability: %s", uform_last_error());
        int finite = isfinite(loss) && isfinite(dt[0]) && isfinite(db[0]) && loss >= 0;
        for (size_t k = 0; k < N_ITEMS * DIMS; k++)
            if (!isfinite(grads[k])) finite = 0;
        CHECK(finite && loss > 1, "%s at inverse temperature 5000: loss %g, finite %d",
              form_name(forms[f]), (double)loss, finite);
    }
}

static void test_invalid(void) {
    static const size_t widths[2] = {8, 16};
    uform_contrastive_config_t good = {widths, 2, UFORM_NEGATIVES_AMBIENT, 1.0f,
                                       UFORM_PAIR_LOSS_SIGMOID, 2};
    uform_relations_t relations = fixture_relations();
    uform_contrastive_batch_t base = {N_ITEMS, DIMS, fixture_embeddings, fixture_bags,
                                      fixture_groups, &relations};
    float tau[2] = {1, 1}, bias[2] = {0, 0};
    float grads[N_ITEMS * DIMS];

    enum { CASES = 18 };
    for (int c = 0; c < CASES; c++) {
        uform_contrastive_config_t config = good;
        uform_contrastive_batch_t batch = base;
        uform_relations_t rel = relations;
        batch.relations = &rel;
        float e[N_ITEMS * DIMS];
        memcpy(e, fixture_embeddings, sizeof(e));
        batch.embeddings = e;
        uint32_t groups[N_ITEMS];
        memcpy(groups, fixture_groups, sizeof(groups));
        batch.groups = groups;
        size_t offsets[N_ITEMS + 1];
        memcpy(offsets, repel_offsets, sizeof(offsets));
        uint32_t ids[7];
        memcpy(ids, repel_ids, sizeof(ids));
        float weights[7];
        memcpy(weights, repel_weights, sizeof(weights));
        rel.repel = (uform_edges_t){offsets, ids, weights};
        float t[2] = {tau[0], tau[1]}, b[2] = {bias[0], bias[1]};
        size_t bad_widths[2] = {8, 17};
        const char *expect = "";
        switch (c) {
        case 0: ids[2] = N_ITEMS, expect = "ids[2]"; break;
        case 1: offsets[3] = 1, expect = "offsets"; break;
        case 2: weights[1] = -1.0f, expect = "weights[1]"; break;
        case 3: weights[0] = NAN, expect = "weights[0]"; break;
        case 4: weights[0] = INFINITY, expect = "weights[0]"; break;
        case 5: groups[7] = 2, expect = "groups[7]"; break;
        case 6: e[5] = NAN, expect = "embeddings[0][5]"; break;
        case 7: config.widths = bad_widths, expect = "widths[1]"; break;
        case 8: config.pair_loss = UFORM_PAIR_LOSS_DERIVED, expect = "pair_loss"; break;
        case 9: config.groups = 0, expect = "groups"; break;
        case 10: t[1] = INFINITY, expect = "log_inverse_temperature[1]"; break;
        case 11: b[0] = NAN, expect = "bias[0]"; break;
        case 12: rel.repel.ids = NULL, expect = "ids is NULL"; break;
        case 13: config.ambient_repulsion_weight = -1, expect = "ambient_repulsion_weight"; break;
        case 14: config.widths_count = 0, expect = "widths"; break;
        case 15: config.negatives = (uform_negatives_t)7, expect = "negatives"; break;
        case 16: offsets[0] = 1, expect = "offsets[0] = 1"; break;
        case 17: offsets[1] = 2, ids[1] = 1, expect = "edge 0 -> 1 given twice"; break;
        }
        for (size_t k = 0; k < N_ITEMS * DIMS; k++) grads[k] = 3.0f;
        float loss = 5.0f, dt[2] = {3, 3}, db[2] = {3, 3};
        uform_status_t status =
            uform_contrastive(NULL, &config, &batch, t, b, &loss, grads, dt, db);
        int untouched = loss == 5.0f && dt[0] == 3 && dt[1] == 3 && db[0] == 3 && db[1] == 3;
        for (size_t k = 0; k < N_ITEMS * DIMS; k++)
            if (grads[k] != 3.0f) untouched = 0;
        CHECK(status == UFORM_INVALID_ARGUMENT && untouched && strstr(uform_last_error(), expect),
              "invalid case %d: status %d, untouched %d, message '%s' (expected '%s')", c,
              (int)status, untouched, uform_last_error(), expect);
    }
    /* NULL bias is fine outside SIGMOID; N = 0 is a zero loss. */
    uform_contrastive_config_t config = good;
    config.pair_loss = UFORM_PAIR_LOSS_RANKED;
    float loss = 9;
    CHECK(uform_contrastive(NULL, &config, &base, tau, NULL, &loss, NULL, NULL, NULL) == UFORM_OK,
          "RANKED without bias: %s", uform_last_error());
    uform_contrastive_batch_t empty = {0, DIMS, NULL, NULL, NULL, NULL};
    CHECK(uform_contrastive(NULL, &good, &empty, tau, bias, &loss, NULL, NULL, NULL) == UFORM_OK &&
              loss == 0,
          "no items: %s", uform_last_error());
    config.pair_loss = UFORM_PAIR_LOSS_SIGMOID;
    CHECK(uform_contrastive(NULL, &config, &base, tau, NULL, &loss, NULL, NULL, NULL) ==
              UFORM_INVALID_ARGUMENT,
          "SIGMOID without bias is rejected");
}

static void test_resolve(void) {
    uform_contrastive_config_t config;
    size_t storage[UFORM_MATRYOSHKA_WIDTHS_MAX];
    float log_t = 0, b = 1;
    CHECK(uform_contrastive_resolve(NULL, 32, &config, storage, &log_t, &b) == UFORM_OK,
          "resolve NULL: %s", uform_last_error());
    CHECK(config.widths_count == 1 && config.widths[0] == 32 && config.groups == 1 &&
              config.pair_loss == UFORM_PAIR_LOSS_BALANCED &&
              config.negatives == UFORM_NEGATIVES_AMBIENT &&
              config.ambient_repulsion_weight == 1.0f && fabsf(log_t - logf(10.0f)) < 1e-6f &&
              b == 0.0f,
          "derived contrastive configuration");

    uform_contrastive_t given = {0};
    given.pair_loss = UFORM_PAIR_LOSS_SIGMOID;
    CHECK(uform_contrastive_resolve(&given, 32, &config, storage, &log_t, &b) == UFORM_OK &&
              b == -10.0f && config.pair_loss == UFORM_PAIR_LOSS_SIGMOID,
          "SIGMOID derives bias -10");
    static const size_t widths[3] = {16, 4, 32};
    given.matryoshka_dimensions = widths;
    given.matryoshka_dimensions_count = 3;
    given.temperature_groups = 3;
    given.inverse_temperature = 20;
    given.bias = 2.5f;
    given.negatives = UFORM_NEGATIVES_NAMED;
    given.ambient_repulsion_weight = 0.25f;
    CHECK(uform_contrastive_resolve(&given, 32, &config, storage, &log_t, &b) == UFORM_OK &&
              config.widths == storage && config.widths_count == 3 && storage[0] == 16 &&
              storage[1] == 4 && storage[2] == 32 && config.groups == 3 && b == 2.5f &&
              fabsf(log_t - logf(20.0f)) < 1e-6f && config.negatives == UFORM_NEGATIVES_NAMED &&
              config.ambient_repulsion_weight == 0.25f,
          "given contrastive configuration kept");

    size_t many[65];
    for (size_t k = 0; k < 65; k++) many[k] = k + 1;
    static const size_t zero_width[1] = {0}, wide[1] = {33}, repeated[3] = {8, 16, 8};
    struct {
        const size_t *widths;
        size_t count;
        float inverse_temperature, bias, ambient;
        int negatives, form;
        const char *expect;
    } bad[] = {
        {zero_width, 1, 0, 0, 0, 0, 0, "matryoshka_dimensions[0]"},
        {wide, 1, 0, 0, 0, 0, 0, "matryoshka_dimensions[0]"},
        {repeated, 3, 0, 0, 0, 0, 0, "matryoshka_dimensions[2]"},
        {many, 65, 0, 0, 0, 0, 0, "at most 64"},
        {NULL, 2, 0, 0, 0, 0, 0, "NULL"},
        {NULL, 0, -1.0f, 0, 0, 0, 0, "inverse_temperature"},
        {NULL, 0, NAN, 0, 0, 0, 0, "inverse_temperature"},
        {NULL, 0, INFINITY, 0, 0, 0, 0, "inverse_temperature"},
        {NULL, 0, 0, NAN, 0, 0, 0, "bias"},
        {NULL, 0, 0, 0, -2.0f, 0, 0, "ambient_repulsion_weight"},
        {NULL, 0, 0, 0, 0, 5, 0, "negatives"},
        {NULL, 0, 0, 0, 0, 0, 9, "pair_loss"},
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        uform_contrastive_t value = {0};
        value.matryoshka_dimensions = bad[k].widths;
        value.matryoshka_dimensions_count = bad[k].count;
        value.inverse_temperature = bad[k].inverse_temperature;
        value.bias = bad[k].bias;
        value.ambient_repulsion_weight = bad[k].ambient;
        value.negatives = (uform_negatives_t)bad[k].negatives;
        value.pair_loss = (uform_pair_loss_form_t)bad[k].form;
        float lt = 123, bb = 456;
        uform_contrastive_config_t untouched = {0};
        uform_status_t status =
            uform_contrastive_resolve(&value, 32, &untouched, storage, &lt, &bb);
        CHECK(status == UFORM_INVALID_ARGUMENT && strstr(uform_last_error(), bad[k].expect) &&
                  lt == 123 && bb == 456 && untouched.widths == NULL,
              "bad contrastive configuration %zu: status %d, message '%s' (expected '%s')", k,
              (int)status, uform_last_error(), bad[k].expect);
    }
    CHECK(uform_contrastive_resolve(NULL, 0, &config, storage, &log_t, &b) ==
              UFORM_INVALID_ARGUMENT,
          "dimensions 0 rejected");
}

int main(void) {
    test_random();
    test_masking_config();
    test_masking_oracle();
    test_masking_statistics();

    make_unit_rows(fixture_embeddings, N_ITEMS, DIMS);
    const uform_pair_loss_form_t forms[3] = {UFORM_PAIR_LOSS_BALANCED, UFORM_PAIR_LOSS_RANKED,
                                             UFORM_PAIR_LOSS_SIGMOID};
    for (size_t f = 0; f < 3; f++) {
        check_against_reference(forms[f], UFORM_NEGATIVES_AMBIENT, 1, 1);
        check_against_reference(forms[f], UFORM_NEGATIVES_NAMED, 1, 1);
        check_against_reference(forms[f], UFORM_NEGATIVES_AMBIENT, 0, 1);
        check_against_reference(forms[f], UFORM_NEGATIVES_NAMED, 1, 0);
    }
    test_precedence();
    test_zero_rows();
    test_stability();
    test_threads();
    test_invalid();
    test_resolve();

    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
