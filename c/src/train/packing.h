/* packing.h: first-fit packing of a step's items into rows (DESIGN section 6). */
#ifndef UFORM_PACKING_H
#define UFORM_PACKING_H

#include "core/internal.h"

typedef struct {
    size_t rows, columns, segments;   /* capacities: max rows, tokens per row, items */
    size_t bags;                      /* distinct bags per device */
} uform_packing_limits_t;

/* Places items of the given token lengths, in order, first-fit into at most
 * limits->rows rows of limits->columns tokens: an item longer than a row is
 * cut to it (kept[i] = the kept length; *truncated += 1 once it is placed); an
 * item with no room, or whose bag (bags may be NULL) would be one more than
 * limits->bags distinct bags,
 * or past the segment limit, is dropped whole (kept[i] = SIZE_MAX, *dropped += 1).
 * row[i] is the row an item went to. */
UFORM_INTERNAL void uform_pack_items(const size_t *lengths, const uint32_t *bags, size_t count,
                                     const uform_packing_limits_t *limits, size_t *kept,
                                     size_t *row, size_t *truncated, size_t *dropped,
                                     size_t *row_used /* scratch: limits->rows */,
                                     uint32_t *bags_seen /* scratch: min(count, limits->bags) */);

#endif /* UFORM_PACKING_H */
