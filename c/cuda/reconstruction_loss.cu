/* reconstruction_loss.cu: the masked media objective's loss on the CUDA
 * backend (backend.h: reconstruction_loss): sum over rows of
 * mean_k (predictions - targets)^2 in float64, and d_predictions = scale 2
 * (predictions - targets) / width, as the CPU backend computes them (the
 * difference in float, its square summed in double).
 *
 * On the device so a step's masked patches (rows x width floats each way)
 * never cross to the host: one block per row writes the row's mean and its
 * gradient; one block sums the rows' means, each thread a fixed stride of
 * rows in order, then a fixed tree (reduce.cuh); 8 bytes come back. Run on an
 * H200 (tests/gpu/test_cuda_ops.c, 2026-12-04); also runs under the emulation
 * (emulation.h). */
#include "cuda_internal.h"
#include "reduce.cuh"

__global__ static void uform_reconstruction_rows(const float *predictions, const float *targets, size_t width,
                                                 float factor, double *row_means, float *d_predictions) {
    __shared__ double shared[UFORM_CUDA_ROW_THREADS / 32];
    size_t r = blockIdx.x;
    double sum = 0.0;
    for (size_t k = threadIdx.x; k < width; k += blockDim.x) {
        float difference = predictions[r * width + k] - targets[r * width + k];
        sum += (double)difference * (double)difference;
        d_predictions[r * width + k] = factor * difference;
    }
    sum = uform_block_sum(sum, shared);
    if (threadIdx.x == 0) row_means[r] = sum / (double)width;
}

__global__ static void uform_reconstruction_total(const double *row_means, size_t rows, double *total) {
    __shared__ double shared[UFORM_CUDA_ROW_THREADS / 32];
    double sum = 0.0;
    for (size_t r = threadIdx.x; r < rows; r += blockDim.x) sum += row_means[r];
    sum = uform_block_sum(sum, shared);
    if (threadIdx.x == 0) *total = sum;
}

double uform_cuda_reconstruction_loss(uform_backend_t *b, const float *predictions, const float *targets,
                                      size_t rows, size_t width, float scale, float *d_predictions) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    if (!rows) return 0.0;
    if (rows > 0x7fffffffu) {
        uform_cuda_record(b, UFORM_INVALID_ARGUMENT, "reconstruction_loss", "more than 2^31 rows in one call");
        return NAN;
    }
    double *means = (double *)uform_cuda_grow(b, &context->loss_rows, (rows + 1) * sizeof(double),
                                              "reconstruction loss");
    if (!means) return NAN;
    const float factor = 2.0f * scale / (float)width;
    UFORM_LAUNCH(uform_reconstruction_rows, (unsigned)rows, UFORM_CUDA_ROW_THREADS, context->stream)(
        predictions, targets, width, factor, means, d_predictions);
    uform_cuda_launched(b, "reconstruction_loss (rows)");
    UFORM_LAUNCH(uform_reconstruction_total, 1, UFORM_CUDA_ROW_THREADS, context->stream)(means, rows, means + rows);
    uform_cuda_launched(b, "reconstruction_loss (total)");
    double total = NAN;
    uform_cuda_download(b, &total, means + rows, sizeof(total));
    /* a failure stays recorded for the step's synchronize; the loss it reports is not finite */
    return context->failure == UFORM_OK ? total : NAN;
}
