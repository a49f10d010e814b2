/* trainer_internal.h: the trainer's private state and the functions its files share.
 *
 * The trainer (docs/training.md) is split by what each file holds:
 *   trainer.c      configuration, the parameter layout and initialisation, tensors
 *   checkpoint.c   save and resume
 *   workspace.c    the activations a step keeps, measured and pointed from one list
 *   step_items.c   a step's items: checks, relations, replicas, media tokens
 *   step_layers.c  the encoder's forward and backward in training, heads, choices
 *   late_step.c    the late-interaction term: its rows gathered, its loss and gradients
 *   step.c         one optimizer step
 *   step_world.c   a mesh step's world: gathers and sums across hosts
 *   gradient_sum.c a mesh step's gradient sum, bucket by bucket during the backward
 * Nothing outside c/src/train/ includes this header. */
#ifndef UFORM_TRAINER_INTERNAL_H
#define UFORM_TRAINER_INTERNAL_H

#include "backend/cpu/cpu_backend.h"
#include "media/media_tokens.h"
#include "train/media_objectives.h"
#include "train/media_rows.h"
#include "model/model.h"
#include "train/objectives.h"
#include "train/optimizer.h"
#include "train/packing.h"
#include "train/mesh.h"
#include "core/safetensors.h"
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- parameters ---------------------------------------------------------- */

typedef struct {
    char name[64];
    size_t offset, rows, cols;  /* cols 0: a vector of `rows` */
    bool decay;                 /* AdamW weight decay (matrices but the byte table) */
    bool f32;                   /* saved as F32 (else BF16) */
} uform_slot_t;

/* One media modality of the run: slots of its parameters (0 width: absent). */
typedef struct {
    size_t width;                 /* values per token: P*P*3, T*P*P*3 or S */
    size_t modality, projection, projection_bias, mask, head, head_bias;
    float mask_ratio, weight;
} uform_trainer_media_t;

typedef struct {
    size_t norm1_weight, norm1_bias, qkv_weight, qkv_bias, out_weight, out_bias;
    size_t norm2_weight, norm2_bias, up_weight, up_bias, down_weight, down_bias;
} uform_block_slots_t;

struct uform_trainer {
    uform_executor_t *executor;
    uform_backend_t backend;           /* what the step's math runs on: the CPU's, or a device's
                                          (uform_trainer_init_on_device) whose memory holds the
                                          flat buffers and the workspaces */
    size_t depth, hidden, heads, dimensions, context;
    uform_objective_t objective;
    bool masks_text, contrasts;
    bool byte_head;                    /* masked text or choices */
    bool late, chooses;                /* late interaction / choices configured */
    uform_late_interaction_t late_config;   /* resolved: no zero fields */
    float choices_weight;
    size_t choice_groups, max_choices;
    uform_masking_t masking;
    uform_contrastive_config_t contrastive;
    size_t widths[64];
    uform_schedule_t schedule;
    uform_packing_limits_t limits;
    uint64_t seed, step;
    size_t truncated, dropped;         /* since the last stats read */

    uform_slot_t *slots;
    size_t slots_count, count;         /* tensors; floats in each flat buffer */
    float *parameters, *gradients, *first_moment, *second_moment;
    uint8_t *decay;
    uform_block_slots_t *blocks;
    /* The blocks as transformer.c sees them: views into parameters and gradients. */
    uform_block_weights_t *block_weights;
    uform_block_gradients_t *block_gradients;
    uform_transformer_t transformer;
    size_t bytes_table, modality, norm_weight, norm_bias, embedding_head, bytes_bias;
    size_t log_inverse_temperature, contrastive_bias;
    size_t token_head, late_log_inverse_temperature, late_bias, choice_log_temperature;
    uform_trainer_media_t media[4];    /* by uform_modality_t; [TEXT] unused */
    uform_model_t geometry;            /* context and media shapes, for the tokenizers */
    /* Workspaces kept across steps, one per replica: a step allocates (and the
     * kernel zero-fills pages) only when it needs more than any step before. */
    struct uform_workspace_store *workspaces;
    size_t workspaces_count;
    /* Set while a call uses the trainer: a trainer is used by one thread at a
     * time (DESIGN section 3), and a second concurrent call is refused. */
    atomic_flag busy;
    uform_mesh_t *mesh;                /* NULL: this process alone (step_world.c) */
    /* On a mesh, a device trainer's gradients pass through host memory to be
     * summed (gradient_sum.c): [count] floats, taken at the first step. */
    float *mesh_gradients;
    /* On a mesh: the thread and buckets that sum the gradients while the
     * backward runs (gradient_sum.c); made at the first step, NULL before. */
    struct uform_gradient_sum *gradient_sum;
    /* The last step's late-interaction rows: gathered over the world (the
     * rows the term reads), and all the world's rows (late_step.c). */
    size_t late_rows_gathered, late_rows_of_world;
    /* Several GPUs: this handle holds a replica per GPU, each a one-GPU
     * trainer, and every verb goes to them (replica_group.c); then nothing
     * above but executor and busy is set. NULL otherwise. */
    struct uform_replica_group *group;
};


