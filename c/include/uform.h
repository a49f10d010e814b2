/*
 * uform.h: the one public header of libuform.
 *
 * C11, prefixed names, opaque handles, status codes. Every function returns a
 * uform_status_t (UFORM_OK = 0) and hands results back through out-pointers;
 * uform_last_error() names what went wrong on the calling thread. The library
 * never prints, never exits and never aborts on bad input.
 *
 * cffi reads this file after `cc -E -DUFORM_CDEF`, so under UFORM_CDEF it must
 * hold only declarations cffi understands: no includes, no attributes, no
 * inline code. Enum values are a stable ABI: never renumber a released value.
 */
#ifndef UFORM_H
#define UFORM_H

#ifndef UFORM_CDEF
#include <stddef.h>
#include <stdint.h>
#endif

#ifdef UFORM_CDEF
#define UFORM_API
#elif defined(UFORM_BUILDING)
#define UFORM_API __attribute__((visibility("default")))
#else
#define UFORM_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Status codes and errors                                                   */
/* ------------------------------------------------------------------------ */

typedef enum {
    UFORM_OK = 0,
    UFORM_INVALID_ARGUMENT = 1, /* a caller's value is out of its domain */
    UFORM_UNSUPPORTED = 2,      /* this build or machine cannot run it (yet) */
    UFORM_FORMAT = 3,           /* corrupt or malformed checkpoint or media */
    UFORM_FILE = 4,             /* the file system refused an operation */
    UFORM_OUT_OF_MEMORY = 5,    /* an allocation failed or a size overflowed */
    UFORM_DEVICE = 6,           /* a GPU runtime failure */
    UFORM_MESH = 7,             /* a multi-host rendezvous failure */
    UFORM_CANCELLED = 8,        /* a progress handler asked to stop */
    UFORM_DIVERGED = 9          /* a training step's loss or gradients are not finite; not applied */
} uform_status_t;

/* The last failure's message on the calling thread; never NULL, "" when none.
 * Valid until the thread's next failing call. */
UFORM_API const char *uform_last_error(void);

/* The library version as major * 10000 + minor * 100 + patch. */
UFORM_API uint32_t uform_version(void);

/* ------------------------------------------------------------------------ */
/* Enumerations (values fixed by the API reference)                          */
/* ------------------------------------------------------------------------ */

typedef enum {
    UFORM_MODALITY_TEXT = 0,
    UFORM_MODALITY_IMAGE = 1,
    UFORM_MODALITY_VIDEO = 2,
    UFORM_MODALITY_AUDIO = 3
} uform_modality_t;

typedef enum {
    UFORM_OBJECTIVE_MASKED = 0,
    UFORM_OBJECTIVE_CONTRASTIVE = 1,
    UFORM_OBJECTIVE_JOINT = 2
} uform_objective_t;

typedef enum {
    UFORM_NEGATIVES_AMBIENT = 0,
    UFORM_NEGATIVES_NAMED = 1
} uform_negatives_t;

typedef enum {
    UFORM_PAIR_LOSS_DERIVED = 0,
    UFORM_PAIR_LOSS_BALANCED = 1,
    UFORM_PAIR_LOSS_RANKED = 2,
    UFORM_PAIR_LOSS_SIGMOID = 3
} uform_pair_loss_form_t;

typedef enum {
    UFORM_SIDE_NONE = 0,
    UFORM_SIDE_QUERY = 1,
    UFORM_SIDE_DOCUMENT = 2,
    UFORM_SIDE_QUERY_AND_DOCUMENT = 3
} uform_late_interaction_side_t;

typedef enum {
    UFORM_SCALAR_F32 = 0,
    UFORM_SCALAR_BF16 = 1,
    UFORM_SCALAR_F16 = 2,
    UFORM_SCALAR_E4M3 = 3, /* OCP FP8 (bias 7, largest 448), one byte, no scale: outputs are
                              unit vectors; nearest even, saturating, NaN 0x7F with its sign */
    UFORM_SCALAR_E5M2 = 4, /* OCP FP8 (bias 15, largest 57344), the same rules */
    UFORM_SCALAR_I8 = 5,   /* round(x * 127), clamped to [-127, 127]: scale 1/127 */
    UFORM_SCALAR_B1 = 6    /* sign bits, x > 0 -> 1, MSB-first in each byte */
} uform_scalar_t;

/* CPU classes: the kernels a RAM model is packed for. AUTO (0) asks the
 * library to pick the best class the CPU and OS can run (BF16 products where
 * the CPU has them: SAPPHIRE on x86-64, SVE_BF16 or NEON_BF16 on aarch64). A library built for
 * x86-64 has no Arm class and one built for aarch64 no x86 class: pinning one
 * answers UFORM_UNSUPPORTED. */
typedef enum {
    UFORM_CPU_CLASS_AUTO = 0,
    UFORM_CPU_CLASS_SERIAL = 1,   /* portable C11, FP32 */
    UFORM_CPU_CLASS_HASWELL = 2,  /* AVX2 + FMA, FP32 */
    UFORM_CPU_CLASS_SKYLAKE = 3,  /* AVX-512F, FP32 */
    UFORM_CPU_CLASS_SAPPHIRE = 4, /* AVX-512 + BF16 dot products, FP32 sums */
    UFORM_CPU_CLASS_NEON = 5,     /* Arm NEON (aarch64), FP32; GEMMs as HASWELL bit for bit */
    UFORM_CPU_CLASS_SVE = 6,      /* Arm SVE (aarch64), any vector length, FP32: NEON bit for bit */
    UFORM_CPU_CLASS_NEON_BF16 = 7, /* NEON + BFDOT (FEAT_BF16): BF16 products, FP32 sums */
    UFORM_CPU_CLASS_SVE_BF16 = 8,  /* SVE + BFDOT, any vector length: NEON_BF16 bit for bit */
    UFORM_CPU_CLASS_AMX = 9        /* SAPPHIRE with its GEMMs on AMX tiles (TDPBF16PS); AUTO's
                                      choice where the CPU and OS allow it (docs/architecture.md) */
} uform_cpu_class_t;

