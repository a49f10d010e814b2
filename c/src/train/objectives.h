/* objectives.h: the parts of the training objectives of docs/training.md
 * sections 1-3 the trainer computes itself, behind the public
 * uform_trainer_init_ram and uform_trainer_step (trainer.c, step.c): the
 * counter-based random numbers, the masking configuration and the
 * masked-text corruption, and the contrastive configuration. The contrastive
 * loss and its gradients are backend operations (backend/losses.h); the media
 * patch masks are in media_objectives.h.
 *
 * Everything here is a pure function of its arguments: no result depends on
 * the thread count, the executor or the order in which items were packed.
 */
#ifndef UFORM_OBJECTIVES_H
#define UFORM_OBJECTIVES_H

#include "backend/losses.h"

/* ---- 1. Random numbers ------------------------------------------------------ */

/* Streams of docs/training.md section 1. Continuation test k (k >= 1) of a
 * span uses stream UFORM_STREAM_SPAN_CONTINUE + k. */
enum {
    UFORM_STREAM_SPAN_START = 1,
    UFORM_STREAM_SPAN_CONTINUE = 2,
    UFORM_STREAM_ACTION = 1000,
    UFORM_STREAM_BYTE = 1001
};

/* mix(mix(mix(mix(mix(seed) ^ step) ^ item) ^ position) ^ stream), with mix the
 * splitmix64 finaliser (x ^= x >> 30; x *= 0xbf58476d1ce4e5b9; x ^= x >> 27;
 * x *= 0x94d049bb133111eb; x ^= x >> 31), all uint64 with wrapping products. */
UFORM_INTERNAL uint64_t uform_random_bits(uint64_t seed, uint64_t step, uint64_t item,
                                          uint64_t position, uint64_t stream);
/* (bits >> 40) * 2^-24: a multiple of 2^-24 in [0, 1), exact in FP32 and FP64. */
UFORM_INTERNAL double uform_random_uniform(uint64_t seed, uint64_t step, uint64_t item,
                                           uint64_t position, uint64_t stream);

/* ---- 2. Masked text --------------------------------------------------------- */

/* The embedding row a MASKed byte takes (rows 0..255 are the bytes). */
#define UFORM_MASK_TOKEN 256u

/* Copies `given` (NULL: all zero) into `resolved` with every zero field
 * replaced by its derived value: token_mask_probability 0.15, token_mean_span
 * 3, replace_fraction 0.8, random_fraction 0.1, text_weight 1, and the
 * media fields of docs/training.md section 11: image/video/audio mask ratio
 * 0.75, weights 1. Non-zero fields are kept as given, so call
 * uform_masking_check on the result. */
UFORM_INTERNAL void uform_masking_resolve(const uform_masking_t *given, uform_masking_t *resolved);

/* UFORM_INVALID_ARGUMENT naming the field when a resolved field is out of its
 * domain: NaN or negative anywhere; token_mask_probability, replace_fraction,
 * random_fraction and the three mask ratios above 1; replace_fraction +
 * random_fraction above 1, summed in FP32 (so 0.8 + 0.2 passes, although
 * 0.8f + 0.2f exceeds 1 in float64); token_mean_span below 1 or infinite; a
 * weight infinite. */
UFORM_INTERNAL uform_status_t uform_masking_check(const uform_masking_t *resolved);

/* The corruption of one item of n bytes (docs/training.md section 2), for a
 * resolved and checked configuration: spans of geometric length (mean m, cut
 * at n) start with probability p / m, then each selected position becomes
 * MASK (UFORM_MASK_TOKEN) with probability r, a random byte with probability
 * q, or stays. Writes ids[0..n) (the corrupted token ids, 0..256; unselected
 * positions keep their byte) and selected[0..n) (1 at selected positions, 0
 * elsewhere) and returns how many positions were selected. Thresholds are
 * float64 values computed from the float32 fields: p / m, 1 / m, r, r + q. */
UFORM_INTERNAL size_t uform_mask_text(const uform_masking_t *resolved, uint64_t seed,
                                      uint64_t step, uint64_t item, const uint8_t *bytes, size_t n,
                                      uint32_t *ids, uint8_t *selected);

/* ---- 3. Contrastive --------------------------------------------------------- */

/* Fills `config` from `given` (NULL: all derived) for embeddings of
 * `dimensions` scalars: matryoshka_dimensions NULL or count 0 derives [D];
 * temperature_groups 0 derives 1; inverse_temperature 0 derives 10;
 * ambient_repulsion_weight 0 derives 1; pair_loss DERIVED is BALANCED; bias 0
 * derives -10 for SIGMOID and 0 otherwise. The widths are copied into
 * widths_storage (capacity UFORM_MATRYOSHKA_WIDTHS_MAX), which config->widths
 * then points to; they keep the given order (the loss is their mean, summed
 * in that order) and must be distinct, each in [1, dimensions], at most 64.
 * Writes the parameters' initial values: log(inverse_temperature) and the
 * bias. UFORM_INVALID_ARGUMENT naming the field, with nothing written, for
 * dimensions 0, a bad width (0, above D, repeated, a count above 64 or a NULL
 * list with a nonzero count), a non-finite or negative inverse temperature,
 * ambient weight or bias (the bias may be negative, not NaN or infinite), or
 * an unknown negatives / pair_loss value. */
UFORM_INTERNAL uform_status_t uform_contrastive_resolve(const uform_contrastive_t *given,
                                                        size_t dimensions,
                                                        uform_contrastive_config_t *config,
                                                        size_t *widths_storage,
                                                        float *initial_log_inverse_temperature,
                                                        float *initial_bias);

/* A configuration field: the given value, or the derived one when it is 0. */
static inline float uform_derive(float given, float derived) { return given == 0.0f ? derived : given; }

#endif /* UFORM_OBJECTIVES_H */
