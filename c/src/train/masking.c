/* masking.c: docs/training.md sections 1-2: the counter-based random numbers
 * every draw of a step uses, and the masked-text corruption. See objectives.h. */
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
    /* The media patch masks of docs/training.md section 11. */
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
