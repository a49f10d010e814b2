/* check.h: the little harness the numeric C tests share: counted checks that
 * print a message on failure, and a deterministic xorshift64 generator. A test
 * may define UFORM_TEST_SEED before including this to draw its own sequence.
 * Each program prints "N passed, M failed" from `passed` and `failed`. */
#ifndef UFORM_TESTS_CHECK_H
#define UFORM_TESTS_CHECK_H

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

#endif /* UFORM_TESTS_CHECK_H */
