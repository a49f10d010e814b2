/* reference_outputs.c: libuform's encoders against float64 reference outputs stored
 * on disk, for machines where the Python package cannot run (aarch64 builds under
 * qemu-user, say).
 *
 *   reference_outputs DIR [cpu_class ...]
 *
 * DIR is a fixture written on x86 by `python3 tests/reference/write_fixture.py DIR`
 * (its docstring documents the layout: manifest.txt plus raw little-endian arrays).
 * The program loads DIR's checkpoint pinned to each CPU class in turn (SERIAL ..
 * SVE_BF16, or only the named ones: serial, haswell, skylake, sapphire, neon, sve,
 * neon_bf16, sve_bf16, amx, with or without a "cpu/" prefix), encodes every stored text, image (as pixels) and recording (as
 * samples) with the public API only, and compares embeddings and token vectors with
 * the reference, component by component. It also checks the determinism contract: a
 * batch equals each item encoded alone, bit for bit.
 *
 * A class the machine or build cannot run fails the load with UFORM_UNSUPPORTED and
 * is skipped ("skip cpu/NAME: why"); when that class was named on the command line,
 * the skip counts as a failure (nothing was tested). One line per class and check,
 * then "N passed, M failed"; exit 0 iff none failed, 1 otherwise, 2 when DIR cannot
 * be read or the arguments are wrong. After each class's checks it prints "encode digest
 * NAME: HEX", an FNV-1a hash of every F32 output it compared (not a check itself), so
 * runs of classes that promise the same bits can be compared with each other.
 *
 * Only pixel and sample entry points are used: no media decoder is needed, so this
 * runs on builds compiled without any media library.
 */
#include "uform.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "check.h"

/* Tolerances, as tests/test_text_encode.py and tests/test_media_encode.py derive them.
 * FP32 classes (SERIAL, HASWELL, SKYLAKE, and NEON and SVE here) keep activations in
 * FP32 over the checkpoint's exact BF16 weights, so they differ from float64 only by
 * FP32 rounding: GEMM sums of up to 4H products (relative error ~ sqrt(k) * 2^-24), the
 * fast exp (~2 ulp), through depth <= 4 blocks; the media inputs add the FP32 resize
 * (< 1e-4 of a 255 level from the float64 one) and the FP32 patch projection, far
 * below that. On unit vectors that stays below 2e-5 per component (this fixture has
 * depth 2). */
#define FP32_TOLERANCE 2e-5
/* SAPPHIRE, AMX, NEON_BF16 and SVE_BF16 round GEMM inputs (pixels and samples included) to
 * BF16, 2^-9 relative per input, so they agree to about 1e-2 per component: 3e-2 absolute, plus a cosine with
 * the reference above 0.999 for every item that has tokens. */
#define BF16_TOLERANCE 3e-2
#define BF16_MIN_COSINE 0.999

#define MAX_ITEMS 64
#define MAX_LINE 1024

enum { TEXT, IMAGE, AUDIO, MODALITIES };
static const char *const MODALITY_NAMES[MODALITIES] = {"text", "image", "audio"};

static const char *const CLASS_NAMES[] = {
    [UFORM_CPU_CLASS_SERIAL] = "serial",     [UFORM_CPU_CLASS_HASWELL] = "haswell",
    [UFORM_CPU_CLASS_SKYLAKE] = "skylake",   [UFORM_CPU_CLASS_SAPPHIRE] = "sapphire",
    [UFORM_CPU_CLASS_NEON] = "neon",         [UFORM_CPU_CLASS_SVE] = "sve",
    [UFORM_CPU_CLASS_NEON_BF16] = "neon_bf16", [UFORM_CPU_CLASS_SVE_BF16] = "sve_bf16",
    [UFORM_CPU_CLASS_AMX] = "amx",
};
#define LAST_CLASS UFORM_CPU_CLASS_AMX

/* ---- the fixture ------------------------------------------------------------------- */

typedef struct {
    void *data;           /* NULL until the manifest names it */
    size_t rows, cols;
} array_t;

