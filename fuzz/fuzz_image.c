/* fuzz_image.c: a libFuzzer target for uform_decode_image (JPEG, PNG, WebP).
 *
 * Build with clang: make fuzz (or, with gcc, the mutation driver
 * fuzz/fuzz_media_main.c: make test-fuzz). Beyond "no crash", it checks what
 * the decoder promises: a refusal is FORMAT/UNSUPPORTED/OUT_OF_MEMORY with a
 * message and a zeroed image; a success is a nonempty image within the pixel
 * limit whose every byte is readable. */
#include "fuzz_media.h"

uform_status_t fuzz_last_status;
static volatile uint64_t fuzz_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uform_image_t image;
    uform_set_error_text("");
    uform_status_t status = fuzz_last_status = uform_decode_image(size ? data : NULL, size, &image);
    if (status != UFORM_OK) {
        fuzz_check_refusal(status, &image, sizeof(image));
        return 0;
    }
    REQUIRE(image.pixels && image.height >= 1 && image.width >= 1);
    REQUIRE(image.height * image.width <= UFORM_MAX_IMAGE_PIXELS);
    fuzz_sink += fuzz_touch(image.pixels, image.height * image.width * 3);
    uform_image_free(&image);
    REQUIRE(image.pixels == NULL);
    return 0;
}