/* GPU classes; NONE (0) for a RAM model, or "pick for me" in a pin. */
typedef enum {
    UFORM_GPU_CLASS_NONE = 0,
    UFORM_GPU_CLASS_AMPERE = 1,    /* sm_80 */
    UFORM_GPU_CLASS_ADA = 2,       /* sm_89 */
    UFORM_GPU_CLASS_HOPPER = 3,    /* sm_90a */
    UFORM_GPU_CLASS_BLACKWELL = 4  /* sm_100a */
} uform_gpu_class_t;

/* Output flags of the encode verbs. */
enum {
    UFORM_OUTPUTS_EMBEDDINGS = 1,
    UFORM_OUTPUTS_TOKENS = 2
};

/* ------------------------------------------------------------------------ */
/* Progress                                                                  */
/* ------------------------------------------------------------------------ */

/* Called at most `steps` times per call (0 derives 100) with done <= total,
 * the last time with done == total; a nonzero return cancels the call with
 * UFORM_CANCELLED. */
typedef int (*uform_progress_fn_t)(void *user, size_t done, size_t total);

typedef struct {
    uform_progress_fn_t callback; /* NULL: no progress reports */
    void *user;
    size_t steps;
} uform_progress_t;

/* ------------------------------------------------------------------------ */
/* Executors: where work runs                                                */
/* ------------------------------------------------------------------------ */

typedef struct uform_executor uform_executor_t;

/* A persistent thread pool on CPU cores. threads = 0 means one per core the
 * process may run on. memory_domains lists NUMA nodes (recorded for replicas;
 * NULL/0 means the whole machine as one domain). */
UFORM_API uform_status_t uform_executor_for_ram(size_t threads, const uint32_t *memory_domains,
                                                size_t memory_domains_count,
                                                uform_executor_t **executor);
/* The listed GPUs (NULL/0: every visible one), a CUDA stream each, with host
 * threads for the work around them (docs/gpu.md). UFORM_UNSUPPORTED from a
 * build without the CUDA backend; UFORM_DEVICE "no GPU found" from a build
 * with it on a machine without a GPU. */
UFORM_API uform_status_t uform_executor_for_vram(const uint32_t *devices, size_t devices_count,
                                                 uform_executor_t **executor);
UFORM_API uform_status_t uform_executor_threads(const uform_executor_t *executor, size_t *threads);
UFORM_API uform_status_t uform_executor_memory_domains(const uform_executor_t *executor,
                                                       size_t *count);
/* Waits for the executor's submitted jobs, stops its threads, frees it. NULL is fine. */
UFORM_API void uform_executor_free(uform_executor_t *executor);

/* ------------------------------------------------------------------------ */
/* Arenas: output memory reused across calls                                 */
/* ------------------------------------------------------------------------ */

typedef struct uform_arena uform_arena_t;

UFORM_API uform_status_t uform_arena_init_ram(uform_arena_t **arena);
/* Invalidates every output previously written into the arena. */
UFORM_API uform_status_t uform_arena_reset(uform_arena_t *arena);
/* A device arena: the output rows of the encode verbs of a VRAM model on GPU
 * `device` (one the VRAM executor holds) are written to that GPU's memory,
 * converted to the output scalar there: uform_encoded_t's `embeddings` and
 * `tokens` are then device pointers (read them with cudaMemcpy, or pass them
 * to kernels of your own); `token_offsets` and the struct stay in host
 * memory. Only a model whose every copy is on that GPU writes into it; a RAM
 * model, a model on another GPU or on several, text_choose and a training
 * step refuse it (docs/gpu.md, "Where outputs live"). The executor must
 * outlive the arena. Without a CUDA build: UFORM_UNSUPPORTED. */
UFORM_API uform_status_t uform_arena_init_vram(uform_arena_t **arena, const uform_executor_t *executor,
                                               uint32_t device);
/* Bytes the arena currently holds from the system (and, in a device arena,
 * from its GPU). */
UFORM_API uform_status_t uform_arena_capacity(const uform_arena_t *arena, size_t *bytes);
/* Where the arena's output rows live: *on_device 0 (host memory, *device 0),
 * or 1 with the GPU in *device. */
UFORM_API uform_status_t uform_arena_location(const uform_arena_t *arena, uint32_t *on_device, uint32_t *device);
UFORM_API void uform_arena_free(uform_arena_t *arena);

/* ------------------------------------------------------------------------ */
/* Models                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct uform_model uform_model_t;

typedef struct {
    const uint32_t *memory_domains;  /* NULL: the executor's or the whole machine */
    size_t memory_domains_count;
    uform_cpu_class_t cpu_class;     /* AUTO: the best this CPU runs */
    uform_executor_t *executor;      /* NULL: a private pool on every core; borrowed, must
                                        outlive the model, also runs encode calls that pass
                                        no executor of their own */
    uform_scalar_t quantization;     /* F32 (0) or BF16: as stored (BF16); E4M3: every
                                        transformer-block matrix quantized at load, one
                                        power-of-two scale per output row (docs/architecture.md);
                                        embeddings, norms, biases, heads and media projections
                                        stay as BF16 loads them */
    uform_progress_t progress;
} uform_model_load_ram_options_t;

