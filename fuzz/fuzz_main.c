/* fuzz_main.c: a plain main for fuzz targets, for builds without libFuzzer.
 *
 *   fuzz_main FILE...                 runs the target once over each file
 *   fuzz_main --mutate N SEED FILE    runs N deterministic mutations of FILE
 *   fuzz_main --write-seeds DIR       writes valid safetensors files to start from
 *
 * Build (gcc, with sanitizers):
 *   gcc -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=address,undefined -Ic/include -Ic/src \
 *       c/src/core/error.c c/src/core/json.c c/src/core/safetensors.c fuzz/fuzz_safetensors.c fuzz/fuzz_main.c \
 *       -lm -o fuzz_main
 *
 * Mutations: bit flips, byte sets, truncations, insertions of bytes and JSON
 * tokens, deletions, copies of ranges, digit edits inside the header and
 * rewrites of the 8-byte header length. Inputs that parse are kept in a small
 * pool and mutated further, so later checks (sizes, layout) get exercised.
 * The same N and SEED always produce the same inputs, so a crash reproduces.
 * Every input is a heap block of exactly its size, so ASan sees overreads.
 */
#include "fuzz_driver.h"
#include "core/safetensors.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Runs the target over an exact-size copy. */
static void run_target(const uint8_t *data, size_t size) {
    uint8_t *copy = checked(malloc(size ? size : 1));
    if (size) memcpy(copy, data, size);
    LLVMFuzzerTestOneInput(copy, size);
    free(copy);
}

/* ---- mutations -------------------------------------------------------------------- */

static const char *const tokens[] = {
    "\"", "\\", "\\u", "\\ud800", "\\udc00", "\\u0000", ",", ":", "[", "]", "{", "}", "0", "-1",
    "1e400", "-0", "01", "1.5", "18446744073709551615", "18446744073709551616", "null", "true",
    " ", "\t", "\xff", "\xc3\xa9", "\xed\xa0\x80", "\xf0\x9f\x98\x80", "\"__metadata__\"",
    "\"dtype\"", "\"shape\"", "\"data_offsets\"", "\"F32\"", "\"BF16\"", "\"U8\"", "\"F8_E5M2\"",
    "[0,0]", "[]", "{}", "\"\":", "\"x\":\"y\"",
};
#define TOKEN_COUNT (sizeof(tokens) / sizeof(tokens[0]))

static const uint8_t interesting_bytes[] = {0,   0xff, 0x80, 0x7f, '"', '\\', '{', '}', '[', ']',
                                            ',', ':',  '0',  '1',  '9', '-',  'e', ' ', 'u', 0x1f};

static uint64_t header_length_of(const input_t *input) {
    uint64_t length = 0;
    if (input->size < 8) return 0;
    for (int i = 7; i >= 0; i--) length = (length << 8) | input->data[i];
    return length;
}

static void set_header_length(input_t *input, uint64_t length) {
    for (size_t i = 0; i < 8 && i < input->size; i++) input->data[i] = (uint8_t)(length >> (8 * i));
}

