/* model.h: a loaded model's parts and the forward pass over packed items. */
#ifndef UFORM_MODEL_H
#define UFORM_MODEL_H

#include "core/output_scalars.h"   /* uform_output_row_bytes */
#include "core/internal.h"
#include "core/safetensors.h"
#include "model/transformer.h"

/* Weights of one pre-norm transformer block. Vectors are FP32, matrices packed
 * by the model's backend; all of it in the backend's memory. */
typedef struct {
    float *attention_norm_weight, *attention_norm_bias; /* [H] */
    uform_packed_t qkv;                                 /* [3H, H] */
    float *qkv_bias;                                    /* [3H] */
    uform_packed_t out;                                 /* [H, H] */
    float *out_bias;                                    /* [H] */
    float *mlp_norm_weight, *mlp_norm_bias;             /* [H] */
    uform_packed_t up;                                  /* [4H, H] */
    float *up_bias;                                     /* [4H] */
    uform_packed_t down;                                /* [H, 4H] */
    float *down_bias;                                   /* [H] */
} uform_block_t;

/* One media modality's input parts (DESIGN section 5, docs/media.md): a
 * token's `width` input values (a patch, a tube patch or a chunk) are
 * projected to H and the modality vector added. width 0: the checkpoint has
 * no such parts. */
typedef struct {
    size_t width;                     /* P*P*3, T*P*P*3 or S; 0 when absent */
    uform_packed_t projection;        /* [H, width] */
    float *bias;                      /* [H] */
    float *modality;                  /* [H] */
} uform_media_part_t;

struct uform_model {
    size_t depth, hidden, heads;
    size_t dimensions, context, token_width, choice_temperature_groups;
    uint64_t step;                    /* the training step the checkpoint was saved at */

    uform_cpu_class_t cpu_class;      /* a RAM model's class, resolved (never AUTO) */
    uform_scalar_t quantization;
    uform_executor_t *executor;       /* runs verbs given no executor */
    bool owns_executor;

    /* A model on a device (VRAM, or a test's device-like backend): the
     * backend whose memory holds every buffer below, and its class. ops is
     * NULL for a RAM model, whose buffers are host memory and whose backend
     * is its CPU class on the calling executor (uform_model_backend). */
    uform_backend_t device;
    uform_gpu_class_t gpu_class;      /* NONE for a RAM model */
    uint32_t gpu_device;              /* the GPU a VRAM model's replica is on */

    float *text_bytes;                /* [257, H]: 256 bytes, then MASK; NULL without text */
    float *text_modality;             /* [H] */

    /* Media parts and the shapes of the checkpoint's "image"/"video"/"audio"
     * metadata objects, zeros derived at load (docs/media.md). */
    uform_media_part_t image, video, audio;
    size_t image_patch_side;
    size_t video_patch_side, video_tube_frames, video_frame_stride;
    size_t audio_chunk_samples, audio_sample_rate;
    uform_block_t *blocks;            /* [depth] */
    uform_block_weights_t *block_weights; /* [depth]: views of blocks for the backend */
    uform_transformer_t transformer;  /* the blocks and final norm as transformer.c runs them */
    float *norm_weight, *norm_bias;   /* [H] */
    uform_packed_t embedding_head;    /* [D, H] */
    uform_packed_t token_head;        /* [W, H]; n == 0 without a token head */
    float *bytes_bias;                /* [256] or NULL without a byte head */
    float *choice_log_temperature;    /* [G] or NULL */

    size_t memory_usage;              /* bytes of every buffer above */

    /* A model on several devices (Model.load_vram listing more than one GPU):
     * a whole copy on each, the verbs spreading their batches over them
     * (encode_batches.c). replicas[0] is this model, the others are owned by
     * it; replica_count 1 and replicas NULL for a model on one device or RAM. */
    size_t replica_count;
    struct uform_model **replicas;
};

/* Replica i of a model (0: the model itself), i < model->replica_count. */
static inline const uform_model_t *uform_model_replica(const uform_model_t *model, size_t i) {
    return i == 0 ? model : model->replicas[i];
}

/* The backend a model's verbs run on: a RAM model's CPU class on `executor`,
 * a device model's backend. */
UFORM_INTERNAL uform_backend_t uform_model_backend(const uform_model_t *model,
                                                   uform_executor_t *executor);

/* UNSUPPORTED naming `verb` and `operation` when the model's backend lacks
 * that operation (a device backend still being built: c/cuda/), else OK. */
UFORM_INTERNAL uform_status_t uform_model_needs(const uform_model_t *model, bool present,
                                                const char *verb, const char *name);

/* Loads a checkpoint's tensors onto each of `count` devices (count >= 1;
 * backends that own nothing the model must free: the VRAM executor's, or a
 * test's), a whole copy on each, each device held (acquire) while its copy
 * loads, as a model of `quantization` (BF16 or E4M3) whose verbs run on
 * `executor` when given none: *result is the copy on devices[0], holding the
 * others as its replicas. Progress counts every copy's tensors. The VRAM
 * loads and tests/c/test_device_model.c and test_device_lanes.c use it. */
UFORM_INTERNAL uform_status_t uform_model_load_on_devices(const uform_safetensors_t *file,
                                                          const uform_backend_t *devices, size_t count,
                                                          uform_scalar_t quantization,
                                                          uform_executor_t *executor,
                                                          const uform_progress_t *progress,
                                                          uform_model_t **result);

/* Runs the blocks and the final norm over x [rows, H] in place on `backend`
 * (batch->segments and positions in its memory; `longest` the longest
 * segment's rows): on return x holds the final normed states. Needs `scratch` (64-byte aligned) of
 * uform_forward_scratch_bytes for batches of up to `rows` rows in `segments`
 * items of at most `longest` rows (every buffer grows with each of them, so a
 * smaller batch's layout fits in the same block). */
UFORM_INTERNAL size_t uform_forward_scratch_bytes(const uform_model_t *model,
                                                  uform_executor_t *executor, size_t rows,
                                                  size_t segments, size_t longest);
UFORM_INTERNAL void uform_forward(const uform_model_t *model, uform_backend_t *backend,
                                  const uform_batch_t *batch, size_t longest, float *x,
                                  void *scratch);

/* y = W x for rows of x, then each output row L2-normalised (x / max(|x|, 1e-12)). */
UFORM_INTERNAL void uform_project_normalize(const uform_model_t *model, uform_backend_t *backend,
                                            const uform_packed_t *head, const float *x, size_t rows,
                                            float *y);


#endif /* UFORM_MODEL_H */