typedef struct {
    size_t dimensions;               /* scalars per embedding */
    size_t context;                  /* tokens per item before truncation */
    uform_scalar_t quantization;     /* the scalar the blocks run in */
    size_t memory_usage;             /* bytes the model holds */
    uform_cpu_class_t cpu_class;     /* the class a RAM model was packed for; AUTO (0) on a GPU */
    uform_gpu_class_t gpu_class;     /* NONE for a RAM model */
    size_t token_width;              /* 0 without a token head */
    size_t choice_temperature_groups;/* 0 without a byte head, 1 when uncalibrated */
    /* Beyond the seed's description: the geometry, for tools and tests. */
    size_t depth;
    size_t hidden;
} uform_model_description_t;

UFORM_API uform_status_t uform_model_load_ram(const char *path,
                                              const uform_model_load_ram_options_t *options,
                                              uform_model_t **model);
/* The buffer is read during the call only; the model keeps its own copy. */
UFORM_API uform_status_t uform_model_load_ram_buffer(const void *data, size_t size,
                                                     const uform_model_load_ram_options_t *options,
                                                     uform_model_t **model);
/* A copy of the checkpoint on each listed GPU (devices_count 0: every GPU of
 * `executor` when given, else GPU 0); with several, every encode verb spreads
 * its batches over them and text_choose its texts. `executor`, when
 * given, must be a VRAM executor holding every listed GPU; NULL: the model
 * makes its own. A build without the CUDA backend answers UFORM_UNSUPPORTED,
 * a machine without a GPU UFORM_DEVICE "no GPU found" (docs/gpu.md). */
UFORM_API uform_status_t uform_model_load_vram(const char *path, const uint32_t *devices,
                                               size_t devices_count, uform_gpu_class_t gpu_class,
                                               uform_executor_t *executor,
                                               uform_scalar_t quantization,
                                               const uform_progress_t *progress,
                                               uform_model_t **model);
UFORM_API uform_status_t uform_model_load_vram_buffer(const void *data, size_t size,
                                                      const uint32_t *devices,
                                                      size_t devices_count,
                                                      uform_gpu_class_t gpu_class,
                                                      uform_executor_t *executor,
                                                      uform_scalar_t quantization,
                                                      const uform_progress_t *progress,
                                                      uform_model_t **model);
UFORM_API uform_status_t uform_model_describe(const uform_model_t *model,
                                              uform_model_description_t *description);
/* One quantized matrix of an E4M3 model, as the blocks multiply it: `name` is
 * a block matrix ("blocks.<l>.attention.qkv.weight", ".attention.out.weight",
 * ".mlp.up.weight" or ".mlp.down.weight"); *rows and *cols get its shape; when
 * codes / scales are not NULL they get the E4M3 codes [rows, cols] row-major
 * and each row's scale [rows], W[i][p] = e4m3(codes[i][p]) x scales[i]. For
 * tools and tests that check the quantization (docs/architecture.md). A model
 * loaded as BF16 has none: InvalidArgumentError. */
UFORM_API uform_status_t uform_model_quantized_matrix(const uform_model_t *model, const char *name,
                                                      size_t *rows, size_t *cols, uint8_t *codes,
                                                      float *scales);
UFORM_API void uform_model_free(uform_model_t *model);

/* ------------------------------------------------------------------------ */
/* Encoding                                                                  */
/* ------------------------------------------------------------------------ */

/* A tape of `count` byte strings: item i is data[offsets[i], offsets[i+1]).
 * offsets holds count + 1 non-decreasing values, the last at most `size`, the
 * bytes data holds (so a bad offset is an error, never an overread); data may
 * be NULL when size is 0. */
typedef struct {
    const void *data;
    size_t size;
    const size_t *offsets;
    size_t count;
} uform_tape_t;

typedef struct {
    uint32_t outputs;                /* UFORM_OUTPUTS_* flags; 0 means EMBEDDINGS */
    uform_scalar_t outputs_scalar;   /* F32, BF16, F16, E4M3, E5M2, I8 or B1 */
    uform_progress_t progress;
} uform_encode_options_t;

/* Where an encode call left its outputs, all inside the arena. */
typedef struct {
    size_t count;                    /* items */
    uform_scalar_t scalar;
    void *embeddings;                /* count rows of embedding_row_bytes, or NULL */
    size_t dimensions;
    size_t embedding_row_bytes;
    void *tokens;                    /* token_offsets[count] rows of token_row_bytes, or NULL */
    size_t *token_offsets;           /* count + 1 row boundaries, or NULL */
    size_t token_width;
    size_t token_row_bytes;
} uform_encoded_t;

typedef struct {
    size_t items;                    /* texts encoded */
    size_t tokens;                   /* tokens run through the model */
    size_t truncated;                /* texts cut at `context` tokens */
    size_t empty;                    /* empty texts (zero embedding, no token rows) */
} uform_text_encode_stats_t;

/* Encodes UTF-8 texts, a byte per token. executor NULL: the model's.
 * stats may be NULL. */
UFORM_API uform_status_t uform_text_encode(uform_model_t *model, uform_executor_t *executor,
                                           const uform_tape_t *texts, uform_arena_t *arena,
                                           const uform_encode_options_t *options,
                                           uform_encoded_t *encoded,
                                           uform_text_encode_stats_t *stats);

/* ------------------------------------------------------------------------ */
/* Images, video and audio (docs/media.md)                                   */
/* ------------------------------------------------------------------------ */

/* One decoded image: height x width RGB pixels, 3 bytes each, rows
 * row_stride bytes apart (>= 3 * width). */
