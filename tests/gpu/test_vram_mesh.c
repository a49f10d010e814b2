/* test_vram_mesh.c: Trainer.init_vram on a mesh (docs/distributed.md, "GPU
 * hosts" and "NCCL"): the gradients summed over Gloo through host memory, or
 * by NCCL on the GPUs.
 *
 * Checked on GPU 0:
 * - a mesh of one host gives the losses of no mesh bit for bit: its gathers and
 *   its gradient sum still go down to the host and back up, which must not
 *   change a bit;
 * - two processes (this program started again as hosts 0 and 1, over loopback)
 *   each holding half of every step's items, against one process holding them
 *   all: the losses within LOSS_TOLERANCE, and both hosts' weights equal bit
 *   for bit after the steps (the sum answers the same bits on every host);
 *   with two GPUs, again with each process holding GPUs 0 and 1 (a replica
 *   per GPU, the process's GPUs ranks of the mesh's world).
 * Each two-host case runs twice: with UFORM_MESH_ENGINE=gloo (sums through
 * host memory) and as chosen (NCCL where the hosts' GPUs are distinct and
 * NCCL loads: under the CUDA emulation each process's devices are its own, so
 * NCCL, emulated, is chosen; on one real GPU the processes share it, and
 * NCCL, which refuses two ranks on one GPU, is declined). With two GPUs, also
 * a host on each GPU (NCCL's case on a real machine). UFORM_MESH_ENGINE=nccl
 * on hosts sharing a GPU is refused at bootstrap naming the GPU. Both hosts
 * describe one multimem tier. Under the emulation: a host killed in the
 * middle of a sum or of a gather (on NCCL) is named by its peer, and the
 * tier of made-up NVLink layouts (UFORM_EMULATION_NCCL_LSA_RANKS) is each
 * layout's.
 *
 * Tolerance: the mesh sums the two hosts' gradients, one process sums every
 * item's in one pass, so the gradients differ by FP32 rounding; AdamW's first
 * steps move a weight by about the learning rate whatever its gradient's size,
 * so a component near 0 can flip: 1e-3 relative, as test_vram_trainer.c.
 *
 * Prints one table row per check and "N passed, M failed"; without a GPU, the
 * CUDA backend or Gloo it says why and exits 0 (make test-gpu). */
#include "check.h"
#include "trainer_batches.h"

#include "uform.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef UFORM_HAVE_CUDA
int main(void) {
    printf("skip test_vram_mesh: this build has no CUDA backend\n");
    return 0;
}
#else

/* c/cuda/collectives.h: whether NCCL loads here (the tests link the library's objects) */
bool uform_nccl_usable(char *why, size_t why_bytes);

#define LOSS_TOLERANCE 1e-3
#define STEPS 3
#define HOSTS 2

typedef struct {
    int32_t status;
    float losses[STEPS];
    uint64_t digest;   /* FNV-1a of one tensor's parameters after the steps (tensor_digest) */
    char engine[16];   /* the mesh's, as described */
    int32_t multimem;  /* its multimem_tier, as described */
    char message[400];
} host_result_t;

static void row(const char *what, bool ok, const char *detail) {
    printf("| %-60s | %-4s | %s\n", what, ok ? "ok" : "FAIL", detail);
    CHECK(ok, "%s: %s", what, detail);
}

static uform_trainer_options_t mesh_options(uform_mesh_t *mesh) {
    static uform_contrastive_t contrastive = {.temperature_groups = 2};
    static uform_late_interaction_t late = {.width = 8, .weight = 0.5f};
    uform_trainer_options_t o = options_for(UFORM_OBJECTIVE_JOINT, &contrastive);
    /* room for every item on one process: nothing truncated or dropped */
    o.batch.max_rows_per_device = ITEMS;
    o.batch.max_columns_per_row = 64;
    o.late_interaction = &late;
    o.mesh = mesh;
    return o;
}

