/* transformer.c: the forward of the blocks, once, over the backend's operations
 * (transformer.h), and the inference activations measured and pointed from one
 * list.
 *
 * Each residual add is fused into the product that feeds it (linear with
 * accumulate: y = y + x W^T + b, one chain per element from y), so inference
 * updates the residual stream in place and training copies it forward first.
 * Every operation keeps a fixed order per output element, so a row's result
 * never depends on the batch around it or on the thread count. */
#include "model/transformer.h"

/* One block of inference with BF16 operands (transformer.h): the same math as
 * below, each operand rounded where it is made instead of by the product
 * that reads it; the residual stream x stays FP32, updated in place. */
static void uform_block_forward_bf16(uform_backend_t *b, const uform_block_weights_t *w,
                                     const uform_batch_t *batch, const uform_activations_t *a,
                                     size_t h, float *x) {
    const uform_backend_ops_t *op = b->ops;
    const uform_layer_activations_t *s = &a->layers[0];
    size_t rows = batch->rows;
    op->layer_norm_forward_bf16(b, x, rows, h, w->attention_norm_weight, w->attention_norm_bias,
                                s->normed_bf16, NULL, NULL);
    if (op->linear_qkv_bf16) {   /* qkv written in BF16, rotated: in the FP32 rows' buffer */
        uint16_t *qkv16 = (uint16_t *)s->qkv;
        op->linear_qkv_bf16(b, &w->qkv, s->normed_bf16, h, rows, w->qkv_bias, a->cosines, a->sines,
                            qkv16);
        op->attention_forward_staged_bf16(b, qkv16, h, batch->segments, batch->segments_count, rows,
                                          batch->longest, s->attended_bf16, a->attention_scratch);
    } else {
        op->linear_bf16(b, &w->qkv, s->normed_bf16, h, rows, w->qkv_bias, false, s->qkv, 3 * h);
        /* rotary positions applied inside */
        op->attention_forward_bf16(b, s->qkv, h, batch->segments, batch->segments_count, rows,
                                   batch->longest, a->cosines, a->sines, s->attended_bf16,
                                   a->attention_scratch);
    }
    op->linear_bf16(b, &w->out, s->attended_bf16, h, rows, w->out_bias, true, x, h);
    op->layer_norm_forward_bf16(b, x, rows, h, w->mlp_norm_weight, w->mlp_norm_bias,
                                s->normed_bf16, NULL, NULL);
    op->linear_gelu_bf16(b, &w->up, s->normed_bf16, h, rows, w->up_bias, s->activated_bf16);
    op->linear_bf16(b, &w->down, s->activated_bf16, 4 * h, rows, w->down_bias, true, x, h);
}

void uform_transformer_forward(uform_backend_t *b, const uform_transformer_t *model,
                               const uform_batch_t *batch, const uform_activations_t *a) {
    const uform_backend_ops_t *op = b->ops;
    size_t rows = batch->rows, h = model->hidden, bytes = rows * h * sizeof(float);
    op->rope_tables(b, batch->segments, batch->segments_count, batch->positions, a->cosines,
                    a->sines);
    for (size_t l = 0; l < model->depth; l++) {
        if (!a->saved && a->layers[0].normed_bf16) {
            uform_block_forward_bf16(b, &model->blocks[l], batch, a, h, a->layers[0].input);
            continue;
        }
        const uform_block_weights_t *w = &model->blocks[l];
        const uform_layer_activations_t *s = &a->layers[a->saved ? l : 0];
        /* training with BF16 operands kept (transformer.h): the same math, the
         * normed rows and GELU's output rounded where they are made */
        bool bf16 = s->normed2_bf16 != NULL;
        /* middle = input + out(attention(rope(qkv(norm1(input))))) */
        if (bf16) {
            op->layer_norm_forward_bf16(b, s->input, rows, h, w->attention_norm_weight,
                                        w->attention_norm_bias, s->normed_bf16, s->mean1, s->rstd1);
            op->linear_bf16(b, &w->qkv, s->normed_bf16, h, rows, w->qkv_bias, false, s->qkv, 3 * h);
        } else {
            op->layer_norm_forward(b, s->input, rows, h, w->attention_norm_weight,
                                   w->attention_norm_bias, s->normed1, s->mean1, s->rstd1);
            op->linear(b, &w->qkv, s->normed1, h, rows, w->qkv_bias, false, s->qkv, 3 * h);
        }
        if (s->qkv_bf16) {   /* rotated and rounded into qkv_bf16, kept for the backward */
            op->attention_forward_train_bf16(b, s->qkv, h, batch->segments, batch->segments_count, rows,
                                             batch->longest, a->cosines, a->sines, s->qkv_bf16, s->attended,
                                             s->logsumexp);
        } else {
            op->rope_forward(b, s->qkv, rows, h, a->cosines, a->sines);
            op->attention_forward(b, s->qkv, h, batch->segments, batch->segments_count, rows, batch->longest,
                                  s->attended, s->logsumexp, a->attention_scratch);
        }
        if (s->middle != s->input) op->copy(b, s->middle, s->input, bytes);
        op->linear(b, &w->out, s->attended, h, rows, w->out_bias, true, s->middle, h);
        /* next = middle + down(gelu(up(norm2(middle)))) */
        if (bf16) {
            op->layer_norm_forward_bf16(b, s->middle, rows, h, w->mlp_norm_weight, w->mlp_norm_bias,
                                        s->normed2_bf16, s->mean2, s->rstd2);
            op->linear_bf16(b, &w->up, s->normed2_bf16, h, rows, w->up_bias, false, s->up, 4 * h);
            op->gelu_forward_bf16(b, s->up, rows * 4 * h, s->activated_bf16);
        } else {
            op->layer_norm_forward(b, s->middle, rows, h, w->mlp_norm_weight, w->mlp_norm_bias,
                                   s->normed2, s->mean2, s->rstd2);
            op->linear_gelu(b, &w->up, s->normed2, h, rows, w->up_bias, s->up, s->activated);
        }
        float *next = !a->saved ? s->input : l + 1 < model->depth ? a->layers[l + 1].input
                                                                  : a->output;
        if (next != s->middle) op->copy(b, next, s->middle, bytes);
        if (bf16)
            op->linear_bf16(b, &w->down, s->activated_bf16, 4 * h, rows, w->down_bias, true, next, h);
        else
            op->linear(b, &w->down, s->activated, 4 * h, rows, w->down_bias, true, next, h);
    }
    op->layer_norm_forward(b, a->output, rows, h, model->norm_weight, model->norm_bias, a->states,
                           a->final_mean, a->final_rstd);
}

