/* objectives.c: docs/training.md sections 1-3 (random numbers, masked text,
 * contrastive loss with gradients) for the CPU trainer. See objectives.h. */
#include "train/objectives.h"

#include <math.h>
#include <stdlib.h>

/* ==== 1. Random numbers ==================================================== */

static inline uint64_t uform_mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

uint64_t uform_random_bits(uint64_t seed, uint64_t step, uint64_t item, uint64_t position,
                           uint64_t stream) {
    uint64_t x = uform_mix64(seed);
    x = uform_mix64(x ^ step);
    x = uform_mix64(x ^ item);
    x = uform_mix64(x ^ position);
    return uform_mix64(x ^ stream);
}

double uform_random_uniform(uint64_t seed, uint64_t step, uint64_t item, uint64_t position,
                            uint64_t stream) {
    return (double)(uform_random_bits(seed, step, item, position, stream) >> 40) * 0x1p-24;
}

/* ==== 2. Masked text ======================================================= */

static float uform_derive(float given, float derived) { return given == 0.0f ? derived : given; }

void uform_masking_resolve(const uform_masking_t *given, uform_masking_t *resolved) {
    uform_masking_t value;
    if (given)
        value = *given;
    else
        memset(&value, 0, sizeof(value));
    value.token_mask_probability = uform_derive(value.token_mask_probability, 0.15f);
    value.token_mean_span = uform_derive(value.token_mean_span, 3.0f);
    value.replace_fraction = uform_derive(value.replace_fraction, 0.8f);
    value.random_fraction = uform_derive(value.random_fraction, 0.1f);
    /* Placeholders until the media objectives are specified. */
    value.image_mask_ratio = uform_derive(value.image_mask_ratio, 0.75f);
    value.video_mask_ratio = uform_derive(value.video_mask_ratio, 0.75f);
    value.audio_mask_ratio = uform_derive(value.audio_mask_ratio, 0.75f);
    value.text_weight = uform_derive(value.text_weight, 1.0f);
    value.image_weight = uform_derive(value.image_weight, 1.0f);
    value.video_weight = uform_derive(value.video_weight, 1.0f);
    value.audio_weight = uform_derive(value.audio_weight, 1.0f);
    *resolved = value;
}

static uform_status_t uform_check_fraction(float value, const char *name) {
    if (!(value >= 0.0f && value <= 1.0f))
        return uform_fail(UFORM_INVALID_ARGUMENT, "masking.%s must be in [0, 1], got %g", name,
                          (double)value);
    return UFORM_OK;
}

static uform_status_t uform_check_weight(float value, const char *name) {
    if (!(value >= 0.0f) || isinf(value))
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "masking.%s must be finite and non-negative, got %g", name,
                          (double)value);
    return UFORM_OK;
}

uform_status_t uform_masking_check(const uform_masking_t *resolved) {
    if (!resolved) return uform_fail(UFORM_INVALID_ARGUMENT, "masking: NULL configuration");
    const uform_masking_t *m = resolved;
    UFORM_TRY(uform_check_fraction(m->token_mask_probability, "token_mask_probability"));
    if (!(m->token_mean_span >= 1.0f) || isinf(m->token_mean_span))
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "masking.token_mean_span must be finite and at least 1, got %g",
                          (double)m->token_mean_span);
    UFORM_TRY(uform_check_fraction(m->replace_fraction, "replace_fraction"));
    UFORM_TRY(uform_check_fraction(m->random_fraction, "random_fraction"));
    /* Summed in FP32, the fields' own precision: 0.8f + 0.2f is 1 there but
     * 1.000000015 in float64 (harmless: the float64 threshold r + q only has
     * to exceed every uniform below 1). */
    if (m->replace_fraction + m->random_fraction > 1.0f)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "masking.replace_fraction + masking.random_fraction must be at most 1, "
                          "got %g + %g",
                          (double)m->replace_fraction, (double)m->random_fraction);
    UFORM_TRY(uform_check_fraction(m->image_mask_ratio, "image_mask_ratio"));
    UFORM_TRY(uform_check_fraction(m->video_mask_ratio, "video_mask_ratio"));
    UFORM_TRY(uform_check_fraction(m->audio_mask_ratio, "audio_mask_ratio"));
    UFORM_TRY(uform_check_weight(m->text_weight, "text_weight"));
    UFORM_TRY(uform_check_weight(m->image_weight, "image_weight"));
    UFORM_TRY(uform_check_weight(m->video_weight, "video_weight"));
    UFORM_TRY(uform_check_weight(m->audio_weight, "audio_weight"));
    return UFORM_OK;
}

