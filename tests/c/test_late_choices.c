/* test_late_choices.c: the late-interaction and choices training terms
 * (docs/training.md sections 9 and 10) against central finite differences of
 * their own losses, for every pair form, plus invariance to the thread count.
 * The end-to-end oracle is the PyTorch reference (tests/test_training_late_choices.py);
 * this checks the backward passes alone, close to the code. */
#include "check.h"

#include "backend/cpu/losses.h"
#include "uform.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double uniform_pm1(void) { return (double)(rng_next() >> 11) * 0x1p-52 * 2.0 - 1.0; }

/* Five items: rows 3, 2, 4, 1, 3; every item a query and a document except item 3
 * (query only) and item 1 (document only). */
#define ITEMS 5
#define ROWS 13
#define WIDTH 8
static const size_t first[ITEMS] = {0, 3, 5, 9, 10};
static const size_t queries[ITEMS] = {2, 0, 4, 1, 3};   /* item 0: a span of 2 of its 3 rows */
static const size_t documents[ITEMS] = {3, 2, 4, 0, 3};
static const uint32_t bags[ITEMS] = {0, 0, 1, 1, 2};

static float late_loss(uform_executor_t *executor, const uform_contrastive_config_t *config,
                       uform_pair_loss_form_t form, const float *vectors, float tau, float bias,
                       float *d_vectors, float *d_tau, float *d_bias) {
    uform_late_batch_t batch = {ITEMS, WIDTH, vectors, first, queries, documents, bags, NULL};
    float loss = 0;
    uform_status_t status = uform_late_interaction_loss(executor, UFORM_SGEMM_AUTO, config, form, &batch, tau, bias, 1.0f,
                                                        &loss, d_vectors, d_tau, d_bias);
    CHECK(status == UFORM_OK, "late interaction loss: status %d (%s)", status, uform_last_error());
    return loss;
}

static int near(double analytic, double numeric, double scale) {
    return fabs(analytic - numeric) <= 2e-2 * scale + 1e-4;
}

static void test_late_interaction_gradients(uform_pair_loss_form_t form, const char *name) {
    uform_contrastive_config_t config;
    memset(&config, 0, sizeof(config));
    config.negatives = UFORM_NEGATIVES_AMBIENT;
    config.ambient_repulsion_weight = 1.0f;
    config.groups = 1;
    float vectors[ROWS * WIDTH], d_vectors[ROWS * WIDTH];
    for (size_t e = 0; e < ROWS * WIDTH; e++) vectors[e] = (float)uniform_pm1();
    float tau = 0.7f, bias = form == UFORM_PAIR_LOSS_SIGMOID ? -0.5f : 0.0f, d_tau = 0, d_bias = 0;
    memset(d_vectors, 0, sizeof(d_vectors));
    float loss = late_loss(NULL, &config, form, vectors, tau, bias, d_vectors, &d_tau, &d_bias);
    CHECK(isfinite(loss) && loss > 0, "%s: loss %g", name, (double)loss);

    const float h = 1e-3f;
    float scratch[ROWS * WIDTH], unused_tau, unused_bias;
    double largest = 1e-6;
    for (size_t e = 0; e < ROWS * WIDTH; e++) largest = fmax(largest, fabs(d_vectors[e]));
    size_t bad = 0;
    for (size_t e = 0; e < ROWS * WIDTH; e++) {
        float saved = vectors[e];
        vectors[e] = saved + h;
        float up = late_loss(NULL, &config, form, vectors, tau, bias, scratch, &unused_tau, &unused_bias);
        vectors[e] = saved - h;
        float down = late_loss(NULL, &config, form, vectors, tau, bias, scratch, &unused_tau, &unused_bias);
        vectors[e] = saved;
        if (!near(d_vectors[e], ((double)up - down) / (2.0 * h), largest)) bad++;
    }
    CHECK(bad == 0, "%s: %zu of %d token-vector gradients disagree with finite differences", name, bad,
          ROWS * WIDTH);
    float up = late_loss(NULL, &config, form, vectors, tau + h, bias, scratch, &unused_tau, &unused_bias);
    float down = late_loss(NULL, &config, form, vectors, tau - h, bias, scratch, &unused_tau, &unused_bias);
    CHECK(near(d_tau, ((double)up - down) / (2.0 * h), fabs(d_tau)), "%s: d tau %g vs %g", name,
          (double)d_tau, ((double)up - down) / (2.0 * h));
    if (form == UFORM_PAIR_LOSS_SIGMOID) {
        up = late_loss(NULL, &config, form, vectors, tau, bias + h, scratch, &unused_tau, &unused_bias);
        down = late_loss(NULL, &config, form, vectors, tau, bias - h, scratch, &unused_tau, &unused_bias);
        CHECK(near(d_bias, ((double)up - down) / (2.0 * h), fabs(d_bias)), "%s: d bias %g vs %g", name,
              (double)d_bias, ((double)up - down) / (2.0 * h));
    }

    /* Three threads: the same bits. */
    uform_executor_t *executor = NULL;
    CHECK(uform_executor_for_ram(3, NULL, 0, &executor) == UFORM_OK, "executor");
    float threaded[ROWS * WIDTH], threaded_tau = 0, threaded_bias = 0;
    memset(threaded, 0, sizeof(threaded));
    float again = late_loss(executor, &config, form, vectors, tau, bias, threaded, &threaded_tau,
                            &threaded_bias);
    CHECK(again == loss && memcmp(threaded, d_vectors, sizeof(threaded)) == 0 && threaded_tau == d_tau,
          "%s: three threads change the result", name);
    uform_executor_free(executor);
}

