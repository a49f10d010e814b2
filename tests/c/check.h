/* check.h: the little harness the numeric C tests share: counted checks that
 * print a message on failure, a deterministic xorshift64 generator, and a
 * comparison of two files' bytes. A test
 * may define UFORM_TEST_SEED before including this to draw its own sequence.
 * Each program prints "N passed, M failed" from `passed` and `failed`. */
#ifndef UFORM_TESTS_CHECK_H
#define UFORM_TESTS_CHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

static int passed, failed;

#define CHECK(condition, ...)                                                                  \
    do {                                                                                       \
        if (condition) {                                                                       \
            passed++;                                                                          \
        } else {                                                                               \
            failed++;                                                                          \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                        \
            printf(__VA_ARGS__);                                                               \
            printf("\n");                                                                      \
        }                                                                                      \
    } while (0)

#ifndef UFORM_TEST_SEED
#define UFORM_TEST_SEED 0x9e3779b97f4a7c15ull
#endif

static uint64_t rng_state = UFORM_TEST_SEED;

static inline uint64_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Whether two files hold the same bytes (false when either cannot be read). */
static inline bool same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y) same = false;
        if (x == EOF || y == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

#endif /* UFORM_TESTS_CHECK_H */