typedef struct {
    array_t input, embedding, tokens;
} item_t;

typedef struct {
    char checkpoint[MAX_LINE];
    size_t dimensions, token_width, context, sample_rate;
    item_t items[MODALITIES][MAX_ITEMS];
    size_t count[MODALITIES];
} fixture_t;

static int fixture_error(const char *dir, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, "%s: ", dir);
    vfprintf(stderr, fmt, args);
    fprintf(stderr, "\n");
    va_end(args);
    return -1;
}

/* Reads DIR/name, which must hold exactly `bytes` bytes, into a heap block. */
static int read_array(const char *dir, const char *name, size_t bytes, void **data) {
    char path[2 * MAX_LINE + 2];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return fixture_error(dir, "%s: %s", name, strerror(errno));
    *data = malloc(bytes ? bytes : 1);
    if (!*data) {
        fclose(f);
        return fixture_error(dir, "%s: out of memory", name);
    }
    size_t got = fread(*data, 1, bytes, f);
    int extra = fgetc(f);
    fclose(f);
    if (got != bytes || extra != EOF)
        return fixture_error(dir, "%s: expected exactly %zu bytes", name, bytes);
    return 0;
}

static int parse_size(const char *text, size_t *value) {
    char *end;
    errno = 0;
    unsigned long long parsed = strtoull(text, &end, 10);
    if (errno || end == text || *end || text[0] == '-') return -1;
    *value = (size_t)parsed;
    return 0;
}

static int load_fixture(const char *dir, fixture_t *fixture) {
    memset(fixture, 0, sizeof(*fixture));
    uint16_t probe = 1;
    unsigned char first;
    memcpy(&first, &probe, 1);
    if (first != 1)
        return fixture_error(dir, "the fixture's arrays are little-endian; this host is not");

    char path[MAX_LINE + 16];
    snprintf(path, sizeof(path), "%s/manifest.txt", dir);
    FILE *manifest = fopen(path, "r");
    if (!manifest) return fixture_error(dir, "manifest.txt: %s", strerror(errno));
    char line[MAX_LINE];
    int status = 0, format = 0;
    for (size_t number = 1; status == 0 && fgets(line, sizeof(line), manifest); number++) {
        char *fields[6];
        size_t count = 0;
        for (char *field = strtok(line, " \t\r\n"); field && count < 6; field = strtok(NULL, " \t\r\n"))
            fields[count++] = field;
        if (count == 0 || fields[0][0] == '#') continue;
        if (count == 2) {
            size_t value = 0;
            if (strcmp(fields[0], "checkpoint") == 0) {
                snprintf(fixture->checkpoint, sizeof(fixture->checkpoint), "%s/%s", dir, fields[1]);
                continue;
            }
            if (parse_size(fields[1], &value) != 0) status = -1;
            else if (strcmp(fields[0], "format") == 0) format = (int)value;
            else if (strcmp(fields[0], "dimensions") == 0) fixture->dimensions = value;
            else if (strcmp(fields[0], "token_width") == 0) fixture->token_width = value;
            else if (strcmp(fields[0], "context") == 0) fixture->context = value;
            else if (strcmp(fields[0], "audio_sample_rate") == 0) fixture->sample_rate = value;
            else status = -1;
            if (status) fixture_error(dir, "manifest.txt:%zu: bad header line", number);
            continue;
        }
        size_t index, rows, cols;
        if (count != 5 || parse_size(fields[1], &index) || parse_size(fields[2], &rows) ||
            parse_size(fields[3], &cols) || index >= MAX_ITEMS || rows > (1u << 24) ||
            cols > (1u << 24)) {
            status = fixture_error(dir, "manifest.txt:%zu: expected 'kind index rows cols file'",
                                   number);
            break;
        }
        /* kind: MODALITY (the input), MODALITY_embedding or MODALITY_tokens */
        int modality = -1;
        const char *suffix = "";
        for (int m = 0; m < MODALITIES; m++) {
            size_t length = strlen(MODALITY_NAMES[m]);
            if (strncmp(fields[0], MODALITY_NAMES[m], length) == 0 &&
                (fields[0][length] == 0 || fields[0][length] == '_')) {
                modality = m;
                suffix = fields[0] + length;
            }
        }
        item_t *item = modality >= 0 ? &fixture->items[modality][index] : NULL;
        array_t *array = NULL;
        size_t element = 0;
        if (!item) {
        } else if (strcmp(suffix, "") == 0) {
            array = &item->input;
            element = modality == IMAGE ? 3 : modality == AUDIO ? sizeof(float) : 1;
        } else if (strcmp(suffix, "_embedding") == 0) {
            array = &item->embedding;
            element = sizeof(double);
        } else if (strcmp(suffix, "_tokens") == 0) {
            array = &item->tokens;
            element = sizeof(double);
        }
        if (!array || array->data) {
            status = fixture_error(dir, "manifest.txt:%zu: unknown or repeated '%s %zu'", number,
                                   fields[0], index);
            break;
        }
        array->rows = rows;
        array->cols = cols;
        status = read_array(dir, fields[4], rows * cols * element, &array->data);
        if (index + 1 > fixture->count[modality]) fixture->count[modality] = index + 1;
    }
    fclose(manifest);
    if (status) return status;
    if (format != 1) return fixture_error(dir, "manifest.txt: format %d, expected 1", format);
    if (!fixture->checkpoint[0] || !fixture->dimensions || !fixture->context ||
        (fixture->count[AUDIO] && !fixture->sample_rate))
        return fixture_error(dir, "manifest.txt: a header line is missing");
    for (int m = 0; m < MODALITIES; m++)
        for (size_t i = 0; i < fixture->count[m]; i++) {
            const item_t *item = &fixture->items[m][i];
            if (!item->input.data || !item->embedding.data ||
                (fixture->token_width && !item->tokens.data))
                return fixture_error(dir, "manifest.txt: %s %zu lacks its input or outputs",
                                     MODALITY_NAMES[m], i);
            if ((m != IMAGE && item->input.rows != 1) || item->embedding.rows != 1 ||
                item->embedding.cols != fixture->dimensions ||
                (item->tokens.data && item->tokens.cols != fixture->token_width))
                return fixture_error(dir, "manifest.txt: %s %zu has the wrong shape",
                                     MODALITY_NAMES[m], i);
        }
    return 0;
}

