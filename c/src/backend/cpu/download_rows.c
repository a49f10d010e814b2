/* download_rows.c: the CPU backend's download_rows (backend.h): FP32 rows
 * converted to an output scalar into host memory. */
#include "backend/cpu/rows.h"
#include "core/output_scalars.h"

#include <math.h>

void uform_cpu_download_rows(uform_backend_t *b, const float *rows_f32, size_t rows, size_t width,
                             uform_scalar_t scalar, void *out, size_t row_bytes) {
    (void)b;
    for (size_t r = 0; r < rows; r++) {
        const float *x = rows_f32 + r * width;
        uint8_t *row = (uint8_t *)out + r * row_bytes;
        switch (scalar) {
        case UFORM_SCALAR_F32: memcpy(row, x, width * 4); break;
        case UFORM_SCALAR_BF16:
            for (size_t i = 0; i < width; i++) {
                uint16_t bits = uform_f32_to_bf16(x[i]);
                memcpy(row + 2 * i, &bits, 2);
            }
            break;
        case UFORM_SCALAR_F16:
            for (size_t i = 0; i < width; i++) {
                uint16_t bits = uform_f32_to_f16(x[i]);
                memcpy(row + 2 * i, &bits, 2);
            }
            break;
        case UFORM_SCALAR_E4M3:
            /* One byte, no scale: unit-vector components are far inside the range. */
            for (size_t i = 0; i < width; i++) row[i] = uform_f64_to_e4m3((double)x[i]);
            break;
        case UFORM_SCALAR_E5M2:
            for (size_t i = 0; i < width; i++) row[i] = uform_f64_to_e5m2((double)x[i]);
            break;
        case UFORM_SCALAR_I8:
            for (size_t i = 0; i < width; i++) row[i] = (uint8_t)uform_f32_to_i8(x[i]);
            break;
        case UFORM_SCALAR_B1:
            /* Sign bits, most significant bit first: numpy.packbits order. */
            memset(row, 0, row_bytes);
            for (size_t i = 0; i < width; i++)
                if (x[i] > 0) row[i / 8] |= (uint8_t)(0x80u >> (i % 8));
            break;
        default: break;
        }
    }
}
