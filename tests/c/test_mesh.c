/* test_mesh.c: the mesh trainer through the public API, under ASan/UBSan: forked
 * processes are the hosts of one mesh over a temporary directory, talking over
 * loopback (UFORM_MESH_HOSTNAME=127.0.0.1).
 *
 * The numbers are checked against one process holding every item in
 * tests/test_mesh.py; here the same comparison runs on the paths Python does not
 * reach under the sanitizers: every gather of step_world.c (embeddings, bags,
 * groups, relations, token vectors), hosts that each hold two replicas, a save
 * on the mesh, the failure of a host mid-run, and the refusals. Tolerance: the
 * mesh sums gradients in another order (FP32), so losses agree to 2e-5
 * relative. Hosts whose trainers run on a device (the guarded backend of
 * test_device_trainer.c: device memory the host cannot touch, as a GPU's) pass
 * their collectives through host copies; they run the CPU kernels in the same
 * order, so they must give the CPU mesh's losses and checkpoint bit for bit.
 * Skips with a message in a build without Gloo. The last line is
 * "N passed, M failed". */
#include "uform.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "guarded_backend.h"

#include "train/gradient_sum.h"
#include "train/late_step.h"
#include "train/mesh.h"
#include "train/mesh_directory.h"
#include "train/trainer_on_device.h"

#define WORLD 8     /* items of the world per step */
#define STEPS 2
#define LOSSES 4    /* loss, contrastive, masked text, late interaction */

typedef struct {
    int32_t status;
    float losses[STEPS][LOSSES];
    char message[400];
    int32_t refused_status;    /* the refused step's answer (refuse_step) */
    char refused_message[400];
    uint64_t buckets_during_backward;   /* of the last step: gradient_sum.c */
    uint64_t late_rows[2];              /* of the last step, gathered and the world's: late_step.c */
} host_result_t;

/* The step at which the last host gives a bad batch (item 0 of no modality),
 * -1 never: every host's step fails naming it, and the run goes on. Set before
 * run_mesh (its hosts are forked). */
static int refuse_step = -1;
static bool refusing;          /* in a host: it is the last one */
/* Blocks of every trainer: 2, so that the gradient sum's buckets (a block
 * each, summed while the backward goes on to the next) are checked in their
 * order; 1 in the loops of injected failures, which only read statuses. */
static size_t run_depth = 2;

/* Item i of the world at step s: bytes derived from (s, i). */
static size_t item_text(size_t step, size_t i, char *out) {
    size_t length = 5 + (step * 7 + i * 11) % 20;
    for (size_t k = 0; k < length; k++) out[k] = (char)('a' + (step * 3 + i * 5 + k * 7) % 26);
    return length;
}

/* The late-interaction rows of the last step's world, as docs/training.md
 * section 9 admits them: a query-only item (i % 3 == 0 in run_steps) its
 * first max_query_span = 10 rows, every other item (both sides) all of its
 * rows; the budgets (a device's tokens) do not bind at this size. */
static void expected_late_rows(uint64_t *gathered, uint64_t *world) {
    char text[32];
    *gathered = *world = 0;
    for (size_t i = 0; i < WORLD; i++) {
        size_t length = item_text(STEPS - 1, i, text);
        *world += length;
        *gathered += i % 3 == 0 && length > 10 ? 10 : length;
    }
}

/* A result's late rows: the term gathered what it reads of the world, no more. */
static void check_late_rows(const host_result_t *r, const char *what, size_t h) {
    uint64_t gathered, world;
    expected_late_rows(&gathered, &world);
    CHECK(r->late_rows[0] == gathered && r->late_rows[1] == world && gathered < world,
          "%s, host %zu: late interaction gathered %llu of the world's %llu rows, not %llu of %llu", what, h,
          (unsigned long long)r->late_rows[0], (unsigned long long)r->late_rows[1], (unsigned long long)gathered,
          (unsigned long long)world);
}