/* ---- step workspace --------------------------------------------------------- */

/* The buffers of one replica's workspace, kept by the trainer across steps:
 * the activations (backend memory), the layer records pointing into them and,
 * on a device, the host side of the index arrays (host memory). */
typedef struct uform_workspace_store {
    void *block;
    size_t bytes;
    uform_layer_activations_t *layers;   /* [depth] */
    void *host;
    size_t host_bytes;
} uform_workspace_store_t;

/* A replica's step buffers. The index arrays (ids, targets, selected_rows,
 * segments, positions) are written by the host into host_*, the same memory
 * on a host-memory backend, else uploaded by uform_workspace_upload. */
typedef struct {
    size_t rows, items, selected;
    uint32_t *host_ids, *host_targets, *host_positions;
    size_t *host_selected_rows;
    uform_segment_t *host_segments;
    uint32_t *ids;            /* [rows] token ids after corruption */
    uint32_t *targets;        /* [selected] original bytes */
    size_t *selected_rows;    /* [selected] */
    uform_segment_t *segments; /* [items] */
    uint32_t *positions;      /* [rows][3] */
    float *cosines, *sines;   /* [rows][32] */
    uform_layer_activations_t *layers; /* [depth] */
    float *output, *final_mean, *final_rstd, *states; /* x after the blocks, final norm */
    float *pooled, *projected, *norms, *embeddings;   /* [items, H], [items, D] x3 */
    float *logits, *losses;   /* [selected, 256], [selected] */
    /* backward */
    float *d_states, *d_x, *d_middle, *d_normed, *d_wide, *d_wide2, *d_attended, *d_qkv;
    float *d_pooled, *d_projected, *d_embeddings, *d_logits, *scale;
    void *block;              /* everything above: one block the trainer keeps across steps */
} uform_workspace_t;


/* One replica's share of a step: a contiguous range of the step's items. */
typedef struct {
    size_t first, last;        /* items [first, last) of the step */
    size_t world_first;        /* its first kept item in the world's order */
    size_t world_row_first;    /* its first row among the world's rows */
    size_t items, rows, selected;
    uform_workspace_t w;
} uform_replica_t;

/* Relations over the kept items: edges touching a dropped item go. */
typedef struct {
    size_t *offsets;
    uint32_t *ids;
    float *weights;
} uform_edges_storage_t;

/* A step's world: the items of every host of the mesh (step_world.c). Without
 * a mesh it is this process: bases 0, totals the local ones. */
typedef struct {
    uform_mesh_t *mesh;
    uform_backend_t *backend;       /* the trainer's: where gathered vectors live */
    size_t hosts, host;
    size_t item_base, world_count;  /* given items: this host's first, and all hosts' */
    size_t items;                   /* this host's kept items */
    size_t kept_base, world_items;  /* kept items */
    size_t row_base, world_rows;    /* rows of kept items */
    size_t selected, media_masked[4], choice_items;   /* world totals */
    size_t *counts_of, *items_of, *edges_of; /* [hosts] each */
    size_t *world_index;            /* [world_count]: world kept index, or SIZE_MAX */
    /* A failure this host's peers heard of in an agreement (uform_world_end:
     * any other failure of its own leaves the mesh) */
    bool failure_agreed;
} uform_world_t;

/* ---- shared functions (defined in the file named above each group) ------------- */

/* host_state.c: the flat buffers from the host. */
/* Whether the trainer's backend memory is host memory (the CPU backend). */
UFORM_INTERNAL bool uform_trainer_on_host(const uform_trainer_t *t);
/* Bytes between the host and the trainer's backend memory, waited for. */
UFORM_INTERNAL uform_status_t uform_trainer_read(uform_trainer_t *t, void *host, const void *device,
                                                 size_t bytes);
