/* fuzz_safetensors.c: a libFuzzer target for the safetensors reader.
 *
 * Build with clang:
 *   clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -Ic/include -Ic/src \
 *       c/src/core/error.c c/src/core/json.c c/src/core/safetensors.c fuzz/fuzz_safetensors.c -lm -o fuzz_st
 * or, without libFuzzer, link fuzz/fuzz_main.c instead of -fsanitize=fuzzer.
 *
 * Beyond "no crash", it checks what the reader promises: a failure leaves the
 * struct zeroed with a message; a success yields tensors inside the buffer,
 * sized by shape and dtype, found by name, and metadata found by key. Every
 * data byte is read, so ASan sees any pointer that strays outside the input.
 */
#include "core/safetensors.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Fuzz harness only: a broken promise must stop the run loudly. */
#define REQUIRE(condition)                                                                    \
    do {                                                                                      \
        if (!(condition)) __builtin_trap();                                                   \
    } while (0)

static volatile uint64_t fuzz_sink;

static void fuzz_json(const uint8_t *data, size_t size) {
    /* The whole input as JSON too, for coverage that needs no valid length field. */
    uform_json_t root;
    uform_status_t status = uform_json_parse((const char *)data, size, 32, &root);
    REQUIRE(status == UFORM_OK || status == UFORM_FORMAT || status == UFORM_OUT_OF_MEMORY);
    uint64_t value;
    if (status == UFORM_OK && uform_json_u64(&root, &value)) fuzz_sink += value;
    if (status == UFORM_OK && root.kind == UFORM_JSON_OBJECT && root.length)
        REQUIRE(uform_json_get(&root, root.keys[0]) == &root.children[0]);
    uform_json_free(&root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const uform_safetensors_t zero;
    uform_safetensors_t file;
    fuzz_json(data, size);

    uform_set_error_text("");
    uform_status_t status = uform_safetensors_parse(data, size, &file);
    if (status != UFORM_OK) {
        REQUIRE(status == UFORM_FORMAT || status == UFORM_OUT_OF_MEMORY);
        REQUIRE(uform_last_error()[0] != '\0');
        REQUIRE(memcmp(&file, &zero, sizeof(file)) == 0);
        uform_safetensors_close(&file);
        return 0;
    }

    uint64_t sum = 0, covered = 0;
    REQUIRE(file.bytes == data && file.size == size && file.mapping == NULL);
    for (size_t i = 0; i < file.tensors_count; i++) {
        const uform_tensor_t *tensor = &file.tensors[i];
        REQUIRE(tensor->name && tensor->name[0]);
        REQUIRE(uform_safetensors_find(&file, tensor->name) == tensor);
        REQUIRE(tensor->rank <= UFORM_SAFETENSORS_MAX_RANK);
        uint64_t bytes = uform_dtype_size(tensor->dtype);
        REQUIRE(bytes != 0);
        for (size_t d = 0; d < tensor->rank; d++) bytes *= tensor->shape[d];
        REQUIRE(bytes == tensor->bytes);
        REQUIRE(tensor->data >= data && tensor->bytes <= size &&
                (size_t)(tensor->data - data) <= size - tensor->bytes);
        for (size_t j = 0; j < tensor->bytes; j++) sum += tensor->data[j];
        covered += tensor->bytes;
    }
    /* The tensors tile the data region exactly: it ends the buffer. */
    uint64_t header_length = 0;
    for (int i = 7; i >= 0; i--) header_length = (header_length << 8) | data[i];
    REQUIRE(covered == size - 8 - header_length);
    for (size_t i = 0; i < file.metadata_count; i++) {
        const uform_metadata_entry_t *entry = &file.metadata[i];
        REQUIRE(entry->key && entry->value);
        sum += strlen(entry->key) + strlen(entry->value);
        const char *value = uform_safetensors_metadata(&file, entry->key);
        REQUIRE(value == entry->value);
    }
    fuzz_sink += sum;
    uform_safetensors_close(&file);
    REQUIRE(memcmp(&file, &zero, sizeof(file)) == 0);
    return 0;
}
