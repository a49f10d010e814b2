/* test_attention_mma.cc: the CUDA backend's tensor-core attention kernels
 * (c/cuda/attention_mma.cuh; their current version has not run on a GPU)
 * run on the CPU under c/cuda/emulation.h (a block's threads as host
 * threads, the warp's shuffles, ldmatrix and mma.sync as exchanges between
 * them, cp.async deferred to its wait) against attention in float64.
 *
 * Inputs: segments of 1, 45, 0, 9, 64 (one whole tile) and 130 rows (three
 * tiles, the last partial), two heads; q, k, v and dout already rounded to
 * BF16, so the kernels' own rounding of them is exact. What is left, and the
 * tolerances (relative to the largest magnitude of each output):
 * - out: the probabilities rounded to BF16 before p v (2^-9 relative per
 *   term, of random sign): 4e-3 (2 x 2^-9);
 * - logsumexp: FP32 sums of exact BF16 products and exp2 in FP32: 1e-5;
 * - dq, dk, dv: p and ds rounded to BF16 before their second products, from
 *   the kernels' own out and logsumexp: 1e-2 (a float64 simulation of exactly
 *   these roundings at these scales, over segments up to 1100 rows, gave
 *   1.8e-3).
 * And bit for bit: the same results whatever the number of blocks a
 * (segment, head) gets (its tiles looped over by fewer blocks), the
 * inference forward (no logsumexp) equal to the training forward, the
 * kernels fed BF16 copies (tiles by cp.async) equal to those fed FP32, the
 * forward taking 128 query rows a block (two row groups a warp) equal to the
 * one taking 64, the backward taking each tile pair in 2 or 4 parts and dq
 * 128 query rows a block (the GPU's default since 2026-12-06, not yet run
 * there) equal to one part and 64 rows, and
 * all of it again with the warps run far apart (emulation.h's by-warp order:
 * each barrier and cp.async wait of the kernels is needed for these to pass;
 * dropping any one of them fails a check, tried 2026-12-04). */
#include "../../c/cuda/emulation.h"

extern "C" {
#include "backend/backend.h"
}

#include "../../c/cuda/attention_mma.cuh"

#include <cstdio>
#include <cstdlib>

static int passed, failed;
static uint64_t state = 0x9e3779b97f4a7c15ull;

static float random_float(float scale) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    float value = (float)((double)(state >> 11) * 0x1p-53 * 2.0 - 1.0) * scale;
    return uform_emulated_float(__bfloat16_as_ushort(__float2bfloat16_rn(value)));
}

static void row(const char *what, bool ok, double error, double bound) {
    printf("| %-44s | %10.3g | %10.3g | %s |\n", what, error, bound, ok ? "ok" : "FAIL");
    ok ? passed++ : failed++;
}

/* Largest |got - expected| against bound x the largest |expected|; NaN fails. */
static void compare(const char *what, const std::vector<double> &expected, const std::vector<float> &got,
                    double relative) {
    double largest = 0, error = 0;
    for (size_t i = 0; i < expected.size(); i++) largest = fmax(largest, fabs(expected[i]));
    for (size_t i = 0; i < expected.size(); i++) {
        double e = fabs((double)got[i] - expected[i]);
        if (!(e <= error)) error = isnan(e) ? INFINITY : e;
    }
    row(what, error <= relative * largest, error, relative * largest);
}

static void same_bits(const char *what, const std::vector<float> &a, const std::vector<float> &b) {
    bool same = a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    row(what, same, 0, 0);
}

/* The backward as the GPU runs it (dq, then dk and dv with D handed over),
 * each tile pair in `parts` pieces, `slots` blocks a (segment, head). */
template <typename T, int parts, int dq_groups = 1, int dkv_groups = 1>
static void backward_in_parts(unsigned slots, const T *qkv, const T *dout_rows, const float *out, const float *dout,
                              const float *lse, size_t hidden, const uform_segment_t *segments, size_t count,
                              size_t heads, float *dqkv, float *deltas) {
    uform_emulated_launch(dim3(count, heads, slots), UFORM_MMA_THREADS, uform_attention_dq_mma<T, parts, dq_groups>, qkv,
                          dout_rows, out, dout, lse, hidden, segments, dqkv, deltas);
    uform_emulated_launch(dim3(count, heads, slots), UFORM_MMA_THREADS, uform_attention_dkv_mma<T, parts, dkv_groups>,
                          qkv, dout_rows, out, dout, lse, hidden, segments, dqkv, (const float *)deltas);
}