/* Items [first, last) of step s's texts, their offsets rebased. */
static uform_status_t step_items(uform_trainer_t *t, unsigned s, size_t first, size_t last, float *loss) {
    texts_t all;
    texts_make(&all, s);
    size_t offsets[ITEMS + 1];
    for (size_t i = first; i <= last; i++) offsets[i - first] = all.offsets[i] - all.offsets[first];
    uform_trainer_batch_t batch = {
        .modalities = all.modalities + first,
        .contents = {all.data + all.offsets[first], offsets[last - first], offsets, last - first},
        .bags = all.bags + first,
        .temperature_groups = all.groups + first};
    uform_trainer_step_stats_t stats;
    uform_status_t status = uform_trainer_step(t, &batch, NULL, UFORM_SCALAR_F32, NULL, &stats);
    *loss = status == UFORM_OK ? stats.loss : NAN;
    return status;
}

/* FNV-1a of one tensor's parameters; a failed read answers its status. */
static uform_status_t tensor_digest(const uform_trainer_t *t, uint64_t *digest) {
    size_t count = 0;
    uform_status_t status = uform_trainer_tensor(t, "blocks.0.attention.qkv.weight", 0, NULL, &count);
    float *values = status == UFORM_OK ? malloc(count * sizeof(float)) : NULL;
    if (status == UFORM_OK && !values) status = UFORM_OUT_OF_MEMORY;
    if (status == UFORM_OK) status = uform_trainer_tensor(t, "blocks.0.attention.qkv.weight", 0, values, &count);
    uint64_t hash = 0xcbf29ce484222325ull;
    for (size_t i = 0; status == UFORM_OK && i < count * sizeof(float); i++)
        hash = (hash ^ ((uint8_t *)values)[i]) * 0x100000001b3ull;
    free(values);
    *digest = hash;
    return status;
}

/* Every step over items [first, last) on a trainer of GPUs 0 .. gpus - 1,
 * alone (hosts 0) or as host `host` of `hosts` meeting in directory/job;
 * without `train`, only the mesh's bootstrap and description. */
static host_result_t run(size_t host, size_t hosts, const char *directory, const char *job, size_t first,
                         size_t last, size_t gpus, uint32_t first_gpu, bool train) {
    host_result_t r;
    memset(&r, 0, sizeof(r));
    uform_executor_t *gpu = NULL;
    uform_mesh_t *mesh = NULL;
    uform_trainer_t *trainer = NULL;
    uint32_t devices[2] = {first_gpu, first_gpu + 1};
    uform_status_t status = uform_executor_for_vram(devices, gpus, &gpu);
    uform_mesh_options_t mo = {host, hosts, directory, job, 60000};
    if (status == UFORM_OK && hosts) status = uform_mesh_bootstrap(gpu, &mo, &mesh);
    uform_mesh_description_t described;
    if (status == UFORM_OK && mesh && uform_mesh_describe(mesh, &described) == UFORM_OK)
        snprintf(r.engine, sizeof(r.engine), "%s", described.engine), r.multimem = (int32_t)described.multimem_tier;
    uform_trainer_options_t options = mesh_options(mesh);
    if (status == UFORM_OK && train) status = uform_trainer_init_vram(gpu, &options, &trainer);
    for (unsigned s = 0; s < STEPS && status == UFORM_OK && train; s++) status = step_items(trainer, s, first, last, &r.losses[s]);
    if (status == UFORM_OK && train) status = tensor_digest(trainer, &r.digest);
    r.status = (int32_t)status;
    if (status != UFORM_OK) snprintf(r.message, sizeof(r.message), "%s", uform_last_error());
    uform_trainer_free(trainer);
    uform_mesh_free(mesh);
    uform_executor_free(gpu);
    return r;
}

/* This program started again as hosts 0 and 1 of a mesh in directory/job,
 * each with `count` GPUs, UFORM_MESH_ENGINE=engine, placing "own" (host h on
 * GPU h) or "shared" (every host on the first GPUs); their results. */
