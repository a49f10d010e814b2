/* quantize.c: E4M3 quantization at load (quantize.h). */
#include "model/quantize.h"
#include "core/fp8.h"

#include <math.h>

int uform_e4m3_row_exponent(double largest) {
    if (!(largest > 0.0)) return 0;
    /* largest = f 2^E, f in [0.5, 1); 448 = 0.875 x 2^9, so largest <= 448 x 2^e
     * holds from e = E - 9 when f <= 0.875, else from e = E - 8. */
    int exponent;
    double fraction = frexp(largest, &exponent);
    int e = fraction <= 0.875 ? exponent - 9 : exponent - 8;
    if (e < UFORM_E4M3_EXPONENT_MIN) e = UFORM_E4M3_EXPONENT_MIN;
    if (e > UFORM_E4M3_EXPONENT_MAX) e = UFORM_E4M3_EXPONENT_MAX;
    return e;
}

float uform_quantize_e4m3_row(const float *row, size_t k, uint8_t *codes) {
    double largest = 0.0;
    for (size_t p = 0; p < k; p++)
        if (fabs((double)row[p]) > largest) largest = fabs((double)row[p]);
    int e = uform_e4m3_row_exponent(largest);
    for (size_t p = 0; p < k; p++) codes[p] = uform_f64_to_e4m3(ldexp((double)row[p], -e));
    return ldexpf(1.0f, e);
}