size_t uform_mask_text(const uform_masking_t *resolved, uint64_t seed, uint64_t step,
                       uint64_t item, const uint8_t *bytes, size_t n, uint32_t *ids,
                       uint8_t *selected) {
    const double span = (double)resolved->token_mean_span;
    /* Start a span where an unselected position draws below p / (m (1 - p) + p):
     * with spans of mean m the selected share is then p (a renewal argument). */
    const double probability = (double)resolved->token_mask_probability;
    const double start = probability / (span * (1.0 - probability) + probability);
    const double stop = 1.0 / span;
    const double replace = (double)resolved->replace_fraction;
    const double replace_or_random = replace + (double)resolved->random_fraction;
    size_t count = 0;
    for (size_t t = 0; t < n; t++) {
        ids[t] = bytes[t];
        selected[t] = 0;
    }
    size_t t = 0;
    while (t < n) {
        if (uform_random_uniform(seed, step, item, t, UFORM_STREAM_SPAN_START) < start) {
            size_t length = 1;
            while (t + length < n &&
                   uform_random_uniform(seed, step, item, t,
                                        (uint64_t)UFORM_STREAM_SPAN_CONTINUE + length) >= stop)
                length++;
            for (size_t u = t; u < t + length; u++) {
                selected[u] = 1;
                double action = uform_random_uniform(seed, step, item, u, UFORM_STREAM_ACTION);
                if (action < replace)
                    ids[u] = UFORM_MASK_TOKEN;
                else if (action < replace_or_random)
                    ids[u] = (uint32_t)(uform_random_bits(seed, step, item, u, UFORM_STREAM_BYTE) >>
                                        56);
            }
            count += length;
            t += length;
        } else {
            t += 1;
        }
    }
    return count;
}

/* ==== 3. Contrastive: configuration ======================================== */

uform_status_t uform_contrastive_resolve(const uform_contrastive_t *given, size_t dimensions,
                                         uform_contrastive_config_t *config,
                                         size_t *widths_storage,
                                         float *initial_log_inverse_temperature,
                                         float *initial_bias) {
    if (!config || !widths_storage || !initial_log_inverse_temperature || !initial_bias)
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: NULL out-pointer");
    if (dimensions == 0)
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: dimensions must be at least 1");
    uform_contrastive_t value;
    if (given)
        value = *given;
    else
        memset(&value, 0, sizeof(value));

    size_t widths[UFORM_MATRYOSHKA_WIDTHS_MAX];
    size_t widths_count = value.matryoshka_dimensions_count;
    if (widths_count == 0) {
        widths[0] = dimensions;
        widths_count = 1;
    } else {
        if (!value.matryoshka_dimensions)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "contrastive.matryoshka_dimensions is NULL with a count of %zu",
                              widths_count);
        if (widths_count > UFORM_MATRYOSHKA_WIDTHS_MAX)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "contrastive.matryoshka_dimensions: %zu widths, at most %d allowed",
                              widths_count, UFORM_MATRYOSHKA_WIDTHS_MAX);
        for (size_t k = 0; k < widths_count; k++) {
            size_t w = value.matryoshka_dimensions[k];
            if (w < 1 || w > dimensions)
                return uform_fail(UFORM_INVALID_ARGUMENT,
                                  "contrastive.matryoshka_dimensions[%zu] = %zu is outside "
                                  "[1, %zu]",
                                  k, w, dimensions);
            for (size_t l = 0; l < k; l++)
                if (widths[l] == w)
                    return uform_fail(UFORM_INVALID_ARGUMENT,
                                      "contrastive.matryoshka_dimensions[%zu] = %zu repeats "
                                      "matryoshka_dimensions[%zu]",
                                      k, w, l);
            widths[k] = w;
        }
    }

    size_t groups = value.temperature_groups ? value.temperature_groups : 1;
    if (groups > (size_t)UINT32_MAX)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "contrastive.temperature_groups = %zu exceeds the uint32 group ids",
                          groups);

    float inverse_temperature = uform_derive(value.inverse_temperature, 10.0f);
    if (!(inverse_temperature > 0.0f) || isinf(inverse_temperature))
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "contrastive.inverse_temperature must be finite and positive, got %g",
                          (double)value.inverse_temperature);

    if ((int)value.negatives != UFORM_NEGATIVES_AMBIENT &&
        (int)value.negatives != UFORM_NEGATIVES_NAMED)
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive.negatives: unknown value %d",
                          (int)value.negatives);

    float ambient = uform_derive(value.ambient_repulsion_weight, 1.0f);
    if (!(ambient >= 0.0f) || isinf(ambient))
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "contrastive.ambient_repulsion_weight must be finite and non-negative, "
                          "got %g",
                          (double)value.ambient_repulsion_weight);

    uform_pair_loss_form_t form = value.pair_loss;
    switch ((int)form) {
    case UFORM_PAIR_LOSS_DERIVED: form = UFORM_PAIR_LOSS_BALANCED; break;
    case UFORM_PAIR_LOSS_BALANCED:
    case UFORM_PAIR_LOSS_RANKED:
    case UFORM_PAIR_LOSS_SIGMOID: break;
    default:
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive.pair_loss: unknown value %d",
                          (int)value.pair_loss);
    }

    float bias = uform_derive(value.bias, form == UFORM_PAIR_LOSS_SIGMOID ? -10.0f : 0.0f);
    if (!isfinite(bias))
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive.bias must be finite, got %g",
                          (double)value.bias);

    memcpy(widths_storage, widths, widths_count * sizeof(size_t));
    config->widths = widths_storage;
    config->widths_count = widths_count;
    config->negatives = value.negatives;
    config->ambient_repulsion_weight = ambient;
    config->pair_loss = form;
    config->groups = groups;
    *initial_log_inverse_temperature = (float)log((double)inverse_temperature);
    *initial_bias = bias;
    return UFORM_OK;
}

