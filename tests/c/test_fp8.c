/* test_fp8.c: the OCP FP8 conversions of c/src/core/fp8.c (E4M3, E5M2) and the
 * CPU backend's FP8 download_rows, against an oracle written here from the
 * format definitions alone (OCP 8-bit Floating Point Specification v1.0):
 *
 * - the grid: every finite non-negative value of a format, enumerated from its
 *   codes (sign 0, exponent field e, mantissa field f: e = 0 gives
 *   f 2^(1 - bias - m), else (1 + f / 2^m) 2^(e - bias)), sorted by value;
 * - rounding: the nearest grid value by brute force over the whole grid, g1
 *   nearer than g2 exactly when x is on g1's side of (g1 + g2) / 2 (exact in
 *   doubles), ties to the value with the even code; above the largest finite
 *   value (infinities included) the largest finite code; NaN 0x7F with the
 *   input's sign; the sign of zero kept.
 *
 * Checked: every code's decoding and re-encoding, every midpoint between
 * neighbours and its FP32 neighbours, zeros, saturation, NaN, FP32 denormals,
 * random FP32 bit patterns and random doubles, and download_rows' rows. */
#include "check.h"

#include "backend/cpu/rows.h"
#include "core/fp8.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    int mantissa, bias;
    bool e4m3;                  /* no infinities, only S.1111.111 is NaN */
    uint8_t (*encode)(double);
    float (*decode)(uint8_t);
    uform_scalar_t scalar;
    /* the oracle's grid: finite non-negative values, ascending, with their codes */
    double values[128];
    uint8_t codes[128];
    size_t count;
    double largest;
    uint8_t largest_code;
} format_t;

static format_t formats[2] = {
    {"E4M3", 3, 7, true, uform_f64_to_e4m3, uform_e4m3_to_f32, UFORM_SCALAR_E4M3, {0}, {0}, 0, 0, 0},
    {"E5M2", 2, 15, false, uform_f64_to_e5m2, uform_e5m2_to_f32, UFORM_SCALAR_E5M2, {0}, {0}, 0, 0, 0},
};

/* What a magnitude code (0..0x7f) is: 0 finite, 1 infinity, 2 NaN. */
static int code_kind(const format_t *f, unsigned magnitude) {
    unsigned field = magnitude >> f->mantissa, top = (1u << (7 - f->mantissa)) - 1;
    if (f->e4m3) return magnitude == 0x7fu ? 2 : 0;
    if (field != top) return 0;
    return (magnitude & ((1u << f->mantissa) - 1)) == 0 ? 1 : 2;
}

static double code_value(const format_t *f, unsigned magnitude) {
    unsigned field = magnitude >> f->mantissa, fraction = magnitude & ((1u << f->mantissa) - 1);
    if (field == 0) return ldexp((double)fraction, 1 - f->bias - f->mantissa);
    return ldexp(1.0 + (double)fraction / (double)(1u << f->mantissa), (int)field - f->bias);
}

static int by_value(const void *a, const void *b) {
    const double *x = a, *y = b;
    return (*x > *y) - (*x < *y);
}

static void build_grid(format_t *f) {
    /* pairs sorted by value: (value, code) packed in an array of structs */
    struct { double value; unsigned code; } entries[128];
    size_t n = 0;
    for (unsigned c = 0; c < 0x80u; c++)
        if (code_kind(f, c) == 0) entries[n].value = code_value(f, c), entries[n++].code = c;
    qsort(entries, n, sizeof(entries[0]), by_value);   /* value is the struct's first member */
    f->count = n;
    for (size_t i = 0; i < n; i++) f->values[i] = entries[i].value, f->codes[i] = (uint8_t)entries[i].code;
    f->largest = f->values[n - 1];
    f->largest_code = f->codes[n - 1];
}

/* The oracle's code for x. */
static uint8_t oracle(const format_t *f, double x) {
    uint8_t sign = signbit(x) ? 0x80u : 0u;
    if (isnan(x)) return (uint8_t)(sign | 0x7fu);
    double a = fabs(x);
    if (a > f->largest) return (uint8_t)(sign | f->largest_code);
    size_t best = 0;
    for (size_t i = 1; i < f->count; i++) {
        double g1 = f->values[best], g2 = f->values[i];
        double middle = (g1 + g2) / 2; /* both have a few significant bits: exact */
        bool nearer = g2 > g1 ? a > middle : a < middle;
        bool tie = a == middle && (f->codes[i] & 1u) == 0;
        if (nearer || tie) best = i;
    }
    return (uint8_t)(sign | f->codes[best]);
}

static float float_of_bits(uint32_t bits) {
    float x;
    memcpy(&x, &bits, 4);
    return x;
}

/* One input through the library and the oracle; failures are counted, not printed past 10. */
static int reported;
static void check_one(const format_t *f, double x, const char *what) {
    uint8_t got = f->encode(x), expected = oracle(f, x);
    if (got == expected) {
        passed++;
        return;
    }
    failed++;
    if (reported++ < 10)
        printf("FAIL %s %s: %a (%.9g) -> 0x%02x, oracle 0x%02x\n", f->name, what, x, x, got, expected);
}

