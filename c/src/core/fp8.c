/* fp8.c: conversions between doubles and the OCP FP8 formats (fp8.h). */
#include "core/fp8.h"

#include <math.h>

static float uform_fp8_to_f32(uint8_t code, int mantissa, int bias, bool e4m3) {
    unsigned magnitude = code & 0x7fu, field = magnitude >> mantissa;
    unsigned fraction = magnitude & ((1u << mantissa) - 1);
    unsigned top = (1u << (7 - mantissa)) - 1; /* the all-ones exponent field */
    float result;
    if (e4m3 ? magnitude == 0x7fu : field == top)
        result = (!e4m3 && fraction == 0) ? INFINITY : NAN;
    else if (field == 0)
        result = ldexpf((float)fraction, 1 - bias - mantissa);
    else
        result = ldexpf((float)(fraction + (1u << mantissa)), (int)field - bias - mantissa);
    return code & 0x80u ? -result : result;
}

float uform_e4m3_to_f32(uint8_t code) { return uform_fp8_to_f32(code, 3, 7, true); }
float uform_e5m2_to_f32(uint8_t code) { return uform_fp8_to_f32(code, 2, 15, false); }