static uform_trainer_options_t options_for(uform_mesh_t *mesh, const char *resume) {
    static const uform_late_interaction_t late = {.width = 16, .max_query_span = 10};
    static uform_contrastive_t contrastive = {.temperature_groups = 2};
    uform_trainer_options_t o;
    memset(&o, 0, sizeof(o));
    o.depth = run_depth;
    o.hidden = 64;
    o.objective = UFORM_OBJECTIVE_JOINT;
    o.contrastive = &contrastive;
    o.late_interaction = &late;
    o.batch.max_rows_per_device = 16;
    o.batch.max_columns_per_row = 32;
    o.schedule.learning_rate = 2e-3f;
    o.schedule.steps = 50;
    o.seed = 9;
    o.mesh = mesh;
    o.resume = resume;
    return o;
}

/* Steps items [first, last) of each step's world; losses into r. */
static uform_status_t run_steps(uform_trainer_t *trainer, size_t first, size_t last, int die_at,
                                host_result_t *r) {
    for (size_t s = 0; s < STEPS; s++) {
        if ((int)s == die_at) kill(getpid(), SIGKILL);
        size_t count = last - first;
        char *data = malloc(WORLD * 32);
        size_t *offsets = malloc((count + 1) * sizeof(size_t));
        uint32_t *modalities = malloc(count * sizeof(uint32_t));
        uint32_t *bags = malloc(count * sizeof(uint32_t));
        uint32_t *groups = malloc(count * sizeof(uint32_t));
        uint32_t *sides = malloc(count * sizeof(uint32_t));
        size_t *edge_offsets = malloc((count + 1) * sizeof(size_t));
        uint32_t *edge_ids = malloc(count * sizeof(uint32_t));
        offsets[0] = edge_offsets[0] = 0;
        size_t edges = 0;
        for (size_t i = first; i < last; i++) {
            size_t k = i - first;
            offsets[k + 1] = offsets[k] + item_text(s, i, data + offsets[k]);
            modalities[k] = UFORM_MODALITY_TEXT;
            bags[k] = (uint32_t)(i / 2);                 /* pairs cross hosts at odd splits */
            groups[k] = (uint32_t)(i % 2);
            sides[k] = i % 3 == 0 ? UFORM_SIDE_QUERY : UFORM_SIDE_QUERY_AND_DOCUMENT;
            if (i % 3 == 1) edge_ids[edges++] = (uint32_t)((i + WORLD / 2) % WORLD); /* world ids */
            edge_offsets[k + 1] = edges;
        }
        uform_relations_t relations;
        memset(&relations, 0, sizeof(relations));
        relations.repel = (uform_edges_t){edge_offsets, edge_ids, NULL};
        uform_trainer_batch_t batch;
        memset(&batch, 0, sizeof(batch));
        batch.modalities = modalities;
        batch.contents = (uform_tape_t){data, offsets[count], offsets, count};
        batch.bags = bags;
        batch.temperature_groups = groups;
        batch.sides = sides;
        batch.relations = &relations;
        bool refused = (int)s == refuse_step;
        if (refused && refusing && count) modalities[0] = 9;
        uform_trainer_step_stats_t stats;
        uform_status_t status = uform_trainer_step(trainer, &batch, NULL, UFORM_SCALAR_F32, NULL, &stats);
        free(data), free(offsets), free(modalities), free(bags), free(groups), free(sides);
        free(edge_offsets), free(edge_ids);
        if (refused) {
            r->refused_status = (int32_t)status;
            snprintf(r->refused_message, sizeof(r->refused_message), "%s", uform_last_error());
            continue;
        }
        if (status != UFORM_OK) return status;
        r->losses[s][0] = stats.loss;
        r->losses[s][1] = stats.contrastive_loss;
        r->losses[s][2] = stats.masked_text_loss;
        r->losses[s][3] = stats.late_interaction_loss;
    }
    return UFORM_OK;
}

/* One host's whole run: bootstrap, init (on the guarded device backend when
 * on_device), steps, save; never returns. */
