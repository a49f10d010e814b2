/* pair_loss.cuh: section 3's pair losses for one anchor, computed by a block
 * (docs/training.md section 3), shared by contrastive_loss.cu and
 * late_interaction_loss.cu as the CPU's two losses share
 * backend/cpu/contrastive_loss.c:
 * - uform_pair_classify: each candidate's kind (positive, negative, not
 *   scored) and weight, by the relations' precedence: self and ignore edges
 *   are not scored; then attract edges (their weight), the anchor's bag
 *   (weight 1), repel edges (their weight), AMBIENT negatives (its weight);
 * - uform_pair_row_loss: the anchor's loss under BALANCED, RANKED or SIGMOID
 *   and, in place of each score, dloss/dscore, in float64 as on the CPU.
 * Every sum and maximum over candidates is a fixed tree over a fixed block
 * (reduce.cuh), so the bits do not depend on the grid. Each call is made by
 * every thread of the block (their barriers). */
#ifndef UFORM_CUDA_PAIR_LOSS_CUH
#define UFORM_CUDA_PAIR_LOSS_CUH

#include "reduce.cuh"

enum { UFORM_CUDA_PAIR_NONE = 0, UFORM_CUDA_PAIR_POSITIVE = 1, UFORM_CUDA_PAIR_NEGATIVE = 2 };

__device__ static inline double uform_pair_softplus(double x) { return fmax(x, 0.0) + log1p(exp(-fabs(x))); }

__device__ static inline double uform_pair_sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

/* kind[j], weight[j] of anchor i's n candidates (block scratch); candidates:
 * NULL (every item) or a byte per item, 0 for an item that is not one. The
 * precedence is applied as four passes, each over edges given once per
 * anchor (loss_checks.c), so no two threads write one candidate in a pass. */
__device__ static void uform_pair_classify(const uform_pair_rules_t &rules, size_t n, size_t i,
                                           const uint8_t *candidates, uint8_t *kind, double *weight) {
    const uint32_t *bags = rules.bags;
    for (size_t j = threadIdx.x; j < n; j += blockDim.x) {
        uint8_t k = UFORM_CUDA_PAIR_NONE;
        double w = 0.0;
        if (bags && bags[j] == bags[i]) {
            k = UFORM_CUDA_PAIR_POSITIVE;
            w = 1.0;
        } else if (rules.ambient) {
            k = UFORM_CUDA_PAIR_NEGATIVE;
            w = rules.ambient_weight;
        }
        kind[j] = k;
        weight[j] = w;
    }
    __syncthreads();
    for (int set = UFORM_PAIR_RULES_REPEL; set >= (int)UFORM_PAIR_RULES_ATTRACT; set--) {   /* repel, then attract */
        if (!rules.offsets[set]) continue;
        for (uint32_t e = rules.offsets[set][i] + threadIdx.x; e < rules.offsets[set][i + 1]; e += blockDim.x) {
            uint32_t j = rules.ids[set][e];
            if (j == i) continue;
            if (set == UFORM_PAIR_RULES_REPEL && bags && bags[j] == bags[i]) continue;   /* a bag outranks repel */
            kind[j] = set == UFORM_PAIR_RULES_REPEL ? UFORM_CUDA_PAIR_NEGATIVE : UFORM_CUDA_PAIR_POSITIVE;
            weight[j] = rules.weights[set] ? (double)rules.weights[set][e] : 1.0;
        }
        __syncthreads();
    }
    const uint32_t *ignore = rules.offsets[UFORM_PAIR_RULES_IGNORE];
    if (ignore)
        for (uint32_t e = ignore[i] + threadIdx.x; e < ignore[i + 1]; e += blockDim.x) {
            kind[rules.ids[UFORM_PAIR_RULES_IGNORE][e]] = UFORM_CUDA_PAIR_NONE;
            weight[rules.ids[UFORM_PAIR_RULES_IGNORE][e]] = 0.0;
        }
    __syncthreads();
    for (size_t j = threadIdx.x; j < n; j += blockDim.x)
        if (j == i || (candidates && !candidates[j])) kind[j] = UFORM_CUDA_PAIR_NONE, weight[j] = 0.0;
    __syncthreads();
}

/* The block's maximum of every thread's `value`, returned to every thread. */
__device__ static inline double uform_block_max(double value, double *shared /* [UFORM_CUDA_ROW_THREADS / 32] */) {
    for (int offset = 16; offset > 0; offset /= 2) value = fmax(value, __shfl_down_sync(0xffffffffu, value, offset));
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    __syncthreads();
    if (lane == 0) shared[warp] = value;
    __syncthreads();
    double top = -INFINITY;
    for (int w = 0; w < UFORM_CUDA_ROW_THREADS / 32; w++) top = fmax(top, shared[w]);
    return top;
}

