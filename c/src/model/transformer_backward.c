/* transformer_backward.c: the backward of the blocks and the final norm, once,
 * over the backend's operations: the forward of transformer.c read in reverse,
 * every step the transpose of its forward step. Weight gradients accumulate
 * (backend.h); the scratch buffers are overwritten:
 *   d_x        dLoss/d(the layer's output), then dLoss/d(its input)  [rows, H]
 *   d_middle   dLoss/d(middle)                                       [rows, H]
 *   d_normed   dLoss/d(normed1 or normed2)                           [rows, H]
 *   d_wide     dLoss/d(activated)                                    [rows, 4H]
 *   d_wide2    dLoss/d(up)                                           [rows, 4H]
 *              (not kept where the backend has gelu_linear_backward_bf16)
 *   d_attended dLoss/d(attended)                                     [rows, H]
 *   d_qkv      dLoss/d(qkv)                                          [rows, 3H] */
#include "model/transformer.h"

/* linear_backward on the operand the forward kept: x in FP32, or x16 in BF16
 * (training with BF16 operands, transformer.h; the other one is NULL). */
static void uform_product_backward(uform_backend_t *b, const uform_weight_t *w, const float *x,
                                   const uint16_t *x16, const float *dy, size_t rows, float *dweight,
                                   float *dbias, float *dx) {
    if (x16)
        b->ops->linear_backward_bf16(b, w, x16, dy, rows, dweight, dbias, dx, false);
    else
        b->ops->linear_backward(b, w, x, dy, rows, dweight, dbias, dx, false);
}

void uform_transformer_backward(uform_backend_t *b, const uform_transformer_t *model,
                                const uform_block_gradients_t *gradients, float *d_norm_weight,
                                float *d_norm_bias, const uform_batch_t *batch,
                                const uform_activations_t *a, const float *d_states,
                                const uform_backward_scratch_t *d, const uform_backward_hook_t *hook) {
    const uform_backend_ops_t *op = b->ops;
    size_t rows = batch->rows, h = model->hidden, bytes = rows * h * sizeof(float);
    op->zero(b, d->d_x, bytes);
    op->layer_norm_backward(b, d_states, a->output, model->norm_weight, a->final_mean,
                            a->final_rstd, rows, h, d->d_x, d_norm_weight, d_norm_bias);
    for (size_t l = model->depth; l-- > 0;) {
        const uform_block_weights_t *w = &model->blocks[l];
        const uform_block_gradients_t *g = &gradients[l];
        const uform_layer_activations_t *s = &a->layers[l];
        /* next = middle + down(gelu(up(norm2(middle)))) */
        uform_product_backward(b, &w->down, s->activated, s->activated_bf16, d->d_x, rows, g->down,
                               g->down_bias, d->d_wide);
        if (op->gelu_linear_backward_bf16 && s->normed2_bf16) {   /* d_wide2 never stored (backend.h) */
            op->gelu_linear_backward_bf16(b, &w->up, s->normed2_bf16, s->up, d->d_wide, rows, g->up, g->up_bias,
                                          d->d_normed);
        } else {
            op->zero(b, d->d_wide2, 4 * bytes);
            op->gelu_backward(b, s->up, d->d_wide, rows * 4 * h, d->d_wide2);
            uform_product_backward(b, &w->up, s->normed2, s->normed2_bf16, d->d_wide2, rows, g->up, g->up_bias,
                                   d->d_normed);
        }
        op->copy(b, d->d_middle, d->d_x, bytes);
        op->layer_norm_backward(b, d->d_normed, s->middle, w->mlp_norm_weight, s->mean2, s->rstd2,
                                rows, h, d->d_middle, g->mlp_norm_weight, g->mlp_norm_bias);
        /* middle = input + out(attention(rope(qkv(norm1(input))))) */
        op->linear_backward(b, &w->out, s->attended, d->d_middle, rows, g->out, g->out_bias,
                            d->d_attended, false);
        op->zero(b, d->d_qkv, 3 * bytes);
        if (s->qkv_bf16)
            op->attention_backward_bf16(b, s->qkv_bf16, s->attended, d->d_attended, s->logsumexp, h,
                                        batch->segments, batch->segments_count, rows, batch->longest, d->d_qkv);
        else
            op->attention_backward(b, s->qkv, s->attended, d->d_attended, s->logsumexp, h,
                                   batch->segments, batch->segments_count, rows, batch->longest, d->d_qkv);
        if (op->rope_linear_backward_bf16 && s->normed_bf16) {   /* the rotation in the product's pass */
            op->rope_linear_backward_bf16(b, &w->qkv, s->normed_bf16, d->d_qkv, a->cosines, a->sines, rows, g->qkv,
                                          g->qkv_bias, d->d_normed);
        } else {
            op->rope_backward(b, d->d_qkv, rows, h, a->cosines, a->sines);
            uform_product_backward(b, &w->qkv, s->normed1, s->normed_bf16, d->d_qkv, rows, g->qkv, g->qkv_bias,
                                   d->d_normed);
        }
        op->copy(b, d->d_x, d->d_middle, bytes);
        op->layer_norm_backward(b, d->d_normed, s->input, w->attention_norm_weight, s->mean1,
                                s->rstd1, rows, h, d->d_x, g->attention_norm_weight,
                                g->attention_norm_bias);
        if (hook) hook->block_done(hook->context, l);
    }
}