/* ==== 3. Contrastive: validation =========================================== */

/* seen: n zeroed bytes, left zeroed. */
static uform_status_t uform_check_edges(const uform_edges_t *edges, size_t count, uint8_t *seen,
                                        const char *name) {
    if (!edges->offsets) return UFORM_OK;
    const size_t *offsets = edges->offsets;
    if (offsets[0] != 0)
        return uform_fail(UFORM_INVALID_ARGUMENT, "relations.%s: offsets[0] = %zu, not 0", name,
                          offsets[0]);
    for (size_t i = 0; i < count; i++)
        if (offsets[i + 1] < offsets[i])
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "relations.%s: offsets[%zu] = %zu is less than offsets[%zu] = %zu",
                              name, i + 1, offsets[i + 1], i, offsets[i]);
    if (offsets[count] > 0 && !edges->ids)
        return uform_fail(UFORM_INVALID_ARGUMENT, "relations.%s: %zu edges but ids is NULL",
                          name, offsets[count]);
    for (size_t e = 0; e < offsets[count]; e++) {
        if (edges->ids[e] >= count)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "relations.%s: ids[%zu] = %u is not below the %zu items", name, e,
                              (unsigned)edges->ids[e], count);
        if (edges->weights) {
            float w = edges->weights[e];
            if (!(w >= 0.0f) || isinf(w))
                return uform_fail(UFORM_INVALID_ARGUMENT,
                                  "relations.%s: weights[%zu] = %g must be finite and "
                                  "non-negative",
                                  name, e, (double)w);
        }
    }
    /* One edge per (anchor, candidate) and kind; self edges are dropped, not counted. */
    uform_status_t status = UFORM_OK;
    for (size_t i = 0; i < count && status == UFORM_OK; i++) {
        size_t e = offsets[i];
        for (; e < offsets[i + 1]; e++) {
            uint32_t j = edges->ids[e];
            if (j == i) continue;
            if (seen[j]) {
                status = uform_fail(UFORM_INVALID_ARGUMENT,
                                    "relations.%s: edge %zu -> %u given twice (ids[%zu])", name, i,
                                    (unsigned)j, e);
                break;
            }
            seen[j] = 1;
        }
        for (size_t f = offsets[i]; f < e; f++) seen[edges->ids[f]] = 0;
    }
    return status;
}

static uform_status_t uform_contrastive_check(const uform_contrastive_config_t *config,
                                              const uform_contrastive_batch_t *batch,
                                              const float *log_inverse_temperature,
                                              const float *bias, const float *loss) {
    if (!config || !batch || !loss)
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: NULL configuration, batch or loss");
    if (!config->widths || config->widths_count == 0 ||
        config->widths_count > UFORM_MATRYOSHKA_WIDTHS_MAX)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "contrastive: widths must hold 1 to %d values, got %zu",
                          UFORM_MATRYOSHKA_WIDTHS_MAX, config->widths_count);
    const size_t n = batch->count, d = batch->dimensions;
    if (d == 0) return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: dimensions must be >= 1");
    for (size_t k = 0; k < config->widths_count; k++)
        if (config->widths[k] < 1 || config->widths[k] > d)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "contrastive: widths[%zu] = %zu is outside [1, %zu]", k,
                              config->widths[k], d);
    if (config->groups == 0)
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: groups must be at least 1");
    if ((int)config->negatives != UFORM_NEGATIVES_AMBIENT &&
        (int)config->negatives != UFORM_NEGATIVES_NAMED)
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: unknown negatives %d",
                          (int)config->negatives);
    const int form = (int)config->pair_loss;
    if (form != UFORM_PAIR_LOSS_BALANCED && form != UFORM_PAIR_LOSS_RANKED &&
        form != UFORM_PAIR_LOSS_SIGMOID)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "contrastive: pair_loss %d is not BALANCED, RANKED or SIGMOID", form);
    if (!(config->ambient_repulsion_weight >= 0.0f) || isinf(config->ambient_repulsion_weight))
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "contrastive: ambient_repulsion_weight %g must be finite and >= 0",
                          (double)config->ambient_repulsion_weight);
    if (n > (size_t)UINT32_MAX)
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: %zu items exceed uint32 ids", n);
    size_t elements;
    if (!uform_mul_ok(n, d, &elements))
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: %zu x %zu overflows", n, d);

    if (!log_inverse_temperature)
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: log_inverse_temperature is NULL");
    for (size_t g = 0; g < config->groups; g++)
        if (!isfinite(log_inverse_temperature[g]))
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "contrastive: log_inverse_temperature[%zu] = %g is not finite", g,
                              (double)log_inverse_temperature[g]);
    if (form == UFORM_PAIR_LOSS_SIGMOID) {
        if (!bias) return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: SIGMOID needs a bias");
        for (size_t g = 0; g < config->groups; g++)
            if (!isfinite(bias[g]))
                return uform_fail(UFORM_INVALID_ARGUMENT,
                                  "contrastive: bias[%zu] = %g is not finite", g, (double)bias[g]);
    }
    if (n == 0) return UFORM_OK;

    if (!batch->embeddings)
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: embeddings is NULL");
    for (size_t e = 0; e < elements; e++)
        if (!isfinite(batch->embeddings[e]))
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "contrastive: embeddings[%zu][%zu] = %g is not finite", e / d, e % d,
                              (double)batch->embeddings[e]);
    if (batch->groups)
        for (size_t i = 0; i < n; i++)
            if (batch->groups[i] >= config->groups)
                return uform_fail(UFORM_INVALID_ARGUMENT,
                                  "contrastive: groups[%zu] = %u is not below the %zu temperature "
                                  "groups",
                                  i, (unsigned)batch->groups[i], config->groups);
    if (batch->relations) {
        uint8_t *seen = uform_alloc_zeroed(n, 1, "contrastive edge check");
        if (!seen) return UFORM_OUT_OF_MEMORY;
        const uform_relations_t *r = batch->relations;
        uform_status_t status = uform_check_edges(&r->attract, n, seen, "attract");
        if (status == UFORM_OK) status = uform_check_edges(&r->repel, n, seen, "repel");
        if (status == UFORM_OK) status = uform_check_edges(&r->ignore, n, seen, "ignore");
        free(seen);
        return status;
    }
    return UFORM_OK;
}