/* One anchor's loss (unscaled) into *loss, and dloss/dscore in place of each
 * score s[j] (0 for a candidate not scored). Returns whether the anchor is
 * scored (the same in every thread); when not, s is left as it was. The
 * block is UFORM_CUDA_ROW_THREADS threads. */
__device__ static bool uform_pair_row_loss(uform_pair_loss_form_t form, size_t n, const uint8_t *kind,
                                           const double *weight, double *s, double *loss) {
    __shared__ double shared[UFORM_CUDA_ROW_THREADS / 32];
    const size_t stride = blockDim.x;
    if (form == UFORM_PAIR_LOSS_SIGMOID) {
        double part = 0.0;
        for (size_t j = threadIdx.x; j < n; j += stride) {
            if (kind[j] == UFORM_CUDA_PAIR_POSITIVE) {
                part += weight[j] * uform_pair_softplus(-s[j]);
                s[j] = -weight[j] * uform_pair_sigmoid(-s[j]);
            } else if (kind[j] == UFORM_CUDA_PAIR_NEGATIVE) {
                part += weight[j] * uform_pair_softplus(s[j]);
                s[j] = weight[j] * uform_pair_sigmoid(s[j]);
            } else {
                s[j] = 0.0;
            }
        }
        *loss = uform_block_sum(part, shared);
        return true;
    }
    /* BALANCED and RANKED: the positives' total weight, and the top score the
     * log-sum-exp is taken from */
    const bool balanced = form == UFORM_PAIR_LOSS_BALANCED;
    double total = 0.0, top = -INFINITY;
    for (size_t j = threadIdx.x; j < n; j += stride) {
        if (kind[j] == UFORM_CUDA_PAIR_POSITIVE) {
            total += weight[j];
            if (balanced) top = fmax(top, s[j]);
        } else if (kind[j] == UFORM_CUDA_PAIR_NEGATIVE && weight[j] > 0) {
            top = fmax(top, s[j]);
        }
    }
    total = uform_block_sum(total, shared);
    top = uform_block_max(top, shared);
    *loss = 0.0;
    if (!(total > 0)) return false;
    if (balanced) {
        double sum = 0.0;
        for (size_t j = threadIdx.x; j < n; j += stride)
            if (kind[j] == UFORM_CUDA_PAIR_POSITIVE)
                sum += exp(s[j] - top);
            else if (kind[j] == UFORM_CUDA_PAIR_NEGATIVE && weight[j] > 0)
                sum += weight[j] * exp(s[j] - top);
        const double lse = top + log(uform_block_sum(sum, shared));
        double pulled = 0.0;   /* sum over positives of target s */
        for (size_t j = threadIdx.x; j < n; j += stride) {
            if (kind[j] == UFORM_CUDA_PAIR_POSITIVE) {
                double target = weight[j] / total;
                pulled += target * s[j];
                s[j] = exp(s[j] - lse) - target;
            } else if (kind[j] == UFORM_CUDA_PAIR_NEGATIVE) {
                s[j] = weight[j] > 0 ? weight[j] * exp(s[j] - lse) : 0.0;
            } else {
                s[j] = 0.0;
            }
        }
        *loss = lse - uform_block_sum(pulled, shared);
        return true;
    }
    /* RANKED: M = log sum_n r_n exp(s_n), -inf without negatives; loss = sum_p
     * t_p softplus(M - s_p); d/ds_p = -t_p sigmoid(M - s_p); dM/ds_n = r_n
     * exp(s_n - M), times sum_p t_p sigmoid(M - s_p) */
    double negatives = -INFINITY;
    if (top > -INFINITY) {
        double sum = 0.0;
        for (size_t j = threadIdx.x; j < n; j += stride)
            if (kind[j] == UFORM_CUDA_PAIR_NEGATIVE && weight[j] > 0) sum += weight[j] * exp(s[j] - top);
        negatives = top + log(uform_block_sum(sum, shared));
    }
    double part = 0.0, pull = 0.0;
    for (size_t j = threadIdx.x; j < n; j += stride) {
        if (kind[j] != UFORM_CUDA_PAIR_POSITIVE) continue;
        if (negatives == -INFINITY) {
            s[j] = 0.0;
            continue;
        }
        double target = weight[j] / total, margin = negatives - s[j], sigma = uform_pair_sigmoid(margin);
        part += target * uform_pair_softplus(margin);
        pull += target * sigma;
        s[j] = -target * sigma;
    }
    *loss = uform_block_sum(part, shared);
    pull = uform_block_sum(pull, shared);
    for (size_t j = threadIdx.x; j < n; j += stride) {
        if (kind[j] == UFORM_CUDA_PAIR_NEGATIVE)
            s[j] = weight[j] > 0 ? pull * weight[j] * exp(s[j] - negatives) : 0.0;
        else if (kind[j] == UFORM_CUDA_PAIR_NONE)
            s[j] = 0.0;
    }
    __syncthreads();   /* s is read across threads next */
    return true;
}

#endif /* UFORM_CUDA_PAIR_LOSS_CUH */