static void test_grid(const format_t *f) {
    /* the grid the oracle built has the format's published shape */
    CHECK(f->count == (f->e4m3 ? 127u : 124u), "%s: %zu finite values", f->name, f->count);
    CHECK(f->largest == (f->e4m3 ? 448.0 : 57344.0), "%s: largest %g", f->name, f->largest);
    CHECK(f->largest == (f->e4m3 ? UFORM_E4M3_MAX : UFORM_E5M2_MAX), "%s: the header's largest", f->name);
    CHECK(f->largest_code == (f->e4m3 ? UFORM_E4M3_MAX_CODE : UFORM_E5M2_MAX_CODE), "%s: largest code", f->name);
    CHECK(f->values[1] == ldexp(1.0, f->e4m3 ? -9 : -16), "%s: smallest subnormal %a", f->name, f->values[1]);
    bool ascending = true;
    for (size_t i = 1; i < f->count; i++) ascending &= f->values[i] > f->values[i - 1];
    CHECK(ascending, "%s: values distinct", f->name);
}

static void test_every_code(const format_t *f) {
    for (unsigned code = 0; code < 256; code++) {
        unsigned magnitude = code & 0x7fu;
        bool negative = code & 0x80u;
        float decoded = f->decode((uint8_t)code);
        int kind = code_kind(f, magnitude);
        if (kind == 2) {
            CHECK(isnan(decoded), "%s: code 0x%02x decodes to %g, not NaN", f->name, code, decoded);
            CHECK(f->encode((double)decoded) == (uint8_t)(0x7fu | (signbit(decoded) ? 0x80u : 0u)),
                  "%s: NaN code 0x%02x re-encodes", f->name, code);
            continue;
        }
        double expected = kind == 1 ? INFINITY : code_value(f, magnitude);
        if (negative) expected = -expected;
        CHECK((double)decoded == expected && (signbit(decoded) != 0) == negative,
              "%s: code 0x%02x decodes to %a, expected %a", f->name, code, decoded, expected);
        uint8_t again = f->encode((double)decoded);
        uint8_t wanted = kind == 1 ? (uint8_t)((code & 0x80u) | f->largest_code) : (uint8_t)code;
        CHECK(again == wanted, "%s: code 0x%02x re-encodes to 0x%02x", f->name, code, again);
        check_one(f, (double)decoded, "code");
    }
}

static void test_midpoints(const format_t *f) {
    for (size_t i = 0; i + 1 < f->count; i++) {
        float middle = (float)((f->values[i] + f->values[i + 1]) / 2);
        CHECK((double)middle == (f->values[i] + f->values[i + 1]) / 2, "%s: midpoint %zu exact", f->name, i);
        /* the tie goes to the even code */
        uint8_t even = (f->codes[i] & 1u) == 0 ? f->codes[i] : f->codes[i + 1];
        CHECK(f->encode((double)middle) == even, "%s: midpoint %a -> 0x%02x, even 0x%02x", f->name,
              (double)middle, f->encode((double)middle), even);
        CHECK(f->encode(-(double)middle) == (0x80u | even), "%s: -midpoint %a", f->name, (double)middle);
        float up = nextafterf(middle, INFINITY), down = nextafterf(middle, 0.0f);
        CHECK(f->encode((double)up) == f->codes[i + 1], "%s: above midpoint %a", f->name, (double)up);
        CHECK(f->encode((double)down) == f->codes[i], "%s: below midpoint %a", f->name, (double)down);
        const float inputs[] = {middle, up, down, -middle, -up, -down};
        for (size_t k = 0; k < 6; k++) check_one(f, (double)inputs[k], "midpoint");
    }
}