int main() {
    const size_t hidden = 128, heads = hidden / UFORM_HEAD_WIDTH, stride = 3 * hidden;
    const uform_segment_t segments[] = {{0, 1, 1}, {1, 45, 1}, {46, 0, 2}, {46, 9, 3}, {55, 64, 1}, {119, 130, 1}};
    const size_t count = sizeof(segments) / sizeof(segments[0]), rows = 249;
    std::vector<float> qkv(rows * stride), dout(rows * hidden), dqkv_initial(rows * stride);
    for (float &x : qkv) x = random_float(2.0f);
    for (float &x : dout) x = random_float(1.0f);
    for (float &x : dqkv_initial) x = random_float(1.0f);

    /* float64: out, logsumexp and the gradients (added to dqkv_initial) */
    std::vector<double> out(rows * hidden), lse(rows * heads), dqkv(dqkv_initial.begin(), dqkv_initial.end());
    for (size_t c = 0; c < count; c++)
        for (size_t h = 0; h < heads; h++) {
            size_t begin = segments[c].begin, length = segments[c].length, column = h * UFORM_HEAD_WIDTH;
            auto q = [&](size_t i, size_t d) { return (double)qkv[(begin + i) * stride + column + d]; };
            auto k = [&](size_t i, size_t d) { return (double)qkv[(begin + i) * stride + hidden + column + d]; };
            auto v = [&](size_t i, size_t d) { return (double)qkv[(begin + i) * stride + 2 * hidden + column + d]; };
            auto g = [&](size_t i, size_t d) { return (double)dout[(begin + i) * hidden + column + d]; };
            std::vector<double> p(length * length);
            for (size_t i = 0; i < length; i++) {
                double top = -INFINITY, total = 0;
                for (size_t j = 0; j < length; j++) {
                    double s = 0;
                    for (size_t d = 0; d < 64; d++) s += q(i, d) * k(j, d);
                    p[i * length + j] = s / 8;
                    top = fmax(top, s / 8);
                }
                for (size_t j = 0; j < length; j++) total += exp(p[i * length + j] - top);
                lse[(begin + i) * heads + h] = top + log(total);
                for (size_t j = 0; j < length; j++) p[i * length + j] = exp(p[i * length + j] - top) / total;
                for (size_t d = 0; d < 64; d++) {
                    double o = 0;
                    for (size_t j = 0; j < length; j++) o += p[i * length + j] * v(j, d);
                    out[(begin + i) * hidden + column + d] = o;
                }
            }
            for (size_t i = 0; i < length; i++) {
                double delta = 0;
                for (size_t d = 0; d < 64; d++) delta += g(i, d) * out[(begin + i) * hidden + column + d];
                for (size_t j = 0; j < length; j++) {
                    double dp = 0;
                    for (size_t d = 0; d < 64; d++) dp += g(i, d) * v(j, d);
                    double pij = p[i * length + j], ds = pij * (dp - delta) / 8;
                    for (size_t d = 0; d < 64; d++) {
                        dqkv[(begin + i) * stride + column + d] += ds * k(j, d);
                        dqkv[(begin + j) * stride + hidden + column + d] += ds * q(i, d);
                        dqkv[(begin + j) * stride + 2 * hidden + column + d] += pij * g(i, d);
                    }
                }
            }
        }

    printf("test_attention_mma: c/cuda/attention_mma.cuh under a CPU emulation of CUDA, against float64\n\n");
    printf("| %-44s | %10s | %10s | %s |\n|---|---:|---:|---|\n", "check", "max error", "bound", "result");
    std::vector<float> out1(rows * hidden), lse1(rows * heads), out2(rows * hidden, 7.0f), lse2(rows * heads, 7.0f);
    std::vector<float> out3(rows * hidden);
    uform_emulated_launch(dim3(count, heads, 1), UFORM_MMA_THREADS, uform_attention_forward_mma<float>, qkv.data(), hidden,
                          segments, out1.data(), lse1.data());
    compare("forward out", out, out1, 4e-3);
    compare("forward logsumexp", lse, lse1, 1e-5);
    uform_emulated_launch(dim3(count, heads, 2), UFORM_MMA_THREADS, uform_attention_forward_mma<float>, qkv.data(), hidden,
                          segments, out2.data(), lse2.data());
    same_bits("forward, 2 blocks per (segment, head): out", out1, out2);
    same_bits("forward, 2 blocks per (segment, head): lse", lse1, lse2);
    uform_emulated_launch(dim3(count, heads, 3), UFORM_MMA_THREADS, uform_attention_forward_mma<float>, qkv.data(), hidden,
                          segments, out3.data(), (float *)NULL);
    same_bits("inference forward (no logsumexp): out", out1, out3);
    /* from a copy of qkv already in BF16 (the GPU's way for segments longer than a tile) */
    std::vector<uint16_t> qkv16(rows * stride);
    for (size_t i = 0; i < qkv16.size(); i++) qkv16[i] = __bfloat16_as_ushort(__float2bfloat16_rn(qkv[i]));
    std::vector<float> out4(rows * hidden), lse4(rows * heads);
    uform_emulated_launch(dim3(count, heads, 3), UFORM_MMA_THREADS, uform_attention_forward_mma<uint16_t>,
                          (const uint16_t *)qkv16.data(), hidden, segments, out4.data(), lse4.data());
    same_bits("forward from BF16 rows: out", out1, out4);
    same_bits("forward from BF16 rows: lse", lse1, lse4);
    /* 128 query rows a block (two groups a warp; the GPU's default where the
     * longest segment spans more than a tile): the 130-row segment's first
     * span runs two groups, its last (2 rows) one; the spans looped over by
     * one block (z = 1) or taken by two */
    for (unsigned slots = 1; slots <= 2; slots++) {
        std::vector<float> out6(rows * hidden, 7.0f), lse6(rows * heads, 7.0f), out7(rows * hidden, 7.0f);
        uform_emulated_launch(dim3(count, heads, slots), UFORM_MMA_THREADS, uform_attention_forward_mma<float, float, 2>,
                              qkv.data(), hidden, segments, out6.data(), lse6.data());
        uform_emulated_launch(dim3(count, heads, slots), UFORM_MMA_THREADS,
                              uform_attention_forward_mma<uint16_t, float, 2>, (const uint16_t *)qkv16.data(), hidden,
                              segments, out7.data(), (float *)NULL);
        same_bits(slots == 1 ? "forward, 128 rows a block, spans looped: out" : "forward, 128 rows a block: out", out1,
                  out6);
        same_bits(slots == 1 ? "forward, 128 rows a block, spans looped: lse" : "forward, 128 rows a block: lse", lse1,
                  lse6);
        same_bits(slots == 1 ? "forward, 128 rows, BF16 rows, looped: out" : "forward, 128 rows, BF16 rows: out", out1,
                  out7);
    }

    std::vector<float> grads1(dqkv_initial), grads2(dqkv_initial), grads3(dqkv_initial), deltas(rows * heads, 7.0f);
    uform_emulated_launch(dim3(count, heads, 1), UFORM_MMA_THREADS, uform_attention_dq_mma<float>, qkv.data(), dout.data(),
                          out1.data(), dout.data(), lse1.data(), hidden, segments, grads1.data(), (float *)NULL);
    uform_emulated_launch(dim3(count, heads, 1), UFORM_MMA_THREADS, uform_attention_dkv_mma<float>, qkv.data(), dout.data(),
                          out1.data(), dout.data(), lse1.data(), hidden, segments, grads1.data(), (const float *)NULL);
    compare("backward dqkv (+= on random values)", dqkv, grads1, 1e-2);
    /* each part alone, against its own largest gradient */
    for (int part = 0; part < 3; part++) {
        std::vector<double> expected;
        std::vector<float> got;
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < hidden; c++) {
                size_t i = r * stride + part * hidden + c;
                expected.push_back(dqkv[i] - dqkv_initial[i]);
                got.push_back(grads1[i] - dqkv_initial[i]);
            }
        static const char *const names[3] = {"backward dq", "backward dk", "backward dv"};
        compare(names[part], expected, got, 1e-2);
    }
    uform_emulated_launch(dim3(count, heads, 3), UFORM_MMA_THREADS, uform_attention_dq_mma<float>, qkv.data(), dout.data(),
                          out1.data(), dout.data(), lse1.data(), hidden, segments, grads2.data(), (float *)NULL);
    uform_emulated_launch(dim3(count, heads, 2), UFORM_MMA_THREADS, uform_attention_dkv_mma<float>, qkv.data(), dout.data(),
                          out1.data(), dout.data(), lse1.data(), hidden, segments, grads2.data(), (const float *)NULL);
    same_bits("backward, 3 and 2 blocks per (segment, head)", grads1, grads2);
    /* D handed from the dq kernel to the dk, dv one (the GPU's way) */
    uform_emulated_launch(dim3(count, heads, 2), UFORM_MMA_THREADS, uform_attention_dq_mma<float>, qkv.data(), dout.data(),
                          out1.data(), dout.data(), lse1.data(), hidden, segments, grads3.data(), deltas.data());
    uform_emulated_launch(dim3(count, heads, 3), UFORM_MMA_THREADS, uform_attention_dkv_mma<float>, qkv.data(), dout.data(),
                          out1.data(), dout.data(), lse1.data(), hidden, segments, grads3.data(), (const float *)deltas.data());
    same_bits("backward, D from the dq kernel", grads1, grads3);
    /* from copies of qkv and dout already in BF16 (the GPU's way for segments
     * longer than a tile), tiles fetched by cp.async */
    std::vector<uint16_t> dout16(rows * hidden);
    for (size_t i = 0; i < dout16.size(); i++) dout16[i] = __bfloat16_as_ushort(__float2bfloat16_rn(dout[i]));
    std::vector<float> grads4(dqkv_initial), deltas4(rows * heads, 7.0f);
    uform_emulated_launch(dim3(count, heads, 3), UFORM_MMA_THREADS, uform_attention_dq_mma<uint16_t>,
                          (const uint16_t *)qkv16.data(), (const uint16_t *)dout16.data(), out1.data(), dout.data(),
                          lse1.data(), hidden, segments, grads4.data(), deltas4.data());
    uform_emulated_launch(dim3(count, heads, 1), UFORM_MMA_THREADS, uform_attention_dkv_mma<uint16_t>,
                          (const uint16_t *)qkv16.data(), (const uint16_t *)dout16.data(), out1.data(), dout.data(),
                          lse1.data(), hidden, segments, grads4.data(), (const float *)deltas4.data());
    same_bits("backward from BF16 rows", grads1, grads4);
    same_bits("backward from BF16 rows: D", deltas, deltas4);
    /* each tile pair in 2 and 4 parts: the same chains, the same bits */
    for (int bf16 = 0; bf16 < 2; bf16++) {
        std::vector<float> two(dqkv_initial), four(dqkv_initial), deltas2(rows * heads), deltas6(rows * heads);
        if (bf16) {
            const uint16_t *q16 = (const uint16_t *)qkv16.data(), *d16 = (const uint16_t *)dout16.data();
            backward_in_parts<uint16_t, 2>(2, q16, d16, out1.data(), dout.data(), lse1.data(), hidden, segments, count,
                                           heads, two.data(), deltas2.data());
            backward_in_parts<uint16_t, 4>(3, q16, d16, out1.data(), dout.data(), lse1.data(), hidden, segments, count,
                                           heads, four.data(), deltas6.data());
        } else {
            backward_in_parts<float, 2>(3, qkv.data(), dout.data(), out1.data(), dout.data(), lse1.data(), hidden,
                                        segments, count, heads, two.data(), deltas2.data());
            backward_in_parts<float, 4>(1, qkv.data(), dout.data(), out1.data(), dout.data(), lse1.data(), hidden,
                                        segments, count, heads, four.data(), deltas6.data());
        }
        same_bits(bf16 ? "backward in 2 parts, from BF16 rows" : "backward in 2 parts", grads1, two);
        same_bits(bf16 ? "backward in 4 parts, from BF16 rows" : "backward in 4 parts", grads1, four);
    }
    /* dq taking 128 query rows a block (two row groups a warp; the 130-row
     * segment's last span one group), its spans looped over by one block or
     * taken by two, and dk, dv 128 keys a block likewise: the same bits */
    for (unsigned slots = 1; slots <= 2; slots++) {
        std::vector<float> wide(dqkv_initial), wide16(dqkv_initial), deltas2(rows * heads), deltas6(rows * heads);
        backward_in_parts<float, 4, 2>(slots, qkv.data(), dout.data(), out1.data(), dout.data(), lse1.data(), hidden,
                                       segments, count, heads, wide.data(), deltas2.data());
        backward_in_parts<uint16_t, 4, 2, 2>(slots, (const uint16_t *)qkv16.data(), (const uint16_t *)dout16.data(),
                                             out1.data(), dout.data(), lse1.data(), hidden, segments, count, heads,
                                             wide16.data(), deltas6.data());
        same_bits(slots == 1 ? "backward, dq 128 rows a block, looped" : "backward, dq 128 rows a block", grads1, wide);
        same_bits(slots == 1 ? "backward, dq and dk, dv 128 rows, BF16, looped" : "backward, dq and dk, dv 128 rows, BF16",
                  grads1, wide16);
        same_bits("backward, dq 128 rows a block: D", deltas, deltas2);
    }

    /* again with each warp run as far as it goes before the next starts
     * (emulation.h): a barrier missing between one warp's reads of a stage
     * and another's next copy into it shows as NaN (cp.async targets hold
     * 0xFF bytes until waited for) */
    uform_emulated_order = UFORM_EMULATED_BY_WARP;
    for (int bf16 = 0; bf16 < 2; bf16++) {
        std::vector<float> out5(rows * hidden), lse5(rows * heads), grads5(dqkv_initial), deltas5(rows * heads);
        if (bf16) {
            uform_emulated_launch(dim3(count, heads, 2), UFORM_MMA_THREADS, uform_attention_forward_mma<uint16_t>,
                                  (const uint16_t *)qkv16.data(), hidden, segments, out5.data(), lse5.data());
            uform_emulated_launch(dim3(count, heads, 2), UFORM_MMA_THREADS, uform_attention_dq_mma<uint16_t>,
                                  (const uint16_t *)qkv16.data(), (const uint16_t *)dout16.data(), out1.data(),
                                  dout.data(), lse1.data(), hidden, segments, grads5.data(), deltas5.data());
            uform_emulated_launch(dim3(count, heads, 2), UFORM_MMA_THREADS, uform_attention_dkv_mma<uint16_t>,
                                  (const uint16_t *)qkv16.data(), (const uint16_t *)dout16.data(), out1.data(),
                                  dout.data(), lse1.data(), hidden, segments, grads5.data(), (const float *)deltas5.data());
        } else {
            uform_emulated_launch(dim3(count, heads, 2), UFORM_MMA_THREADS, uform_attention_forward_mma<float>,
                                  qkv.data(), hidden, segments, out5.data(), lse5.data());
            uform_emulated_launch(dim3(count, heads, 2), UFORM_MMA_THREADS, uform_attention_dq_mma<float>, qkv.data(),
                                  dout.data(), out1.data(), dout.data(), lse1.data(), hidden, segments, grads5.data(),
                                  (float *)NULL);
            uform_emulated_launch(dim3(count, heads, 2), UFORM_MMA_THREADS, uform_attention_dkv_mma<float>, qkv.data(),
                                  dout.data(), out1.data(), dout.data(), lse1.data(), hidden, segments, grads5.data(),
                                  (const float *)NULL);
        }
        same_bits(bf16 ? "warps apart, from BF16 rows: forward out" : "warps apart: forward out", out1, out5);
        same_bits(bf16 ? "warps apart, from BF16 rows: forward lse" : "warps apart: forward lse", lse1, lse5);
        std::vector<float> out8(rows * hidden), lse8(rows * heads);
        if (bf16)
            uform_emulated_launch(dim3(count, heads, 1), UFORM_MMA_THREADS,
                                  uform_attention_forward_mma<uint16_t, uint16_t, 2>, (const uint16_t *)qkv16.data(),
                                  hidden, segments, (uint16_t *)out8.data(), (float *)NULL);
        else
            uform_emulated_launch(dim3(count, heads, 1), UFORM_MMA_THREADS, uform_attention_forward_mma<float, float, 2>,
                                  qkv.data(), hidden, segments, out8.data(), lse8.data());
        if (bf16) {   /* BF16 out (inference): the FP32 out rounded, bit for bit */
            std::vector<uint16_t> want(rows * hidden), got(rows * hidden);
            for (size_t i = 0; i < want.size(); i++) want[i] = __bfloat16_as_ushort(__float2bfloat16_rn(out1[i]));
            memcpy(got.data(), out8.data(), got.size() * sizeof(uint16_t));
            row("warps apart, 128 rows a block, BF16 out", want == got, 0, 0);
        } else {
            same_bits("warps apart, 128 rows a block: forward out", out1, out8);
            same_bits("warps apart, 128 rows a block: forward lse", lse1, lse8);
        }
        same_bits(bf16 ? "warps apart, from BF16 rows: backward" : "warps apart: backward", grads1, grads5);
        std::vector<float> grads9(dqkv_initial), deltas9(rows * heads);
        if (bf16)   /* 4 parts, dq and dk, dv 128 rows a block */
            backward_in_parts<uint16_t, 4, 2, 2>(1, (const uint16_t *)qkv16.data(), (const uint16_t *)dout16.data(),
                                           out1.data(), dout.data(), lse1.data(), hidden, segments, count, heads,
                                           grads9.data(), deltas9.data());
        else
            backward_in_parts<float, 2>(2, qkv.data(), dout.data(), out1.data(), dout.data(), lse1.data(), hidden,
                                        segments, count, heads, grads9.data(), deltas9.data());
        same_bits(bf16 ? "warps apart, from BF16 rows: backward, 4 parts, 128 rows" : "warps apart: backward, 2 parts",
                  grads1, grads9);
    }

    printf("\ntest_attention_mma: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
