/* encode_batches.h: what every encode verb (text, image, video, audio)
 * shares: the check of a tape and of the encode options, and an encoder that
 * packs items, in order and without padding, into forward batches, runs the
 * blocks and writes the embeddings and token rows into the arena.
 *
 * A verb turns each item into token rows (modality vector added) and calls
 * uform_encoder_add for it; the encoder runs a batch whenever the next item
 * does not fit, and at uform_encoder_finish. Outputs do not depend on how the
 * items fell into batches (the kernels' determinism contract), so an item
 * encoded alone equals the same item inside any batch, bit for bit. */
#ifndef UFORM_ENCODE_BATCHES_H
#define UFORM_ENCODE_BATCHES_H

#include "encode/batch_indices.h"
#include "model/model.h"

#include <pthread.h>

/* INVALID_ARGUMENT naming `name` unless the tape is non-empty, its offsets
 * non-decreasing and inside its data. */
UFORM_INTERNAL uform_status_t uform_check_tape(const uform_tape_t *tape, const char *name);

/* Rows per forward batch: enough for efficient GEMMs, bounded so scratch stays
 * near the backend's forward_batch_bytes at any width (16 MiB on a CPU, 1 GiB
 * on a GPU). Not floored at the context (a model of context 2^24
 * would size every call for it): an item longer than a batch is a batch of
 * its own, the buffers grown for it. */
UFORM_INTERNAL size_t uform_batch_rows(const uform_model_t *model);

/* Checks the encode options against the model: *outputs (0 derives
 * EMBEDDINGS) and *scalar as the call will use them. */
UFORM_INTERNAL uform_status_t uform_check_encode_options(const uform_model_t *model,
                                                         const uform_encode_options_t *options,
                                                         uint32_t *outputs, uform_scalar_t *scalar);

/* One device's part of a call: the model's copy there, its backend, the
 * buffers in its memory and the batch it holds. A model on one device (every
 * RAM model, a VRAM model on one GPU) gives a call one lane, run on the
 * calling thread; a model on several GPUs gives a lane per GPU, each batch
 * run on a thread of its own while the caller packs the next lane's. */
typedef struct {
    struct uform_encoder *encoder; /* the call it is part of (for its thread) */
    const uform_model_t *model;   /* the copy on this lane's device */
    uform_backend_t backend;      /* buffers marked "backend" are in its memory */
    size_t max_rows;              /* rows the buffers below hold */
    float *states;                /* backend [max_rows, H]: token rows, then final normed states */
    void *scratch;                /* backend: the forward's */
    /* segments [max_items], positions [max_rows][3] and byte ids [max_rows]
     * (UFORM_NOT_TEXT for media rows) */
    uform_batch_indices_t indices;
    float *inputs;                /* backend: media inputs, on a device backend */
    size_t inputs_bytes;
    float *pooled;                /* backend [max_items, H] */
    float *projected;             /* backend [max(max_items, max_rows), max(D, W)] */

    /* the batch: items [first, first + items) of the call, `rows` token rows */
    size_t first, items, rows, longest;
    uint8_t *tokens_destination;  /* where its token rows go (host) */
    /* A threaded lane's media inputs [rows, width], staged on the host while
     * the caller packs, projected when the batch runs (its device is the
     * lane thread's then). */
    const uform_media_part_t *part;
    float *staged_inputs;
    size_t staged_rows, staged_capacity;

    /* the thread running its batch, and what it answered */
    pthread_t thread;
    bool running;
    uform_status_t status;
    char message[512];
} uform_encoder_lane_t;

typedef struct uform_encoder {
    const uform_model_t *model;
    uform_executor_t *executor;
    uint32_t outputs;
    uform_encoded_t *encoded;
    uform_arena_t *arena;
    size_t count;                 /* items of the call */
    size_t added;                 /* items added so far */
    size_t finished;              /* items whose outputs are written */
    uform_progress_state_t progress;

    size_t max_rows, max_items;   /* budgets of one batch */
    size_t lane_count;            /* the model's replicas */
    bool threaded;                /* lane_count > 1: batches run on lane threads */
    uform_encoder_lane_t *lanes;
    size_t open;                  /* the lane whose batch is being packed */

    /* Token rows: straight into the arena when the call's total is known at
     * begin; otherwise staged here and copied into the arena at finish. */
    bool tokens_known;
    uint8_t *staged;
    size_t staged_bytes;
} uform_encoder_t;

/* Starts a call of `count` items (count >= 1). rows_bound bounds the call's
 * total token rows (it sizes the scratch of a call smaller than one batch);
 * rows_exact says it is the exact total, so token rows can go straight into
 * the arena. Rewinds the arena: the previous call's outputs end here. */
UFORM_INTERNAL uform_status_t uform_encoder_begin(uform_encoder_t *encoder, const uform_model_t *model,
                                                  uform_executor_t *executor,
                                                  const uform_encode_options_t *options,
                                                  uint32_t outputs, uform_scalar_t scalar,
                                                  uform_arena_t *arena, uform_encoded_t *encoded,
                                                  size_t count, size_t rows_bound, bool rows_exact);

/* Adds the next item: `rows` token rows (at most context) with `axes`
 * position axes. Runs the open batch first when the item does not fit.
 * *x receives where a media item's rows [rows, H] go (the backend's memory:
 * uform_encoder_embed writes them), *ids where a text item writes its byte
 * ids [rows] instead (host; the batch's embedding lookup fills its rows; they
 * start as UFORM_NOT_TEXT) and *positions their positions [rows][3] (host;
 * unused axes 0), all valid until the next call.
 * Fails with UFORM_CANCELLED when the progress handler asks. */
UFORM_INTERNAL uform_status_t uform_encoder_add(uform_encoder_t *encoder, size_t rows, size_t axes,
                                                float **x, uint32_t **ids,
                                                uint32_t **positions);

/* Writes a media item's rows x [rows, H] (from uform_encoder_add) = its
 * inputs [rows, part->width] (host memory) projected, plus the modality. */
UFORM_INTERNAL uform_status_t uform_encoder_embed(uform_encoder_t *encoder,
                                                  const uform_media_part_t *part,
                                                  const float *inputs, size_t rows, float *x);

/* Runs the last batch and completes *encoded. */
UFORM_INTERNAL uform_status_t uform_encoder_finish(uform_encoder_t *encoder);

/* Frees the scratch (after finish, or instead of it on failure). */
UFORM_INTERNAL void uform_encoder_free(uform_encoder_t *encoder);

#endif /* UFORM_ENCODE_BATCHES_H */