typedef struct {
    const uint8_t *data;
    size_t height, width;
    size_t row_stride;
} uform_pixels_t;

typedef struct {
    size_t items;                    /* images encoded */
    size_t tokens;                   /* patches run through the model */
    size_t resized;                  /* images resized to a grid other than their own size */
    size_t shrunk;                   /* images whose grid was scaled down to fit `context` */
} uform_image_encode_stats_t;

typedef struct {
    size_t items;                    /* clips encoded */
    size_t frames;                   /* frames kept (every frame_stride-th) */
    size_t tokens;                   /* tube patches run through the model */
    size_t truncated;                /* clips cut at `context` tokens */
    size_t empty;                    /* clips without a frame (zero embedding, no token rows) */
} uform_video_encode_stats_t;

typedef struct {
    size_t items;                    /* recordings encoded */
    size_t samples;                  /* samples after the mono downmix and resampling */
    size_t tokens;                   /* chunks run through the model */
    size_t truncated;                /* recordings cut at `context` chunks */
    size_t empty;                    /* recordings without a sample (zero embedding) */
} uform_audio_encode_stats_t;

/* Encodes decoded RGB images. A model without image parts: UFORM_UNSUPPORTED. */
UFORM_API uform_status_t uform_image_encode_pixels(uform_model_t *model, uform_executor_t *executor,
                                                   const uform_pixels_t *images, size_t count,
                                                   uform_arena_t *arena,
                                                   const uform_encode_options_t *options,
                                                   uform_encoded_t *encoded,
                                                   uform_image_encode_stats_t *stats);
/* Decodes JPEG, PNG or WebP files (their bytes, one per tape entry) and
 * encodes them; a format this build cannot decode: UFORM_UNSUPPORTED naming
 * the missing library; a corrupt file or one over the pixel limit: UFORM_FORMAT. */
UFORM_API uform_status_t uform_image_encode(uform_model_t *model, uform_executor_t *executor,
                                            const uform_tape_t *files, uform_arena_t *arena,
                                            const uform_encode_options_t *options,
                                            uform_encoded_t *encoded,
                                            uform_image_encode_stats_t *stats);
/* Decodes MP4 or WebM clips (their bytes) and encodes them. */
UFORM_API uform_status_t uform_video_encode(uform_model_t *model, uform_executor_t *executor,
                                            const uform_tape_t *files, uform_arena_t *arena,
                                            const uform_encode_options_t *options,
                                            uform_encoded_t *encoded,
                                            uform_video_encode_stats_t *stats);
/* Decodes WAV, FLAC, MP3 or Ogg/Opus recordings (their bytes) and encodes them. */
UFORM_API uform_status_t uform_audio_encode(uform_model_t *model, uform_executor_t *executor,
                                            const uform_tape_t *files, uform_arena_t *arena,
                                            const uform_encode_options_t *options,
                                            uform_encoded_t *encoded,
                                            uform_audio_encode_stats_t *stats);
/* Encodes mono float32 recordings at `sample_rate` Hz: recording i is
 * samples[offsets[i] .. offsets[i+1]) (offsets in samples, count + 1 values,
 * the last at most `size`, the samples the buffer holds). */
UFORM_API uform_status_t uform_audio_encode_samples(uform_model_t *model, uform_executor_t *executor,
                                                    const float *samples, size_t size,
                                                    const size_t *offsets, size_t count,
                                                    size_t sample_rate, uform_arena_t *arena,
                                                    const uform_encode_options_t *options,
                                                    uform_encoded_t *encoded,
                                                    uform_audio_encode_stats_t *stats);

/* The three file verbs with the files named by path: entry i of `paths` is a
 * path (the bytes os.fsencode gives; no NUL inside, no terminator needed).
 * Every path is checked before any decoding: an empty one, one with a NUL or
 * over PATH_MAX is UFORM_INVALID_ARGUMENT; a missing, unreadable or
 * non-regular file (directory, device, FIFO, socket) is UFORM_FILE; messages
 * name "files[i]" and the path. Each file is then read by the pool thread
 * that decodes it, so at most the items in flight are held in memory; a file
 * that vanishes between the check and its read is UFORM_FILE for that item.
 * Answers equal the byte verbs' on the same files, bit for bit. */
UFORM_API uform_status_t uform_image_encode_paths(uform_model_t *model, uform_executor_t *executor,
                                                  const uform_tape_t *paths, uform_arena_t *arena,
                                                  const uform_encode_options_t *options,
                                                  uform_encoded_t *encoded,
                                                  uform_image_encode_stats_t *stats);
UFORM_API uform_status_t uform_video_encode_paths(uform_model_t *model, uform_executor_t *executor,
                                                  const uform_tape_t *paths, uform_arena_t *arena,
                                                  const uform_encode_options_t *options,
                                                  uform_encoded_t *encoded,
                                                  uform_video_encode_stats_t *stats);
UFORM_API uform_status_t uform_audio_encode_paths(uform_model_t *model, uform_executor_t *executor,
                                                  const uform_tape_t *paths, uform_arena_t *arena,
                                                  const uform_encode_options_t *options,
                                                  uform_encoded_t *encoded,
                                                  uform_audio_encode_stats_t *stats);

/* Which media formats this build decodes: UFORM_MEDIA_* flags. */
enum {
    UFORM_MEDIA_JPEG = 1,
    UFORM_MEDIA_PNG = 2,
    UFORM_MEDIA_WEBP = 4,
    UFORM_MEDIA_VIDEO = 8,           /* MP4/MOV and WebM/Matroska through libavformat/libavcodec */
    UFORM_MEDIA_AUDIO = 16,          /* WAV, FLAC, Ogg Vorbis, Ogg Opus through libsndfile */
    UFORM_MEDIA_MP3 = 32             /* MP3 (MPEG audio layers I-III) through libmpg123 */
};
UFORM_API uint32_t uform_media_formats(void);

