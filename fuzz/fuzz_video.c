/* fuzz_video.c: a libFuzzer target for uform_decode_video (libavformat,
 * libavcodec, libswscale).
 *
 * The frame stride is 1, 2 or 3 by the input's size. Checks: a refusal has a
 * message and a zeroed result; a success holds 1.. frames of a nonempty size
 * within the limits, every byte readable. */
#include "fuzz_media.h"

uform_status_t fuzz_last_status;
static volatile uint64_t fuzz_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uform_video_t video;
    uform_set_error_text("");
    size_t stride = 1 + size % 3;
    uform_status_t status = fuzz_last_status = uform_decode_video(size ? data : NULL, size, stride, &video);
    if (status != UFORM_OK) {
        fuzz_check_refusal(status, &video, sizeof(video));
        return 0;
    }
    REQUIRE(video.pixels && video.frames >= 1 && video.height >= 1 && video.width >= 1);
    REQUIRE(video.height * video.width <= UFORM_MAX_IMAGE_PIXELS);
    size_t bytes = video.frames * video.height * video.width * 3;
    REQUIRE(bytes / video.frames / 3 == video.height * video.width && bytes <= UFORM_MAX_VIDEO_BYTES);
    fuzz_sink += fuzz_touch(video.pixels, bytes);
    uform_video_free(&video);
    REQUIRE(video.pixels == NULL);
    return 0;
}
