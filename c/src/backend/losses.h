/* losses.h: the inputs of the backend's loss operations (backend.h:
 * contrastive_loss, late_interaction_loss, choices_loss) and the checks every
 * backend runs on them before computing (loss_checks.c), written once. The
 * math of each loss is docs/training.md sections 3, 9 and 10. */
#ifndef UFORM_BACKEND_LOSSES_H
#define UFORM_BACKEND_LOSSES_H

#include "core/internal.h"

/* ---- the contrastive term (section 3) ---------------------------------------- */

#define UFORM_MATRYOSHKA_WIDTHS_MAX 64

/* The items of one step's world, as the loss sees them. */
typedef struct {
    size_t count;                       /* N items in the world */
    size_t dimensions;                  /* D */
    const float *embeddings;            /* [N, D], unit rows (or zero rows for empty items) */
    const uint32_t *bags;               /* NULL: no bag positives; equal ids share a bag */
    const uint32_t *groups;             /* NULL: all group 0; else each < config->groups */
    const uform_relations_t *relations; /* NULL: none; CSR over the N items */
} uform_contrastive_batch_t;

/* A resolved configuration (uform_contrastive_resolve): no zero fields. */
typedef struct {
    const size_t *widths;               /* Matryoshka prefix widths, each in [1, D], distinct */
    size_t widths_count;                /* 1 .. UFORM_MATRYOSHKA_WIDTHS_MAX */
    uform_negatives_t negatives;        /* AMBIENT or NAMED */
    float ambient_repulsion_weight;     /* finite, >= 0 */
    uform_pair_loss_form_t pair_loss;   /* BALANCED, RANKED or SIGMOID */
    size_t groups;                      /* G >= 1 */
} uform_contrastive_config_t;

/* ---- late interaction (section 9) ------------------------------------------- */

typedef struct {
    size_t count;                    /* N items of the world */
    size_t width;                    /* W scalars per token vector */
    const float *vectors;            /* unit token vectors, rows of W */
    const size_t *first;             /* [N] each item's first row in vectors */
    const size_t *query_rows;        /* [N] query tokens (the item's first rows); 0: not a query */
    const size_t *document_rows;     /* [N] rows as a document; 0: not a document */
    const uint32_t *bags;            /* NULL: no bag positives */
    const uform_relations_t *relations; /* NULL: none */
} uform_late_batch_t;

/* ---- calibrated choices (section 10) ---------------------------------------- */

typedef struct {
    size_t count;              /* items with choices */
    size_t hidden;             /* H */
    const float *states;       /* [count, H]: the final state at each item's MASK row */
    const uint8_t *bytes;      /* the choice bytes of every item, back to back */
    const float *targets;      /* one target per choice byte, aligned with bytes */
    const size_t *offsets;     /* [count + 1]: item c's choices are bytes[offsets[c] .. offsets[c+1]) */
    const uint32_t *groups;    /* [count] temperature group of each item */
} uform_choices_batch_t;

/* ---- checks (loss_checks.c) ------------------------------------------------- */

/* One edge set over `count` items: offsets non-decreasing from 0, ids below
 * count, no edge given twice, weights finite and non-negative. seen: count
 * zeroed bytes, left zeroed. */
UFORM_INTERNAL uform_status_t uform_check_edges(const uform_edges_t *edges, size_t count, uint8_t *seen,
                                                const char *name);
/* The three edge sets of relations over `count` items (NULL: none), each by
 * uform_check_edges. */
UFORM_INTERNAL uform_status_t uform_check_relations(const uform_relations_t *relations, size_t count);
/* Everything uform_contrastive checks before it computes (nothing is written
 * on failure). */
UFORM_INTERNAL uform_status_t uform_contrastive_check(const uform_contrastive_config_t *config,
                                                      const uform_contrastive_batch_t *batch,
                                                      const float *log_inverse_temperature,
                                                      const float *bias, const float *loss);
/* The same, the embeddings' finiteness scanned only when scan_embeddings (a
 * device backend scans its device memory itself, before writing anything). */
UFORM_INTERNAL uform_status_t uform_contrastive_check_parts(const uform_contrastive_config_t *config,
                                                            const uform_contrastive_batch_t *batch,
                                                            const float *log_inverse_temperature,
                                                            const float *bias, const float *loss,
                                                            bool scan_embeddings);

#endif /* UFORM_BACKEND_LOSSES_H */
