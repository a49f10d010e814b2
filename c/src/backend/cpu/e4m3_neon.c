/* e4m3_neon.c: the E4M3 tile decoders with NEON (e4m3_decode.h), the steps
 * of e4m3_avx2.c: the magnitude bits under a rebiased FP32 exponent, a
 * subnormal built as 2^-6 (1 + m/8) minus 2^-6 (normal numbers only, so the
 * FPCR flush mode cannot change a bit), then the scale and the sign. */
#include "backend/cpu/e4m3_decode.h"

#if defined(__aarch64__)
#include <arm_neon.h>

static inline __attribute__((always_inline)) float32x4_t
uform_e4m3_decode4(uint32x4_t code, const float *scales) {
    uint32x4_t magnitude = vandq_u32(code, vdupq_n_u32(0x7f));
    uint32x4_t bits = vaddq_u32(vshlq_n_u32(magnitude, 20), vdupq_n_u32(120u << 23));
    uint32x4_t subnormal = vceqq_u32(vandq_u32(code, vdupq_n_u32(0x78)), vdupq_n_u32(0));
    bits = vaddq_u32(bits, vandq_u32(subnormal, vdupq_n_u32(1u << 23)));
    float32x4_t value = vsubq_f32(
        vreinterpretq_f32_u32(bits),
        vreinterpretq_f32_u32(vandq_u32(subnormal, vreinterpretq_u32_f32(vdupq_n_f32(1.0f / 64.0f)))));
    value = vmulq_f32(value, vld1q_f32(scales));
    uint32x4_t sign = vshlq_n_u32(vandq_u32(code, vdupq_n_u32(0x80)), 24);
    return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(value), sign));
}

/* Codes i .. i + 7 of a row as two vectors of four FP32. */
static inline __attribute__((always_inline)) void
uform_e4m3_decode8(const uint8_t *codes, const float *scales, float32x4_t *low, float32x4_t *high) {
    uint16x8_t wide = vmovl_u8(vld1_u8(codes));
    *low = uform_e4m3_decode4(vmovl_u16(vget_low_u16(wide)), scales);
    *high = uform_e4m3_decode4(vmovl_u16(vget_high_u16(wide)), scales + 4);
}

void uform_e4m3_decode_f32_neon(const uint8_t *codes, size_t rows, size_t width,
                                const float *scales, void *out) {
    float *dst = out;
    for (size_t r = 0; r < rows; r++, codes += width, dst += width)
        for (size_t i = 0; i < width; i += 8) {
            float32x4_t low, high;
            uform_e4m3_decode8(codes + i, scales + i, &low, &high);
            vst1q_f32(dst + i, low);
            vst1q_f32(dst + i + 4, high);
        }
}

void uform_e4m3_decode_bf16_neon(const uint8_t *codes, size_t rows, size_t width,
                                 const float *scales, void *out) {
    uint16_t *dst = out;
    for (size_t r = 0; r < rows; r++, codes += width, dst += width)
        for (size_t i = 0; i < width; i += 8) {
            float32x4_t low, high;
            uform_e4m3_decode8(codes + i, scales + i, &low, &high);
            /* the high halves are the BF16 bits, exactly (4 significant bits) */
            vst1q_u16(dst + i, vcombine_u16(vshrn_n_u32(vreinterpretq_u32_f32(low), 16),
                                            vshrn_n_u32(vreinterpretq_u32_f32(high), 16)));
        }
}

#endif /* __aarch64__ */
