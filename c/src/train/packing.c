/* packing.c: first-fit packing. Rows only bound what a step carries on the
 * CPU (the forward runs over one flat matrix of every kept token); the GPU
 * backend lays rows out as they are placed here. */
#include "train/packing.h"

void uform_pack_items(const size_t *lengths, const uint32_t *bags, size_t count,
                      const uform_packing_limits_t *limits, size_t *kept, size_t *row,
                      size_t *truncated, size_t *dropped, size_t *row_used, uint32_t *bags_seen) {
    size_t rows_open = 0, segments = 0, bags_open = 0;
    for (size_t i = 0; i < count; i++) {
        size_t length = lengths[i] < limits->columns ? lengths[i] : limits->columns;
        kept[i] = SIZE_MAX;
        row[i] = SIZE_MAX;
        if (segments == limits->segments) {
            (*dropped)++;
            continue;
        }
        bool new_bag = false;
        if (bags) {
            new_bag = true;
            for (size_t b = 0; b < bags_open && new_bag; b++) new_bag = bags_seen[b] != bags[i];
            if (new_bag && bags_open == limits->bags) {
                (*dropped)++;
                continue;
            }
        }
        size_t r = 0;
        while (r < rows_open && limits->columns - row_used[r] < length) r++;
        if (r == rows_open) {
            if (rows_open == limits->rows) {
                (*dropped)++;
                continue;
            }
            row_used[rows_open++] = 0;
        }
        if (new_bag) bags_seen[bags_open++] = bags[i];
        row_used[r] += length;
        kept[i] = length;
        row[i] = r;
        segments++;
        if (lengths[i] > limits->columns) (*truncated)++;
    }
}