static void mutate_once(input_t *input, size_t *capacity) {
    size_t size = input->size;
    uint64_t header = header_length_of(input);
    /* The JSON region, where most interesting edits land. */
    size_t json_begin = size > 8 ? 8 : size;
    size_t json_end = header <= size - json_begin ? json_begin + (size_t)header : size;
    switch (rng_below(10)) {
    case 0: /* bit flip */
        if (size) input->data[rng_below(size)] ^= (uint8_t)(1u << rng_below(8));
        break;
    case 1: { /* byte set */
        if (!size) break;
        uint8_t value = rng_below(2) ? interesting_bytes[rng_below(sizeof(interesting_bytes))]
                                     : (uint8_t)rng_next();
        size_t at = json_end > json_begin && rng_below(4) ? json_begin + rng_below(json_end - json_begin)
                                                          : rng_below(size);
        input->data[at] = value;
        break;
    }
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
    case 4: { /* insert a JSON token, mostly inside the header */
        const char *token = tokens[rng_below(TOKEN_COUNT)];
        size_t at = json_end > json_begin && rng_below(4) ? json_begin + rng_below(json_end - json_begin + 1)
                                                          : rng_below(size + 1);
        splice(input, capacity, at, 0, (const uint8_t *)token, strlen(token));
        if (rng_below(2)) set_header_length(input, header + strlen(token)); /* keep it framed */
        break;
    }
    case 5: { /* delete a range */
        if (!size) break;
        size_t at = rng_below(size);
        size_t count = 1 + rng_below(size - at < 32 ? size - at : 32);
        splice(input, capacity, at, count, NULL, 0);
        if (rng_below(2) && at >= 8 && at < json_end) set_header_length(input, header - count);
        break;
    }
    case 6: { /* copy a range elsewhere (duplicates keys and entries) */
        if (!size) break;
        size_t from = rng_below(size);
        size_t count = 1 + rng_below(size - from < 128 ? size - from : 128);
        uint8_t *copy = checked(malloc(count));
        memcpy(copy, input->data + from, count);
        size_t at = rng_below(size + 1);
        splice(input, capacity, at, 0, copy, count);
        free(copy);
        if (rng_below(2) && at >= 8 && at <= json_end) set_header_length(input, header + count);
        break;
    }
    case 7: /* digit edit inside the header: shapes and offsets */
    case 8: {
        if (json_end <= json_begin) break;
        size_t start = json_begin + rng_below(json_end - json_begin);
        for (size_t i = 0; i < json_end - json_begin; i++) {
            size_t at = json_begin + (start - json_begin + i) % (json_end - json_begin);
            uint8_t c = input->data[at];
            if (c < '0' || c > '9') continue;
            uint64_t choice = rng_below(4);
            if (choice == 0) input->data[at] = (uint8_t)('0' + rng_below(10));
            else if (choice == 1) input->data[at] = (uint8_t)(c == '9' ? '0' : c + 1);
            else if (choice == 2) input->data[at] = (uint8_t)(c == '0' ? '9' : c - 1);
            else {
                uint8_t digit = (uint8_t)('0' + rng_below(10));
                splice(input, capacity, at, 0, &digit, 1);
                set_header_length(input, header + 1);
            }
            break;
        }
        break;
    }
    default: { /* header length rewrite */
        if (size < 8) break;
        uint64_t choices[] = {0,
                              header + 1,
                              header - 1,
                              header + 1 + rng_below(16),
                              header - 1 - rng_below(16),
                              size - 8,
                              size - 7,
                              UFORM_SAFETENSORS_MAX_HEADER,
                              (uint64_t)UFORM_SAFETENSORS_MAX_HEADER + 1,
                              UINT64_MAX,
                              rng_next(),
                              rng_below(size)};
        set_header_length(input, choices[rng_below(sizeof(choices) / sizeof(choices[0]))]);
        break;
    }
    }
}

static bool parses(const input_t *input) {
    uform_safetensors_t file;
    bool ok = uform_safetensors_parse(input->data, input->size, &file) == UFORM_OK;
    uform_safetensors_close(&file);
    return ok;
}

#define POOL_SIZE 64

static int run_mutations(uint64_t count, uint64_t seed, const char *path) {
    input_t base;
    if (!read_file(path, &base)) {
        fprintf(stderr, "fuzz_main: cannot read %s\n", path);
        return 2;
    }
    rng_state = seed;
    input_t pool[POOL_SIZE];
    size_t pool_count = 0;
    uint64_t parsed = 0;
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
        size_t edits = 1 + rng_below(4);
        for (size_t e = 0; e < edits; e++) mutate_once(&input, &capacity);
        run_target(input.data, input.size);
        if (parses(&input)) {
            parsed++;
            bool full = pool_count == POOL_SIZE;
            size_t slot = full ? rng_below(POOL_SIZE) : pool_count++;
            if (full) free(pool[slot].data);
            pool[slot].data = checked(malloc(input.size ? input.size : 1));
            memcpy(pool[slot].data, input.data, input.size);
            pool[slot].size = input.size;
        }
    }
    printf("fuzz_main: %" PRIu64 " mutations of %s (seed %" PRIu64 "): %" PRIu64
           " parsed, the rest refused; no crash\n",
           count, path, seed, parsed);
    for (size_t i = 0; i < pool_count; i++) free(pool[i].data);
    free(input.data);
    free(base.data);
    return 0;
}

