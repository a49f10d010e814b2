/* resample.c: uform_resample (placeholder until built; docs/media.md). */
#include "decode.h"

uform_status_t uform_resample(const float *samples, size_t count, size_t from_rate, size_t to_rate,
                              float **out, size_t *out_count) {
    (void)samples, (void)count, (void)from_rate, (void)to_rate;
    *out = NULL, *out_count = 0;
    return uform_fail(UFORM_UNSUPPORTED, "resampling: not built in this version");
}