/* ==== 3. Contrastive: computation ========================================== */

enum { UFORM_PAIR_NONE = 0, UFORM_PAIR_POSITIVE = 1, UFORM_PAIR_NEGATIVE = 2 };

/* Per-thread scratch, each of count (N) or width (w) entries. */
typedef struct {
    double *attract, *repel;  /* edge weights of the current anchor; -1: no edge */
    uint8_t *ignore;          /* 1: an ignore edge of the current anchor */
    uint8_t *kind;            /* UFORM_PAIR_* of each candidate */
    double *weight;           /* its weight */
    double *cosine, *score;   /* of the scored candidates */
    double *dunit;            /* [w]: the gradient of the anchor's unit prefix */
} uform_contrastive_scratch_t;

typedef struct {
    const uform_contrastive_config_t *config;
    const uform_contrastive_batch_t *batch;
    const double *temperatures;  /* exp(log_inverse_temperature) [G] */
    const float *bias;           /* [G] under SIGMOID */
    uform_contrastive_scratch_t *scratch;  /* [threads] */
    size_t width;                /* the current Matryoshka width */
    double *units;               /* [N, width] */
    double *norms;               /* [N] */
    float *forces;               /* [N, N]: dL_i/dcosine_ij of anchor i's loss (unscaled) */
    double *row_loss, *row_dtau, *row_dbias;  /* [N] per anchor (unscaled) */
    uint8_t *row_scored;         /* [N] */
    double scale;                /* 1 / (anchors averaged over * widths) */
    double *dembeddings;         /* [N, D] float64 accumulator over widths */
} uform_contrastive_job_t;

static void uform_run(uform_executor_t *executor, size_t count, size_t grain, uform_range_fn_t fn,
                      void *context) {
    if (executor)
        uform_parallel_for(executor, count, grain, fn, context);
    else if (count)
        fn(context, 0, count, 0);
}

/* Four fixed partial sums: one order of operations for every call. */
static double uform_dot_f64(const double *a, const double *b, size_t n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t k = 0;
    for (; k + 4 <= n; k += 4) {
        s0 += a[k] * b[k];
        s1 += a[k + 1] * b[k + 1];
        s2 += a[k + 2] * b[k + 2];
        s3 += a[k + 3] * b[k + 3];
    }
    for (; k < n; k++) s0 += a[k] * b[k];
    return (s0 + s1) + (s2 + s3);
}

/* log(1 + exp(x)) without overflow. */
static inline double uform_softplus(double x) { return fmax(x, 0.0) + log1p(exp(-fabs(x))); }

static inline double uform_sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

/* The prefix e[0:w] of every item as a unit vector in float64. */
static void uform_contrastive_units(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    uform_contrastive_job_t *job = context;
    const size_t d = job->batch->dimensions, w = job->width;
    for (size_t i = begin; i < end; i++) {
        const float *row = job->batch->embeddings + i * d;
        double *unit = job->units + i * w;
        double sum = 0;
        for (size_t k = 0; k < w; k++) {
            unit[k] = (double)row[k];
            sum += unit[k] * unit[k];
        }
        double norm = sqrt(sum);
        double inverse = 1.0 / (norm > 1e-12 ? norm : 1e-12);
        for (size_t k = 0; k < w; k++) unit[k] *= inverse;
        job->norms[i] = norm;
    }
}

/* Classifies every candidate of anchor i into scratch->kind / weight by the
 * relations' precedence (section 3). */
