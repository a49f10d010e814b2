/* resample.h: the windowed-sinc resampler behind uform_resample (decode.h),
 * with the pieces the audio verbs use directly (docs/media.md, "Resampling").
 *
 * Output sample j of a recording of `count` samples at `from` Hz, resampled
 * to `to` Hz, sits at input time t_j = j * from / to (in input samples) and is
 *
 *     y_j = sum_i x_i h(i - t_j),  over 0 <= i < count with |i - t_j| < w,
 *
 * (samples outside the recording are zero), accumulated in float64, where
 *
 *     f    = ROLLOFF * min(1, to / from) / 2       cutoff, cycles per input sample
 *     w    = ZEROS * max(1, from / to)             half-width, input samples
 *     h(x) = 2 f sinc(2 f x) I0(BETA sqrt(1 - (x / w)^2)) / I0(BETA)
 *
 * with sinc(z) = sin(pi z) / (pi z), sinc(0) = 1, and I0 the modified Bessel
 * function of order 0 (a Kaiser window). There are ceil(count * to / from)
 * output samples. Equal rates copy. */
#ifndef UFORM_MEDIA_RESAMPLE_H
#define UFORM_MEDIA_RESAMPLE_H

#include "core/internal.h"

#define UFORM_RESAMPLE_ZEROS 16      /* lower-rate periods on each side of the kernel */
#define UFORM_RESAMPLE_BETA 8.6      /* Kaiser window shape: sidelobes near -90 dB */
#define UFORM_RESAMPLE_ROLLOFF 0.9   /* cutoff as a fraction of the lower Nyquist frequency */
#define UFORM_MAX_SAMPLE_RATE ((size_t)1 << 20)

/* ceil(count * to / from); false when it overflows. */
UFORM_INTERNAL bool uform_resample_length(size_t count, size_t from_rate, size_t to_rate,
                                          size_t *length);

/* Output samples [first, first + n) of the resampled recording into out
 * (n >= 0; indices past the length are computed by the same formula, which
 * gives the filter's tail). from_rate and to_rate in [1, UFORM_MAX_SAMPLE_RATE].
 * OUT_OF_MEMORY when the kernel table cannot be allocated. */
UFORM_INTERNAL uform_status_t uform_resample_range(const float *samples, size_t count,
                                                   size_t from_rate, size_t to_rate, size_t first,
                                                   size_t n, float *out);

#endif /* UFORM_MEDIA_RESAMPLE_H */