static void free_fixture(fixture_t *fixture) {
    for (int m = 0; m < MODALITIES; m++)
        for (size_t i = 0; i < fixture->count[m]; i++) {
            free(fixture->items[m][i].input.data);
            free(fixture->items[m][i].embedding.data);
            free(fixture->items[m][i].tokens.data);
        }
}

/* ---- encoding ------------------------------------------------------------------------ */

/* Items [first, first + count) of one modality, embeddings and (with a token head) tokens. */
static uform_status_t encode(uform_model_t *model, const fixture_t *fixture, int modality,
                             size_t first, size_t count, uform_arena_t *arena,
                             uform_encoded_t *encoded) {
    const item_t *items = &fixture->items[modality][first];
    uform_encode_options_t options = {0};
    options.outputs = UFORM_OUTPUTS_EMBEDDINGS | (fixture->token_width ? UFORM_OUTPUTS_TOKENS : 0);
    options.outputs_scalar = UFORM_SCALAR_F32;
    size_t total = 0;
    for (size_t i = 0; i < count; i++) total += items[i].input.cols;
    uform_status_t status = UFORM_INVALID_ARGUMENT;
    size_t *offsets = malloc((count + 1) * sizeof(size_t));
    void *tape = malloc(total * (modality == AUDIO ? sizeof(float) : 1) + 1);
    uform_pixels_t *pixels = malloc(count * sizeof(uform_pixels_t));
    if (!offsets || !tape || !pixels) goto done;
    offsets[0] = 0;
    for (size_t i = 0; i < count; i++) {
        const array_t *input = &items[i].input;
        size_t element = modality == AUDIO ? sizeof(float) : 1;
        if (modality != IMAGE)
            memcpy((char *)tape + offsets[i] * element, input->data, input->cols * element);
        offsets[i + 1] = offsets[i] + input->cols;
        pixels[i] = (uform_pixels_t){input->data, input->rows, input->cols, 3 * input->cols};
    }
    if (modality == TEXT) {
        uform_tape_t texts = {tape, total, offsets, count};
        status = uform_text_encode(model, NULL, &texts, arena, &options, encoded, NULL);
    } else if (modality == IMAGE) {
        status = uform_image_encode_pixels(model, NULL, pixels, count, arena, &options, encoded, NULL);
    } else {
        status = uform_audio_encode_samples(model, NULL, tape, total, offsets, count,
                                            fixture->sample_rate, arena, &options, encoded, NULL);
    }
done:
    free(offsets);
    free(tape);
    free(pixels);
    return status;
}

