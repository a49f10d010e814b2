/* fuzz_audio.c: a libFuzzer target for uform_decode_audio (libsndfile).
 *
 * Odd-sized inputs ask for 16 kHz, even ones for the file's own rate, so the
 * resampling path is reached too (UNSUPPORTED until uform_resample is built).
 * Checks: a refusal has a message and a zeroed result; a success holds
 * 1 .. UFORM_MAX_AUDIO_SAMPLES samples, every one readable. */
#include "fuzz_media.h"

uform_status_t fuzz_last_status;
static volatile uint64_t fuzz_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uform_audio_t audio;
    uform_set_error_text("");
    size_t rate = size & 1 ? 16000 : 0;
    uform_status_t status = fuzz_last_status = uform_decode_audio(size ? data : NULL, size, rate, &audio);
    if (status != UFORM_OK) {
        fuzz_check_refusal(status, &audio, sizeof(audio));
        return 0;
    }
    REQUIRE(audio.samples && audio.count >= 1 && audio.count <= UFORM_MAX_AUDIO_SAMPLES);
    fuzz_sink += fuzz_touch(audio.samples, audio.count * sizeof(float));
    uform_audio_free(&audio);
    REQUIRE(audio.samples == NULL);
    return 0;
}
