/* arena.c: growable memory for outputs, reused across calls.
 *
 * An arena is a list of 64-byte aligned blocks. uform_arena_take hands out
 * pieces front to back; reset rewinds to the first block without freeing, so a
 * service encoding batch after batch stops allocating once it has seen its
 * largest batch.
 *
 * A device arena (uform_arena_init_vram, backend/vram.c) keeps a second list
 * whose blocks are a GPU's memory, for the output rows themselves
 * (uform_arena_take_rows); what the host reads to walk them (offsets) stays
 * in the first list, in host memory. */
#include "core/internal.h"

#include <stdatomic.h>
#include <stdlib.h>

typedef struct uform_arena_block {
    struct uform_arena_block *next;
    uint8_t *data;    /* host blocks: just after this header; device blocks: the GPU's memory */
    size_t capacity;  /* bytes usable at data */
    size_t used;
} uform_arena_block_t;

typedef struct {
    uform_arena_block_t *first;
    uform_arena_block_t *current;
} uform_arena_list_t;

#define UFORM_ARENA_HEADER 64 /* room for the block header, keeps data aligned */
#define UFORM_ARENA_MIN_BLOCK ((size_t)1 << 16)

struct uform_arena {
    uform_arena_list_t host;
    uform_arena_list_t rows;          /* a device arena's rows (empty in a host arena) */
    bool on_device;
    uform_arena_memory_t memory;      /* a device arena's allocator */
    size_t capacity;                  /* bytes held from the system and the GPU */
    atomic_flag busy;                 /* set while a call writes outputs into the arena */
};

_Static_assert(sizeof(uform_arena_block_t) <= UFORM_ARENA_HEADER, "block header too big");

/* A block of the host list, or of a device arena's rows (device). */
static uform_arena_block_t *uform_arena_block_new(const uform_arena_t *arena, bool device, size_t capacity,
                                                  const char *what) {
    size_t bytes;
    if (!uform_add_ok(capacity, UFORM_ARENA_HEADER, &bytes)) {
        uform_fail(UFORM_OUT_OF_MEMORY, "%s: %zu bytes is too large", what, capacity);
        return NULL;
    }
    uform_arena_block_t *block = uform_alloc_aligned(1, device ? UFORM_ARENA_HEADER : bytes, what);
    if (!block) return NULL;
    block->next = NULL;
    block->capacity = capacity;
    block->used = 0;
    block->data = (uint8_t *)block + UFORM_ARENA_HEADER;
    if (device) {
        block->data = arena->memory.alloc(arena->memory.gpu, capacity, what);
        if (!block->data) {
            uform_free_aligned(block);
            return NULL;
        }
    }
    return block;
}

static uform_status_t uform_arena_new(uform_arena_t **result) {
    if (!result) return uform_fail(UFORM_INVALID_ARGUMENT, "arena: the out-pointer is NULL");
    *result = uform_alloc_zeroed(1, sizeof(uform_arena_t), "arena");
    if (!*result) return UFORM_OUT_OF_MEMORY;
    atomic_flag_clear(&(*result)->busy);
    return UFORM_OK;
}

uform_status_t uform_arena_init_ram(uform_arena_t **result) { return uform_arena_new(result); }

uform_status_t uform_arena_init_device(uform_arena_t **result, const uform_arena_memory_t *memory) {
    UFORM_TRY(uform_arena_new(result));
    (*result)->on_device = true;
    (*result)->memory = *memory;
    return UFORM_OK;
}

static void uform_arena_free_blocks(const uform_arena_t *arena, uform_arena_block_t *block, bool device) {
    while (block) {
        uform_arena_block_t *next = block->next;
        if (device) arena->memory.free(arena->memory.gpu, block->data);
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

static void uform_arena_list_rewind(uform_arena_list_t *list) {
    for (uform_arena_block_t *block = list->first; block; block = block->next) block->used = 0;
    list->current = list->first;
}

void uform_arena_rewind(uform_arena_t *arena) {
    /* Rewind only: blocks are freed with the arena alone, so a stale view of
     * an earlier output reads old values, never freed memory. */
    uform_arena_list_rewind(&arena->host);
    uform_arena_list_rewind(&arena->rows);
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

uform_status_t uform_arena_location(const uform_arena_t *arena, uint32_t *on_device, uint32_t *device) {
    if (!arena || !on_device || !device) return uform_fail(UFORM_INVALID_ARGUMENT, "arena_location: NULL argument");
    *on_device = arena->on_device ? 1u : 0u;
    *device = arena->on_device ? arena->memory.gpu : 0;
    return UFORM_OK;
}

bool uform_arena_on_device(const uform_arena_t *arena, uint32_t *gpu) {
    if (arena->on_device && gpu) *gpu = arena->memory.gpu;
    return arena->on_device;
}

uform_status_t uform_arena_require_host(const uform_arena_t *arena, const char *who) {
    if (!arena->on_device) return UFORM_OK;
    return uform_fail(UFORM_UNSUPPORTED,
                      "%s in a host arena (uform_arena_init_ram); this one is in GPU %u's memory, which only the "
                      "encode verbs write into",
                      who, arena->memory.gpu);
}

void uform_arena_free(uform_arena_t *arena) {
    if (!arena) return;
    uform_arena_free_blocks(arena, arena->host.first, false);
    uform_arena_free_blocks(arena, arena->rows.first, true);
    free(arena);
}

static void *uform_arena_list_take(uform_arena_t *arena, uform_arena_list_t *list, size_t bytes,
                                   const char *what) {
    bool device = list == &arena->rows;
    size_t rounded;
    if (!uform_add_ok(bytes, 63, &rounded)) {
        uform_fail(UFORM_OUT_OF_MEMORY, "%s: %zu bytes is too large", what, bytes);
        return NULL;
    }
    rounded &= ~(size_t)63;
    if (rounded == 0) rounded = 64;
    /* First fit among the current block and those after it. */
    for (uform_arena_block_t *block = list->current; block; block = block->next) {
        if (block->capacity - block->used >= rounded) {
            void *pointer = block->data + block->used;
            block->used += rounded;
            list->current = block;
            return pointer;
        }
    }
    size_t capacity = rounded > UFORM_ARENA_MIN_BLOCK ? rounded : UFORM_ARENA_MIN_BLOCK;
    uform_arena_block_t *block = uform_arena_block_new(arena, device, capacity, what);
    if (!block) return NULL;
    block->used = rounded;
    /* Append after the last block so earlier pieces stay where they are. */
    uform_arena_block_t **link = &list->first;
    while (*link) link = &(*link)->next;
    *link = block;
    list->current = block;
    arena->capacity += capacity + (device ? 0 : UFORM_ARENA_HEADER);
    return block->data;
}

void *uform_arena_take(uform_arena_t *arena, size_t bytes, const char *what) {
    return uform_arena_list_take(arena, &arena->host, bytes, what);
}

void *uform_arena_take_rows(uform_arena_t *arena, size_t bytes, const char *what) {
    if (!arena->on_device) return uform_arena_take(arena, bytes, what);
    return uform_arena_list_take(arena, &arena->rows, bytes, what);
}
