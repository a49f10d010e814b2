/* test_nccl_ops.c: the NCCL calls of c/cuda/collectives.cu on communicators
 * of this process's GPU 0 (collectives.h), checked against what they must
 * leave in memory.
 *
 * Why this file: on a machine of one GPU the mesh never runs NCCL (a world of
 * one GPU sums nothing, and processes sharing a GPU are refused by NCCL), so
 * without it the first real NCCL call would wait for a machine of several
 * GPUs. A communicator of one rank runs every call the trainer makes:
 * loading libnccl.so.2, the non-blocking start, ncclCommQueryProperties (the
 * multimem tier), a marked sum (of one rank: the values unchanged, bit for
 * bit), a gather (the rank's block copied into place, nothing around it
 * touched), finalize; then a communicator of two ranks whose second never
 * comes, which must end in UFORM_MESH after its timeout and not hang.
 *
 * Under the CUDA emulation (make test-cuda-emulated) the same calls run
 * against c/cuda/nccl_emulation.h, and the tier is checked exactly against
 * the NVLink layout the emulation is told (UFORM_EMULATION_NCCL_LSA_RANKS).
 *
 * Prints one table row per check and "N passed, M failed"; without a GPU, the
 * CUDA backend or NCCL it says why and exits 0 (make test-gpu). */
#include "check.h"

#ifndef UFORM_HAVE_CUDA
int main(void) {
    printf("skip test_nccl_ops: this build has no CUDA backend\n");
    return 0;
}
#else
#include "../../c/cuda/collectives.h"
#include "../../c/cuda/cuda_backend.h"

#include <stdlib.h>
#include <string.h>

#define SUM_COUNT 150001   /* floats: more than two of the emulation's 65536-float chunks, and odd */
#define GATHER_BYTES 1001  /* one rank's block, odd */
#define GUARD 64           /* bytes either side of the gathered block that must stay as they were */

static void row(const char *what, bool ok, const char *detail) {
    printf("| %-58s | %-4s | %s\n", what, ok ? "ok" : "FAIL", detail);
    CHECK(ok, "%s: %s", what, detail);
}

/* One rank's communicator on `backend`, or NULL with the failure's row. */
static uform_nccl_t *connect_alone(uform_backend_t *backend, const char *what) {
    uint8_t id[UFORM_NCCL_ID_BYTES];
    uform_nccl_t *comm = NULL;
    uform_status_t status = uform_nccl_unique_id(id);
    if (status == UFORM_OK) status = uform_nccl_connect(id, 1, 0, backend, 1, 30000, &comm);
    row(what, status == UFORM_OK && comm, status == UFORM_OK ? "" : uform_last_error());
    return status == UFORM_OK ? comm : NULL;
}

static void test_tier(uform_backend_t *backend) {
#ifdef UFORM_CUDA_EMULATION
    /* made-up layouts: none, and a domain of this one rank (within the host) */
    const char *layouts[2] = {"0", "1"};
    const uform_multimem_tier_t expected[2] = {UFORM_MULTIMEM_NONE, UFORM_MULTIMEM_NVLINK};
    for (int i = 0; i < 2; i++) {
        setenv("UFORM_EMULATION_NCCL_LSA_RANKS", layouts[i], 1);
        uform_nccl_t *comm = connect_alone(backend, "one rank: started (for the multimem tier)");
        if (!comm) continue;
        uform_multimem_tier_t tier = uform_nccl_multimem_tier(comm, 1);
        char what[96], detail[64];
        snprintf(what, sizeof(what), "multimem tier, emulated NVLink domains of %s ranks", layouts[i]);
        snprintf(detail, sizeof(detail), "%d, expected %d", (int)tier, (int)expected[i]);
        row(what, tier == expected[i], detail);
        uform_nccl_free(comm, 30000);
    }
    unsetenv("UFORM_EMULATION_NCCL_LSA_RANKS");
#else
    /* whatever this machine has: a valid tier, asked without failing */
    uform_nccl_t *comm = connect_alone(backend, "one rank: started (for the multimem tier)");
    if (!comm) return;
    uform_multimem_tier_t tier = uform_nccl_multimem_tier(comm, 1);
    char detail[64];
    snprintf(detail, sizeof(detail), "%d (0 NONE, 1 NVLINK, 2 NVLINK_SWITCH)", (int)tier);
    row("multimem tier: one of the three", tier >= UFORM_MULTIMEM_NONE && tier <= UFORM_MULTIMEM_NVLINK_SWITCH,
        detail);
    uform_nccl_free(comm, 30000);
#endif
}

/* A marked sum over one rank leaves the values as they were, bit for bit;
 * the compute stream's later work sees them after the join. */