static void uform_pair_classify(const uform_contrastive_config_t *config, size_t n,
                                const uint32_t *bags, const uform_relations_t *relations, size_t i,
                                uform_contrastive_scratch_t *scratch) {
    const uform_edges_t *attract = relations ? &relations->attract : NULL;
    const uform_edges_t *repel = relations ? &relations->repel : NULL;
    const uform_edges_t *ignore = relations ? &relations->ignore : NULL;
    if (attract && attract->offsets)
        for (size_t e = attract->offsets[i]; e < attract->offsets[i + 1]; e++) {
            uint32_t j = attract->ids[e];
            if (j == i) continue;
            double w = attract->weights ? (double)attract->weights[e] : 1.0;
            scratch->attract[j] = w;
        }
    if (repel && repel->offsets)
        for (size_t e = repel->offsets[i]; e < repel->offsets[i + 1]; e++) {
            uint32_t j = repel->ids[e];
            if (j == i) continue;
            double w = repel->weights ? (double)repel->weights[e] : 1.0;
            scratch->repel[j] = w;
        }
    if (ignore && ignore->offsets)
        for (size_t e = ignore->offsets[i]; e < ignore->offsets[i + 1]; e++)
            scratch->ignore[ignore->ids[e]] = 1;

    const bool ambient = config->negatives == UFORM_NEGATIVES_AMBIENT;
    const double ambient_weight = (double)config->ambient_repulsion_weight;
    for (size_t j = 0; j < n; j++) {
        uint8_t kind = UFORM_PAIR_NONE;
        double weight = 0;
        if (j == i || scratch->ignore[j]) {
            /* not scored */
        } else if (scratch->attract[j] >= 0) {
            kind = UFORM_PAIR_POSITIVE;
            weight = scratch->attract[j];
        } else if (bags && bags[j] == bags[i]) {
            kind = UFORM_PAIR_POSITIVE;
            weight = 1.0;
        } else if (scratch->repel[j] >= 0) {
            kind = UFORM_PAIR_NEGATIVE;
            weight = scratch->repel[j];
        } else if (ambient) {
            kind = UFORM_PAIR_NEGATIVE;
            weight = ambient_weight;
        }
        scratch->kind[j] = kind;
        scratch->weight[j] = weight;
    }

    /* Leave the edge tables clean for the next anchor. */
    if (attract && attract->offsets)
        for (size_t e = attract->offsets[i]; e < attract->offsets[i + 1]; e++)
            scratch->attract[attract->ids[e]] = -1.0;
    if (repel && repel->offsets)
        for (size_t e = repel->offsets[i]; e < repel->offsets[i + 1]; e++)
            scratch->repel[repel->ids[e]] = -1.0;
    if (ignore && ignore->offsets)
        for (size_t e = ignore->offsets[i]; e < ignore->offsets[i + 1]; e++)
            scratch->ignore[ignore->ids[e]] = 0;
}

/* One anchor's loss and dloss/dscore (into scratch->score, reused), unscaled.
 * Returns whether the anchor is scored. */
static bool uform_pair_row_loss(uform_pair_loss_form_t form, size_t n,
                                uform_contrastive_scratch_t *scratch, double *loss_out) {
    const uint8_t *kind = scratch->kind;
    const double *weight = scratch->weight;
    double *s = scratch->score;  /* in: scores; out: gradients (unscored: 0) */
    double loss = 0;
    switch (form) {
    case UFORM_PAIR_LOSS_SIGMOID:
        for (size_t j = 0; j < n; j++) {
            if (kind[j] == UFORM_PAIR_POSITIVE) {
                loss += weight[j] * uform_softplus(-s[j]);
                s[j] = -weight[j] * uform_sigmoid(-s[j]);
            } else if (kind[j] == UFORM_PAIR_NEGATIVE) {
                loss += weight[j] * uform_softplus(s[j]);
                s[j] = weight[j] * uform_sigmoid(s[j]);
            } else {
                s[j] = 0;
            }
        }
        *loss_out = loss;
        return true;
    case UFORM_PAIR_LOSS_BALANCED: {
        double total = 0, top = -INFINITY;
        for (size_t j = 0; j < n; j++) {
            if (kind[j] == UFORM_PAIR_POSITIVE) {
                total += weight[j];
                top = fmax(top, s[j]);
            } else if (kind[j] == UFORM_PAIR_NEGATIVE && weight[j] > 0) {
                top = fmax(top, s[j]);
            }
        }
        if (!(total > 0)) break;
        double sum = 0;
        for (size_t j = 0; j < n; j++)
            if (kind[j] == UFORM_PAIR_POSITIVE)
                sum += exp(s[j] - top);
            else if (kind[j] == UFORM_PAIR_NEGATIVE && weight[j] > 0)
                sum += weight[j] * exp(s[j] - top);
        const double lse = top + log(sum);
        loss = lse;
        for (size_t j = 0; j < n; j++) {
            if (kind[j] == UFORM_PAIR_POSITIVE) {
                double target = weight[j] / total;
                loss -= target * s[j];
                s[j] = exp(s[j] - lse) - target;
            } else if (kind[j] == UFORM_PAIR_NEGATIVE) {
                s[j] = weight[j] > 0 ? weight[j] * exp(s[j] - lse) : 0.0;
            } else {
                s[j] = 0;
            }
        }
        *loss_out = loss;
        return true;
    }
    case UFORM_PAIR_LOSS_RANKED: {
        double total = 0, top = -INFINITY;
        for (size_t j = 0; j < n; j++) {
            if (kind[j] == UFORM_PAIR_POSITIVE)
                total += weight[j];
            else if (kind[j] == UFORM_PAIR_NEGATIVE && weight[j] > 0)
                top = fmax(top, s[j]);
        }
        if (!(total > 0)) break;
        /* M = log sum_n r_n exp(s_n); -inf without negatives. */
        double negatives = -INFINITY;
        if (top > -INFINITY) {
            double sum = 0;
            for (size_t j = 0; j < n; j++)
                if (kind[j] == UFORM_PAIR_NEGATIVE && weight[j] > 0)
                    sum += weight[j] * exp(s[j] - top);
            negatives = top + log(sum);
        }
        /* loss = sum_p t_p softplus(M - s_p); d/ds_p = -t_p sigmoid(M - s_p);
         * d/dM = sum_p t_p sigmoid(M - s_p); dM/ds_n = r_n exp(s_n - M). */
        double pull = 0;
        for (size_t j = 0; j < n; j++) {
            if (kind[j] != UFORM_PAIR_POSITIVE) continue;
            double target = weight[j] / total;
            if (negatives == -INFINITY) {
                s[j] = 0;
                continue;
            }
            double margin = negatives - s[j];
            double sigma = uform_sigmoid(margin);
            loss += target * uform_softplus(margin);
            pull += target * sigma;
            s[j] = -target * sigma;
        }
        for (size_t j = 0; j < n; j++) {
            if (kind[j] == UFORM_PAIR_NEGATIVE)
                s[j] = weight[j] > 0 ? pull * weight[j] * exp(s[j] - negatives) : 0.0;
            else if (kind[j] == UFORM_PAIR_NONE)
                s[j] = 0;
        }
        *loss_out = loss;
        return true;
    }
    default: break;
    }
    *loss_out = 0;
    return false;
}