/* ---- checks -------------------------------------------------------------------------- */

/* One check's line: "cpu/NAME what: details ok" or "... FAIL". */
static void verdict(int ok, const char *cpu_class, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    printf("cpu/%s ", cpu_class);
    vprintf(fmt, args);
    printf(" %s\n", ok ? "ok" : "FAIL");
    va_end(args);
    if (ok) passed++;
    else failed++;
    fflush(stdout);
}

/* |produced - expected| over n values, the largest; NaN and infinity count as infinite. */
static double max_error(const float *produced, const double *expected, size_t n) {
    double largest = 0;
    for (size_t i = 0; i < n; i++) {
        double error = fabs((double)produced[i] - expected[i]);
        if (!(error <= largest)) largest = isnan(error) ? INFINITY : error;
    }
    return largest;
}

/* FNV-1a over bytes, continuing from `hash`. */
static uint64_t fnv1a(uint64_t hash, const void *data, size_t size) {
    const unsigned char *bytes = data;
    for (size_t i = 0; i < size; i++) hash = (hash ^ bytes[i]) * 0x100000001b3ull;
    return hash;
}

/* Embeddings and token vectors of every item of one modality against the reference;
 * folds the outputs' bits into *digest. */
static void check_reference(uform_model_t *model, const fixture_t *fixture, int modality,
                            const char *cpu_class, double tolerance, int bf16, uint64_t *digest) {
    const char *name = MODALITY_NAMES[modality];
    size_t count = fixture->count[modality], D = fixture->dimensions, W = fixture->token_width;
    if (count == 0) return;
    uform_arena_t *arena = NULL;
    uform_encoded_t encoded;
    if (uform_arena_init_ram(&arena) != UFORM_OK ||
        encode(model, fixture, modality, 0, count, arena, &encoded) != UFORM_OK) {
        verdict(0, cpu_class, "%s: encode failed: %s", name, uform_last_error());
        uform_arena_free(arena);
        return;
    }
    const item_t *items = fixture->items[modality];

    /* embeddings */
    int ok = encoded.count == count && encoded.dimensions == D && encoded.embeddings &&
             encoded.scalar == UFORM_SCALAR_F32;
    double largest = 0, lowest_cosine = 1;
    for (size_t i = 0; ok && i < count; i++) {
        const float *row =
            (const float *)((const char *)encoded.embeddings + i * encoded.embedding_row_bytes);
        const double *expected = items[i].embedding.data;
        *digest = fnv1a(*digest, row, D * sizeof(float));
        double error = max_error(row, expected, D);
        if (!(error <= largest)) largest = error;
        size_t tokens = W ? items[i].tokens.rows : 1;
        if (tokens == 0) {
            /* an item without tokens embeds as exact zeros */
            for (size_t j = 0; j < D; j++)
                if (row[j] != 0) ok = 0;
        } else if (bf16) {
            double cosine = 0;
            for (size_t j = 0; j < D; j++) cosine += row[j] * expected[j];
            if (!(cosine >= lowest_cosine)) lowest_cosine = cosine;
        }
    }
    if (!ok)
        verdict(0, cpu_class, "%s: %zu embeddings: wrong shape or a nonzero empty item", name, count);
    else if (bf16)
        verdict(largest <= tolerance && lowest_cosine > BF16_MIN_COSINE, cpu_class,
                "%s: %zu embeddings max error %.1e (tolerance %.0e), min cosine %.6f (> %g)", name,
                count, largest, tolerance, lowest_cosine, BF16_MIN_COSINE);
    else
        verdict(largest <= tolerance, cpu_class, "%s: %zu embeddings max error %.1e (tolerance %.0e)",
                name, count, largest, tolerance);

    /* token vectors: the same rows, in the same order, as the reference */
    if (W) {
        ok = encoded.tokens && encoded.token_offsets && encoded.token_width == W;
        size_t rows = 0;
        largest = 0;
        for (size_t i = 0; ok && i < count; i++) {
            size_t start = encoded.token_offsets[i], end = encoded.token_offsets[i + 1];
            if (start != rows || end - start != items[i].tokens.rows) {
                printf("cpu/%s %s tokens: item %zu has %zu rows, the reference %zu\n", cpu_class,
                       name, i, end - start, items[i].tokens.rows);
                ok = 0;
                break;
            }
            const double *expected = items[i].tokens.data;
            for (size_t r = 0; r < end - start; r++) {
                const float *row = (const float *)((const char *)encoded.tokens +
                                                   (start + r) * encoded.token_row_bytes);
                *digest = fnv1a(*digest, row, W * sizeof(float));
                double error = max_error(row, expected + r * W, W);
                if (!(error <= largest)) largest = error;
            }
            rows = end;
        }
        if (!ok)
            verdict(0, cpu_class, "%s tokens: wrong shape", name);
        else
            verdict(largest <= tolerance, cpu_class,
                    "%s tokens: %zu rows max error %.1e (tolerance %.0e)", name, rows, largest,
                    tolerance);
    }
    uform_arena_free(arena);
}