static void test_sum(uform_backend_t *b, uform_nccl_t *comm) {
    float *host = malloc(SUM_COUNT * sizeof(float)), *back = malloc(SUM_COUNT * sizeof(float));
    float *device = uform_backend_alloc(b, SUM_COUNT, sizeof(float), "sum");
    if (!host || !back || !device) {
        row("sum: memory", false, uform_last_error());
        free(host), free(back), uform_backend_free(b, device);
        return;
    }
    uint32_t state = 12345;
    for (size_t i = 0; i < SUM_COUNT; i++) {
        state = state * 1664525u + 1013904223u;
        host[i] = (float)((int32_t)state) * 0x1p-28f;
    }
    b->ops->upload(b, device, host, SUM_COUNT * sizeof(float));
    uform_status_t status = uform_nccl_prepare(comm, 1);
    if (status == UFORM_OK) {
        uform_nccl_mark(comm, b, 0);
        status = uform_nccl_sum(comm, device, SUM_COUNT, 0, 30000);
    }
    if (status == UFORM_OK) {
        uform_nccl_join(comm, b);
        b->ops->download(b, back, device, SUM_COUNT * sizeof(float));
        status = b->ops->synchronize(b);
    }
    char detail[160];
    snprintf(detail, sizeof(detail), "%s", status == UFORM_OK ? "" : uform_last_error());
    row("sum of 150001 floats over one rank: unchanged, bit for bit",
        status == UFORM_OK && memcmp(host, back, SUM_COUNT * sizeof(float)) == 0, detail);
    status = uform_nccl_sum(comm, device, 0, 0, 30000);
    row("sum of nothing", status == UFORM_OK, status == UFORM_OK ? "" : uform_last_error());
    free(host), free(back), uform_backend_free(b, device);
}

/* A gather over one rank puts the rank's block at the start of `out` and
 * touches nothing after it. */
static void test_gather(uform_backend_t *b, uform_nccl_t *comm) {
    uint8_t mine_host[GATHER_BYTES], before[GATHER_BYTES + GUARD], after[GATHER_BYTES + GUARD];
    for (size_t i = 0; i < sizeof(mine_host); i++) mine_host[i] = (uint8_t)(i * 37 + 11);
    memset(before, 0xa5, sizeof(before));
    uint8_t *mine = uform_backend_alloc(b, GATHER_BYTES, 1, "gather input");
    uint8_t *out = uform_backend_alloc(b, sizeof(before), 1, "gather output");
    if (!mine || !out) {
        row("gather: memory", false, uform_last_error());
        uform_backend_free(b, mine), uform_backend_free(b, out);
        return;
    }
    b->ops->upload(b, mine, mine_host, GATHER_BYTES);
    b->ops->upload(b, out, before, sizeof(before));
    size_t bytes[1] = {GATHER_BYTES};
    uform_status_t status = uform_nccl_gather(comm, b, mine, bytes, out, 30000);
    if (status == UFORM_OK) {
        b->ops->download(b, after, out, sizeof(after));
        status = b->ops->synchronize(b);
    }
    bool placed = status == UFORM_OK && memcmp(after, mine_host, GATHER_BYTES) == 0;
    bool untouched = status == UFORM_OK && memcmp(after + GATHER_BYTES, before + GATHER_BYTES, GUARD) == 0;
    row("gather of 1001 bytes over one rank: the block in place", placed,
        status == UFORM_OK ? "" : uform_last_error());
    row("gather: the 64 bytes after the block untouched", untouched, "");
    uform_backend_free(b, mine), uform_backend_free(b, out);
}

/* Rank 0 of 2 whose rank 1 never comes: UFORM_MESH naming the wait, in
 * about the timeout. */
static void test_missing_rank(uform_backend_t *b) {
    uint8_t id[UFORM_NCCL_ID_BYTES];
    uform_nccl_t *comm = NULL;
    uform_status_t status = uform_nccl_unique_id(id);
    if (status == UFORM_OK) status = uform_nccl_connect(id, 2, 0, b, 1, 2000, &comm);
    const char *message = status == UFORM_OK ? "connected, with no peer" : uform_last_error();
    row("2 ranks, the second never comes: UFORM_MESH after 2 s",
        status == UFORM_MESH && !comm && strstr(message, "some never came"), message);
    uform_nccl_free(comm, 1000);
}

int main(void) {
    size_t gpus = 0;
    if (uform_cuda_devices(&gpus) != UFORM_OK) {
        printf("skip test_nccl_ops: %s\n", uform_last_error());   /* "no GPU found: ..." */
        return 0;
    }
    if (gpus == 0) {
        printf("skip test_nccl_ops: no GPU found\n");
        return 0;
    }
    char why[512];
    if (!uform_nccl_usable(why, sizeof(why))) {
        printf("skip test_nccl_ops: %s\n", why);
        return 0;
    }
    uform_backend_t backend;
    if (uform_cuda_backend_init(0, &backend) != UFORM_OK) {
        printf("test_nccl_ops: the CUDA backend did not start on GPU 0: %s\n0 passed, 1 failed\n",
               uform_last_error());
        return 1;
    }
    printf("test_nccl_ops on GPU 0 of %zu\n\n", gpus);
    test_tier(&backend);
    uform_nccl_t *comm = connect_alone(&backend, "one rank: started");
    if (comm) {
        test_sum(&backend, comm);
        test_gather(&backend, comm);
        uform_nccl_free(comm, 30000);
    }
    test_missing_rank(&backend);
    uform_cuda_backend_free(&backend);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
#endif
