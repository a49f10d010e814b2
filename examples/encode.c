/* encode.c: load a checkpoint and print the embedding of one text, using only
 * uform.h and libuform.
 *
 *   cc encode.c $(pkg-config --cflags --libs uform) -o encode
 *   ./encode model.safetensors "hello, world"
 */
#include <stdio.h>
#include <string.h>
#include <uform.h>

static int fail(const char *what) {
    fprintf(stderr, "%s: %s\n", what, uform_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s CHECKPOINT TEXT\n", argv[0]);
        return 2;
    }
    uform_model_t *model = NULL;
    if (uform_model_load_ram(argv[1], NULL, &model) != UFORM_OK) return fail("load");

    uform_model_description_t description;
    uform_model_describe(model, &description);

    uform_arena_t *arena = NULL;
    if (uform_arena_init_ram(&arena) != UFORM_OK) return fail("arena");

    size_t offsets[2] = {0, strlen(argv[2])};
    uform_tape_t texts = {argv[2], offsets[1], offsets, 1};
    uform_encoded_t encoded;
    uform_text_encode_stats_t stats;
    if (uform_text_encode(model, NULL, &texts, arena, NULL, &encoded, &stats) != UFORM_OK)
        return fail("encode");

    const float *embedding = encoded.embeddings;
    double norm = 0;
    printf("%zu tokens -> %zu dimensions:", stats.tokens, encoded.dimensions);
    for (size_t i = 0; i < encoded.dimensions; i++) {
        if (i < 8) printf(" %+.4f", embedding[i]);
        norm += (double)embedding[i] * embedding[i];
    }
    printf(" ... (norm %.6f)\n", norm);

    uform_arena_free(arena);
    uform_model_free(model);
    return norm > 0.999 && norm < 1.001 ? 0 : 1;
}