/* ------------------------------------------------------------------------ */
/* Calibrated choices (docs/architecture.md, "text_choose")                  */
/* ------------------------------------------------------------------------ */

typedef struct {
    const uint32_t *temperature_groups; /* NULL: group 0 for every text; else one per text,
                                           each below max(1, choice_temperature_groups) */
    uform_progress_t progress;
} uform_choose_options_t;

/* text_choose's answer: a tape of FP32 probabilities inside the arena. Text
 * i's probabilities are probabilities[offsets[i] .. offsets[i+1]), one per
 * choice byte in the order given, summing to 1. */
typedef struct {
    size_t count;                    /* texts */
    float *probabilities;            /* offsets[count] values */
    size_t *offsets;                 /* count + 1 boundaries */
} uform_chosen_t;

/* Scores single-byte choices after each text: the text cut to context - 1
 * bytes, MASK appended, the byte logits at MASK restricted to the choices,
 * divided by the group's temperature (1 when the checkpoint has none), and
 * softmaxed. choices holds either one entry per text or a single entry every
 * text shares; each entry is a non-empty string of distinct bytes, each byte
 * one choice. A model without a byte head answers UFORM_UNSUPPORTED. stats
 * (may be NULL) counts texts, tokens (MASK included), texts cut, empty texts. */
UFORM_API uform_status_t uform_text_choose(uform_model_t *model, uform_executor_t *executor,
                                           const uform_tape_t *texts, const uform_tape_t *choices,
                                           uform_arena_t *arena,
                                           const uform_choose_options_t *options,
                                           uform_chosen_t *chosen,
                                           uform_text_encode_stats_t *stats);

/* ------------------------------------------------------------------------ */
/* Late interaction: MaxSim over token vectors                               */
/* ------------------------------------------------------------------------ */

/* Token rows of several items, as an encode call leaves them in its arena:
 * item i's rows are rows [offsets[i], offsets[i+1]), row r at
 * (const char *)data + r * row_bytes. */
typedef struct {
    const void *data;
    const size_t *offsets;           /* count + 1 non-decreasing boundaries */
    size_t count;                    /* items */
    size_t width;                    /* scalars per row */
    size_t row_bytes;                /* >= width scalars of `scalar` */
    uform_scalar_t scalar;           /* F32, BF16, F16, E4M3, E5M2 (OCP FP8 codes, no scale)
                                        or I8 (value = int8 / 127); not B1 */
} uform_token_rows_t;

/* scores[q * documents->count + d] = mean over the query's rows of the largest
 * dot product with any of the document's rows (MaxSim, as ColBERT). A query
 * or document without rows scores 0. Both sides need the same width. The
 * executor's threads share the work (NULL: the calling thread only); a VRAM
 * executor's first GPU scores instead (the rows are still host memory). */
UFORM_API uform_status_t uform_late_interaction_scores(uform_executor_t *executor,
                                                       const uform_token_rows_t *queries,
                                                       const uform_token_rows_t *documents,
                                                       float *scores);

/* ------------------------------------------------------------------------ */
/* Mesh: one training run over several processes and hosts (docs/distributed.md) */
/* ------------------------------------------------------------------------ */

typedef struct uform_mesh uform_mesh_t;

typedef enum {
    UFORM_MULTIMEM_NONE = 0,          /* no multicast memory: plain collectives (every CPU mesh, a Gloo
                                         mesh, or NCCL reporting no NVLink SHARP) */
    UFORM_MULTIMEM_NVLINK = 1,        /* NVLink SHARP within each host's NVLink domain (NVSwitch):
                                         NCCL's sums reduce in the switches there */
    UFORM_MULTIMEM_NVLINK_SWITCH = 2  /* one NVLink domain with SHARP spans hosts (an NVLink Switch
                                         System, such as GB200 NVL72) */
} uform_multimem_tier_t;

typedef struct {
    size_t host_domain_index;         /* this process, 0 .. host_domain_count - 1 (0 leads) */
    size_t host_domain_count;         /* processes in the run */
    const char *directory;            /* a folder every host sees (shared file system) */
    const char *job;                  /* the run's name: [A-Za-z0-9._-], at most 128 bytes */
    uint64_t timeout_ms;              /* 0: 300000 (5 minutes). How long bootstrap waits for
                                         the other hosts, and each collective for its peers */
} uform_mesh_options_t;

typedef struct {
    size_t host_domain_index, host_domain_count;
    size_t rank;                      /* this process's first device among every device of the run */
    size_t ranks;                     /* devices (replicas) of the whole run */
    const size_t *devices;            /* [host_domain_count]: devices (replicas) of each host: its
                                         memory domains on CPUs, its GPUs on a VRAM executor */
    const char *const *hosts;         /* [host_domain_count]: each host's name as it reported it */
    uform_multimem_tier_t multimem_tier; /* the lowest tier NCCL reports on any GPU of the run
                                            (ncclCommQueryProperties, NCCL 2.29 on); NONE without
                                            NCCL. Queried on one H200 (NONE); NVLink SHARP
                                            never seen */
    uform_gpu_class_t gpu_class;      /* every host's GPUs' class; NONE on CPUs */
    const char *engine;               /* "nccl": GPU hosts whose gradients NCCL sums on the GPUs
                                         (Gloo carries the rest); else "gloo" */
    const char *run_id;               /* 32 hex digits, fresh for every bootstrap */
    uint64_t timeout_ms;              /* as derived */
} uform_mesh_description_t;