/* ---- inference activations ---------------------------------------------------- */

/* The one list of an inference forward's buffers, walked with base NULL to
 * measure (the returned end is the size in bytes) and then over the block to
 * point, so the size cannot drift from the layout. 64-byte aligned each. */
static size_t uform_inference_layout(uform_backend_t *b, size_t hidden, size_t rows,
                                     size_t segments, size_t longest, uint8_t *base,
                                     uform_layer_activations_t *layer, uform_activations_t *a) {
    size_t offset = 0;
    bool bf16 = b->ops->linear_bf16 != NULL;   /* BF16 operands (transformer.h) */
#define UFORM_TAKE(pointer, bytes)                                                             \
    do {                                                                                       \
        offset = (offset + 63) & ~(size_t)63;                                                  \
        (pointer) = base ? (void *)(base + offset) : NULL;                                     \
        offset += (bytes);                                                                     \
    } while (0)
    if (bf16) {
        UFORM_TAKE(layer->normed_bf16, rows * hidden * sizeof(uint16_t));
        UFORM_TAKE(layer->attended_bf16, rows * hidden * sizeof(uint16_t));
        UFORM_TAKE(layer->activated_bf16, rows * 4 * hidden * sizeof(uint16_t));
    } else {
        UFORM_TAKE(layer->normed1, rows * hidden * sizeof(float));
        UFORM_TAKE(layer->attended, rows * hidden * sizeof(float));
        UFORM_TAKE(layer->up, rows * 4 * hidden * sizeof(float));
    }
    UFORM_TAKE(layer->qkv, rows * 3 * hidden * sizeof(float));
    UFORM_TAKE(a->cosines, rows * UFORM_PAIRS * sizeof(float));
    UFORM_TAKE(a->sines, rows * UFORM_PAIRS * sizeof(float));
    UFORM_TAKE(a->attention_scratch, b->ops->attention_scratch_bytes(b, hidden, segments, longest));
#undef UFORM_TAKE
    return offset;
}

size_t uform_inference_activations_bytes(uform_backend_t *b, size_t hidden, size_t rows,
                                         size_t segments, size_t longest) {
    uform_layer_activations_t layer;
    uform_activations_t a;
    return uform_inference_layout(b, hidden, rows, segments, longest, NULL, &layer, &a);
}

void uform_inference_activations(uform_backend_t *b, size_t hidden, size_t rows, size_t segments,
                                 size_t longest, float *x, void *block,
                                 uform_layer_activations_t *layer, uform_activations_t *a) {
    memset(layer, 0, sizeof(*layer));
    memset(a, 0, sizeof(*a));
    uform_inference_layout(b, hidden, rows, segments, longest, block, layer, a);
    layer->input = layer->middle = x;
    layer->normed2 = layer->normed1;
    layer->activated = layer->up;
    a->saved = false;
    a->layers = layer;
    a->output = a->states = x;
}
