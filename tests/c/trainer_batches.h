/* trainer_batches.h: the runs the device trainer tests compare
 * (tests/c/test_device_trainer.c on the guarded backend,
 * tests/gpu/test_vram_trainer.c on a GPU): small options and batches of
 * ITEMS texts, with the shared choices "abcd" when asked, or of texts and WAV
 * recordings. */
#ifndef UFORM_TESTS_TRAINER_BATCHES_H
#define UFORM_TESTS_TRAINER_BATCHES_H

#include "uform.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ITEMS 8

/* ITEMS texts of 1 to 40 bytes, two to a bag, two temperature groups. */
typedef struct {
    char data[ITEMS * 40];
    size_t offsets[ITEMS + 1];
    uint32_t modalities[ITEMS], bags[ITEMS], groups[ITEMS];
    uform_tape_t tape;
} texts_t;

static inline void texts_make(texts_t *t, unsigned seed) {
    t->offsets[0] = 0;
    for (size_t i = 0; i < ITEMS; i++) {
        size_t length = 1 + (seed * 31 + i * 17) % 40;
        for (size_t k = 0; k < length; k++) t->data[t->offsets[i] + k] = (char)('a' + (seed + i * 7 + k * 3) % 26);
        t->offsets[i + 1] = t->offsets[i] + length;
        t->modalities[i] = UFORM_MODALITY_TEXT;
        t->bags[i] = (uint32_t)(i / 2);
        t->groups[i] = (uint32_t)(i % 2);
    }
    t->tape = (uform_tape_t){t->data, t->offsets[ITEMS], t->offsets, ITEMS};
}

/* The step batch of `texts`: bags and groups, and with `choices` every item
 * choosing among "abcd" (the entry shared; item i's right one is i % 4). */
static inline uform_trainer_batch_t batch_of(const texts_t *texts, bool choices) {
    static const size_t choice_offsets[2] = {0, 4};
    static float targets[ITEMS * 4];
    for (size_t i = 0; i < ITEMS * 4; i++) targets[i] = i % 4 == (i / 4) % 4 ? 1.0f : 0.0f;
    uform_trainer_batch_t batch = {.modalities = texts->modalities, .contents = texts->tape,
                                   .bags = texts->bags, .temperature_groups = texts->groups};
    if (choices) {
        batch.choices = (uform_tape_t){"abcd", 4, choice_offsets, 1};
        batch.choice_targets = targets;
    }
    return batch;
}

/* Depth 2, hidden 64; two rows of 32 columns per device, so the items spread
 * over rows; a short schedule. */
static inline uform_trainer_options_t options_for(uform_objective_t objective, uform_contrastive_t *contrastive) {
    uform_trainer_options_t options;
    memset(&options, 0, sizeof(options));
    options.depth = 2;
    options.hidden = 64;
    options.objective = objective;
    options.contrastive = contrastive;
    options.batch.max_rows_per_device = 2;
    options.batch.max_columns_per_row = 32;
    options.schedule.learning_rate = 3e-3f;
    options.schedule.steps = 20;
    options.seed = 11;
    return options;
}

/* ITEMS items: texts at even indices, WAV recordings (16 kHz mono PCM16, 32 to
 * 160 samples: 1 to 5 chunks of 32) at odd ones, in one tape. */
typedef struct {
    uint8_t data[ITEMS * 400];
    size_t offsets[ITEMS + 1];
    uint32_t modalities[ITEMS];
    uform_tape_t tape;
} mixed_t;

static inline size_t wav_write(uint8_t *out, size_t samples, unsigned seed) {
    static const uint8_t header[44] = {'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'A', 'V', 'E', 'f', 'm', 't', ' ',
                                       16, 0, 0, 0, 1, 0, 1, 0, 0x80, 0x3e, 0, 0, 0, 0x7d, 0, 0,
                                       2, 0, 16, 0, 'd', 'a', 't', 'a', 0, 0, 0, 0};
    memcpy(out, header, 44);
    uint32_t data = (uint32_t)(2 * samples), riff = 36 + data;
    for (int k = 0; k < 4; k++) out[4 + k] = (uint8_t)(riff >> (8 * k)), out[40 + k] = (uint8_t)(data >> (8 * k));
    for (size_t i = 0; i < samples; i++) {
        int16_t value = (int16_t)(8000.0 * sin(0.05 * (double)(i * (seed + 3))));
        out[44 + 2 * i] = (uint8_t)value, out[45 + 2 * i] = (uint8_t)((uint16_t)value >> 8);
    }
    return 44 + 2 * samples;
}

static inline void mixed_make(mixed_t *m, unsigned seed) {
    m->offsets[0] = 0;
    for (size_t i = 0; i < ITEMS; i++) {
        uint8_t *at = m->data + m->offsets[i];
        size_t size;
        if (i % 2) {
            size = wav_write(at, 32 * (1 + (seed + i) % 5), seed + (unsigned)i);
            m->modalities[i] = UFORM_MODALITY_AUDIO;
        } else {
            size = 1 + (seed * 31 + i * 17) % 40;
            for (size_t k = 0; k < size; k++) at[k] = (uint8_t)('a' + (seed + i * 7 + k * 3) % 26);
            m->modalities[i] = UFORM_MODALITY_TEXT;
        }
        m->offsets[i + 1] = m->offsets[i] + size;
    }
    m->tape = (uform_tape_t){m->data, m->offsets[ITEMS], m->offsets, ITEMS};
}

/* Every tensor of every buffer of the two trainers, equal bit for bit. */
static inline bool same_state(const uform_trainer_t *a, const uform_trainer_t *b, const char *const *names,
                              size_t names_count) {
    for (size_t n = 0; n < names_count; n++)
        for (uint32_t which = 0; which < 4; which++) {
            size_t count = 0;
            if (uform_trainer_tensor(a, names[n], which, NULL, &count) != UFORM_OK) return false;
            float *x = malloc(count * sizeof(float)), *y = malloc(count * sizeof(float));
            bool same = uform_trainer_tensor(a, names[n], which, x, &count) == UFORM_OK &&
                        uform_trainer_tensor(b, names[n], which, y, &count) == UFORM_OK &&
                        memcmp(x, y, count * sizeof(float)) == 0;
            free(x), free(y);
            if (!same) {
                printf("FAIL: \"%s\" buffer %u differs\n", names[n], which);
                return false;
            }
        }
    return true;
}

/* A tensor's master weights (which 0) of a trainer, malloc'd; NULL if it has none. */
static inline float *trainer_weights(const uform_trainer_t *t, const char *name, size_t *count) {
    *count = 0;
    if (uform_trainer_tensor(t, name, 0, NULL, count) != UFORM_OK) return NULL;
    float *values = malloc(*count * sizeof(float));
    if (uform_trainer_tensor(t, name, 0, values, count) != UFORM_OK) {
        free(values);
        return NULL;
    }
    return values;
}

#endif /* UFORM_TESTS_TRAINER_BATCHES_H */