/* Meets the other hosts in options->directory/options->job: blocks until all
 * host_domain_count processes arrived (UFORM_MESH naming those that did not,
 * after timeout_ms), then connects the collective engine: Gloo over TCP (its
 * address: UFORM_MESH_HOSTNAME, else UFORM_MESH_INTERFACE, else this machine's
 * host name), for RAM and VRAM executors alike; on VRAM executors also NCCL,
 * which sums the gradients on the GPUs where every host can load it and no
 * GPU is shared between hosts (UFORM_MESH_ENGINE=gloo declines it, =nccl
 * insists: UFORM_MESH naming why it cannot). Every host's executor must be of one kind (RAM, or
 * VRAM of one GPU class): else UFORM_MESH naming both. A build without Gloo:
 * UFORM_UNSUPPORTED. The executor is borrowed and must outlive the mesh. */
UFORM_API uform_status_t uform_mesh_bootstrap(uform_executor_t *executor,
                                              const uform_mesh_options_t *options,
                                              uform_mesh_t **mesh);
/* Pointers in *description stay valid until the mesh is freed. */
UFORM_API uform_status_t uform_mesh_describe(const uform_mesh_t *mesh,
                                             uform_mesh_description_t *description);
/* Closes the connections (peers still using them get UFORM_MESH). NULL is fine. */
UFORM_API void uform_mesh_free(uform_mesh_t *mesh);

/* ------------------------------------------------------------------------ */
/* Training (docs/training.md). Every zero field derives.                    */
/* ------------------------------------------------------------------------ */

typedef struct { size_t patch_side, channels; } uform_image_shape_t;
typedef struct { size_t patch_side, tube_frames, frame_stride, channels; } uform_video_shape_t;
typedef struct { size_t chunk_samples, sample_rate; } uform_audio_shape_t;

typedef struct {
    size_t max_rows_per_device;
    size_t max_segments_per_device;
    size_t max_columns_per_row;
    size_t max_bags_per_device;
    size_t max_choices_per_item;
    uform_image_shape_t image;       /* patch_side 0: no images in the run */
    uform_video_shape_t video;       /* patch_side 0: no video */
    uform_audio_shape_t audio;       /* chunk_samples 0: no audio */
} uform_batch_shape_t;

typedef struct {
    float token_mask_probability, token_mean_span, replace_fraction, random_fraction;
    float image_mask_ratio, video_mask_ratio, audio_mask_ratio;
    float text_weight, image_weight, video_weight, audio_weight;
} uform_masking_t;

typedef struct {
    const size_t *matryoshka_dimensions;  /* NULL: the full width only */
    size_t matryoshka_dimensions_count;
    size_t temperature_groups;
    float inverse_temperature;
    float bias;
    uform_negatives_t negatives;
    float ambient_repulsion_weight;
    size_t max_edges_per_device;          /* accepted, not enforced (docs/training.md) */
    uform_pair_loss_form_t pair_loss;
} uform_contrastive_t;

typedef struct {
    float weight;
    size_t width;
    float inverse_temperature, bias;
    size_t max_query_span, max_query_tokens_per_device, max_documents_per_device,
        max_document_tokens_per_device;
    uform_pair_loss_form_t pair_loss;
} uform_late_interaction_t;

typedef struct {
    float weight;
    size_t temperature_groups;
} uform_choices_t;

typedef struct {
    float learning_rate, min_learning_rate;
    size_t warmup_steps, steps;
} uform_schedule_t;

typedef struct {
    const char *resume;                          /* NULL: start fresh */
    size_t depth, hidden;
    uform_batch_shape_t batch;
    uform_objective_t objective;
    const uform_masking_t *masking;              /* NULL: all derived */
    const uform_contrastive_t *contrastive;      /* NULL: all derived */
    const uform_late_interaction_t *late_interaction; /* NULL: not configured */
    const uform_choices_t *choices;              /* NULL: not configured */
    uform_schedule_t schedule;
    uint64_t seed;
    uform_progress_t progress;                   /* while resume is read (the floats read and
                                                    checked, 3 per parameter); cancelling fails
                                                    the init with UFORM_CANCELLED */
    uform_mesh_t *mesh;                          /* NULL: this process alone; else a mesh
                                                    bootstrapped on the same executor, borrowed
                                                    (it must outlive the trainer; one trainer
                                                    per mesh at a time): every step is one
                                                    update over the items of every host */
    uform_cpu_class_t cpu_class;                 /* init_ram: the class whose FP32 GEMMs the
                                                    step runs (SERIAL portable, HASWELL AVX2,
                                                    SKYLAKE/SAPPHIRE/AMX AVX-512, NEON, SVE);
                                                    AUTO: the best. init_vram: AUTO only */
} uform_trainer_options_t;

/* One edge set as compressed sparse rows over a step's items: anchor i's
 * candidates are ids[offsets[i] .. offsets[i+1]), with optional weights. */
typedef struct {
    const size_t *offsets;    /* count + 1 values, or NULL: no edges */
    const uint32_t *ids;
    const float *weights;     /* NULL: every weight 1 */
} uform_edges_t;

typedef struct {
    uform_edges_t attract, repel, ignore;
} uform_relations_t;

