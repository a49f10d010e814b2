/* error.c: the thread-local last error, checked allocation and scalar conversions. */
#include "core/internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#define UFORM_ERROR_CAPACITY 1024

static _Thread_local char uform_error_text[UFORM_ERROR_CAPACITY];

const char *uform_last_error(void) { return uform_error_text; }

uint32_t uform_version(void) {
    return UFORM_VERSION_MAJOR * 10000u + UFORM_VERSION_MINOR * 100u + UFORM_VERSION_PATCH;
}

uform_status_t uform_fail(uform_status_t status, const char *format, ...) {
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(uform_error_text, sizeof(uform_error_text), format, arguments);
    va_end(arguments);
    return status;
}

void uform_set_error_text(const char *text) {
    snprintf(uform_error_text, sizeof(uform_error_text), "%s", text ? text : "");
}

uform_status_t uform_fail_context(uform_status_t status, const char *prefix) {
    char previous[UFORM_ERROR_CAPACITY];
    memcpy(previous, uform_error_text, sizeof(previous));
    int written = snprintf(uform_error_text, sizeof(uform_error_text), "%s: ", prefix);
    size_t used = written < 0 ? 0 : (size_t)written;
    if (used < sizeof(uform_error_text)) {
        size_t room = sizeof(uform_error_text) - used - 1;
        size_t length = strnlen(previous, room);
        memcpy(uform_error_text + used, previous, length);
        uform_error_text[used + length] = '\0';
    }
    return status;
}

void *uform_alloc(size_t count, size_t size, const char *what) {
    size_t bytes;
    if (!uform_mul_ok(count, size, &bytes)) {
        uform_fail(UFORM_OUT_OF_MEMORY, "%s: %zu x %zu bytes overflows", what, count, size);
        return NULL;
    }
    void *pointer = malloc(bytes ? bytes : 1);
    if (!pointer) uform_fail(UFORM_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes", what, bytes);
    return pointer;
}

void *uform_alloc_zeroed(size_t count, size_t size, const char *what) {
    size_t bytes;
    if (!uform_mul_ok(count, size, &bytes)) {
        uform_fail(UFORM_OUT_OF_MEMORY, "%s: %zu x %zu bytes overflows", what, count, size);
        return NULL;
    }
    void *pointer = calloc(bytes ? count : 1, bytes ? size : 1);
    if (!pointer) uform_fail(UFORM_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes", what, bytes);
    return pointer;
}

void *uform_alloc_aligned(size_t count, size_t size, const char *what) {
    size_t bytes;
    if (!uform_mul_ok(count, size, &bytes) || bytes > SIZE_MAX - 64) {
        uform_fail(UFORM_OUT_OF_MEMORY, "%s: %zu x %zu bytes overflows", what, count, size);
        return NULL;
    }
    bytes = (bytes + 63) & ~(size_t)63;
    void *pointer = aligned_alloc(64, bytes ? bytes : 64);
    if (!pointer) uform_fail(UFORM_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes", what, bytes);
    return pointer;
}

void uform_free_aligned(void *pointer) { free(pointer); }

float uform_f16_to_f32(uint16_t value) {
    uint32_t sign = (uint32_t)(value & 0x8000u) << 16;
    uint32_t exponent = (value >> 10) & 0x1fu;
    uint32_t mantissa = value & 0x3ffu;
    uint32_t bits;
    if (exponent == 0) {
        /* zero or subnormal: mantissa * 2^-24 */
        float magnitude = (float)mantissa * 0x1p-24f;
        memcpy(&bits, &magnitude, sizeof(bits));
        bits |= sign;
    } else if (exponent == 31) {
        bits = sign | 0x7f800000u | (mantissa << 13);
    } else {
        bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
    }
    float result;
    memcpy(&result, &bits, sizeof(result));
    return result;
}

void uform_progress_begin(uform_progress_state_t *state, const uform_progress_t *progress,
                          size_t total) {
    state->progress = progress;
    state->total = total;
    state->reported = 0;
}

uform_status_t uform_progress_update(uform_progress_state_t *state, size_t done) {
    const uform_progress_t *progress = state->progress;
    if (!progress || !progress->callback) return UFORM_OK;
    /* Zero derives, as everywhere: a handler with no step count hears 100 reports. */
    size_t steps = progress->steps ? progress->steps : 100;
    /* Mark j of 1..steps sits at floor(total * j / steps); the last is total
     * itself, so a finished call always reports done == total. One report per
     * update that crosses marks, however many it crosses: a handler never hears
     * the same `done` twice, and a huge step count costs nothing. */
    if (state->reported >= steps) return UFORM_OK;
    size_t crossed; /* marks at or below done: floor(total * j / steps) <= done */
    if (done >= state->total)
        crossed = steps;
    else
        crossed = (size_t)((((unsigned __int128)done + 1) * steps - 1) / state->total);
    if (crossed <= state->reported) return UFORM_OK;
    state->reported = crossed;
    if (progress->callback(progress->user, done, state->total) != 0)
        return uform_fail(UFORM_CANCELLED, "cancelled by the progress handler at %zu of %zu", done,
                          state->total);
    return UFORM_OK;
}