/* Pass 1 over anchors: scores, the anchor's loss and its row of forces. */
static void uform_contrastive_rows(void *context, size_t begin, size_t end, size_t thread) {
    uform_contrastive_job_t *job = context;
    uform_contrastive_scratch_t *scratch = &job->scratch[thread];
    const uform_contrastive_batch_t *batch = job->batch;
    const size_t n = batch->count, w = job->width;
    const bool sigmoid = job->config->pair_loss == UFORM_PAIR_LOSS_SIGMOID;
    for (size_t i = begin; i < end; i++) {
        const size_t g = batch->groups ? batch->groups[i] : 0;
        const double temperature = job->temperatures[g];
        const double offset = sigmoid ? (double)job->bias[g] : 0.0;
        uform_pair_classify(job->config, n, batch->bags, batch->relations, i, scratch);
        const double *unit = job->units + i * w;
        for (size_t j = 0; j < n; j++) {
            if (scratch->kind[j] == UFORM_PAIR_NONE) {
                scratch->cosine[j] = 0;
                scratch->score[j] = 0;
                continue;
            }
            double c = uform_dot_f64(unit, job->units + j * w, w);
            scratch->cosine[j] = c;
            scratch->score[j] = c * temperature + offset;
        }
        double loss = 0;
        bool scored = uform_pair_row_loss(job->config->pair_loss, n, scratch, &loss);
        float *forces = job->forces + i * n;
        double dtau = 0, dbias = 0;
        if (scored) {
            for (size_t j = 0; j < n; j++) {
                double ds = scratch->score[j];
                forces[j] = (float)(ds * temperature);
                dtau += ds * scratch->cosine[j] * temperature;
                dbias += ds;
            }
        } else {
            memset(forces, 0, n * sizeof(float));
        }
        job->row_scored[i] = scored;
        job->row_loss[i] = loss;
        job->row_dtau[i] = dtau;
        job->row_dbias[i] = sigmoid ? dbias : 0.0;
    }
}

/* Pass 2 over items: du_i = scale sum_j (F_ij + F_ji) u_j, then back through
 * the prefix renormalisation into the float64 accumulator. */
static void uform_contrastive_columns(void *context, size_t begin, size_t end, size_t thread) {
    uform_contrastive_job_t *job = context;
    double *du = job->scratch[thread].dunit;
    const size_t n = job->batch->count, d = job->batch->dimensions, w = job->width;
    for (size_t i = begin; i < end; i++) {
        if (job->norms[i] == 0) continue;  /* an empty item: a constant */
        for (size_t k = 0; k < w; k++) du[k] = 0;
        for (size_t j = 0; j < n; j++) {
            double h = (double)job->forces[i * n + j] + (double)job->forces[j * n + i];
            if (h == 0) continue;
            const double *unit = job->units + j * w;
            for (size_t k = 0; k < w; k++) du[k] += h * unit[k];
        }
        const double *unit = job->units + i * w;
        const double norm = job->norms[i];
        double *target = job->dembeddings + i * d;
        if (norm > 1e-12) {
            double dot = 0;
            for (size_t k = 0; k < w; k++) dot += unit[k] * du[k];
            const double factor = job->scale / norm;
            for (size_t k = 0; k < w; k++) target[k] += (du[k] - unit[k] * dot) * factor;
        } else {
            const double factor = job->scale / 1e-12;
            for (size_t k = 0; k < w; k++) target[k] += du[k] * factor;
        }
    }
}