typedef struct {
    const uint32_t *modalities;      /* uform_modality_t per item */
    uform_tape_t contents;           /* text bytes, or encoded media files */
    const uint32_t *bags;            /* NULL: no bag positives */
    const uint32_t *temperature_groups; /* NULL: group 0 */
    const uint32_t *sides;           /* uform_late_interaction_side_t per item; NULL: every
                                        item QUERY_AND_DOCUMENT (with late interaction) */
    const uform_relations_t *relations; /* NULL: none */
    /* Choices (with a Choices configuration): count 0 for none; else one
     * entry per item holding its choice bytes (empty: the item makes no
     * choice), and choice_targets the soft targets aligned with those bytes:
     * item i's targets are choice_targets[choices.offsets[i] .. offsets[i+1]);
     * or, as text_choose takes them, one entry shared by every item (count 1
     * for several items): n = offsets[1] - offsets[0] choices each, item i's
     * targets at choice_targets[offsets[0] + i n .. offsets[0] + (i + 1) n). */
    uform_tape_t choices;
    const float *choice_targets;
} uform_trainer_batch_t;

typedef struct {
    uint64_t step;
    float learning_rate;
    float loss, contrastive_loss, masked_text_loss, masked_image_loss, masked_video_loss,
        masked_audio_loss, late_interaction_loss, choices_loss;
    size_t truncated, dropped;
} uform_trainer_step_stats_t;

typedef struct uform_trainer uform_trainer_t;

/* Trains on the CPU cores of a RAM executor (borrowed; must outlive the trainer). */
UFORM_API uform_status_t uform_trainer_init_ram(uform_executor_t *executor,
                                                const uform_trainer_options_t *options,
                                                uform_trainer_t **trainer);
/* Trains on the GPUs of a VRAM executor, a replica per GPU, or as ranks of
 * options->mesh (docs/gpu.md, docs/distributed.md); UFORM_UNSUPPORTED or
 * UFORM_DEVICE as uform_executor_for_vram. */
UFORM_API uform_status_t uform_trainer_init_vram(uform_executor_t *executor,
                                                 const uform_trainer_options_t *options,
                                                 uform_trainer_t **trainer);
/* One optimizer step over the batch. embeddings, when not NULL, receives the
 * pooled embeddings the loss scored: count rows in `outputs_scalar`, in the arena. */
UFORM_API uform_status_t uform_trainer_step(uform_trainer_t *trainer,
                                            const uform_trainer_batch_t *batch,
                                            uform_arena_t *arena, uform_scalar_t outputs_scalar,
                                            uform_encoded_t *embeddings,
                                            uform_trainer_step_stats_t *stats);
/* Writes the model (BF16) and the train.* state atomically. */
UFORM_API uform_status_t uform_trainer_save(uform_trainer_t *trainer, const char *path,
                                            const uform_progress_t *progress);
/* Copies one named tensor of the run (a checkpoint name) as FP32: which = 0
 * the master weights, 1 the last step's gradients, 2 and 3 the AdamW moments.
 * values NULL: only sets *count to the tensor's size; else *count must be it. */
UFORM_API uform_status_t uform_trainer_tensor(const uform_trainer_t *trainer, const char *name,
                                              uint32_t which, float *values, size_t *count);
UFORM_API void uform_trainer_free(uform_trainer_t *trainer);

/* ------------------------------------------------------------------------ */
/* Submission: the same verbs, answered later                                */
/* ------------------------------------------------------------------------ */

typedef struct uform_job uform_job_t;

/* uform_trainer_step and uform_trainer_save queued on executor's submission
 * thread (Python's Trainer.deferred), answered by uform_job_wait; the trainer
 * must outlive the job. Submission takes the trainer
 * (and, for a step with embeddings, the arena) until the job has run: another
 * step, save or tensor read meanwhile is refused at once (UFORM_INVALID_ARGUMENT,
 * "in use by another call"), never queued behind it. Submission itself checks
 * only NULLs and those two; every check of the batch, and every failure of the
 * step or save, is the job's status. The batch structure, the path and the
 * progress structure are copied; everything the batch points at (contents,
 * modalities, bags, relations, choices, targets...), *embeddings and *stats
 * must stay valid and unchanged until the job has finished. */
UFORM_API uform_status_t uform_trainer_step_submit(uform_trainer_t *trainer, uform_executor_t *executor,
                                                   const uform_trainer_batch_t *batch,
                                                   uform_arena_t *arena, uform_scalar_t outputs_scalar,
                                                   uform_encoded_t *embeddings,
                                                   uform_trainer_step_stats_t *stats, uform_job_t **job);
UFORM_API uform_status_t uform_trainer_save_submit(uform_trainer_t *trainer, uform_executor_t *executor,
                                                   const char *path, const uform_progress_t *progress,
                                                   uform_job_t **job);

/* Queues uform_text_encode on the executor's submission thread (the model's
 * executor when NULL). Every pointer argument must stay valid until the job
 * is waited for; the results land in *encoded and *stats then. */
UFORM_API uform_status_t uform_text_encode_submit(uform_model_t *model,
                                                  uform_executor_t *executor,
                                                  const uform_tape_t *texts, uform_arena_t *arena,
                                                  const uform_encode_options_t *options,
                                                  uform_encoded_t *encoded,
                                                  uform_text_encode_stats_t *stats,
                                                  uform_job_t **job);
/* Queues uform_text_choose likewise. */
UFORM_API uform_status_t uform_text_choose_submit(uform_model_t *model, uform_executor_t *executor,
                                                  const uform_tape_t *texts,
                                                  const uform_tape_t *choices, uform_arena_t *arena,
                                                  const uform_choose_options_t *options,
                                                  uform_chosen_t *chosen,
                                                  uform_text_encode_stats_t *stats,
                                                  uform_job_t **job);
