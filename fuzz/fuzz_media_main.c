/* fuzz_media_main.c: a plain main for the media fuzz targets, for builds
 * without libFuzzer (gcc). Link it with one of fuzz_image.c, fuzz_audio.c or
 * fuzz_video.c (make test-fuzz does, under ASan/UBSan).
 *
 *   fuzz_media_KIND FILE...                 runs the target once over each file
 *   fuzz_media_KIND --mutate N SEED FILE    runs N deterministic mutations of FILE
 *
 * Seeds are real files written at run time by fuzz/make_media_seeds.py.
 * Mutations suit binary media: bit flips, bytes set to boundary values,
 * truncations, insertions, deletions, copies of ranges, and edits of 16- and
 * 32-bit integers of either byte order (the sizes and counts headers
 * declare), half of them inside the first 512 bytes where headers live.
 * Inputs that still decode are pooled and mutated further, so checks past
 * the headers get exercised. The same N and SEED give the same inputs, so a
 * crash reproduces; every input is a heap block of exactly its size. */
#include "fuzz_driver.h"
#include "fuzz_media.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* Runs the target over an exact-size copy; answers whether it decoded. */
static bool run_target(const uint8_t *data, size_t size) {
    uint8_t *copy = checked(malloc(size ? size : 1));
    if (size) memcpy(copy, data, size);
    LLVMFuzzerTestOneInput(copy, size);
    free(copy);
    return fuzz_last_status == UFORM_OK;
}

/* ---- mutations ---------------------------------------------------------------------- */

/* An offset, half the time inside the headers. */
static size_t somewhere(size_t size) { return rng_below(2) ? rng_below(size < 512 ? size : 512) : rng_below(size); }

static void edit_integer(input_t *input) {
    size_t width = rng_below(2) ? 2 : 4;
    if (input->size < width) return;
    size_t at = somewhere(input->size - width + 1);
    bool big_endian = rng_below(2);
    uint64_t value = 0;
    for (size_t i = 0; i < width; i++)
        value |= (uint64_t)input->data[at + i] << (8 * (big_endian ? width - 1 - i : i));
    uint64_t top = width == 2 ? 0xffff : 0xffffffffu;
    uint64_t choices[] = {0, 1, top, top >> 1, (top >> 1) + 1, value + 1, value - 1, value * 2, value / 2,
                          value + rng_below(256), rng_next()};
    value = choices[rng_below(sizeof(choices) / sizeof(choices[0]))] & top;
    for (size_t i = 0; i < width; i++)
        input->data[at + i] = (uint8_t)(value >> (8 * (big_endian ? width - 1 - i : i)));
}

static void mutate_once(input_t *input, size_t *capacity) {
    static const uint8_t boundaries[] = {0, 1, 0x7f, 0x80, 0xfe, 0xff};
    size_t size = input->size;
    switch (rng_below(8)) {
    case 0: /* bit flip */
        if (size) input->data[somewhere(size)] ^= (uint8_t)(1u << rng_below(8));
        break;
    case 1: /* byte set */
        if (size)
            input->data[somewhere(size)] =
                rng_below(2) ? boundaries[rng_below(sizeof(boundaries))] : (uint8_t)rng_next();
        break;
    case 2: /* truncation */
        input->size = rng_below(size + 1);
        break;
    case 3: { /* insert random bytes */
        uint8_t bytes[16];
        size_t count = 1 + rng_below(sizeof(bytes));
        for (size_t i = 0; i < count; i++) bytes[i] = (uint8_t)rng_next();
        splice(input, capacity, rng_below(size + 1), 0, bytes, count);
        break;
    }
    case 4: { /* delete a range */
        if (!size) break;
        size_t at = somewhere(size);
        splice(input, capacity, at, 1 + rng_below(size - at < 64 ? size - at : 64), NULL, 0);
        break;
    }
    case 5: { /* copy a range elsewhere (duplicated chunks, markers, boxes) */
        if (!size) break;
        size_t from = rng_below(size);
        size_t count = 1 + rng_below(size - from < 256 ? size - from : 256);
        uint8_t *copy = checked(malloc(count));
        memcpy(copy, input->data + from, count);
        splice(input, capacity, rng_below(size + 1), 0, copy, count);
        free(copy);
        break;
    }
    default: /* a declared size or count */
        edit_integer(input);
        break;
    }
}

#define POOL_SIZE 32

static int run_mutations(uint64_t count, uint64_t seed, const char *path) {
    input_t base;
    if (!read_file(path, &base)) {
        fprintf(stderr, "fuzz_media: cannot read %s\n", path);
        return 2;
    }
    rng_state = seed;
    input_t pool[POOL_SIZE];
    size_t pool_count = 0;
    uint64_t decoded = 0;
    input_t input = {NULL, 0};
    size_t capacity = 0;
    for (uint64_t n = 0; n < count; n++) {
        const input_t *parent = pool_count && rng_below(2) ? &pool[rng_below(pool_count)] : &base;
        if (capacity < parent->size + 1) {
            capacity = parent->size * 2 + 64;
            input.data = checked(realloc(input.data, capacity));
        }
        memcpy(input.data, parent->data, parent->size);
        input.size = parent->size;
        size_t edits = 1 + rng_below(3);
        for (size_t e = 0; e < edits; e++) mutate_once(&input, &capacity);
        if (!run_target(input.data, input.size)) continue;
        decoded++;
        bool full = pool_count == POOL_SIZE;
        size_t slot = full ? rng_below(POOL_SIZE) : pool_count++;
        if (full) free(pool[slot].data);
        pool[slot].data = checked(malloc(input.size ? input.size : 1));
        memcpy(pool[slot].data, input.data, input.size);
        pool[slot].size = input.size;
    }
    printf("fuzz_media: %" PRIu64 " mutations of %s (seed %" PRIu64 "): %" PRIu64
           " decoded, the rest refused; no crash\n",
           count, path, seed, decoded);
    for (size_t i = 0; i < pool_count; i++) free(pool[i].data);
    free(input.data);
    free(base.data);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "--mutate") == 0)
        return run_mutations(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10), argv[4]);
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: %s FILE...\n       %s --mutate N SEED FILE\n", argv[0], argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        input_t input;
        if (!read_file(argv[i], &input)) {
            fprintf(stderr, "fuzz_media: cannot read %s\n", argv[i]);
            return 2;
        }
        run_target(input.data, input.size);
        free(input.data);
    }
    printf("fuzz_media: %d inputs, no crash\n", argc - 1);
    return 0;
}