UFORM_INTERNAL uform_status_t uform_trainer_write(uform_trainer_t *t, void *device, const void *host,
                                                  size_t bytes);
/* Parameters, moments and decay flags the host can read and write: the
 * buffers themselves on host memory, else copies (read: filled from the
 * device; commit: written back). */
typedef struct {
    float *parameters, *first_moment, *second_moment;
    uint8_t *decay;
    bool copies;
} uform_host_state_t;
UFORM_INTERNAL uform_status_t uform_host_state_open(uform_trainer_t *t, uform_host_state_t *h, bool read);
UFORM_INTERNAL uform_status_t uform_host_state_commit(uform_trainer_t *t, const uform_host_state_t *h);
UFORM_INTERNAL void uform_host_state_close(uform_host_state_t *h);

/* trainer.c */
UFORM_INTERNAL uform_status_t uform_trainer_enter(const uform_trainer_t *t, const char *what);
/* step and save with the trainer entered (and for the step, the arena taken
 * already when arena_held): what the blocking calls and their submitted jobs
 * (submit.c) run. */
UFORM_INTERNAL uform_status_t uform_trainer_step_held(uform_trainer_t *t,
                                                      const uform_trainer_batch_t *batch,
                                                      uform_arena_t *arena, bool arena_held,
                                                      uform_scalar_t outputs_scalar,
                                                      uform_encoded_t *embeddings_out,
                                                      uform_trainer_step_stats_t *stats);
UFORM_INTERNAL uform_status_t uform_trainer_save_held(uform_trainer_t *t, const char *path,
                                                      const uform_progress_t *progress);
UFORM_INTERNAL void uform_trainer_leave(const uform_trainer_t *t);
/* step.c: a step of a one-backend trainer whose caller tokenized the batch's
 * media (tokens: one per item, kept by the caller; NULL for text only), or
 * refused the batch (refused not OK, its message this thread's error: the
 * step fails with it at its first agreement, with its mesh's hosts). */
UFORM_INTERNAL uform_status_t uform_trainer_step_tokens(uform_trainer_t *t, const uform_trainer_batch_t *batch,
                                                        uform_media_tokens_t *tokens, uform_status_t refused,
                                                        uform_arena_t *arena,
                                                        bool arena_held, uform_scalar_t outputs_scalar,
                                                        uform_encoded_t *embeddings_out,
                                                        uform_trainer_step_stats_t *stats);
UFORM_INTERNAL uform_status_t uform_trainer_tensor_held(const uform_trainer_t *t, const char *name,
                                                        uint32_t which, float *values, size_t *count);

/* replica_group.c: the verbs of a trainer over several GPUs. */
typedef struct uform_replica_group uform_replica_group_t;
UFORM_INTERNAL uform_status_t uform_group_step(uform_trainer_t *t, const uform_trainer_batch_t *batch,
                                               uform_arena_t *arena, bool arena_held,
                                               uform_scalar_t outputs_scalar, uform_encoded_t *embeddings_out,
                                               uform_trainer_step_stats_t *stats);
UFORM_INTERNAL uform_status_t uform_group_save(uform_trainer_t *t, const char *path,
                                               const uform_progress_t *progress);
UFORM_INTERNAL uform_status_t uform_group_tensor(const uform_trainer_t *t, const char *name, uint32_t which,
                                                 float *values, size_t *count);
UFORM_INTERNAL void uform_group_free(uform_replica_group_t *group);
/* Hold and let go of the trainer's backend around a call's work, on the thread
 * that does it (nothing on the CPU backend). */
UFORM_INTERNAL void uform_trainer_hold(uform_trainer_t *t);
UFORM_INTERNAL void uform_trainer_unhold(uform_trainer_t *t);
UFORM_INTERNAL const uform_slot_t *uform_slot_at(const uform_trainer_t *t, size_t i);

/* checkpoint.c */
/* Writes the checkpoint (atomically), whatever the mesh. */
UFORM_INTERNAL uform_status_t uform_checkpoint_write(uform_trainer_t *t, const char *path,
                                                     const uform_progress_t *progress);
/* Reads and checks the run's state into h (the host side of the flat
 * buffers); progress hears the floats read. */
UFORM_INTERNAL uform_status_t uform_resume(uform_trainer_t *t, const uform_host_state_t *h,
                                           const char *path, uint64_t given_seed,
                                           const uform_progress_t *progress);
