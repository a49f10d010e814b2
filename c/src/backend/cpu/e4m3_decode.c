/* e4m3_decode.c: the portable E4M3 tile decoders (e4m3_decode.h), a table of
 * the 128 magnitudes. */
#include "backend/cpu/e4m3_decode.h"

/* |e4m3(c)| for c < 128: (8 + m) 2^(E - 10) when the exponent field E > 0,
 * m 2^-9 below (subnormals); c = 127 is NaN and never stored (saturation). */
#define UFORM_E4M3_MAGNITUDE(c)                                                        \
    ((c) >> 3 ? (float)(8 + ((c) & 7)) * (float)(1u << ((c) >> 3)) * (1.0f / 1024.0f) \
              : (float)((c) & 7) * (1.0f / 512.0f))
#define UFORM_E4M3_8(c)                                                                     \
    UFORM_E4M3_MAGNITUDE(c), UFORM_E4M3_MAGNITUDE(c + 1), UFORM_E4M3_MAGNITUDE(c + 2),      \
        UFORM_E4M3_MAGNITUDE(c + 3), UFORM_E4M3_MAGNITUDE(c + 4), UFORM_E4M3_MAGNITUDE(c + 5), \
        UFORM_E4M3_MAGNITUDE(c + 6), UFORM_E4M3_MAGNITUDE(c + 7)
static const float uform_e4m3_magnitudes[128] = {
    UFORM_E4M3_8(0),  UFORM_E4M3_8(8),  UFORM_E4M3_8(16), UFORM_E4M3_8(24),
    UFORM_E4M3_8(32), UFORM_E4M3_8(40), UFORM_E4M3_8(48), UFORM_E4M3_8(56),
    UFORM_E4M3_8(64), UFORM_E4M3_8(72), UFORM_E4M3_8(80), UFORM_E4M3_8(88),
    UFORM_E4M3_8(96), UFORM_E4M3_8(104), UFORM_E4M3_8(112), UFORM_E4M3_8(120)};

static inline float uform_e4m3_scaled(uint8_t code, float scale) {
    float value = uform_e4m3_magnitudes[code & 0x7f] * scale;
    return code & 0x80 ? -value : value;
}

void uform_e4m3_decode_f32_portable(const uint8_t *codes, size_t rows, size_t width,
                                    const float *scales, void *out) {
    float *dst = out;
    for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < width; i++)
            dst[r * width + i] = uform_e4m3_scaled(codes[r * width + i], scales[i]);
}

void uform_e4m3_decode_bf16_portable(const uint8_t *codes, size_t rows, size_t width,
                                     const float *scales, void *out) {
    uint16_t *dst = out;
    for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < width; i++) {
            float value = uform_e4m3_scaled(codes[r * width + i], scales[i]);
            uint32_t bits;
            memcpy(&bits, &value, 4);
            dst[r * width + i] = (uint16_t)(bits >> 16); /* exact: 4 significant bits */
        }
}
