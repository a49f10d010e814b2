/* convert_rows.cu: FP32 rows as an output scalar on the GPU (backend.h:
 * convert_rows, into the GPU's memory: a device arena's rows; download_rows,
 * converted here and then copied down at their final width). Each output
 * element is one call of core/output_scalars.h, the functions the CPU's
 * download_rows calls, so rows converted here and on the host are the same
 * bits. Run on an H200 (tests/gpu/test_cuda_ops.c, 2026-12-04); also runs
 * under the emulation. */
#include "cuda_internal.h"

#include "core/output_scalars.h"

#define UFORM_CONVERT_THREADS 256

/* One output unit per thread, grid-strided: a component (F32, BF16, F16,
 * E4M3, E5M2, I8), or a byte of eight sign bits (B1, most significant first,
 * as numpy.packbits; bytes past the last component are 0). */
__global__ static void uform_convert_rows_kernel(const float *x, size_t rows, size_t width, uform_scalar_t scalar,
                                                 uint8_t *out, size_t row_bytes) {
    size_t units = scalar == UFORM_SCALAR_B1 ? row_bytes : width;
    for (size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x; index < rows * units;
         index += (size_t)gridDim.x * blockDim.x) {
        size_t r = index / units, i = index % units;
        const float *row = x + r * width;
        uint8_t *destination = out + r * row_bytes;
        switch (scalar) {
        case UFORM_SCALAR_F32: memcpy(destination + 4 * i, &row[i], 4); break;
        case UFORM_SCALAR_BF16: {
            uint16_t bits = uform_f32_to_bf16(row[i]);
            memcpy(destination + 2 * i, &bits, 2);
            break;
        }
        case UFORM_SCALAR_F16: {
            uint16_t bits = uform_f32_to_f16(row[i]);
            memcpy(destination + 2 * i, &bits, 2);
            break;
        }
        case UFORM_SCALAR_E4M3: destination[i] = uform_f64_to_e4m3((double)row[i]); break;
        case UFORM_SCALAR_E5M2: destination[i] = uform_f64_to_e5m2((double)row[i]); break;
        case UFORM_SCALAR_I8: destination[i] = (uint8_t)uform_f32_to_i8(row[i]); break;
        case UFORM_SCALAR_B1: {
            unsigned byte = 0;
            for (size_t bit = 0; bit < 8 && 8 * i + bit < width; bit++)
                if (row[8 * i + bit] > 0) byte |= 0x80u >> bit;
            destination[i] = (uint8_t)byte;
            break;
        }
        default: break;
        }
    }
}

void uform_cuda_convert_rows(uform_backend_t *b, const float *rows_f32, size_t rows, size_t width,
                             uform_scalar_t scalar, void *rows_out, size_t row_bytes) {
    size_t units = scalar == UFORM_SCALAR_B1 ? row_bytes : width;
    if (!rows || !units) return;
    UFORM_LAUNCH(uform_convert_rows_kernel, uform_cuda_blocks(rows * units, UFORM_CONVERT_THREADS),
                 UFORM_CONVERT_THREADS, uform_cuda_context(b)->stream)(rows_f32, rows, width, scalar,
                                                                        (uint8_t *)rows_out, row_bytes);
    uform_cuda_launched(b, "convert_rows");
}

/* Converted on the GPU into a scratch buffer of the backend's, then copied
 * down at the output's width (a quarter of the FP32 bytes for BF16, a
 * thirty-second for B1); FP32 rows packed as the output is come down as they
 * are. */
void uform_cuda_download_rows(uform_backend_t *b, const float *rows_f32, size_t rows, size_t width,
                              uform_scalar_t scalar, void *host, size_t row_bytes) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    if (!rows) return;
    if (scalar == UFORM_SCALAR_F32 && row_bytes == width * sizeof(float)) {   /* nothing to convert */
        uform_cuda_download(b, host, rows_f32, rows * row_bytes);
        return;
    }
    void *converted = uform_cuda_grow(b, &context->converted_rows, rows * row_bytes, "download_rows (converted rows)");
    if (!converted) return;
    uform_cuda_convert_rows(b, rows_f32, rows, width, scalar, converted, row_bytes);
    if (context->failure != UFORM_OK) return;
    size_t written = uform_output_row_bytes(scalar, width);   /* a wider row's padding is not written */
    if (written == row_bytes) {
        uform_cuda_download(b, host, converted, rows * row_bytes);
        return;
    }
    for (size_t r = 0; r < rows && context->failure == UFORM_OK; r++)
        uform_cuda_download(b, (uint8_t *)host + r * row_bytes, (const uint8_t *)converted + r * row_bytes, written);
}
