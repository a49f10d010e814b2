/* arena.c: growable host memory for outputs, reused across calls.
 *
 * An arena is a list of 64-byte aligned blocks. uform_arena_take hands out
 * pieces front to back; reset rewinds to the first block without freeing, so a
 * service encoding batch after batch stops allocating once it has seen its
 * largest batch. */
#include "core/internal.h"

#include <stdatomic.h>
#include <stdlib.h>

typedef struct uform_arena_block {
    struct uform_arena_block *next;
    size_t capacity;  /* bytes usable after the header */
    size_t used;
    /* data follows, 64-byte aligned */
} uform_arena_block_t;

#define UFORM_ARENA_HEADER 64 /* room for the block header, keeps data aligned */
#define UFORM_ARENA_MIN_BLOCK ((size_t)1 << 16)

struct uform_arena {
    uform_arena_block_t *first;
    uform_arena_block_t *current;
    size_t capacity;        /* bytes held from the system */
    atomic_flag busy;       /* set while a call writes outputs into the arena */
};

_Static_assert(sizeof(uform_arena_block_t) <= UFORM_ARENA_HEADER, "block header too big");

static uform_arena_block_t *uform_arena_block_new(size_t capacity, const char *what) {
    size_t bytes;
    if (!uform_add_ok(capacity, UFORM_ARENA_HEADER, &bytes)) {
        uform_fail(UFORM_OUT_OF_MEMORY, "%s: %zu bytes is too large", what, capacity);
        return NULL;
    }
    uform_arena_block_t *block = uform_alloc_aligned(1, bytes, what);
    if (!block) return NULL;
    block->next = NULL;
    block->capacity = capacity;
    block->used = 0;
    return block;
}

uform_status_t uform_arena_init_ram(uform_arena_t **result) {
    if (!result) return uform_fail(UFORM_INVALID_ARGUMENT, "arena: the out-pointer is NULL");
    *result = uform_alloc_zeroed(1, sizeof(uform_arena_t), "arena");
    if (!*result) return UFORM_OUT_OF_MEMORY;
    atomic_flag_clear(&(*result)->busy);
    return UFORM_OK;
}

static void uform_arena_free_blocks(uform_arena_block_t *block) {
    while (block) {
        uform_arena_block_t *next = block->next;
        uform_free_aligned(block);
        block = next;
    }
}

uform_status_t uform_arena_acquire(uform_arena_t *arena) {
    if (atomic_flag_test_and_set(&arena->busy))
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "arena: already in use by another call; give each concurrent call its own arena");
    return UFORM_OK;
}

void uform_arena_release(uform_arena_t *arena) { atomic_flag_clear(&arena->busy); }

void uform_arena_rewind(uform_arena_t *arena) {
    /* Rewind only: blocks are freed with the arena alone, so a stale view of
     * an earlier output reads old values, never freed memory. */
    for (uform_arena_block_t *block = arena->first; block; block = block->next) block->used = 0;
    arena->current = arena->first;
}

uform_status_t uform_arena_reset(uform_arena_t *arena) {
    if (!arena) return uform_fail(UFORM_INVALID_ARGUMENT, "arena: NULL");
    UFORM_TRY(uform_arena_acquire(arena));
    uform_arena_rewind(arena);
    uform_arena_release(arena);
    return UFORM_OK;
}

uform_status_t uform_arena_capacity(const uform_arena_t *arena, size_t *bytes) {
    if (!arena || !bytes) return uform_fail(UFORM_INVALID_ARGUMENT, "arena_capacity: NULL argument");
    *bytes = arena->capacity;
    return UFORM_OK;
}

void uform_arena_free(uform_arena_t *arena) {
    if (!arena) return;
    uform_arena_free_blocks(arena->first);
    free(arena);
}

void *uform_arena_take(uform_arena_t *arena, size_t bytes, const char *what) {
    size_t rounded;
    if (!uform_add_ok(bytes, 63, &rounded)) {
        uform_fail(UFORM_OUT_OF_MEMORY, "%s: %zu bytes is too large", what, bytes);
        return NULL;
    }
    rounded &= ~(size_t)63;
    if (rounded == 0) rounded = 64;
    /* First fit among the current block and those after it. */
    for (uform_arena_block_t *block = arena->current; block; block = block->next) {
        if (block->capacity - block->used >= rounded) {
            void *pointer = (uint8_t *)block + UFORM_ARENA_HEADER + block->used;
            block->used += rounded;
            arena->current = block;
            return pointer;
        }
    }
    size_t capacity = rounded > UFORM_ARENA_MIN_BLOCK ? rounded : UFORM_ARENA_MIN_BLOCK;
    uform_arena_block_t *block = uform_arena_block_new(capacity, what);
    if (!block) return NULL;
    block->used = rounded;
    /* Append after the last block so earlier pieces stay where they are. */
    uform_arena_block_t **link = &arena->first;
    while (*link) link = &(*link)->next;
    *link = block;
    arena->current = block;
    arena->capacity += capacity + UFORM_ARENA_HEADER;
    return (uint8_t *)block + UFORM_ARENA_HEADER;
}