static void host_main(const char *directory, const char *job, size_t host, size_t hosts, int replicas,
                      int die_at, const char *save, size_t hidden, bool on_device, size_t fail_at, int fd) {
    host_result_t r;
    memset(&r, 0, sizeof(r));
    refusing = host + 1 == hosts;
    uint32_t domains[2] = {0, 1};   /* recorded, not bound: two replicas on any machine */
    uform_executor_t *executor = NULL;
    uform_mesh_t *mesh = NULL;
    uform_trainer_t *trainer = NULL;
    uform_status_t status = uform_executor_for_ram(1, domains, (size_t)replicas, &executor);
    uform_mesh_options_t mo = {host, hosts, directory, job, 8000};
    if (status == UFORM_OK) status = uform_mesh_bootstrap(executor, &mo, &mesh);
    uform_trainer_options_t o = options_for(mesh, NULL);
    if (hidden) o.hidden = hidden;
    guard_t *guards[2] = {NULL, NULL};
    if (status == UFORM_OK && on_device) {
        /* with two replicas, two devices: a replica per device, the host's
         * last device failing when asked */
        uform_backend_t devices[2];
        for (int d = 0; d < replicas; d++) {
            devices[d] = guarded_backend(UFORM_CPU_CLASS_AUTO, executor);
            guards[d] = guard_of(&devices[d]);
        }
        status = uform_trainer_init_on_devices(executor, &o, devices, (size_t)replicas, &trainer);
        guard_t *failing = guards[replicas - 1];
        failing->synchronizes = 0;
        failing->fail_synchronize_at = fail_at;   /* a device failure at that synchronize of the steps */
    } else if (status == UFORM_OK) {
        status = uform_trainer_init_ram(executor, &o, &trainer);
    }
    if (status == UFORM_OK)
        status = run_steps(trainer, host * WORLD / hosts, (host + 1) * WORLD / hosts, die_at, &r);
    if (status == UFORM_OK) r.buckets_during_backward = uform_trainer_buckets_during_backward(trainer);
    if (status == UFORM_OK) {
        size_t late[2];
        uform_trainer_late_rows(trainer, &late[0], &late[1]);
        r.late_rows[0] = late[0], r.late_rows[1] = late[1];
    }
    if (status == UFORM_OK && save) status = uform_trainer_save(trainer, save, NULL);
    r.status = (int32_t)status;
    if (status != UFORM_OK) snprintf(r.message, sizeof(r.message), "%s", uform_last_error());
    uform_trainer_free(trainer);
    for (int d = 0; d < 2; d++) {
        guard_t *guard = guards[d];
        if (!guard) continue;
        if (guard->violations || guard->allocations) {   /* failed steps too: their error paths */
            r.status = -2;
            snprintf(r.message, sizeof(r.message),
                     "device %d: %zu pointers on the wrong side (%s), %zu buffers leaked", d, guard->violations,
                     guard->violation, guard->allocations);
        }
        guard_free(guard);
    }
    uform_mesh_free(mesh);
    uform_executor_free(executor);
    ssize_t written = write(fd, &r, sizeof(r));
    exit(written == (ssize_t)sizeof(r) ? 0 : 3);
}

typedef struct {
    int replicas, die_at;     /* die_at: the step host (hosts - 1) is killed at, -1 never */
    const char *save;
    size_t odd_hidden;        /* the last host's hidden width, 0: the same */
    unsigned on_device;       /* bit h: host h trains on the guarded device backend */
    size_t fail_at;           /* the last host's device fails at this synchronize of its steps (0: never) */
} mesh_run_t;

/* Forks `hosts` hosts and collects their results (in host order). */
static void run_mesh(const char *directory, const char *job, size_t hosts, mesh_run_t run,
                     host_result_t *results) {
    pid_t pids[4];
    int fds[4];
    for (size_t h = 0; h < hosts; h++) {
        int pipe_fds[2];
        if (pipe(pipe_fds) != 0) abort();
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            close(pipe_fds[0]);
            bool last = h + 1 == hosts;
            host_main(directory, job, h, hosts, run.replicas, last ? run.die_at : -1, run.save,
                      last ? run.odd_hidden : 0, (run.on_device >> h) & 1u, last ? run.fail_at : 0,
                      pipe_fds[1]);
        }
        close(pipe_fds[1]);
        pids[h] = pid;
        fds[h] = pipe_fds[0];
    }
    for (size_t h = 0; h < hosts; h++) {
        memset(&results[h], 0, sizeof(results[h]));
        results[h].status = -1;
        if (read(fds[h], &results[h], sizeof(results[h])) != (ssize_t)sizeof(results[h]))
            results[h].status = -1;   /* killed: no result */
        close(fds[h]);
        int code = 0;
        waitpid(pids[h], &code, 0);
        /* a host exits 0 after writing its result; a sanitizer report (a leak found at
         * exit) makes it exit otherwise; only the host killed on purpose may not exit */
        bool killed_on_purpose = run.die_at >= 0 && h + 1 == hosts;
        CHECK(killed_on_purpose ? WIFSIGNALED(code) : WIFEXITED(code) && WEXITSTATUS(code) == 0,
              "host %zu of %zu ended with status %d", h, hosts, code);
    }
}

