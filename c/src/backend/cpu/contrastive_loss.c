/* contrastive_loss.c: the CPU backend's contrastive loss (docs/training.md
 * section 3) and its gradients over a batch's embeddings, and the pair losses
 * over a given score matrix (late interaction), in float64. Configuration:
 * train/contrastive_config.c; input checks: backend/loss_checks.c. */
#include "backend/cpu/losses.h"

#include <math.h>
#include <stdlib.h>

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
    UFORM_TRY(uform_check_relations(relations, n));
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