static void test_edges(const format_t *f) {
    uint8_t top = f->largest_code;
    CHECK(f->encode(0.0) == 0x00, "%s: +0", f->name);
    CHECK(f->encode(-0.0) == 0x80, "%s: -0 keeps its sign", f->name);
    CHECK(f->encode(INFINITY) == top && f->encode(-INFINITY) == (0x80u | top), "%s: infinities saturate",
          f->name);
    CHECK(top == (f->e4m3 ? 0x7e : 0x7b), "%s: the largest code", f->name);
    CHECK(f->encode(NAN) == 0x7f, "%s: NaN", f->name);
    CHECK(f->encode(-NAN) == 0xff, "%s: -NaN keeps its sign", f->name);
    CHECK(f->encode((double)float_of_bits(0x7f800001u)) == 0x7f, "%s: a signalling NaN", f->name);
    CHECK(f->encode((double)float_of_bits(0xffc00123u)) == 0xff, "%s: a negative NaN payload", f->name);
    /* at and above the largest finite value: saturation, never NaN or infinity */
    double beyond[] = {f->largest, nextafter(f->largest, INFINITY), (double)nextafterf((float)f->largest, INFINITY),
                       f->largest * 1.03125, f->largest * 1.0625, f->largest * 1.125, f->largest * 1.5,
                       f->largest * 2, 1e30, (double)FLT_MAX, DBL_MAX};
    for (size_t k = 0; k < sizeof(beyond) / sizeof(beyond[0]); k++) {
        CHECK(f->encode(beyond[k]) == top, "%s: %a saturates", f->name, beyond[k]);
        CHECK(f->encode(-beyond[k]) == (0x80u | top), "%s: %a saturates", f->name, -beyond[k]);
        check_one(f, beyond[k], "beyond");
        check_one(f, -beyond[k], "beyond");
    }
    /* just below the largest: rounds to it or to its neighbour, as the oracle says */
    check_one(f, (double)nextafterf((float)f->largest, 0.0f), "below largest");
    /* FP32 denormals: all far below half the smallest subnormal of either format */
    const uint32_t denormals[] = {1u, 2u, 3u, 0x1234u, 0x400000u, 0x7fffffu};
    for (size_t k = 0; k < 6; k++) {
        float x = float_of_bits(denormals[k]), negative = float_of_bits(denormals[k] | 0x80000000u);
        CHECK(f->encode((double)x) == 0x00 && f->encode((double)negative) == 0x80,
              "%s: denormal %a to a zero of its sign", f->name, (double)x);
        check_one(f, (double)x, "denormal");
        check_one(f, (double)negative, "denormal");
    }
    /* FP32 normals around the smallest subnormal and half of it */
    double smallest = f->values[1];
    const double around[] = {smallest / 2, smallest, smallest * 1.5, smallest * 0.75, smallest * 0.25};
    for (size_t k = 0; k < 5; k++) {
        float x = (float)around[k];
        const float near[] = {x, nextafterf(x, INFINITY), nextafterf(x, 0.0f)};
        for (size_t j = 0; j < 3; j++) {
            check_one(f, (double)near[j], "near the smallest");
            check_one(f, -(double)near[j], "near the smallest");
        }
    }
    CHECK(f->encode(smallest / 2) == 0x00, "%s: half the smallest subnormal ties to 0", f->name);
    CHECK(f->encode(smallest * 1.5) == 0x02, "%s: 1.5 smallest ties to code 2", f->name);
}

static void test_random(const format_t *f) {
    /* random FP32 bit patterns: every exponent, both signs, NaNs and infinities included */
    for (int k = 0; k < 200000; k++) check_one(f, (double)float_of_bits((uint32_t)rng_next()), "random bits");
    /* random FP32 values within the format's range, where rounding is busy */
    for (int k = 0; k < 100000; k++) {
        double unit = (double)(rng_next() >> 11) * 0x1p-53 * 2.0 - 1.0;   /* [-1, 1) */
        double scale = ldexp(1.0, (int)(rng_next() % 48) - 30);
        float x = (float)(unit * scale);
        if (fabs((double)x) > 2 * f->largest) continue;
        check_one(f, (double)x, "random in range");
    }
    /* random doubles (the functions take doubles): more bits than FP32 */
    for (int k = 0; k < 20000; k++) {
        double unit = (double)(rng_next() >> 11) * 0x1p-53 * 2.0 - 1.0;
        check_one(f, unit * f->largest * 1.1, "random double");
    }
}

/* download_rows: each byte the oracle's code, rows row_bytes apart, padding untouched. */
static void test_download_rows(const format_t *f) {
    enum { ROWS = 7, WIDTH = 37, ROW_BYTES = 40 };
    float rows[ROWS * WIDTH];
    for (size_t i = 0; i < ROWS * WIDTH; i++) {
        if (i % 5 == 0) rows[i] = float_of_bits((uint32_t)rng_next());   /* anything */
        else rows[i] = (float)((double)(rng_next() >> 11) * 0x1p-53 * 2.0 - 1.0);   /* a component */
    }
    rows[3] = 1.0f, rows[4] = -1.0f, rows[5] = -0.0f, rows[6] = NAN, rows[7] = -INFINITY;
    uint8_t out[ROWS * ROW_BYTES];
    memset(out, 0xa5, sizeof(out));
    uform_cpu_download_rows(NULL, rows, ROWS, WIDTH, f->scalar, out, ROW_BYTES);
    bool same = true, padding = true;
    for (size_t r = 0; r < ROWS; r++) {
        for (size_t i = 0; i < WIDTH; i++) same &= out[r * ROW_BYTES + i] == oracle(f, (double)rows[r * WIDTH + i]);
        for (size_t i = WIDTH; i < ROW_BYTES; i++) padding &= out[r * ROW_BYTES + i] == 0xa5;
    }
    CHECK(same, "%s: download_rows writes the oracle's codes", f->name);
    CHECK(padding, "%s: download_rows writes width bytes a row", f->name);
}

int main(void) {
    for (size_t k = 0; k < 2; k++) {
        format_t *f = &formats[k];
        build_grid(f);
        reported = 0;
        test_grid(f);
        test_every_code(f);
        test_midpoints(f);
        test_edges(f);
        test_random(f);
        test_download_rows(f);
    }
    printf("test_fp8: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
