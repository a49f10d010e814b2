/* fuzz_driver.h: what the plain fuzz mains (fuzz_main.c, fuzz_media_main.c)
 * share, for builds without libFuzzer: inputs read into heap blocks, a
 * deterministic generator (splitmix64) so a run reproduces, and the splice
 * every mutation is made of. */
#ifndef UFORM_FUZZ_DRIVER_H
#define UFORM_FUZZ_DRIVER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *data;
    size_t size;
} input_t;

/* A fuzz driver is a test tool, not the library: it may exit. */
static void *checked(void *pointer) {
    if (!pointer) {
        fprintf(stderr, "fuzz: out of memory\n");
        exit(2);
    }
    return pointer;
}

static bool read_file(const char *path, input_t *input) {
    FILE *stream = fopen(path, "rb");
    if (!stream) return false;
    size_t capacity = 4096, count;
    input->data = checked(malloc(capacity));
    input->size = 0;
    while ((count = fread(input->data + input->size, 1, capacity - input->size, stream)) > 0)
        if ((input->size += count) == capacity) input->data = checked(realloc(input->data, capacity *= 2));
    fclose(stream);
    return true;
}

static uint64_t rng_state;

static uint64_t rng_next(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static size_t rng_below(size_t bound) { return bound ? (size_t)(rng_next() % bound) : 0; }

/* Replaces input bytes [at, at + remove) with insert[0, count). */
static void splice(input_t *input, size_t *capacity, size_t at, size_t remove, const uint8_t *insert,
                   size_t count) {
    size_t size = input->size - remove + count;
    if (size > *capacity) {
        *capacity = size * 2;
        input->data = checked(realloc(input->data, *capacity));
    }
    memmove(input->data + at + count, input->data + at + remove, input->size - at - remove);
    if (count) memcpy(input->data + at, insert, count);
    input->size = size;
}

#endif /* UFORM_FUZZ_DRIVER_H */