/* A batch of every item equals each item encoded alone, bit for bit (a row's arithmetic
 * never depends on the rows around it), embeddings and token rows. */
static void check_batch(uform_model_t *model, const fixture_t *fixture, int modality,
                        const char *cpu_class) {
    const char *name = MODALITY_NAMES[modality];
    size_t count = fixture->count[modality];
    if (count < 2) return;
    uform_arena_t *batch_arena = NULL, *alone_arena = NULL;
    uform_encoded_t batch, alone;
    int ok = uform_arena_init_ram(&batch_arena) == UFORM_OK &&
             uform_arena_init_ram(&alone_arena) == UFORM_OK &&
             encode(model, fixture, modality, 0, count, batch_arena, &batch) == UFORM_OK;
    size_t differ = 0;
    for (size_t i = 0; ok && i < count; i++) {
        if (encode(model, fixture, modality, i, 1, alone_arena, &alone) != UFORM_OK) {
            ok = 0;
            break;
        }
        const char *row = (const char *)batch.embeddings + i * batch.embedding_row_bytes;
        int same = memcmp(alone.embeddings, row, batch.dimensions * sizeof(float)) == 0;
        if (batch.tokens) {
            size_t start = batch.token_offsets[i], rows = batch.token_offsets[i + 1] - start;
            same = same && alone.token_offsets[1] == rows;
            for (size_t r = 0; same && r < rows; r++)
                same = memcmp((const char *)alone.tokens + r * alone.token_row_bytes,
                              (const char *)batch.tokens + (start + r) * batch.token_row_bytes,
                              batch.token_width * sizeof(float)) == 0;
        }
        if (!same) differ++;
    }
    if (!ok)
        verdict(0, cpu_class, "%s batch: encode failed: %s", name, uform_last_error());
    else
        verdict(differ == 0, cpu_class, "%s batch: %zu of %zu items differ from the item alone", name,
                differ, count);
    uform_arena_free(batch_arena);
    uform_arena_free(alone_arena);
}

