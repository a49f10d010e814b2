/* audio.c: chunk tokens of a recording (audio.h). */
#include "media/audio_tokens.h"

#include "media/decode/resample.h"

bool uform_audio_layout(size_t count, size_t from_rate, size_t to_rate, size_t chunk_samples,
                        size_t context, uform_audio_layout_t *layout) {
    memset(layout, 0, sizeof(*layout));
    if (!uform_resample_length(count, from_rate, to_rate, &layout->samples)) return false;
    layout->chunks = layout->samples / chunk_samples + (layout->samples % chunk_samples != 0);
    layout->kept = layout->chunks < context ? layout->chunks : context;
    return true;
}

uform_status_t uform_audio_chunks(const float *samples, size_t count, size_t from_rate,
                                  size_t to_rate, size_t chunk_samples,
                                  const uform_audio_layout_t *layout, float *out,
                                  uint32_t *positions) {
    size_t room = layout->kept * chunk_samples;
    size_t used = layout->samples < room ? layout->samples : room;
    UFORM_TRY(uform_resample_range(samples, count, from_rate, to_rate, 0, used, out));
    for (size_t i = used; i < room; i++) out[i] = 0.0f;
    for (size_t k = 0; k < layout->kept; k++) {
        positions[3 * k] = (uint32_t)k;
        positions[3 * k + 1] = positions[3 * k + 2] = 0;
    }
    return UFORM_OK;
}
