/* fp8.c: conversions between doubles and the OCP FP8 formats (fp8.h). */
#include "core/fp8.h"

#include <math.h>

/* x >= 0 rounded to an integer, ties to even (x < 2^52, so the parts are exact). */
static double uform_round_even(double x) {
    double whole = floor(x), fraction = x - whole;
    if (fraction > 0.5 || (fraction == 0.5 && fmod(whole, 2.0) != 0.0)) whole += 1.0;
    return whole;
}

/* One format: `mantissa` bits, exponent `bias`, largest finite value and code. */
static uint8_t uform_f64_to_fp8(double value, int mantissa, int bias, double largest,
                                uint8_t largest_code) {
    uint8_t sign = signbit(value) ? 0x80u : 0u;
    if (isnan(value)) return (uint8_t)(sign | UFORM_FP8_NAN);
    double magnitude = fabs(value);
    if (magnitude >= largest) return (uint8_t)(sign | largest_code);
    /* The quantum of the binade holding `magnitude`; below the smallest
     * normal 2^(1 - bias) the subnormal quantum 2^(1 - bias - mantissa). */
    int exponent = 1 - bias;
    if (magnitude >= ldexp(1.0, 1 - bias)) {
        frexp(magnitude, &exponent); /* magnitude = f x 2^exponent, f in [0.5, 1) */
        exponent -= 1;
    }
    double steps = uform_round_even(ldexp(magnitude, mantissa - exponent));
    /* steps counts quanta: below 2^mantissa a subnormal; 2^(mantissa + 1) is
     * the next binade's first value, which the code arithmetic below carries
     * into the exponent field on its own. */
    unsigned code;
    if (exponent == 1 - bias && steps < ldexp(1.0, mantissa)) code = (unsigned)steps;
    else code = ((unsigned)(exponent + bias) << mantissa) + (unsigned)steps - (1u << mantissa);
    if (code > largest_code) code = largest_code; /* cannot happen below `largest` */
    return (uint8_t)(sign | code);
}

uint8_t uform_f64_to_e4m3(double value) {
    return uform_f64_to_fp8(value, 3, 7, UFORM_E4M3_MAX, UFORM_E4M3_MAX_CODE);
}

uint8_t uform_f64_to_e5m2(double value) {
    return uform_f64_to_fp8(value, 2, 15, UFORM_E5M2_MAX, UFORM_E5M2_MAX_CODE);
}

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
