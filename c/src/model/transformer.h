/* transformer.h: the encoder's blocks written once over the backend interface.
 *
 * One forward serves the encode verbs and the trainer: the verbs pass
 * activations whose layers all share one set of buffers and keep no
 * statistics; the trainer passes one set per layer, which its backward reads.
 * One backward (transformer_backward.c) serves the trainer. The math is
 * DESIGN section 5 (docs/architecture.md): pre-norm blocks, rotary positions,
 * attention confined to each item, tanh GELU, final norm. */
#ifndef UFORM_TRANSFORMER_H
#define UFORM_TRANSFORMER_H

#include "backend/backend.h"

/* One block's weights as the backend holds them. Vectors are FP32. */
typedef struct {
    const float *attention_norm_weight, *attention_norm_bias;  /* [H] */
    uform_weight_t qkv;                                        /* [3H, H] */
    const float *qkv_bias;                                     /* [3H] */
    uform_weight_t out;                                        /* [H, H] */
    const float *out_bias;                                     /* [H] */
    const float *mlp_norm_weight, *mlp_norm_bias;              /* [H] */
    uform_weight_t up;                                         /* [4H, H] */
    const float *up_bias;                                      /* [4H] */
    uform_weight_t down;                                       /* [H, 4H] */
    const float *down_bias;                                    /* [H] */
} uform_block_weights_t;

/* The blocks and the final norm. */
typedef struct {
    size_t depth, hidden;
    const uform_block_weights_t *blocks;   /* [depth] */
    const float *norm_weight, *norm_bias;  /* [H] */
} uform_transformer_t;

/* What one layer's forward writes. In training every pointer is its own
 * buffer, kept for the backward; in inference input == middle (the residual
 * stream, updated in place), normed1 == normed2, up == activated, and the
 * statistics (mean*, rstd*, logsumexp) are NULL. */
typedef struct {
    float *input, *normed1, *mean1, *rstd1, *qkv, *attended, *logsumexp;
    float *middle, *normed2, *mean2, *rstd2, *up, *activated;
    /* Inference on a backend with BF16 operands (backend.h: linear_bf16 and
     * its three companions): the products' operands as BF16 [rows, H],
     * [rows, H], [rows, 4H], made where they are computed, and then normed1,
     * normed2, attended, up and activated are NULL. Training on a backend
     * with BF16 training operands (backend.h: linear_backward_bf16 and
     * gelu_forward_bf16): normed_bf16 holds norm1's rows, normed2_bf16
     * norm2's, activated_bf16 GELU's [rows, 4H], kept for the backward's
     * products, and then normed1, normed2 and activated are NULL (attended
     * and up stay FP32: attention's and GELU's backwards read them). NULL
     * otherwise. qkv_bf16: training on a backend with BF16 attention
     * operands (backend.h: attention_forward_train_bf16) keeps q, k, v so,
     * rotated, [rows, 3H], and then qkv is one FP32 buffer every layer's
     * product writes in turn. */
    uint16_t *normed_bf16, *attended_bf16, *activated_bf16, *normed2_bf16, *qkv_bf16;
} uform_layer_activations_t;

/* A forward's buffers. layers has depth entries when `saved`, else one that
 * every layer reuses. Before the forward, layers[0].input holds the embedded
 * rows; after it, states holds the final normed rows (in inference states ==
 * output == layers[0].input). */
typedef struct {
    bool saved;
    uform_layer_activations_t *layers;
    float *output, *final_mean, *final_rstd, *states;  /* [rows, H], [rows] x2, [rows, H] */
    float *cosines, *sines;                            /* [rows][32] rotary tables */
    void *attention_scratch;                           /* inference only (backend.h) */
} uform_activations_t;

/* One batch of packed items for the blocks. positions hold 3 integers per
 * row (unused axes 0). */
typedef struct {
    size_t rows;
    size_t segments_count;
    const uform_segment_t *segments;
    const uint32_t *positions;   /* [rows][3] */
    size_t longest;              /* the longest segment's rows (attention's launch on a GPU) */
} uform_batch_t;

/* Runs the blocks and the final norm (the forward of docs/architecture.md). */
UFORM_INTERNAL void uform_transformer_forward(uform_backend_t *b, const uform_transformer_t *model,
                                              const uform_batch_t *batch,
                                              const uform_activations_t *a);

/* The backward of a saved forward: d_states [rows, H] is dLoss/d(states);
 * accumulates every block's weight gradients (the same layout as the weights,
 * dense) and leaves dLoss/d(layers[0].input) in d->d_x. `gradients` mirrors
 * `model` with pointers to gradient buffers; d_* are [rows, H] or [rows, 4H]
 * scratch buffers named in transformer_backward.c. */
typedef struct {
    float *d_x, *d_middle, *d_normed, *d_wide, *d_wide2, *d_attended, *d_qkv;
} uform_backward_scratch_t;

typedef struct {
    float *attention_norm_weight, *attention_norm_bias, *qkv, *qkv_bias, *out, *out_bias;
    float *mlp_norm_weight, *mlp_norm_bias, *up, *up_bias, *down, *down_bias;
} uform_block_gradients_t;

/* Called after block `layer`'s backward wrote the last of its weight
 * gradients (blocks finish from the last to the first). The backend's work
 * may still be queued on a device; on host memory the gradients are final. */
typedef struct {
    void (*block_done)(void *context, size_t layer);
    void *context;
} uform_backward_hook_t;

/* hook: NULL for none. */
UFORM_INTERNAL void uform_transformer_backward(uform_backend_t *b, const uform_transformer_t *model,
                                               const uform_block_gradients_t *gradients,
                                               float *d_norm_weight, float *d_norm_bias,
                                               const uform_batch_t *batch,
                                               const uform_activations_t *a, const float *d_states,
                                               const uform_backward_scratch_t *d,
                                               const uform_backward_hook_t *hook);

/* Inference: the bytes of one forward's buffers for up to `rows` rows in
 * `segments` items of at most `longest` rows (measured by the same list that
 * points them), and the pointing itself over a block of that size. */
UFORM_INTERNAL size_t uform_inference_activations_bytes(uform_backend_t *b, size_t hidden,
                                                        size_t rows, size_t segments,
                                                        size_t longest);
UFORM_INTERNAL void uform_inference_activations(uform_backend_t *b, size_t hidden, size_t rows,
                                                size_t segments, size_t longest, float *x,
                                                void *block, uform_layer_activations_t *layer,
                                                uform_activations_t *a);

#endif /* UFORM_TRANSFORMER_H */
