/* fp8_accuracy.c: what FP8 products cost in accuracy (c/cuda/gemm_fp8.cu).
 *
 *     make bench-fp8-accuracy      # writes a checkpoint, builds this under the CUDA emulation, runs it
 *
 * Encodes the same texts with one random checkpoint three ways and compares
 * the embeddings: a RAM model in BF16 (the reference), a RAM model in E4M3
 * (the weights quantized, BF16 activations: every CPU, and GPUs without FP8
 * tensor cores) and a VRAM model in E4M3 (the weights and the activations in
 * FP8: ADA and later). Built against the CUDA emulation (the kernels as
 * written, the product on the host with FP32 sums), since no GPU has run the
 * FP8 path yet: a GPU's tensor cores accumulate differently, within 1e-3 of a
 * product's largest output (tests/gpu/test_cuda_ops.c), well inside what the
 * activations' quantization moves. Prints the lowest and the mean cosine.
 * Slow: the emulation runs every block's threads as fibers and the products
 * as plain loops (tens of minutes at depth 12, hidden 512, on two cores). */
#include "uform.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEXTS 16

static const float *embed(uform_model_t *model, const uform_tape_t *texts, uform_arena_t *arena, size_t *dimensions) {
    uform_encoded_t encoded;
    if (uform_text_encode(model, NULL, texts, arena, NULL, &encoded, NULL) != UFORM_OK) {
        fprintf(stderr, "text_encode: %s\n", uform_last_error());
        exit(1);
    }
    *dimensions = encoded.dimensions;
    return (const float *)encoded.embeddings;
}

static void compare(const char *what, const float *a, const float *b, size_t count, size_t width) {
    double lowest = 1, total = 0;
    for (size_t r = 0; r < count; r++) {
        double dot = 0, na = 0, nb = 0;
        for (size_t i = 0; i < width; i++) {
            double x = a[r * width + i], y = b[r * width + i];
            dot += x * y, na += x * x, nb += y * y;
        }
        double cosine = dot / sqrt(na * nb);
        lowest = cosine < lowest ? cosine : lowest;
        total += cosine;
    }
    printf("| %-44s | %.6f | %.6f |\n", what, lowest, total / (double)count);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s checkpoint.safetensors\n", argv[0]);
        return 2;
    }
    /* texts of 8 to 128 bytes, printable, from a fixed generator */
    char data[TEXTS * 128];
    size_t offsets[TEXTS + 1] = {0};
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (size_t t = 0; t < TEXTS; t++) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        size_t length = 8 + (size_t)(state % 121);
        for (size_t i = 0; i < length; i++) {
            state ^= state << 13, state ^= state >> 7, state ^= state << 17;
            data[offsets[t] + i] = (char)(32 + state % 95);
        }
        offsets[t + 1] = offsets[t] + length;
    }
    uform_tape_t texts = {data, offsets[TEXTS], offsets, TEXTS};
    uform_model_load_ram_options_t options;
    memset(&options, 0, sizeof(options));
    uform_model_t *bf16 = NULL, *e4m3 = NULL, *fp8 = NULL;
    options.quantization = UFORM_SCALAR_BF16;
    if (uform_model_load_ram(argv[1], &options, &bf16) != UFORM_OK) return fprintf(stderr, "%s\n", uform_last_error()), 1;
    options.quantization = UFORM_SCALAR_E4M3;
    if (uform_model_load_ram(argv[1], &options, &e4m3) != UFORM_OK) return fprintf(stderr, "%s\n", uform_last_error()), 1;
    if (uform_model_load_vram(argv[1], NULL, 0, UFORM_GPU_CLASS_NONE, NULL, UFORM_SCALAR_E4M3, NULL, &fp8) != UFORM_OK)
        return fprintf(stderr, "%s\n", uform_last_error()), 1;
    uform_model_description_t described;
    uform_model_describe(bf16, &described);
    uform_arena_t *arenas[3];
    for (int i = 0; i < 3; i++) uform_arena_init_ram(&arenas[i]);
    size_t d = 0;
    const float *reference = embed(bf16, &texts, arenas[0], &d);
    const float *weights_only = embed(e4m3, &texts, arenas[1], &d);
    const float *both = embed(fp8, &texts, arenas[2], &d);
    printf("# %s: depth %zu, hidden %zu, %zu dimensions; %d texts of 8-128 bytes (CUDA emulated)\n\n", argv[1],
           described.depth, described.hidden, described.dimensions, TEXTS);
    printf("| embeddings against | lowest cosine | mean cosine |\n|---|---:|---:|\n");
    compare("E4M3 weights (RAM) vs BF16", reference, weights_only, TEXTS, d);
    compare("E4M3 weights and FP8 activations (VRAM) vs BF16", reference, both, TEXTS, d);
    compare("E4M3 weights and FP8 activations vs E4M3 RAM", weights_only, both, TEXTS, d);
    for (int i = 0; i < 3; i++) uform_arena_free(arenas[i]);
    uform_model_free(bf16), uform_model_free(e4m3), uform_model_free(fp8);
    return 0;
}