UFORM_INTERNAL uform_status_t uform_resume_peek(const char *path, uform_trainer_options_t *o);

/* workspace.c */
UFORM_INTERNAL uform_status_t uform_workspace_init(uform_workspace_t *w, uform_trainer_t *t,
                                                   size_t replica, size_t rows, size_t items,
                                                   size_t selected);
/* The index arrays the host wrote, to the backend (nothing on host memory). */
UFORM_INTERNAL void uform_workspace_upload(uform_trainer_t *t, uform_workspace_t *w);
UFORM_INTERNAL void uform_workspace_release(uform_trainer_t *t, size_t replica);

/* step_items.c */
/* Anchors are this host's items (index: their kept index); candidates are
 * world items (candidates: their world kept index). */
UFORM_INTERNAL uform_status_t uform_remap_edges(const uform_edges_t *given, size_t count,
                                                const size_t *index, const size_t *candidates,
                                                size_t kept_count,
                                                uform_edges_storage_t *storage, uform_edges_t *out);
/* Edge ids must be below world_count (the items of every host). */
UFORM_INTERNAL uform_status_t uform_check_step_batch(const uform_trainer_t *t,
                                                     const uform_trainer_batch_t *b,
                                                     size_t world_count);
/* The arena a step answers its embeddings in, when asked for: a host arena. */
UFORM_INTERNAL uform_status_t uform_check_step_arena(const uform_arena_t *arena, bool embeddings);
UFORM_INTERNAL void uform_split_by_tokens(const size_t *lengths, size_t count, size_t columns,
                                          uform_replica_t *replica, size_t replicas);
UFORM_INTERNAL void uform_replica_layout(const uform_trainer_batch_t *batch, const size_t *kept,
                                         const uint32_t *ids, const uint8_t *chosen,
                                         size_t row_base, const uform_media_tokens_t *tokens,
                                         uform_replica_t *replica);
UFORM_INTERNAL bool uform_has_choices(const uform_trainer_batch_t *batch, size_t i);
/* Each item's rows before truncation: its bytes (and MASK after a question
 * with choices), or its media tokens. */
UFORM_INTERNAL void uform_item_lengths(const uform_trainer_batch_t *batch, const uform_media_tokens_t *tokens,
                                       size_t *lengths);
/* Item i's number of choices, where its bytes and its targets start (one
 * entry per item, or one shared by all: step_items.c). */
UFORM_INTERNAL size_t uform_item_choices(const uform_trainer_batch_t *batch, size_t i, size_t *bytes,
                                         size_t *targets);
UFORM_INTERNAL void uform_tokens_free(uform_media_tokens_t *tokens, size_t count);
UFORM_INTERNAL uform_status_t uform_replica_media(const uform_trainer_t *t,
                                                  const uform_trainer_batch_t *batch,
                                                  const uform_replica_t *rep, const size_t *kept,
                                                  const size_t *first_row, const uint8_t *masked,
                                                  const uform_media_tokens_t *tokens, size_t m,
                                                  uform_media_rows_t *rows);
UFORM_INTERNAL uform_status_t uform_tokenize_media(const uform_trainer_t *t,
                                                   const uform_trainer_batch_t *b,
                                                   uform_media_tokens_t **out);

/* late_step.c: the late-interaction term over the world's items (gathered on
 * a mesh), its gradients into each replica's d_states. */
UFORM_INTERNAL uform_status_t uform_late_step(uform_trainer_t *t,
                                              const uform_trainer_batch_t *batch,
                                              uform_replica_t *replica, size_t replicas,
                                              const size_t *kept, const size_t *index,
                                              const size_t *first_row, uform_world_t *world,
                                              const uint32_t *bags,
                                              const uform_relations_t *relations, float *loss);

/* trainer_mesh.c: collective; status is this host's init so far (every host
 * fails when one did, or when their trainers differ, naming the field). */
UFORM_INTERNAL uform_status_t uform_trainer_join_mesh(uform_trainer_t *t, uform_mesh_t *mesh,
                                                      uform_status_t status);
UFORM_INTERNAL uform_status_t uform_trainer_save_on_mesh(uform_trainer_t *t, const char *path,
                                                         const uform_progress_t *progress);

/* step_world.c: collective on a mesh (every host calls each in the same order),
 * the identity without one. */
UFORM_INTERNAL uform_status_t uform_world_begin(uform_trainer_t *t, const uform_trainer_batch_t *batch,
                                                uform_world_t *w);
