/* quantize.h: E4M3 quantization of a weight matrix at load
 * (docs/architecture.md, "E4M3 quantization", states the rule so that an
 * outside tool reproduces the codes bit for bit).
 *
 * Row i of W [n, k] gets the scale 2^e_i, e_i the smallest integer with
 * max_p |W[i][p]| <= 448 x 2^e_i, clamped to [-117, 100] (0 for a row of
 * zeros), and codes[i][p] = e4m3(W[i][p] / 2^e_i): round to nearest even,
 * saturating (fp8.h). A power of two keeps the division exact, keeps every
 * dequantized weight e4m3 x 2^e_i exact in BF16 and FP32 (the clamp keeps it
 * a normal number), and only moves where E4M3's subnormal range starts:
 * FP8's relative precision is the same in every binade. */
#ifndef UFORM_MODEL_QUANTIZE_H
#define UFORM_MODEL_QUANTIZE_H

#include "core/internal.h"

#define UFORM_E4M3_EXPONENT_MIN (-117)
#define UFORM_E4M3_EXPONENT_MAX 100

/* e_i for a row whose largest magnitude is `largest` (finite, >= 0). */
UFORM_INTERNAL int uform_e4m3_row_exponent(double largest);
/* Quantizes one row of k finite values; returns its scale 2^e. */
UFORM_INTERNAL float uform_quantize_e4m3_row(const float *row, size_t k, uint8_t *codes);

#endif /* UFORM_MODEL_QUANTIZE_H */