/* Two items with choices: 3 and 2 choices, groups 0 and 1. */
#define HIDDEN 8
static double choices_total(const float *states, const float *table, const float *bias,
                            const float *log_t, float *d_states, float *d_table, float *d_bias,
                            float *d_log_t) {
    static const uint8_t bytes[5] = {'A', 'B', 'C', 'y', 'n'};
    static const float targets[5] = {0.7f, 0.2f, 0.1f, 0.0f, 1.0f};
    static const size_t offsets[3] = {0, 3, 5};
    static const uint32_t groups[2] = {0, 1};
    uform_choices_batch_t batch = {2, HIDDEN, states, bytes, targets, offsets, groups};
    double sum = 0;
    uform_choices_loss(&batch, table, bias, log_t, 1.0f, &sum, d_states, d_table, d_bias, d_log_t);
    return sum;
}

static void test_choices_gradients(void) {
    static float table[256 * HIDDEN], d_table[256 * HIDDEN], scratch_table[256 * HIDDEN];
    float states[2 * HIDDEN], d_states[2 * HIDDEN], scratch_states[2 * HIDDEN];
    float bias[256], d_bias[256], scratch_bias[256], log_t[2] = {0.3f, -0.4f}, d_log_t[2] = {0, 0};
    float scratch_log_t[2];
    for (size_t e = 0; e < 256 * HIDDEN; e++) table[e] = (float)uniform_pm1();
    for (size_t e = 0; e < 2 * HIDDEN; e++) states[e] = (float)uniform_pm1();
    for (size_t e = 0; e < 256; e++) bias[e] = (float)(0.5 * uniform_pm1());
    memset(d_table, 0, sizeof(d_table));
    memset(d_bias, 0, sizeof(d_bias));
    double loss = choices_total(states, table, bias, log_t, d_states, d_table, d_bias, d_log_t);
    CHECK(isfinite(loss) && loss > 0, "choices: loss %g", loss);
    const float h = 1e-3f;
    float *values[4] = {states, table + 'A' * HIDDEN, bias, log_t};
    const float *grads[4] = {d_states, d_table + 'A' * HIDDEN, d_bias, d_log_t};
    const size_t counts[4] = {2 * HIDDEN, 3 * HIDDEN, 256, 2};  /* 'A', 'B', 'C' rows */
    const char *names[4] = {"states", "byte table", "byte bias", "log temperature"};
    for (size_t v = 0; v < 4; v++) {
        size_t bad = 0;
        for (size_t e = 0; e < counts[v]; e++) {
            float saved = values[v][e];
            values[v][e] = saved + h;
            double up = choices_total(states, table, bias, log_t, scratch_states, scratch_table,
                                      scratch_bias, scratch_log_t);
            values[v][e] = saved - h;
            double down = choices_total(states, table, bias, log_t, scratch_states, scratch_table,
                                        scratch_bias, scratch_log_t);
            values[v][e] = saved;
            if (!near(grads[v][e], (up - down) / (2.0 * h), 1.0)) bad++;
        }
        CHECK(bad == 0, "choices: %zu gradients of the %s disagree with finite differences", bad, names[v]);
    }
}

int main(void) {
    test_late_interaction_gradients(UFORM_PAIR_LOSS_RANKED, "RANKED");
    test_late_interaction_gradients(UFORM_PAIR_LOSS_BALANCED, "BALANCED");
    test_late_interaction_gradients(UFORM_PAIR_LOSS_SIGMOID, "SIGMOID");
    test_choices_gradients();
    printf("test_late_choices: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