static bool close_enough(float a, float b) {
    return fabsf(a - b) <= 2e-5f * fmaxf(fabsf(a), fabsf(b)) + 1e-7f;
}

int main(void) {
    (void)rng_next;   /* check.h's generator: these runs draw nothing */
    uform_capabilities_t capabilities;
    if (uform_capabilities(&capabilities) != UFORM_OK || !capabilities.mesh_engine_built) {
        printf("skip test_mesh: this build has no mesh engine (Gloo was not found when it was built)\n");
        printf("0 passed, 0 failed\n");
        return 0;
    }
    setenv("UFORM_MESH_HOSTNAME", "127.0.0.1", 1);
    char directory[] = "/tmp/uform-test-mesh-XXXXXX";
    if (!mkdtemp(directory)) return 1;

    /* The oracle: one process, one replica, every item. */
    host_result_t alone;
    memset(&alone, 0, sizeof(alone));
    uform_executor_t *executor = NULL;
    uform_trainer_t *trainer = NULL;
    CHECK(uform_executor_for_ram(1, NULL, 0, &executor) == UFORM_OK, "executor");
    uform_trainer_options_t o = options_for(NULL, NULL);
    CHECK(uform_trainer_init_ram(executor, &o, &trainer) == UFORM_OK, "init: %s", uform_last_error());
    CHECK(run_steps(trainer, 0, WORLD, -1, &alone) == UFORM_OK, "steps: %s", uform_last_error());
    {
        size_t late[2];
        uform_trainer_late_rows(trainer, &late[0], &late[1]);
        alone.late_rows[0] = late[0], alone.late_rows[1] = late[1];
        check_late_rows(&alone, "one process", 0);
    }
    uform_trainer_free(trainer);
    CHECK(alone.losses[0][1] > 0 && alone.losses[0][2] > 0 && alone.losses[0][3] > 0,
          "every term is present: %g %g %g", alone.losses[0][1], alone.losses[0][2], alone.losses[0][3]);

    /* 2 and 3 hosts of one replica, 2 hosts of two replicas each: the oracle's losses. */
    size_t host_counts[3] = {2, 3, 2};
    int replicas[3] = {1, 1, 2};
    host_result_t equal[3][4];   /* kept: the device hosts below must give the same bits */
    for (size_t c = 0; c < 3; c++) {
        host_result_t *results = equal[c];
        char job[32];
        snprintf(job, sizeof(job), "equal-%zu", c);
        run_mesh(directory, job, host_counts[c], (mesh_run_t){replicas[c], -1, NULL, 0, 0, 0}, results);
        for (size_t h = 0; h < host_counts[c]; h++) {
            CHECK(results[h].status == UFORM_OK, "hosts %zu x %d, host %zu: %s", host_counts[c], replicas[c], h,
                  results[h].message);
            /* the sums overlapped the backward: every block's bucket handed
             * over as the backward finished it (the losses check the order) */
            CHECK(results[h].buckets_during_backward == run_depth,
                  "hosts %zu x %d, host %zu: %llu buckets summed during the backward, not %zu", host_counts[c],
                  replicas[c], h, (unsigned long long)results[h].buckets_during_backward, run_depth);
            check_late_rows(&results[h], "a mesh", h);
            for (size_t s = 0; s < STEPS && results[h].status == UFORM_OK; s++)
                for (size_t k = 0; k < LOSSES; k++)
                    CHECK(close_enough(results[h].losses[s][k], alone.losses[s][k]),
                          "hosts %zu x %d, host %zu, step %zu, loss %zu: %.9g against %.9g", host_counts[c],
                          replicas[c], h, s, k, results[h].losses[s][k], alone.losses[s][k]);
        }
    }

    /* A save on the mesh: host 0 writes, the file loads as a model. */
    char checkpoint[512];
    snprintf(checkpoint, sizeof(checkpoint), "%s/saved.safetensors", directory);
    {
        host_result_t results[2];
        run_mesh(directory, "save", 2, (mesh_run_t){1, -1, checkpoint, 0, 0, 0}, results);
        CHECK(results[0].status == UFORM_OK && results[1].status == UFORM_OK, "save: %s / %s",
              results[0].message, results[1].message);
        uform_model_t *model = NULL;
        CHECK(uform_model_load_ram(checkpoint, NULL, &model) == UFORM_OK, "load: %s", uform_last_error());
        uform_model_free(model);
    }

    /* Hosts on a device: the CPU mesh's losses and checkpoint, bit for bit (2
     * hosts, with the save; 3 hosts, uneven splits). */
    {
        char saved_on_device[600];
        snprintf(saved_on_device, sizeof(saved_on_device), "%s/saved-on-device.safetensors", directory);
        host_result_t results[3];
        run_mesh(directory, "device-2", 2, (mesh_run_t){1, -1, saved_on_device, 0, 3u, 0}, results);
        for (size_t h = 0; h < 2; h++)
            CHECK(results[h].status == UFORM_OK &&
                      memcmp(results[h].losses, equal[0][h].losses, sizeof(results[h].losses)) == 0,
                  "device hosts 2, host %zu: %s (loss %.9g against the CPU mesh's %.9g)", h, results[h].message,
                  results[h].losses[STEPS - 1][0], equal[0][h].losses[STEPS - 1][0]);
        CHECK(same_file(checkpoint, saved_on_device), "device hosts: the saved checkpoint differs from the CPU mesh's");
        run_mesh(directory, "device-3", 3, (mesh_run_t){1, -1, NULL, 0, 7u, 0}, results);
        for (size_t h = 0; h < 3; h++)
            CHECK(results[h].status == UFORM_OK &&
                      memcmp(results[h].losses, equal[1][h].losses, sizeof(results[h].losses)) == 0 &&
                      results[h].buckets_during_backward == run_depth,
                  "device hosts 3, host %zu: %s (%llu buckets summed during the backward)", h, results[h].message,
                  (unsigned long long)results[h].buckets_during_backward);
        for (size_t h = 0; h < 3; h++) check_late_rows(&results[h], "device hosts 3", h);
        /* A device failure on host 1 at each synchronize of its steps in turn:
         * host 1 reports it as itself, and host 0 names host 1 and its message
         * at once, whether the failure reached it through an agreement or by
         * host 1 leaving the mesh mid-collective (mesh.h: uform_mesh_abandon),
         * well inside the 8 s timeout it would otherwise wait out. */
        size_t reached = 0, host0_finished_at = 0;
        run_depth = 1;
        for (size_t at = 1; at <= 80; at++) {
            char job[32];
            snprintf(job, sizeof(job), "device-fails-%zu", at);
            time_t started = time(NULL);
            run_mesh(directory, job, 2, (mesh_run_t){1, -1, NULL, 0, 3u, at}, results);
            if (results[0].status == UFORM_OK && results[1].status == UFORM_OK) break;   /* past the last */
            reached = at;
            CHECK(results[1].status == UFORM_DEVICE && strstr(results[1].message, "injected"),
                  "device failure at synchronize %zu, host 1: %d %s", at, results[1].status, results[1].message);
            /* the last step's update's own synchronize: host 0 applied it and has no
             * collective left to learn of host 1's failure in */
            if (results[0].status == UFORM_OK && !host0_finished_at) {
                host0_finished_at = at;
                continue;
            }
            CHECK(results[0].status == UFORM_MESH && strstr(results[0].message, "host 1") &&
                      strstr(results[0].message, "injected"),
                  "device failure at synchronize %zu, host 0: %d %s", at, results[0].status, results[0].message);
            CHECK(time(NULL) - started < 5, "device failure at synchronize %zu: %ld s", at,
                  (long)(time(NULL) - started));
        }
        CHECK(reached >= 10, "the injections reached %zu synchronizes of two steps", reached);
        CHECK(host0_finished_at == 0 || host0_finished_at == reached,
              "host 0 finished without host 1 at synchronize %zu of %zu (only the last may)", host0_finished_at,
              reached);
        printf("a device failure at each of a device host's %zu synchronizes (2 steps): named at once\n", reached);
        run_depth = 2;
        /* Hosts of two devices each (a replica per device in each process,
         * train/replica_group.c): the one process's losses (the world's
         * gradients summed in another order: close_enough), a save that
         * loads; then a failure of host 1's second device at each
         * synchronize of its steps in turn: host 1 answers it as itself, host
         * 0 fails naming it (or, for the last update, finishes). */
        char saved_on_devices[600];
        snprintf(saved_on_devices, sizeof(saved_on_devices), "%s/saved-on-devices.safetensors", directory);
        run_mesh(directory, "devices-2x2", 2, (mesh_run_t){2, -1, saved_on_devices, 0, 3u, 0}, results);
        for (size_t h = 0; h < 2; h++) {
            CHECK(results[h].status == UFORM_OK, "2 hosts x 2 devices, host %zu: %s", h, results[h].message);
            for (size_t s = 0; s < STEPS && results[h].status == UFORM_OK; s++)
                for (size_t k = 0; k < LOSSES; k++)
                    CHECK(close_enough(results[h].losses[s][k], alone.losses[s][k]),
                          "2 hosts x 2 devices, host %zu, step %zu, loss %zu: %.9g against %.9g", h, s, k,
                          results[h].losses[s][k], alone.losses[s][k]);
        }
        uform_model_t *model = NULL;
        CHECK(uform_model_load_ram(saved_on_devices, NULL, &model) == UFORM_OK, "2 hosts x 2 devices: load %s",
              uform_last_error());
        uform_model_free(model);
        /* host 1 gives a bad batch at step 0: both hosts' step fails naming it
         * (host 1's refusal, checked before its GPUs split it, is agreed),
         * and step 1 runs */
        refuse_step = 0;
        run_mesh(directory, "devices-refused", 2, (mesh_run_t){2, -1, NULL, 0, 3u, 0}, results);
        refuse_step = -1;
        CHECK(results[1].refused_status == UFORM_INVALID_ARGUMENT && strstr(results[1].refused_message,
                                                                            "modalities[0]"),
              "2 x 2 devices, a bad batch on host 1: %d %s", results[1].refused_status, results[1].refused_message);
        CHECK(results[0].refused_status == UFORM_MESH && strstr(results[0].refused_message, "modalities[0]"),
              "2 x 2 devices, a bad batch on host 1, host 0: %d %s", results[0].refused_status,
              results[0].refused_message);
        CHECK(results[0].status == UFORM_OK && results[1].status == UFORM_OK && results[0].losses[1][0] > 0,
              "2 x 2 devices, the step after the refused one: %s / %s", results[0].message, results[1].message);
        size_t failures = 0;
        run_depth = 1;
        for (size_t at = 1; at <= 80; at++) {
            char job[40];
            snprintf(job, sizeof(job), "devices-fail-%zu", at);
            time_t started = time(NULL);
            run_mesh(directory, job, 2, (mesh_run_t){2, -1, NULL, 0, 3u, at}, results);
            if (results[0].status == UFORM_OK && results[1].status == UFORM_OK) break;   /* past the last */
            failures = at;
            CHECK(results[1].status == UFORM_DEVICE && strstr(results[1].message, "injected"),
                  "2 x 2 devices, failure at synchronize %zu, host 1: %d %s", at, results[1].status,
                  results[1].message);
            CHECK(results[0].status == UFORM_OK ||
                      (results[0].status == UFORM_MESH && strstr(results[0].message, "injected")),
                  "2 x 2 devices, failure at synchronize %zu, host 0: %d %s", at, results[0].status,
                  results[0].message);
            CHECK(time(NULL) - started < 5, "2 x 2 devices, failure at synchronize %zu: %ld s", at,
                  (long)(time(NULL) - started));
        }
        CHECK(failures >= 10, "2 x 2 devices: the injections reached %zu synchronizes", failures);
        printf("2 hosts x 2 devices: a failure at each of %zu synchronizes of a host's second device: answered\n",
               failures);
        run_depth = 2;
        /* one host on CPUs, one on a device: refused at init, naming the field */
        run_mesh(directory, "mixed", 2, (mesh_run_t){1, -1, NULL, 0, 2u, 0}, results);
        for (size_t h = 0; h < 2; h++)
            CHECK(results[h].status == UFORM_MESH && strstr(results[h].message, "the trainer's memory"),
                  "mixed host %zu: %d %s", h, results[h].status, results[h].message);
    }

    /* A host on GPUs (a stand-in that introduces itself as one HOPPER GPU, as a
     * VRAM executor's bootstrap does) and one on CPUs: refused at bootstrap,
     * naming both kinds. */
    {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            uform_mesh_directory_t d;
            uform_status_t status = uform_mesh_directory_meet(directory, "kinds", 1, 2, 8000, &d);
            if (status == UFORM_OK) status = uform_mesh_directory_set(&d, "host.1", "1 3 - gpu-host", 14);
            exit(status == UFORM_OK ? 0 : 1);
        }
        uform_mesh_t *mesh = NULL;
        uform_mesh_options_t mo = {0, 2, directory, "kinds", 8000};
        uform_status_t status = uform_mesh_bootstrap(executor, &mo, &mesh);
        CHECK(status == UFORM_MESH && !mesh && strstr(uform_last_error(), "HOPPER") &&
                  strstr(uform_last_error(), "CPUs") && strstr(uform_last_error(), "gpu-host"),
              "a mesh of GPUs and CPUs: %d %s", status, uform_last_error());
        int code = 0;
        waitpid(pid, &code, 0);
        CHECK(WIFEXITED(code) && WEXITSTATUS(code) == 0, "the stand-in host ended with %d", code);
        uform_mesh_free(mesh);
    }

    /* A peer that closed its connections while this host sends to it: Gloo's
     * write meets a closed socket (SIGPIPE, whose default action would end
     * the process); the sum fails with UFORM_MESH and the process lives. */
    {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            uform_executor_t *own = NULL;
            uform_mesh_t *mesh = NULL;
            uform_mesh_options_t mo = {1, 2, directory, "closed-peer", 8000};
            bool ok = uform_executor_for_ram(1, NULL, 0, &own) == UFORM_OK &&
                      uform_mesh_bootstrap(own, &mo, &mesh) == UFORM_OK;
            void *go = NULL;
            size_t size = 0;
            ok = ok && uform_mesh_directory_get(&mesh->directory, "go", 8000, &go, &size) == UFORM_OK;
            free(go);
            uform_mesh_directory_t directory_copy = ok ? mesh->directory : (uform_mesh_directory_t){0};
            uform_mesh_free(mesh);   /* closes the connections */
            ok = ok && uform_mesh_directory_set(&directory_copy, "closed", "1", 1) == UFORM_OK;
            uform_executor_free(own);
            exit(ok ? 0 : 1);
        }
        uform_mesh_t *mesh = NULL;
        uform_mesh_options_t mo = {0, 2, directory, "closed-peer", 8000};
        uform_status_t status = uform_mesh_bootstrap(executor, &mo, &mesh);
        CHECK(status == UFORM_OK, "closed peer: bootstrap %s", uform_last_error());
        if (mesh) {
            void *closed = NULL;
            size_t size = 0;
            uform_mesh_directory_set(&mesh->directory, "go", "1", 1);
            CHECK(uform_mesh_directory_get(&mesh->directory, "closed", 8000, &closed, &size) == UFORM_OK,
                  "closed peer: %s", uform_last_error());
            free(closed);
            size_t count = (size_t)16 << 20;   /* 64 MiB: many writes after the peer's reset */
            float *values = calloc(count, sizeof(float));
            /* SIGPIPE blocked here too, so one the library leaves behind stays
             * pending (and is seen below) instead of ending this process */
            sigset_t pipe_signal, saved, pending;
            sigemptyset(&pipe_signal);
            sigaddset(&pipe_signal, SIGPIPE);
            pthread_sigmask(SIG_BLOCK, &pipe_signal, &saved);
            status = values ? uform_mesh_sum(mesh, values, count) : UFORM_OUT_OF_MEMORY;
            CHECK(status == UFORM_MESH, "closed peer: the sum answers %d: %s", status, uform_last_error());
            free(values);
            sigemptyset(&pending);
            sigpending(&pending);
            bool left_pending = sigismember(&pending, SIGPIPE) == 1;
            CHECK(!left_pending, "closed peer: a SIGPIPE is left pending");
            if (left_pending) {
                struct timespec now = {0, 0};
                sigtimedwait(&pipe_signal, NULL, &now);
            }
            pthread_sigmask(SIG_SETMASK, &saved, NULL);
        }
        uform_mesh_free(mesh);
        int code = 0;
        waitpid(pid, &code, 0);
        CHECK(WIFEXITED(code) && WEXITSTATUS(code) == 0, "the closing peer ended with %d", code);
    }

    /* A host killed at its second step: the other names it, within the timeout. */
    {
        host_result_t results[2];
        time_t started = time(NULL);
        run_mesh(directory, "killed", 2, (mesh_run_t){1, 1, NULL, 0, 0, 0}, results);
        CHECK(results[0].status == UFORM_MESH, "the survivor: %d %s", results[0].status, results[0].message);
        CHECK(strstr(results[0].message, "lost host 1") != NULL, "names host 1: %s", results[0].message);
        CHECK(results[1].status == -1, "the killed host wrote nothing");
        CHECK(time(NULL) - started < 30, "bounded: %ld s", (long)(time(NULL) - started));
    }

    /* A host with another model shape: both refuse at init, naming the field. */
    {
        host_result_t results[2];
        run_mesh(directory, "shape", 2, (mesh_run_t){1, -1, NULL, 128, 0, 0}, results);
        for (size_t h = 0; h < 2; h++)
            CHECK(results[h].status == UFORM_MESH && strstr(results[h].message, "hidden"),
                  "host %zu: %d %s", h, results[h].status, results[h].message);
    }

    /* Refusals without peers: bad options, a mesh on another executor, one taken twice. */
    {
        uform_mesh_t *mesh = NULL;
        uform_mesh_options_t bad = {0, 0, directory, "job", 100};
        CHECK(uform_mesh_bootstrap(executor, &bad, &mesh) == UFORM_INVALID_ARGUMENT && !mesh, "count 0");
        bad = (uform_mesh_options_t){0, 1, directory, "a/b", 100};
        CHECK(uform_mesh_bootstrap(executor, &bad, &mesh) == UFORM_INVALID_ARGUMENT, "job with a slash");
        CHECK(uform_mesh_bootstrap(executor, NULL, &mesh) == UFORM_INVALID_ARGUMENT, "NULL options");
        CHECK(uform_mesh_describe(NULL, NULL) == UFORM_INVALID_ARGUMENT, "describe NULL");
        uform_mesh_options_t one = {0, 1, directory, "one", 100};
        CHECK(uform_mesh_bootstrap(executor, &one, &mesh) == UFORM_OK, "one host: %s", uform_last_error());
        uform_mesh_description_t description;
        CHECK(uform_mesh_describe(mesh, &description) == UFORM_OK && description.host_domain_count == 1 &&
                  description.ranks == 1 && strcmp(description.engine, "gloo") == 0 &&
                  strlen(description.run_id) == 32,
              "describe");
        uform_executor_t *other = NULL;
        CHECK(uform_executor_for_ram(1, NULL, 0, &other) == UFORM_OK, "executor");
        uform_trainer_options_t mo = options_for(mesh, NULL);
        uform_trainer_t *t1 = NULL, *t2 = NULL;
        CHECK(uform_trainer_init_ram(other, &mo, &t2) == UFORM_INVALID_ARGUMENT && !t2, "another executor");
        CHECK(uform_trainer_init_ram(executor, &mo, &t1) == UFORM_OK, "init: %s", uform_last_error());
        CHECK(uform_trainer_init_ram(executor, &mo, &t2) == UFORM_INVALID_ARGUMENT && !t2, "taken twice");
        uform_trainer_free(t1);
        CHECK(uform_trainer_init_ram(executor, &mo, &t2) == UFORM_OK, "free again: %s", uform_last_error());
        uform_trainer_free(t2);
        uform_executor_free(other);
        uform_mesh_free(mesh);
    }
    uform_executor_free(executor);
    char command[600];
    snprintf(command, sizeof(command), "rm -rf '%s'", directory);
    if (system(command) != 0) printf("could not remove %s\n", directory);
    printf("test_mesh: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