static void run_hosts(const char *program, const char *directory, const char *job, const char *count,
                      const char *engine, const char *placing, host_result_t *hosts) {
    pid_t pids[HOSTS];
    char results[HOSTS][300];
    for (size_t h = 0; h < HOSTS; h++) {
        snprintf(results[h], sizeof(results[h]), "%s/result.%s.%zu", directory, job, h);
        char index[24];
        snprintf(index, sizeof(index), "%zu", h);
        fflush(stdout);
        pids[h] = fork();
        if (pids[h] == 0) {
            execl("/proc/self/exe", program, "host", index, directory, job, results[h], count, engine, placing,
                  (char *)NULL);
            execl(program, program, "host", index, directory, job, results[h], count, engine, placing, (char *)NULL);
            _exit(127);
        }
    }
    for (size_t h = 0; h < HOSTS; h++) {
        int code = 0;
        waitpid(pids[h], &code, 0);
        memset(&hosts[h], 0, sizeof(hosts[h]));
        hosts[h].status = -1;
        FILE *f = fopen(results[h], "rb");
        if (!f || fread(&hosts[h], sizeof(hosts[h]), 1, f) != 1)
            snprintf(hosts[h].message, sizeof(hosts[h].message), "host %zu wrote no result (exit status %d)", h,
                     code);
        if (f) fclose(f);
    }
}