/* ---- seeds -------------------------------------------------------------------------- */

static int write_seeds(const char *directory) {
    mkdir(directory, 0777);
    char path[4096];
    float f32[6] = {1, 2, 3, 4, 5, 6};
    uint16_t bf16[4] = {0x3f80, 0x4000, 0xc040, 0x7f7f}; /* finite: the writer refuses NaN */
    int64_t scalar = 42;
    uint8_t f8[3] = {0x38, 0x40, 0xc8};
    uform_tensor_view_t views[] = {
        {"blocks.0.attention.qkv.weight", UFORM_DTYPE_F32, 2, {2, 3}, f32},
        {"text.bytes", UFORM_DTYPE_BF16, 2, {2, 2}, bf16},
        {"empty", UFORM_DTYPE_U8, 2, {0, 4}, NULL},
        {"step", UFORM_DTYPE_I64, 0, {0}, &scalar},
        {"e4m3 \"q\" \xc3\xa9", UFORM_DTYPE_F8_E4M3, 1, {3}, f8},
    };
    uform_metadata_entry_t metadata[] = {{"format", "pt"},
                                         {"uform", "{\"version\":4,\"hidden\":64}"}};
    struct {
        const char *name;
        size_t tensors, metadata;
    } seeds[] = {{"full.safetensors", 5, 2}, {"tensors.safetensors", 5, 0},
                 {"metadata.safetensors", 0, 2}, {"empty.safetensors", 0, 0}};
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", directory, seeds[i].name);
        if (uform_safetensors_write(path, views, seeds[i].tensors, metadata, seeds[i].metadata,
                                    NULL) != UFORM_OK) {
            fprintf(stderr, "fuzz_main: %s\n", uform_last_error());
            return 2;
        }
    }
    /* An unpadded header with unaligned data, as other writers may make. */
    static const char unpadded[] =
        "{\"a\":{\"dtype\":\"U16\",\"shape\":[3],\"data_offsets\":[0,6]},"
        "\"b\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[6,14]}}";
    uint8_t bytes[8 + sizeof(unpadded) - 1 + 14];
    uint64_t length = sizeof(unpadded) - 1;
    for (int i = 0; i < 8; i++) bytes[i] = (uint8_t)(length >> (8 * i));
    memcpy(bytes + 8, unpadded, length);
    for (size_t i = 0; i < 14; i++) bytes[8 + length + i] = (uint8_t)(i * 17);
    snprintf(path, sizeof(path), "%s/unpadded.safetensors", directory);
    FILE *stream = fopen(path, "wb");
    if (!stream || fwrite(bytes, 1, sizeof(bytes), stream) != sizeof(bytes) || fclose(stream)) {
        fprintf(stderr, "fuzz_main: cannot write %s\n", path);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "--mutate") == 0)
        return run_mutations(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10), argv[4]);
    if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0) return write_seeds(argv[2]);
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr,
                "usage: %s FILE...\n"
                "       %s --mutate N SEED FILE\n"
                "       %s --write-seeds DIR\n",
                argv[0], argv[0], argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        input_t input;
        if (!read_file(argv[i], &input)) {
            fprintf(stderr, "fuzz_main: cannot read %s\n", argv[i]);
            return 2;
        }
        run_target(input.data, input.size);
        free(input.data);
    }
    printf("fuzz_main: %d inputs, no crash\n", argc - 1);
    return 0;
}
