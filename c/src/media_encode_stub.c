/* media_encode_stub.c: the image, video and audio verbs (placeholders until built). */
#include "model.h"

#define UFORM_NOT_BUILT(verb) uform_fail(UFORM_UNSUPPORTED, verb ": not built in this version")

uform_status_t uform_image_encode_pixels(uform_model_t *model, uform_executor_t *executor,
                                         const uform_pixels_t *images, size_t count, uform_arena_t *arena,
                                         const uform_encode_options_t *options, uform_encoded_t *encoded,
                                         uform_image_encode_stats_t *stats) {
    (void)model, (void)executor, (void)images, (void)count, (void)arena, (void)options, (void)encoded, (void)stats;
    return UFORM_NOT_BUILT("image_encode_pixels");
}
uform_status_t uform_image_encode(uform_model_t *model, uform_executor_t *executor, const uform_tape_t *files,
                                  uform_arena_t *arena, const uform_encode_options_t *options,
                                  uform_encoded_t *encoded, uform_image_encode_stats_t *stats) {
    (void)model, (void)executor, (void)files, (void)arena, (void)options, (void)encoded, (void)stats;
    return UFORM_NOT_BUILT("image_encode");
}
uform_status_t uform_video_encode(uform_model_t *model, uform_executor_t *executor, const uform_tape_t *files,
                                  uform_arena_t *arena, const uform_encode_options_t *options,
                                  uform_encoded_t *encoded, uform_video_encode_stats_t *stats) {
    (void)model, (void)executor, (void)files, (void)arena, (void)options, (void)encoded, (void)stats;
    return UFORM_NOT_BUILT("video_encode");
}
uform_status_t uform_audio_encode(uform_model_t *model, uform_executor_t *executor, const uform_tape_t *files,
                                  uform_arena_t *arena, const uform_encode_options_t *options,
                                  uform_encoded_t *encoded, uform_audio_encode_stats_t *stats) {
    (void)model, (void)executor, (void)files, (void)arena, (void)options, (void)encoded, (void)stats;
    return UFORM_NOT_BUILT("audio_encode");
}
uform_status_t uform_audio_encode_samples(uform_model_t *model, uform_executor_t *executor, const float *samples,
                                          size_t size, const size_t *offsets, size_t count, size_t sample_rate,
                                          uform_arena_t *arena, const uform_encode_options_t *options,
                                          uform_encoded_t *encoded, uform_audio_encode_stats_t *stats) {
    (void)model, (void)executor, (void)samples, (void)size, (void)offsets, (void)count, (void)sample_rate;
    (void)arena, (void)options, (void)encoded, (void)stats;
    return UFORM_NOT_BUILT("audio_encode_samples");
}