int main(int argc, char **argv) {
    if (argc == 9 && strcmp(argv[1], "host") == 0) {   /* started again as one host of the mesh */
        size_t host = strtoul(argv[2], NULL, 10);
        setenv("UFORM_MESH_ENGINE", argv[7], 1);
        bool own_gpu = strcmp(argv[8], "own") == 0;   /* host h on GPU h, else all on the first GPUs */
        /* NCCL insisted on where GPUs are shared: the emulation's processes
         * share theirs too (emulation.h), as on a real machine */
        if (!own_gpu && strcmp(argv[7], "nccl") == 0) setenv("UFORM_EMULATION_SHARED_GPUS", "1", 1);
        /* "lost": host 1 dies in step 1's second gradient sum (2 blocks: 4 sums a step) */
        if (strcmp(argv[8], "lost") == 0 && host == 1) setenv("UFORM_EMULATION_NCCL_DIE_AT", "6", 1);
        /* "lost-gather": host 1 dies in step 1's gather of embeddings (a
         * broadcast per host for the embeddings, another for the token rows:
         * 4 a step) */
        if (strcmp(argv[8], "lost-gather") == 0 && host == 1)
            setenv("UFORM_EMULATION_NCCL_DIE_AT_BROADCAST", "5", 1);
        /* "lsa:a:b": bootstrap only, host 0's emulated NVLink domains of a
         * ranks with multicast (nccl_emulation.h), host 1's of b */
        bool tiers = strncmp(argv[8], "lsa:", 4) == 0;
        if (tiers) {
            char domain[16] = "0";
            sscanf(argv[8] + 4 + (host ? strcspn(argv[8] + 4, ":") + 1 : 0), "%15[0-9]", domain);
            setenv("UFORM_EMULATION_NCCL_LSA_RANKS", domain, 1);
        }
        host_result_t r = run(host, HOSTS, argv[3], argv[4], host * ITEMS / HOSTS, (host + 1) * ITEMS / HOSTS,
                              strtoul(argv[6], NULL, 10), own_gpu ? (uint32_t)host : 0, !tiers);
        FILE *f = fopen(argv[5], "wb");
        bool written = f && fwrite(&r, sizeof(r), 1, f) == 1;
        if (f) fclose(f);
        return written ? 0 : 3;
    }
    uform_capabilities_t capabilities;
    if (uform_capabilities(&capabilities) != UFORM_OK || !capabilities.gpu_backend_built) {
        printf("skip test_vram_mesh: this build has no CUDA backend\n");
        return 0;
    }
    if (capabilities.gpus == 0) {
        printf("skip test_vram_mesh: no GPU found\n");
        return 0;
    }
    if (!capabilities.mesh_engine_built) {
        printf("skip test_vram_mesh: this build has no mesh engine (Gloo was not found when it was built)\n");
        return 0;
    }
    setenv("UFORM_MESH_HOSTNAME", "127.0.0.1", 1);
    char directory[] = "/tmp/uform-vram-mesh-XXXXXX";
    if (!mkdtemp(directory)) return 1;

    host_result_t alone = run(0, 0, NULL, NULL, 0, ITEMS, 1, 0, true);
    row("one process, no mesh (the oracle)", alone.status == UFORM_OK, alone.message);
    host_result_t one = run(0, 1, directory, "one", 0, ITEMS, 1, 0, true);
    char detail[768];
    snprintf(detail, sizeof(detail), "%s losses %.9g %.9g %.9g against %.9g %.9g %.9g", one.message,
             (double)one.losses[0], (double)one.losses[1], (double)one.losses[2], (double)alone.losses[0],
             (double)alone.losses[1], (double)alone.losses[2]);
    row("a mesh of one host = no mesh, bit for bit",
        one.status == UFORM_OK && memcmp(one.losses, alone.losses, sizeof(one.losses)) == 0 &&
            one.digest == alone.digest,
        detail);

    /* two hosts, this program again twice: of GPU 0 each (sharing it), then,
     * with two GPUs, of GPUs 0 and 1 each (a replica per GPU in each process:
     * the process's GPUs are ranks of the mesh's world), and of a GPU each;
     * each through host memory (gloo), then as chosen (auto) */
    /* {GPUs per host, placing, engine}: a GPU each only on a real machine
     * (under the emulation it takes the shared cases' path); 2 x 2 over Gloo
     * only on a real machine too (under the emulation, to keep make test's
     * time: tests/c/test_mesh.c trains 2 x 2 device hosts over Gloo) */
    const char *cases[5][3] = {{"1", "shared", "gloo"}, {"1", "shared", "auto"}, {"2", "shared", "gloo"},
                               {"2", "shared", "auto"}, {"1", "own", "auto"}};
    size_t case_count = capabilities.gpus < 2 ? 2 : 4;
#ifndef UFORM_CUDA_EMULATION
    if (capabilities.gpus >= 2) case_count = 5;
#endif
    for (size_t c = 0; c < case_count; c++) {
#ifdef UFORM_CUDA_EMULATION
        if (c == 2) continue;
#endif
        const char *count = cases[c][0], *placing = cases[c][1], *engine = cases[c][2];
        host_result_t hosts[HOSTS];
        char job[32];
        snprintf(job, sizeof(job), "two-%zu", c);
        run_hosts(argv[0], directory, job, count, engine, placing, hosts);
        char name[96];
        snprintf(name, sizeof(name), "mesh of 2 x %s GPU%s (%s), %s", count, count[0] == '1' ? "" : "s",
                 strcmp(placing, "own") == 0 ? "a GPU each" : "shared", engine);
        for (size_t h = 0; h < HOSTS; h++) {
            double worst = 0;
            for (unsigned s = 0; s < STEPS; s++)
                worst = fmax(worst, fabs((double)hosts[h].losses[s] - alone.losses[s]) /
                                        fmax(fabs((double)alone.losses[s]), 1e-30));
            char what[160];
            snprintf(what, sizeof(what), "%s, host %zu: losses against one process", name, h);
            snprintf(detail, sizeof(detail), "%s largest relative difference %.1e (<= %.0e), engine %s",
                     hosts[h].message, worst, LOSS_TOLERANCE, hosts[h].engine);
            row(what, hosts[h].status == UFORM_OK && worst <= LOSS_TOLERANCE, detail);
        }
        char what[160];
        snprintf(what, sizeof(what), "%s: both hosts' weights equal, bit for bit", name);
        row(what, hosts[0].status == UFORM_OK && hosts[1].status == UFORM_OK && hosts[0].digest == hosts[1].digest,
            "");
        /* which engine summed: gloo when asked; else NCCL exactly where it can be */
        bool distinct = strcmp(placing, "own") == 0;
#ifdef UFORM_CUDA_EMULATION
        distinct = true;   /* each process's emulated devices are its own */
#endif
        const char *expected = strcmp(engine, "gloo") == 0 || !distinct || !uform_nccl_usable(NULL, 0)
                                   ? "gloo" : "nccl";
        snprintf(what, sizeof(what), "%s: the engine is %s", name, expected);
        snprintf(detail, sizeof(detail), "described %s and %s", hosts[0].engine, hosts[1].engine);
        row(what, strcmp(hosts[0].engine, expected) == 0 && strcmp(hosts[1].engine, expected) == 0, detail);
        /* the tier is the world's: both hosts describe the same one, NONE
         * without NCCL (on a real machine, whatever its NVLink has) */
        snprintf(what, sizeof(what), "%s: one multimem tier on both hosts", name);
        snprintf(detail, sizeof(detail), "described %d and %d", (int)hosts[0].multimem, (int)hosts[1].multimem);
        row(what, hosts[0].multimem == hosts[1].multimem &&
                      (strcmp(expected, "nccl") == 0 || hosts[0].multimem == UFORM_MULTIMEM_NONE), detail);
    }
    /* NCCL insisted on, where the hosts share a GPU: refused at bootstrap, naming why */
    host_result_t refused[HOSTS];
    run_hosts(argv[0], directory, "insist", "1", "nccl", "shared", refused);
    for (size_t h = 0; h < HOSTS; h++) {
        bool usable = uform_nccl_usable(NULL, 0);
        bool named = strstr(refused[h].message, "UFORM_MESH_ENGINE=nccl, but") &&
                     (!usable || strstr(refused[h].message, "NCCL refuses two ranks on one GPU"));
        char what[160];
        snprintf(what, sizeof(what), "2 x 1 GPU shared, UFORM_MESH_ENGINE=nccl: host %zu refused at bootstrap", h);
        row(what, refused[h].status == UFORM_MESH && named, refused[h].message);
    }
#ifdef UFORM_CUDA_EMULATION
    /* multimem_tier from what (emulated) NCCL reports of NVLink SHARP, two
     * hosts of two GPUs (4 ranks): {engine, placing, expected tier} */
    const struct {
        const char *engine, *placing;
        uform_multimem_tier_t tier;
        const char *why;
    } tiers[] = {
        {"auto", "lsa:0:0", UFORM_MULTIMEM_NONE, "no multicast anywhere"},
        {"auto", "lsa:2:2", UFORM_MULTIMEM_NVLINK, "multicast within each host's 2 GPUs"},
        {"auto", "lsa:4:4", UFORM_MULTIMEM_NVLINK_SWITCH, "one domain of 4 ranks over both hosts"},
        {"auto", "lsa:4:0", UFORM_MULTIMEM_NONE, "host 1 has none: the world's lowest"},
        {"auto", "lsa:4:2", UFORM_MULTIMEM_NVLINK, "the world's lowest of SWITCH and NVLINK"},
        {"gloo", "lsa:4:4", UFORM_MULTIMEM_NONE, "Gloo sums through host memory"},
    };
    for (size_t c = 0; c < sizeof(tiers) / sizeof(tiers[0]); c++) {
        host_result_t hosts[HOSTS];
        char job[32];
        snprintf(job, sizeof(job), "tier-%zu", c);
        run_hosts(argv[0], directory, job, "2", tiers[c].engine, tiers[c].placing, hosts);
        char what[160];
        snprintf(what, sizeof(what), "2 x 2 GPUs, %s, %s: multimem tier %d (%s)", tiers[c].engine, tiers[c].placing,
                 (int)tiers[c].tier, tiers[c].why);
        snprintf(detail, sizeof(detail), "%s described %d and %d",
                 hosts[0].message[0] ? hosts[0].message : hosts[1].message, (int)hosts[0].multimem,
                 (int)hosts[1].multimem);
        row(what, hosts[0].status == UFORM_OK && hosts[1].status == UFORM_OK &&
                      hosts[0].multimem == (int32_t)tiers[c].tier && hosts[1].multimem == (int32_t)tiers[c].tier,
            detail);
    }
    /* a host lost in the middle of NCCL's sums: its peer's sum fails (NCCL's
     * error, the communicator aborted) and the mesh names the lost host */
    host_result_t lost[HOSTS];
    run_hosts(argv[0], directory, "lost", "1", "auto", "lost", lost);
    row("2 x 1 GPU, NCCL, host 1 killed mid-sum: host 0 names it",
        lost[0].status == UFORM_MESH && strstr(lost[0].message, "lost host 1") && strcmp(lost[0].engine, "nccl") == 0,
        lost[0].message);
    run_hosts(argv[0], directory, "lost-gather", "1", "auto", "lost-gather", lost);
    row("2 x 1 GPU, NCCL, host 1 killed mid-gather: host 0 names it",
        lost[0].status == UFORM_MESH && strstr(lost[0].message, "lost host 1") &&
            strstr(lost[0].message, "NCCL: the gather") && strcmp(lost[0].engine, "nccl") == 0,
        lost[0].message);
#endif
    char command[400];
    snprintf(command, sizeof(command), "rm -rf '%s'", directory);
    if (system(command) != 0) printf("could not remove %s\n", directory);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#endif
