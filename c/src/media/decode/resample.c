/* resample.c: the Kaiser-windowed sinc resampler (resample.h, docs/media.md).
 *
 * Output j's taps depend only on the fraction (j * from mod to) / to, which
 * takes to / gcd(from, to) values (the phases), so the kernel is tabulated
 * per phase when that table is small (at most 2^22 weights, 32 MiB), else
 * evaluated per output sample; both paths compute the very same weights by
 * the same expression, so the choice never changes a bit of the output. */
#include "media/decode/resample.h"
#include "media/decode/decode.h"

#include <math.h>
#include <stdlib.h>

#define UFORM_RESAMPLE_TABLE_MAX ((size_t)1 << 22)

bool uform_resample_length(size_t count, size_t from_rate, size_t to_rate, size_t *length) {
    size_t product, rounded;
    if (!uform_mul_ok(count, to_rate, &product) || !uform_add_ok(product, from_rate - 1, &rounded))
        return false;
    *length = rounded / from_rate;
    return true;
}

static size_t uform_gcd(size_t a, size_t b) {
    while (b) {
        size_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* I0(x) by its power series sum_k ((x/2)^k / k!)^2, to double precision. */
static double uform_bessel_i0(double x) {
    double term = 1.0, sum = 1.0, half = x / 2.0;
    for (int k = 1; k < 500; k++) {
        term *= (half / k) * (half / k);
        sum += term;
        if (term < sum * 1e-17) break;
    }
    return sum;
}

typedef struct {
    size_t from, to;
    double cutoff;       /* f, cycles per input sample */
    double half_width;   /* w, input samples */
    double i0_beta;      /* I0(BETA) */
    long long reach;     /* D = ceil(w): taps d in [-D, D] around floor(t_j) */
} uform_kernel_t;

static void uform_kernel_init(uform_kernel_t *k, size_t from, size_t to) {
    k->from = from;
    k->to = to;
    k->cutoff = UFORM_RESAMPLE_ROLLOFF * 0.5 * (to < from ? (double)to / (double)from : 1.0);
    k->half_width = UFORM_RESAMPLE_ZEROS * (from > to ? (double)from / (double)to : 1.0);
    k->i0_beta = uform_bessel_i0(UFORM_RESAMPLE_BETA);
    k->reach = (long long)ceil(k->half_width);
}

/* The 2D + 1 weights of taps d = -D .. D for an output whose input time has
 * remainder `remainder` (t_j = floor(t_j) + remainder / to). */
static void uform_kernel_weights(const uform_kernel_t *k, size_t remainder, double *weights) {
    long long to = (long long)k->to;
    for (long long d = -k->reach; d <= k->reach; d++) {
        double x = (double)(d * to - (long long)remainder) / (double)to;
        double w = 0.0;
        if (fabs(x) < k->half_width) {
            double z = 2.0 * k->cutoff * x;
            double sinc = z == 0.0 ? 1.0 : sin(M_PI * z) / (M_PI * z);
            double u = x / k->half_width;
            w = 2.0 * k->cutoff * sinc * uform_bessel_i0(UFORM_RESAMPLE_BETA * sqrt(1.0 - u * u)) /
                k->i0_beta;
        }
        weights[d + k->reach] = w;
    }
}

uform_status_t uform_resample_range(const float *samples, size_t count, size_t from_rate,
                                    size_t to_rate, size_t first, size_t n, float *out) {
    if (from_rate == to_rate) {
        for (size_t j = 0; j < n; j++) out[j] = first + j < count ? samples[first + j] : 0.0f;
        return UFORM_OK;
    }
    if (n == 0) return UFORM_OK;
    uform_kernel_t kernel;
    uform_kernel_init(&kernel, from_rate, to_rate);
    size_t taps = 2 * (size_t)kernel.reach + 1;
    size_t divisor = uform_gcd(from_rate, to_rate);
    size_t phases = to_rate / divisor;
    bool tabulated = phases <= UFORM_RESAMPLE_TABLE_MAX / taps;
    double *table = uform_alloc(tabulated ? phases : 1, taps * sizeof(double), "resampling kernel");
    if (!table) return UFORM_OUT_OF_MEMORY;
    if (tabulated)
        for (size_t p = 0; p < phases; p++) uform_kernel_weights(&kernel, p * divisor, table + p * taps);

    for (size_t j = first; j < first + n; j++) {
        /* t_j = j * from / to exactly: quotient and remainder (no overflow:
         * j stays below the output length, and count * to fits). */
        size_t numerator = j * from_rate;
        size_t quotient = numerator / to_rate, remainder = numerator % to_rate;
        const double *weights = table;
        if (tabulated) weights = table + (remainder / divisor) * taps;
        else uform_kernel_weights(&kernel, remainder, table);
        double sum = 0.0;
        for (size_t t = 0; t < taps; t++) {
            long long i = (long long)quotient + (long long)t - kernel.reach;
            if (i >= 0 && (size_t)i < count) sum += (double)samples[i] * weights[t];
        }
        out[j - first] = (float)sum;
    }
    free(table);
    return UFORM_OK;
}

uform_status_t uform_resample(const float *samples, size_t count, size_t from_rate, size_t to_rate,
                              float **out, size_t *out_count) {
    *out = NULL, *out_count = 0;
    if (from_rate == 0 || to_rate == 0 || from_rate > UFORM_MAX_SAMPLE_RATE ||
        to_rate > UFORM_MAX_SAMPLE_RATE)
        return uform_fail(UFORM_INVALID_ARGUMENT, "resampling: rates %zu -> %zu Hz; each must be in "
                                                  "[1, %zu]",
                          from_rate, to_rate, UFORM_MAX_SAMPLE_RATE);
    size_t length;
    if (!uform_resample_length(count, from_rate, to_rate, &length) || length > UFORM_MAX_AUDIO_SAMPLES)
        return uform_fail(UFORM_FORMAT, "resampling: %zu samples at %zu Hz become more than %zu at %zu Hz",
                          count, from_rate, UFORM_MAX_AUDIO_SAMPLES, to_rate);
    float *result = uform_alloc(length ? length : 1, sizeof(float), "resampled samples");
    if (!result) return UFORM_OUT_OF_MEMORY;
    uform_status_t status = uform_resample_range(samples, count, from_rate, to_rate, 0, length, result);
    if (status != UFORM_OK) {
        free(result);
        return status;
    }
    *out = result;
    *out_count = length;
    return UFORM_OK;
}