uform_status_t uform_contrastive(uform_executor_t *executor,
                                 const uform_contrastive_config_t *config,
                                 const uform_contrastive_batch_t *batch,
                                 const float *log_inverse_temperature, const float *bias,
                                 float *loss, float *d_embeddings, float *d_log_inverse_temperature,
                                 float *d_bias) {
    UFORM_TRY(uform_contrastive_check(config, batch, log_inverse_temperature, bias, loss));
    const size_t n = batch->count, d = batch->dimensions, groups = config->groups;
    const bool sigmoid = config->pair_loss == UFORM_PAIR_LOSS_SIGMOID;
    if (n == 0) {
        *loss = 0;
        return UFORM_OK;
    }
    size_t widest = 0;
    for (size_t k = 0; k < config->widths_count; k++)
        widest = config->widths[k] > widest ? config->widths[k] : widest;
    const size_t threads = executor ? uform_executor_width(executor) : 1;

    /* Scratch, all allocated before anything is written. */
    uform_status_t status = UFORM_OUT_OF_MEMORY;
    size_t pairs;
    if (!uform_mul_ok(n, n, &pairs))
        return uform_fail(UFORM_OUT_OF_MEMORY, "contrastive: %zu x %zu scores overflow", n, n);
    double *temperatures = uform_alloc(groups, sizeof(double), "contrastive temperatures");
    double *dtau = uform_alloc_zeroed(groups, sizeof(double), "contrastive temperature gradients");
    double *dbias = uform_alloc_zeroed(groups, sizeof(double), "contrastive bias gradients");
    uform_contrastive_scratch_t *scratch =
        uform_alloc_zeroed(threads, sizeof(*scratch), "contrastive scratch");
    double *units = uform_alloc(n, widest * sizeof(double), "contrastive unit prefixes");
    double *norms = uform_alloc(n, sizeof(double), "contrastive norms");
    float *forces = uform_alloc(pairs, sizeof(float), "contrastive score gradients");
    double *rows = uform_alloc(n, 3 * sizeof(double), "contrastive anchor sums");
    uint8_t *scored = uform_alloc(n, 1, "contrastive anchors");
    double *dembeddings = uform_alloc_zeroed(n, d * sizeof(double), "contrastive gradients");
    if (!temperatures || !dtau || !dbias || !scratch || !units || !norms || !forces || !rows ||
        !scored || !dembeddings)
        goto done;
    for (size_t t = 0; t < threads; t++) {
        uform_contrastive_scratch_t *s = &scratch[t];
        s->attract = uform_alloc(n, sizeof(double), "contrastive scratch");
        s->repel = uform_alloc(n, sizeof(double), "contrastive scratch");
        s->ignore = uform_alloc_zeroed(n, 1, "contrastive scratch");
        s->kind = uform_alloc(n, 1, "contrastive scratch");
        s->weight = uform_alloc(n, sizeof(double), "contrastive scratch");
        s->cosine = uform_alloc(n, sizeof(double), "contrastive scratch");
        s->score = uform_alloc(n, sizeof(double), "contrastive scratch");
        s->dunit = uform_alloc(widest, sizeof(double), "contrastive scratch");
        if (!s->attract || !s->repel || !s->ignore || !s->kind || !s->weight || !s->cosine ||
            !s->score || !s->dunit)
            goto done;
        for (size_t j = 0; j < n; j++) s->attract[j] = s->repel[j] = -1.0;
    }
    status = UFORM_OK;

    for (size_t g = 0; g < groups; g++) temperatures[g] = exp((double)log_inverse_temperature[g]);
    uform_contrastive_job_t job = {
        .config = config,
        .batch = batch,
        .temperatures = temperatures,
        .bias = bias,
        .scratch = scratch,
        .units = units,
        .norms = norms,
        .forces = forces,
        .row_loss = rows,
        .row_dtau = rows + n,
        .row_dbias = rows + 2 * n,
        .row_scored = scored,
        .dembeddings = dembeddings,
    };
    double total = 0;
    bool any = false;
    for (size_t k = 0; k < config->widths_count; k++) {
        job.width = config->widths[k];
        uform_run(executor, n, 16, uform_contrastive_units, &job);
        uform_run(executor, n, 4, uform_contrastive_rows, &job);
        size_t anchors = 0;
        for (size_t i = 0; i < n; i++) anchors += scored[i];
        if (anchors == 0) break;  /* the same for every width: relations do not depend on it */
        any = true;
        const double scale = 1.0 / ((double)anchors * (double)config->widths_count);
        double width_loss = 0;
        for (size_t i = 0; i < n; i++) {
            if (!scored[i]) continue;
            size_t g = batch->groups ? batch->groups[i] : 0;
            width_loss += job.row_loss[i];
            dtau[g] += job.row_dtau[i] * scale;
            dbias[g] += job.row_dbias[i] * scale;
        }
        total += width_loss * scale;
        job.scale = scale;
        uform_run(executor, n, 4, uform_contrastive_columns, &job);
    }

    *loss = any ? (float)total : 0.0f;
    if (any) {
        if (d_embeddings)
            for (size_t e = 0; e < n * d; e++) d_embeddings[e] += (float)dembeddings[e];
        if (d_log_inverse_temperature)
            for (size_t g = 0; g < groups; g++) d_log_inverse_temperature[g] += (float)dtau[g];
        if (d_bias && sigmoid)
            for (size_t g = 0; g < groups; g++) d_bias[g] += (float)dbias[g];
    }

done:
    if (scratch)
        for (size_t t = 0; t < threads; t++) {
            uform_contrastive_scratch_t *s = &scratch[t];
            free(s->attract);
            free(s->repel);
            free(s->ignore);
            free(s->kind);
            free(s->weight);
            free(s->cosine);
            free(s->score);
            free(s->dunit);
        }
    free(scratch);
    free(temperatures);
    free(dtau);
    free(dbias);
    free(units);
    free(norms);
    free(forces);
    free(rows);
    free(scored);
    free(dembeddings);
    return status;
}