/* The media verbs likewise (docs/media.md): each queues its blocking verb,
 * which then runs on the submission thread exactly as when called directly
 * (decoding included). As for text, the submit call itself refuses only a
 * NULL job, model, input (files; images while count > 0; offsets) or arena,
 * and an arena another call holds (UFORM_INVALID_ARGUMENT); every other
 * check, and every failure of decoding or encoding (UFORM_FORMAT for a corrupt
 * file, ...), is the job's status, answered by uform_job_wait. The tape and
 * options structures are copied; the file bytes, the pixels array and its
 * pixels, the samples and offsets, *encoded and *stats must stay valid and
 * unchanged until the job has finished. The arena is held from submission. */
UFORM_API uform_status_t uform_image_encode_pixels_submit(uform_model_t *model,
                                                          uform_executor_t *executor,
                                                          const uform_pixels_t *images, size_t count,
                                                          uform_arena_t *arena,
                                                          const uform_encode_options_t *options,
                                                          uform_encoded_t *encoded,
                                                          uform_image_encode_stats_t *stats,
                                                          uform_job_t **job);
UFORM_API uform_status_t uform_image_encode_submit(uform_model_t *model, uform_executor_t *executor,
                                                   const uform_tape_t *files, uform_arena_t *arena,
                                                   const uform_encode_options_t *options,
                                                   uform_encoded_t *encoded,
                                                   uform_image_encode_stats_t *stats,
                                                   uform_job_t **job);
UFORM_API uform_status_t uform_video_encode_submit(uform_model_t *model, uform_executor_t *executor,
                                                   const uform_tape_t *files, uform_arena_t *arena,
                                                   const uform_encode_options_t *options,
                                                   uform_encoded_t *encoded,
                                                   uform_video_encode_stats_t *stats,
                                                   uform_job_t **job);
UFORM_API uform_status_t uform_audio_encode_submit(uform_model_t *model, uform_executor_t *executor,
                                                   const uform_tape_t *files, uform_arena_t *arena,
                                                   const uform_encode_options_t *options,
                                                   uform_encoded_t *encoded,
                                                   uform_audio_encode_stats_t *stats,
                                                   uform_job_t **job);
/* The *_paths verbs submitted: the paths (and the files they name) are
 * borrowed until the job has finished; their checks are the job's. */
UFORM_API uform_status_t uform_image_encode_paths_submit(uform_model_t *model, uform_executor_t *executor,
                                                         const uform_tape_t *paths, uform_arena_t *arena,
                                                         const uform_encode_options_t *options,
                                                         uform_encoded_t *encoded,
                                                         uform_image_encode_stats_t *stats,
                                                         uform_job_t **job);
UFORM_API uform_status_t uform_video_encode_paths_submit(uform_model_t *model, uform_executor_t *executor,
                                                         const uform_tape_t *paths, uform_arena_t *arena,
                                                         const uform_encode_options_t *options,
                                                         uform_encoded_t *encoded,
                                                         uform_video_encode_stats_t *stats,
                                                         uform_job_t **job);
UFORM_API uform_status_t uform_audio_encode_paths_submit(uform_model_t *model, uform_executor_t *executor,
                                                         const uform_tape_t *paths, uform_arena_t *arena,
                                                         const uform_encode_options_t *options,
                                                         uform_encoded_t *encoded,
                                                         uform_audio_encode_stats_t *stats,
                                                         uform_job_t **job);
UFORM_API uform_status_t uform_audio_encode_samples_submit(uform_model_t *model,
                                                           uform_executor_t *executor,
                                                           const float *samples, size_t size,
                                                           const size_t *offsets, size_t count,
                                                           size_t sample_rate, uform_arena_t *arena,
                                                           const uform_encode_options_t *options,
                                                           uform_encoded_t *encoded,
                                                           uform_audio_encode_stats_t *stats,
                                                           uform_job_t **job);
/* 1 when the job has finished, 0 while it runs. */
UFORM_API int uform_job_done(const uform_job_t *job);
/* Blocks until the job finishes; returns the job's own status and makes its
 * message this thread's uform_last_error(). */
UFORM_API uform_status_t uform_job_wait(uform_job_t *job);
/* Waits if still running, then frees. NULL is fine. */
UFORM_API void uform_job_free(uform_job_t *job);

/* ------------------------------------------------------------------------ */
/* Capabilities: what this build and machine run (docs/c-api.md)            */
/* ------------------------------------------------------------------------ */

typedef struct {
    uint32_t media_formats;          /* UFORM_MEDIA_* flags, as uform_media_formats() */
    uint32_t cpu_classes;            /* bit (1u << class) for every uform_cpu_class_t a RAM
                                        model loads pinned to: built for this target and run
                                        by this CPU and OS; SERIAL always, AUTO (bit 0) never */
    uform_cpu_class_t best_cpu_class;/* the class AUTO loads; one of cpu_classes */
    uint32_t gpu_backend_built;      /* 1 when built with the CUDA backend: VRAM executors,
                                        models and trainers run where a GPU is present
                                        (UFORM_DEVICE "no GPU found" without one); 0: they
                                        answer UFORM_UNSUPPORTED */
    size_t gpus;                     /* GPUs that backend sees; 0 without one */
    uint32_t mesh_engine_built;      /* 1 when uform_mesh_bootstrap can connect hosts on CPUs
                                        (built with Gloo); 0: it answers UFORM_UNSUPPORTED */
} uform_capabilities_t;

/* Fills *capabilities; NULL: UFORM_INVALID_ARGUMENT. Cheap (cpuid or
 * getauxval), the same answer on every call of a process. */
UFORM_API uform_status_t uform_capabilities(uform_capabilities_t *capabilities);

#ifdef __cplusplus
}
#endif

#endif /* UFORM_H */
