/* fuzz_media.h: what the media fuzz targets (fuzz_image.c, fuzz_audio.c,
 * fuzz_video.c) share with each other and with fuzz_media_main.c. */
#ifndef UFORM_FUZZ_MEDIA_H
#define UFORM_FUZZ_MEDIA_H

#include "media/decode/decode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The status of the target's last decode, so the mutation driver can keep
 * inputs that decode and mutate them further. */
extern uform_status_t fuzz_last_status;

/* Fuzz harness only: a broken promise must stop the run loudly. */
#define REQUIRE(condition)                                                                    \
    do {                                                                                      \
        if (!(condition)) __builtin_trap();                                                   \
    } while (0)

/* A refusal: an expected status, a message, and the output left zeroed. */
static inline void fuzz_check_refusal(uform_status_t status, const void *output, size_t output_size) {
    REQUIRE(status == UFORM_FORMAT || status == UFORM_UNSUPPORTED || status == UFORM_OUT_OF_MEMORY);
    REQUIRE(uform_last_error()[0] != '\0');
    for (size_t i = 0; i < output_size; i++) REQUIRE(((const uint8_t *)output)[i] == 0);
}

/* Reads every output byte, so ASan sees a buffer shorter than its sizes claim. */
static inline uint64_t fuzz_touch(const void *bytes, size_t size) {
    uint64_t sum = 0;
    for (size_t i = 0; i < size; i++) sum += ((const uint8_t *)bytes)[i];
    return sum;
}

#endif /* UFORM_FUZZ_MEDIA_H */