/* ==== Pair losses over a given score matrix (late interaction) ============ */

typedef struct {
    const uform_contrastive_config_t *config;
    uform_pair_loss_form_t form;
    size_t n;
    const uint32_t *bags;
    const uform_relations_t *relations;
    const uint8_t *anchors, *candidates;
    double *scores;                        /* [n, n]: in scores, out dloss_i/ds_ij */
    double *row_loss;
    uint8_t *scored;
    uform_contrastive_scratch_t *scratch;  /* [threads] */
} uform_pair_job_t;

static void uform_pair_rows(void *context, size_t begin, size_t end, size_t thread) {
    uform_pair_job_t *job = context;
    uform_contrastive_scratch_t *scratch = &job->scratch[thread];
    const size_t n = job->n;
    for (size_t i = begin; i < end; i++) {
        double *row = job->scores + i * n;
        bool scored = false;
        double loss = 0;
        if (job->anchors[i]) {
            uform_pair_classify(job->config, n, job->bags, job->relations, i, scratch);
            for (size_t j = 0; j < n; j++) {
                if (!job->candidates[j]) scratch->kind[j] = UFORM_PAIR_NONE;
                scratch->score[j] = scratch->kind[j] == UFORM_PAIR_NONE ? 0.0 : row[j];
            }
            scored = uform_pair_row_loss(job->form, n, scratch, &loss);
        }
        for (size_t j = 0; j < n; j++) row[j] = scored ? scratch->score[j] : 0.0;
        job->scored[i] = scored;
        job->row_loss[i] = scored ? loss : 0.0;
    }
}

uform_status_t uform_pair_losses(uform_executor_t *executor, const uform_contrastive_config_t *config,
                                 uform_pair_loss_form_t form, size_t n, const uint32_t *bags,
                                 const uform_relations_t *relations, const uint8_t *anchors,
                                 const uint8_t *candidates, double *scores, double *row_loss,
                                 uint8_t *scored) {
    if (n == 0) return UFORM_OK;
    if (relations) {
        uint8_t *seen = uform_alloc_zeroed(n, 1, "pair edge check");
        if (!seen) return UFORM_OUT_OF_MEMORY;
        uform_status_t status = uform_check_edges(&relations->attract, n, seen, "attract");
        if (status == UFORM_OK) status = uform_check_edges(&relations->repel, n, seen, "repel");
        if (status == UFORM_OK) status = uform_check_edges(&relations->ignore, n, seen, "ignore");
        free(seen);
        UFORM_TRY(status);
    }
    const size_t threads = executor ? uform_executor_width(executor) : 1;
    uform_contrastive_scratch_t *scratch = uform_alloc_zeroed(threads, sizeof(*scratch), "pair scratch");
    uform_status_t status = scratch ? UFORM_OK : UFORM_OUT_OF_MEMORY;
    for (size_t t = 0; t < threads && status == UFORM_OK; t++) {
        uform_contrastive_scratch_t *s = &scratch[t];
        s->attract = uform_alloc(n, sizeof(double), "pair scratch");
        s->repel = uform_alloc(n, sizeof(double), "pair scratch");
        s->ignore = uform_alloc_zeroed(n, 1, "pair scratch");
        s->kind = uform_alloc(n, 1, "pair scratch");
        s->weight = uform_alloc(n, sizeof(double), "pair scratch");
        s->score = uform_alloc(n, sizeof(double), "pair scratch");
        if (!s->attract || !s->repel || !s->ignore || !s->kind || !s->weight || !s->score)
            status = UFORM_OUT_OF_MEMORY;
        else
            for (size_t j = 0; j < n; j++) s->attract[j] = s->repel[j] = -1.0;
    }
    if (status == UFORM_OK) {
        uform_pair_job_t job = {config, form, n, bags, relations, anchors, candidates,
                                scores, row_loss, scored, scratch};
        uform_run(executor, n, 4, uform_pair_rows, &job);
    }
    if (scratch)
        for (size_t t = 0; t < threads; t++) {
            free(scratch[t].attract);
            free(scratch[t].repel);
            free(scratch[t].ignore);
            free(scratch[t].kind);
            free(scratch[t].weight);
            free(scratch[t].score);
        }
    free(scratch);
    return status;
}