UFORM_INTERNAL uform_status_t uform_world_agree(uform_world_t *w, uform_status_t status, uint64_t step);
UFORM_INTERNAL uform_status_t uform_world_summary(uform_world_t *w, const size_t *index, size_t count,
                                                  size_t items, size_t rows, size_t selected,
                                                  const size_t *media_masked, size_t choice_items);
/* The world kept index of each world item (the edges' candidates). */
UFORM_INTERNAL const size_t *uform_world_candidates(const uform_world_t *w, const size_t *index);
/* Per kept item, in host memory. */
UFORM_INTERNAL uform_status_t uform_world_gather_items(uform_world_t *w, const void *local,
                                                       size_t item_bytes, void *out);
/* Per kept item (embeddings) and per row (token vectors), in the backend's
 * memory: on a device they pass through host memory, as the engine is Gloo. */
UFORM_INTERNAL uform_status_t uform_world_gather_item_vectors(uform_world_t *w, const void *local,
                                                              size_t item_bytes, void *out);
/* Each host's count of rows to gather (rows_of[hosts]; this host gives
 * `rows`) and where this host's start among them. Then the gather of those
 * rows, in host order (without a mesh: a copy). */
UFORM_INTERNAL uform_status_t uform_world_count_rows(uform_world_t *w, size_t rows, size_t *rows_of,
                                                     size_t *first);
UFORM_INTERNAL uform_status_t uform_world_gather_rows(uform_world_t *w, const void *local,
                                                      const size_t *rows_of, size_t row_bytes, void *out);
UFORM_INTERNAL uform_status_t uform_world_gather_relations(uform_world_t *w,
                                                           const uform_relations_t *local,
                                                           uform_edges_storage_t *storage,
                                                           uform_relations_t *out);
UFORM_INTERNAL uform_status_t uform_world_sum_doubles(uform_world_t *w, double *values, size_t count);
UFORM_INTERNAL void uform_world_free(uform_world_t *w);
/* The step's end on this host: a failure of its own (memory, device) that its
 * peers did not hear of in an agreement abandons the mesh (mesh.h: the peers,
 * in a collective or on their way to the next, fail at once naming this host)
 * instead of leaving them to time out. Then uform_world_free. */
UFORM_INTERNAL void uform_world_end(uform_world_t *w, uform_status_t status);

/* gradient_sum.c: a mesh step's gradient sum in buckets, overlapping the
 * backward. */
typedef struct uform_gradient_sum uform_gradient_sum_t;
/* Before the backward, on a mesh. On failure this host has left the mesh. */
UFORM_INTERNAL uform_status_t uform_gradient_sum_begin(uform_trainer_t *t, uform_world_t *w);
/* uform_backward_hook_t's block_done, its context the trainer. */
UFORM_INTERNAL void uform_gradient_sum_block_done(void *trainer, size_t layer);
/* After the backward: posts the buckets not posted yet and waits for all;
 * the gradients are then the world's sum (uploaded, on a device). Answers
 * this host's own failure during the sums (its device), else the sums'. */
UFORM_INTERNAL uform_status_t uform_gradient_sum_finish(uform_trainer_t *t, const uform_world_t *w);
UFORM_INTERNAL void uform_gradient_sum_free(uform_gradient_sum_t *s);

/* step_layers.c */
UFORM_INTERNAL uform_media_parameters_t uform_media_parameters(const uform_trainer_t *t, size_t m);
UFORM_INTERNAL uform_status_t uform_forward_train(uform_trainer_t *t, uform_workspace_t *w,
                                                  const uform_media_rows_t *media);
UFORM_INTERNAL void uform_embed_backward(uform_trainer_t *t, uform_workspace_t *w);
UFORM_INTERNAL void uform_backward_train(uform_trainer_t *t, uform_workspace_t *w,
                                         const uform_backward_hook_t *hook);
UFORM_INTERNAL void uform_embed(uform_trainer_t *t, uform_workspace_t *w);
UFORM_INTERNAL float uform_masked_text(uform_trainer_t *t, uform_workspace_t *w, float weight,
                                       size_t world_selected);
UFORM_INTERNAL uform_status_t uform_replica_choices(uform_trainer_t *t,
                                                    const uform_trainer_batch_t *batch,
                                                    uform_replica_t *rep, const size_t *kept,
                                                    const size_t *first_row, float scale,
                                                    double *loss_sum);

#endif /* UFORM_TRAINER_INTERNAL_H */