/* Every check for one class; 0 when it ran, 1 when the class was skipped. */
static int check_class(uform_executor_t *executor, const fixture_t *fixture,
                       uform_cpu_class_t cpu_class) {
    const char *name = CLASS_NAMES[cpu_class];
    uform_model_load_ram_options_t options = {0};
    options.cpu_class = cpu_class;
    options.executor = executor;
    options.quantization = UFORM_SCALAR_BF16;
    uform_model_t *model = NULL;
    uform_status_t status = uform_model_load_ram(fixture->checkpoint, &options, &model);
    if (status == UFORM_UNSUPPORTED) {
        printf("skip cpu/%s: %s\n", name, uform_last_error());
        return 1;
    }
    if (status != UFORM_OK) {
        verdict(0, name, "load: status %d: %s", (int)status, uform_last_error());
        return 0;
    }
    uform_model_description_t description = {0};
    int ok = uform_model_describe(model, &description) == UFORM_OK &&
             description.cpu_class == cpu_class && description.dimensions == fixture->dimensions &&
             description.token_width == fixture->token_width && description.context == fixture->context;
    verdict(ok, name, "load: %zu dimensions, %zu-wide tokens, context %zu, packed for cpu/%s",
            description.dimensions, description.token_width, description.context,
            description.cpu_class >= UFORM_CPU_CLASS_SERIAL &&
                    description.cpu_class <= LAST_CLASS
                ? CLASS_NAMES[description.cpu_class]
                : "?");
    if (ok) {
        int bf16 = cpu_class == UFORM_CPU_CLASS_SAPPHIRE || cpu_class == UFORM_CPU_CLASS_AMX ||
                   cpu_class == UFORM_CPU_CLASS_NEON_BF16 || cpu_class == UFORM_CPU_CLASS_SVE_BF16;
        double tolerance = bf16 ? BF16_TOLERANCE : FP32_TOLERANCE;
        uint64_t digest = 0xcbf29ce484222325ull;
        for (int m = 0; m < MODALITIES; m++)
            check_reference(model, fixture, m, name, tolerance, bf16, &digest);
        for (int m = 0; m < MODALITIES; m++) check_batch(model, fixture, m, name);
        /* Not a check: classes that promise the same bits (NEON and SVE at every vector
         * length, say) print the same digest; scripts compare these lines across runs. */
        printf("encode digest %s: %016llx\n", name, (unsigned long long)digest);
    }
    uform_model_free(model);
    return 0;
}

int main(int argc, char **argv) {
    (void)rng_next; /* check.h's generator: this program draws nothing */
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR [CLASS ...] (serial, haswell, skylake, sapphire, neon, sve, "
                        "neon_bf16, sve_bf16, amx)\n", argv[0]);
        return 2;
    }
    bool named[LAST_CLASS + 1] = {false}, any_named = argc > 2;
    for (int a = 2; a < argc; a++) {
        const char *wanted = strncasecmp(argv[a], "cpu/", 4) == 0 ? argv[a] + 4 : argv[a];
        bool known = false;
        for (int c = UFORM_CPU_CLASS_SERIAL; c <= LAST_CLASS; c++)
            if (strcasecmp(wanted, CLASS_NAMES[c]) == 0) named[c] = known = true;
        if (!known) {
            fprintf(stderr, "%s: unknown CPU class '%s'\n", argv[0], argv[a]);
            return 2;
        }
    }
    static fixture_t fixture;
    if (load_fixture(argv[1], &fixture) != 0) {
        free_fixture(&fixture);
        return 2;
    }
    uform_executor_t *executor = NULL;
    if (uform_executor_for_ram(0, NULL, 0, &executor) != UFORM_OK) {
        fprintf(stderr, "executor: %s\n", uform_last_error());
        free_fixture(&fixture);
        return 1;
    }
    for (int c = UFORM_CPU_CLASS_SERIAL; c <= LAST_CLASS; c++) {
        if (any_named && !named[c]) continue;
        int skipped = check_class(executor, &fixture, (uform_cpu_class_t)c);
        if (skipped && any_named) {
            printf("FAIL cpu/%s was asked for by name but cannot run here\n", CLASS_NAMES[c]);
            failed++;
        }
    }
    uform_executor_free(executor);
    free_fixture(&fixture);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
