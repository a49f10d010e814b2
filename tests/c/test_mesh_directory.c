/* test_mesh_directory.c: the shared-directory rendezvous of c/src/train/mesh_directory.c.
 *
 * Hosts are forked children of this program meeting in a mkdtemp folder; each
 * child sends its outcome (status, message, run id, its own checks, seconds)
 * back through a pipe. Checked: 1, 2 and 4 hosts meet and agree on the run id
 * and exchange keys; files left by an earlier run (run, hello.*, its run folder
 * and keys, junk) are never read by a new meeting; two jobs meet in one folder
 * at once; a missing follower, a missing leader and a missing key are named in
 * time; a host count that differs is named; every argument check names its
 * field; leave removes the run's files. */
#include "check.h"

#include "train/mesh_directory.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char root[256];

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void sleep_ms(unsigned ms) {
    struct timespec t = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {}
}

static bool contains(const char *text, const char *part) { return strstr(text, part) != NULL; }

static void path_of(char *out, size_t size, const char *a, const char *b, const char *c) {
    snprintf(out, size, "%s/%s%s%s", a, b, c ? "/" : "", c ? c : "");
}

static bool file_exists(const char *path) {
    struct stat info;
    return stat(path, &info) == 0;
}

static void write_file(const char *path, const char *text) {
    FILE *file = fopen(path, "w");
    if (!file) {
        CHECK(false, "cannot write %s", path);
        return;
    }
    fputs(text, file);
    fclose(file);
}

/* ---- children --------------------------------------------------------------- */

enum { MEET, KEYS, SET_OLD, CHECK_NEW };

typedef struct {
    const char *job;
    size_t host, hosts;
    uint64_t timeout_ms;
    int action;
    unsigned delay_ms;
} plan_t;

typedef struct {
    int status;
    int ok;            /* the child's own checks */
    double seconds;    /* of the meeting */
    char run_id[33];
    char message[1024];
    char note[256];    /* the first failed check of the child */
} outcome_t;

typedef struct {
    pid_t pid;
    int fd;
} child_t;

static void note(outcome_t *o, bool condition, const char *what) {
    if (condition || !o->ok) return;
    o->ok = 0;
    snprintf(o->note, sizeof(o->note), "%s (%s)", what, uform_last_error());
}

static void run_plan(const plan_t *p, outcome_t *o) {
    memset(o, 0, sizeof(*o));
    o->ok = 1;
    sleep_ms(p->delay_ms);
    uform_mesh_directory_t d;
    double start = seconds_now();
    o->status = uform_mesh_directory_meet(root, p->job, p->host, p->hosts, p->timeout_ms, &d);
    o->seconds = seconds_now() - start;
    snprintf(o->message, sizeof(o->message), "%s", uform_last_error());
    if (o->status != UFORM_OK) return;
    memcpy(o->run_id, d.run_id, sizeof(o->run_id));
    char key[32], value[64];
    if (p->action == KEYS) {
        snprintf(key, sizeof(key), "k.%zu", p->host);
        snprintf(value, sizeof(value), "the value of host %zu", p->host);
        note(o, uform_mesh_directory_set(&d, key, value, strlen(value)) == UFORM_OK, "set");
        for (size_t h = 0; h < p->hosts; h++) {
            if (h == p->host) continue;
            void *got = NULL;
            size_t size = 0;
            snprintf(key, sizeof(key), "k.%zu", h);
            snprintf(value, sizeof(value), "the value of host %zu", h);
            uform_status_t status = uform_mesh_directory_get(&d, key, 5000, &got, &size);
            note(o, status == UFORM_OK, "get");
            note(o, status != UFORM_OK || (size == strlen(value) && memcmp(got, value, size) == 0),
                 "get's value");
            free(got);
        }
        /* A last exchange, so that host 0 leaves only when everyone is done. */
        snprintf(key, sizeof(key), "done.%zu", p->host);
        note(o, uform_mesh_directory_set(&d, key, NULL, 0) == UFORM_OK, "set done");
        if (p->host == 0) {
            for (size_t h = 1; h < p->hosts; h++) {
                void *got = NULL;
                size_t size = 1;
                snprintf(key, sizeof(key), "done.%zu", h);
                note(o, uform_mesh_directory_get(&d, key, 5000, &got, &size) == UFORM_OK && size == 0,
                     "get done");
                free(got);
            }
            uform_mesh_directory_leave(&d);
            note(o, d.hosts == 0, "leave clears the handle");
        }
    } else if (p->action == SET_OLD) {
        if (p->host == 0) note(o, uform_mesh_directory_set(&d, "old", "old run", 7) == UFORM_OK, "set old");
    } else if (p->action == CHECK_NEW) {
        note(o, !uform_mesh_directory_has(&d, "old"), "the old run's key is not visible");
        note(o, !uform_mesh_directory_has(&d, "junk"), "junk of the old run is not visible");
    }
}

static child_t spawn(const plan_t *plan) {
    int fds[2];
    child_t child = {-1, -1};
    if (pipe(fds) != 0) {
        CHECK(false, "pipe: %s", strerror(errno));
        return child;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        outcome_t outcome;
        run_plan(plan, &outcome);
        const char *bytes = (const char *)&outcome;
        size_t done = 0;
        while (done < sizeof(outcome)) {
            ssize_t n = write(fds[1], bytes + done, sizeof(outcome) - done);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            done += (size_t)n;
        }
        close(fds[1]);
        exit(0); /* exit, not _exit: the sanitizers check the child too */
    }
    close(fds[1]);
    if (pid < 0) {
        CHECK(false, "fork: %s", strerror(errno));
        close(fds[0]);
        return child;
    }
    child.pid = pid;
    child.fd = fds[0];
    return child;
}

static outcome_t collect(child_t child) {
    outcome_t outcome;
    memset(&outcome, 0, sizeof(outcome));
    outcome.status = -1;
    if (child.pid < 0) return outcome;
    char *bytes = (char *)&outcome;
    size_t done = 0;
    while (done < sizeof(outcome)) {
        ssize_t n = read(child.fd, bytes + done, sizeof(outcome) - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += (size_t)n;
    }
    close(child.fd);
    int wait_status = 0;
    while (waitpid(child.pid, &wait_status, 0) < 0 && errno == EINTR) {}
    if (done != sizeof(outcome) || !WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
        outcome.status = -1;
        outcome.ok = 0;
        snprintf(outcome.note, sizeof(outcome.note), "the child failed (exit status %d)",
                 WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1);
    }
    return outcome;
}

/* Runs `count` plans at once and collects them in order. */
static void run_all(const plan_t *plans, size_t count, outcome_t *outcomes) {
    child_t children[8];
    for (size_t i = 0; i < count; i++) children[i] = spawn(&plans[i]);
    for (size_t i = 0; i < count; i++) outcomes[i] = collect(children[i]);
}

static bool is_run_id(const char *id) {
    if (strlen(id) != 32) return false;
    for (size_t i = 0; i < 32; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f'))) return false;
    return true;
}

/* ---- tests ----------------------------------------------------------------- */

static void test_one_host(void) {
    uform_mesh_directory_t d;
    uform_status_t status = uform_mesh_directory_meet(root, "solo", 0, 1, 1000, &d);
    CHECK(status == UFORM_OK, "1 host meets: %s", uform_last_error());
    if (status != UFORM_OK) return;
    CHECK(is_run_id(d.run_id), "run id \"%s\" is 32 hex digits", d.run_id);
    CHECK(file_exists(d.run_path), "the run folder %s exists", d.run_path);
    char expected[512];
    snprintf(expected, sizeof(expected), "%s/solo/run-%s", root, d.run_id);
    CHECK(strcmp(d.run_path, expected) == 0, "run_path %s", d.run_path);

    CHECK(!uform_mesh_directory_has(&d, "a"), "no key a yet");
    CHECK(uform_mesh_directory_set(&d, "a", "first", 5) == UFORM_OK, "set a: %s", uform_last_error());
    CHECK(uform_mesh_directory_set(&d, "a", "second!", 7) == UFORM_OK, "set a again");
    CHECK(uform_mesh_directory_has(&d, "a"), "key a exists");
    void *value = NULL;
    size_t size = 0;
    CHECK(uform_mesh_directory_get(&d, "a", 100, &value, &size) == UFORM_OK && size == 7 &&
              memcmp(value, "second!", 7) == 0,
          "get a gives the newest value");
    free(value);

    /* A larger value, and an empty one. */
    size_t big = (size_t)1 << 20;
    unsigned char *data = malloc(big);
    for (size_t i = 0; i < big; i++) data[i] = (unsigned char)(rng_next() >> 56);
    CHECK(uform_mesh_directory_set(&d, "big_value-1.0", data, big) == UFORM_OK, "set 1 MiB");
    value = NULL;
    CHECK(uform_mesh_directory_get(&d, "big_value-1.0", 100, &value, &size) == UFORM_OK && size == big &&
              memcmp(value, data, big) == 0,
          "get 1 MiB back");
    free(value);
    free(data);
    CHECK(uform_mesh_directory_set(&d, "empty", NULL, 0) == UFORM_OK, "set empty");
    value = NULL;
    size = 5;
    CHECK(uform_mesh_directory_get(&d, "empty", 100, &value, &size) == UFORM_OK && size == 0 && value,
          "get empty");
    free(value);

    /* get timeout names the key, within its bound. */
    double start = seconds_now();
    value = (void *)1;
    status = uform_mesh_directory_get(&d, "missing.key", 120, &value, &size);
    double took = seconds_now() - start;
    CHECK(status == UFORM_MESH, "get of a missing key: UFORM_MESH (got %d)", status);
    CHECK(contains(uform_last_error(), "\"missing.key\"") && contains(uform_last_error(), "120 ms"),
          "the timeout names the key: %s", uform_last_error());
    CHECK(took >= 0.11 && took < 1.0, "get timed out after %.3f s", took);
    CHECK(value == NULL && size == 0, "get clears its outputs on failure");

    /* A key over 64 MiB (a sparse file) is UFORM_FORMAT. */
    char path[4200];
    path_of(path, sizeof(path), d.run_path, "huge", NULL);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, ((off_t)64 << 20) + 1) == 0, "make a sparse file");
    if (fd >= 0) close(fd);
    value = NULL;
    status = uform_mesh_directory_get(&d, "huge", 100, &value, &size);
    CHECK(status == UFORM_FORMAT && value == NULL, "a key over 64 MiB: UFORM_FORMAT (got %d: %s)", status,
          uform_last_error());

    /* Key checks. */
    char long_key[202];
    memset(long_key, 'k', 201);
    long_key[201] = '\0';
    const char *bad_keys[] = {"", "a/b", "a b", ".hidden", "..", "ready", "abort", "ack.1", long_key, NULL};
    for (size_t i = 0; i < sizeof(bad_keys) / sizeof(*bad_keys); i++) {
        status = uform_mesh_directory_set(&d, bad_keys[i], "x", 1);
        CHECK(status == UFORM_INVALID_ARGUMENT && contains(uform_last_error(), "key"),
              "set with bad key %zu: %d %s", i, status, uform_last_error());
        status = uform_mesh_directory_get(&d, bad_keys[i], 10, &value, &size);
        CHECK(status == UFORM_INVALID_ARGUMENT && contains(uform_last_error(), "key"),
              "get with bad key %zu: %d %s", i, status, uform_last_error());
    }
    long_key[200] = '\0';
    CHECK(uform_mesh_directory_set(&d, long_key, "x", 1) == UFORM_OK, "a 200-byte key: %s",
          uform_last_error());
    status = uform_mesh_directory_set(&d, "v", NULL, 3);
    CHECK(status == UFORM_INVALID_ARGUMENT && contains(uform_last_error(), "value"), "NULL value: %s",
          uform_last_error());
    status = uform_mesh_directory_get(&d, "a", 10, NULL, &size);
    CHECK(status == UFORM_INVALID_ARGUMENT && contains(uform_last_error(), "value"), "NULL *value: %s",
          uform_last_error());

    /* leave removes the run folder and the run file. */
    char run_folder[4096], run_file[512];
    snprintf(run_folder, sizeof(run_folder), "%s", d.run_path);
    snprintf(run_file, sizeof(run_file), "%s/solo/run", root);
    CHECK(file_exists(run_file), "run file exists before leave");
    uform_mesh_directory_leave(&d);
    CHECK(!file_exists(run_folder) && !file_exists(run_file), "leave removes the run's files");
    CHECK(uform_mesh_directory_set(&d, "a", "x", 1) == UFORM_INVALID_ARGUMENT,
          "set after leave is refused");
    uform_mesh_directory_leave(&d); /* twice: a no-op */

    /* A second meeting of the same job draws a new run id. */
    uform_mesh_directory_t again;
    CHECK(uform_mesh_directory_meet(root, "solo", 0, 1, 1000, &again) == UFORM_OK, "meet again");
    CHECK(!uform_mesh_directory_has(&again, "a"), "the earlier run's key is gone");
    uform_mesh_directory_leave(&again);
}

static void test_hosts(size_t hosts, const char *job) {
    plan_t plans[8] = {{0}};
    outcome_t outcomes[8];
    for (size_t h = 0; h < hosts; h++) plans[h] = (plan_t){job, h, hosts, 5000, KEYS, (unsigned)(h * 7)};
    run_all(plans, hosts, outcomes);
    for (size_t h = 0; h < hosts; h++) {
        CHECK(outcomes[h].status == UFORM_OK, "%zu hosts: host %zu meets: %s", hosts, h, outcomes[h].message);
        CHECK(outcomes[h].ok, "%zu hosts: host %zu: %s", hosts, h, outcomes[h].note);
        CHECK(is_run_id(outcomes[h].run_id) && strcmp(outcomes[h].run_id, outcomes[0].run_id) == 0,
              "%zu hosts: host %zu agrees on the run id (%s vs %s)", hosts, h, outcomes[h].run_id,
              outcomes[0].run_id);
    }
    /* Host 0 left: the run folder, the run file and the hellos are gone. */
    char path[512];
    snprintf(path, sizeof(path), "%s/%s/run-%s", root, job, outcomes[0].run_id);
    CHECK(!file_exists(path), "%zu hosts: leave removed %s", hosts, path);
    snprintf(path, sizeof(path), "%s/%s/run", root, job);
    CHECK(!file_exists(path), "%zu hosts: leave removed %s", hosts, path);
    for (size_t h = 1; h < hosts; h++) {
        snprintf(path, sizeof(path), "%s/%s/hello.%zu", root, job, h);
        CHECK(!file_exists(path), "%zu hosts: leave removed %s", hosts, path);
    }
}

static void test_stale(void) {
    plan_t plans[3];
    outcome_t first[3], second[3], third[3];
    for (size_t h = 0; h < 3; h++) plans[h] = (plan_t){"stale", h, 3, 5000, SET_OLD, 0};
    run_all(plans, 3, first);
    for (size_t h = 0; h < 3; h++)
        CHECK(first[h].status == UFORM_OK && first[h].ok && strcmp(first[h].run_id, first[0].run_id) == 0,
              "stale: first meeting, host %zu: %s %s", h, first[h].message, first[h].note);
    /* Leave everything behind, and add junk. */
    char path[512];
    snprintf(path, sizeof(path), "%s/stale/run-%s/junk", root, first[0].run_id);
    write_file(path, "junk");
    snprintf(path, sizeof(path), "%s/stale/hello.7", root);
    write_file(path, "not a nonce");
    snprintf(path, sizeof(path), "%s/stale/run", root);
    CHECK(file_exists(path), "stale: the first run file stays");

    /* Followers first: they find the old run file, which never lists their nonces. */
    for (size_t h = 0; h < 3; h++) plans[h] = (plan_t){"stale", h, 3, 5000, CHECK_NEW, h == 0 ? 150 : 0};
    run_all(plans, 3, second);
    for (size_t h = 0; h < 3; h++) {
        CHECK(second[h].status == UFORM_OK && second[h].ok, "stale: second meeting, host %zu: %s %s", h,
              second[h].message, second[h].note);
        CHECK(strcmp(second[h].run_id, second[0].run_id) == 0, "stale: second meeting agrees");
    }
    CHECK(strcmp(second[0].run_id, first[0].run_id) != 0, "stale: a new run id (%s vs %s)", second[0].run_id,
          first[0].run_id);

    /* Host 0 first: it finds stale hellos (one looks like a real nonce) and a
     * garbage run file; the followers' fresh hellos replace them. */
    snprintf(path, sizeof(path), "%s/stale/hello.1", root);
    write_file(path, "0123456789abcdef0123456789abcdef\n");
    snprintf(path, sizeof(path), "%s/stale/hello.2", root);
    write_file(path, "garbage\n\n");
    snprintf(path, sizeof(path), "%s/stale/run", root);
    write_file(path, "uform mesh run 1\nid zz\nhosts 3\n");
    for (size_t h = 0; h < 3; h++) plans[h] = (plan_t){"stale", h, 3, 5000, CHECK_NEW, h == 0 ? 0 : 150};
    run_all(plans, 3, third);
    for (size_t h = 0; h < 3; h++) {
        CHECK(third[h].status == UFORM_OK && third[h].ok, "stale: third meeting, host %zu: %s %s", h,
              third[h].message, third[h].note);
        CHECK(strcmp(third[h].run_id, third[0].run_id) == 0, "stale: third meeting agrees");
    }
    CHECK(strcmp(third[0].run_id, first[0].run_id) != 0 && strcmp(third[0].run_id, second[0].run_id) != 0,
          "stale: third run id is new");
}

static void test_two_jobs(void) {
    plan_t plans[4] = {
        {"alpha", 0, 2, 5000, MEET, 0}, {"beta", 1, 2, 5000, MEET, 0},
        {"alpha", 1, 2, 5000, MEET, 3}, {"beta", 0, 2, 5000, MEET, 5},
    };
    outcome_t o[4];
    run_all(plans, 4, o);
    for (size_t i = 0; i < 4; i++)
        CHECK(o[i].status == UFORM_OK, "two jobs: child %zu meets: %s", i, o[i].message);
    CHECK(strcmp(o[0].run_id, o[2].run_id) == 0, "two jobs: alpha agrees");
    CHECK(strcmp(o[1].run_id, o[3].run_id) == 0, "two jobs: beta agrees");
    CHECK(strcmp(o[0].run_id, o[1].run_id) != 0, "two jobs: the run ids differ");
}

static void test_follower_missing(void) {
    plan_t plans[2] = {{"partial", 0, 3, 300, MEET, 0}, {"partial", 2, 3, 300, MEET, 0}};
    outcome_t o[2];
    double start = seconds_now();
    run_all(plans, 2, o);
    double took = seconds_now() - start;
    CHECK(o[0].status == UFORM_MESH, "host 1 missing: host 0 fails with UFORM_MESH (%d: %s)", o[0].status,
          o[0].message);
    char expected[512];
    snprintf(expected, sizeof(expected), "mesh: job \"partial\" in %s: host 1 of 3 did not arrive within 300 ms",
             root);
    CHECK(strcmp(o[0].message, expected) == 0, "host 1 missing: host 0 says: %s", o[0].message);
    CHECK(o[1].status == UFORM_MESH && contains(o[1].message, "host 0"),
          "host 1 missing: host 2 fails naming host 0 (%d: %s)", o[1].status, o[1].message);
    CHECK(o[0].seconds >= 0.29 && o[0].seconds < 1.5 && o[1].seconds < 1.5,
          "host 1 missing: the meetings took %.3f and %.3f s", o[0].seconds, o[1].seconds);
    CHECK(took < 3.0, "host 1 missing: everything returned within %.3f s", took);
}

static void test_leader_missing(void) {
    plan_t plans[2] = {{"leaderless", 1, 3, 300, MEET, 0}, {"leaderless", 2, 3, 300, MEET, 0}};
    outcome_t o[2];
    double start = seconds_now();
    run_all(plans, 2, o);
    double took = seconds_now() - start;
    for (size_t i = 0; i < 2; i++) {
        CHECK(o[i].status == UFORM_MESH &&
                  contains(o[i].message, "host 0 (the leader) did not arrive within 300 ms"),
              "host 0 missing: follower %zu says (%d): %s", i + 1, o[i].status, o[i].message);
        CHECK(o[i].seconds >= 0.29 && o[i].seconds < 1.5, "host 0 missing: %.3f s", o[i].seconds);
    }
    CHECK(took < 3.0, "host 0 missing: returned within %.3f s", took);
}

static void test_host_count_mismatch(void) {
    plan_t plans[2] = {{"mismatch", 0, 2, 3000, MEET, 0}, {"mismatch", 1, 3, 3000, MEET, 0}};
    outcome_t o[2];
    run_all(plans, 2, o);
    CHECK(o[1].status == UFORM_MESH &&
              contains(o[1].message, "host_domain_count: this host says 3, host 0 says 2"),
          "mismatch: the follower says (%d): %s", o[1].status, o[1].message);
    CHECK(o[0].status == UFORM_MESH && contains(o[0].message, "host_domain_count: host 0 says 2, host 1 says 3"),
          "mismatch: host 0 says (%d): %s", o[0].status, o[0].message);
    CHECK(o[0].seconds < 2.0 && o[1].seconds < 2.0, "mismatch: found early (%.3f, %.3f s)", o[0].seconds,
          o[1].seconds);

    /* A follower past host 0's count never finds its nonce: it names host 0 and the count. */
    plan_t more[3] = {{"mismatch2", 0, 2, 3000, MEET, 0}, {"mismatch2", 1, 2, 3000, MEET, 0},
                      {"mismatch2", 2, 3, 400, MEET, 0}};
    outcome_t m[3];
    run_all(more, 3, m);
    CHECK(m[0].status == UFORM_OK && m[1].status == UFORM_OK, "mismatch2: hosts 0, 1 meet: %s / %s",
          m[0].message, m[1].message);
    CHECK(m[2].status == UFORM_MESH && contains(m[2].message, "host 0 (the leader) did not arrive") &&
              contains(m[2].message, "names 2 hosts"),
          "mismatch2: host 2 says (%d): %s", m[2].status, m[2].message);
}

static void expect_invalid(const char *directory, const char *job, size_t host, size_t hosts,
                           uint64_t timeout_ms, const char *field, const char *what) {
    uform_mesh_directory_t d;
    memset(&d, 0x5a, sizeof(d));
    uform_status_t status = uform_mesh_directory_meet(directory, job, host, hosts, timeout_ms, &d);
    CHECK(status == UFORM_INVALID_ARGUMENT && contains(uform_last_error(), field),
          "%s: UFORM_INVALID_ARGUMENT naming %s (got %d: %s)", what, field, status, uform_last_error());
    CHECK(d.hosts == 0 && d.run_path[0] == '\0', "%s: the handle is zeroed", what);
}

static void test_arguments(void) {
    char long_job[130];
    memset(long_job, 'j', 129);
    long_job[129] = '\0';
    expect_invalid(NULL, "j", 0, 1, 100, "directory", "NULL directory");
    expect_invalid("", "j", 0, 1, 100, "directory", "empty directory");
    expect_invalid(root, NULL, 0, 1, 100, "job", "NULL job");
    expect_invalid(root, "", 0, 1, 100, "job", "empty job");
    expect_invalid(root, ".", 0, 1, 100, "job", "job .");
    expect_invalid(root, "..", 0, 1, 100, "job", "job ..");
    expect_invalid(root, "a/b", 0, 1, 100, "job", "job with a slash");
    expect_invalid(root, "a b", 0, 1, 100, "job", "job with a space");
    expect_invalid(root, long_job, 0, 1, 100, "job", "job of 129 bytes");
    expect_invalid(root, "j", 0, 0, 100, "host_domain_count", "0 hosts");
    expect_invalid(root, "j", 0, 65537, 100, "host_domain_count", "65537 hosts");
    expect_invalid(root, "j", 2, 2, 100, "host_domain_index", "host 2 of 2");
    expect_invalid(root, "j", 0, 1, 0, "timeout_ms", "timeout 0");
    CHECK(uform_mesh_directory_meet(root, "j", 0, 1, 100, NULL) == UFORM_INVALID_ARGUMENT, "NULL out");

    /* A 128-byte job is fine, and a directory that does not exist yet is made. */
    long_job[128] = '\0';
    char nested[512];
    snprintf(nested, sizeof(nested), "%s/made/on/demand//", root);
    uform_mesh_directory_t d;
    CHECK(uform_mesh_directory_meet(nested, long_job, 0, 1, 100, &d) == UFORM_OK,
          "a 128-byte job in a new nested folder: %s", uform_last_error());
    char expected[512];
    snprintf(expected, sizeof(expected), "%s/made/on/demand/%s", root, long_job);
    CHECK(strcmp(d.job_path, expected) == 0, "job_path %s", d.job_path);
    uform_mesh_directory_leave(&d);

    /* A directory below a regular file cannot be made: UFORM_FILE naming the path. */
    char file[512], below[600];
    snprintf(file, sizeof(file), "%s/plain-file", root);
    write_file(file, "x");
    snprintf(below, sizeof(below), "%s/sub", file);
    uform_status_t status = uform_mesh_directory_meet(below, "j", 0, 1, 100, &d);
    CHECK(status == UFORM_FILE && contains(uform_last_error(), file) &&
              contains(uform_last_error(), strerror(ENOTDIR)),
          "a folder below a file: UFORM_FILE (%d: %s)", status, uform_last_error());

    /* A folder this user cannot write (root writes everywhere: skipped). */
    if (geteuid() != 0) {
        char locked[512];
        snprintf(locked, sizeof(locked), "%s/locked", root);
        mkdir(locked, 0555);
        status = uform_mesh_directory_meet(locked, "j", 0, 1, 100, &d);
        CHECK(status == UFORM_FILE && contains(uform_last_error(), locked),
              "an unwritable folder: UFORM_FILE (%d: %s)", status, uform_last_error());
        chmod(locked, 0755);
    }

    /* Keys on a handle that never met. */
    memset(&d, 0, sizeof(d));
    CHECK(uform_mesh_directory_set(&d, "a", "x", 1) == UFORM_INVALID_ARGUMENT, "set before meet");
    CHECK(uform_mesh_directory_set(NULL, "a", "x", 1) == UFORM_INVALID_ARGUMENT, "set on NULL");
    void *value = NULL;
    size_t size = 0;
    CHECK(uform_mesh_directory_get(&d, "a", 10, &value, &size) == UFORM_INVALID_ARGUMENT, "get before meet");
    CHECK(!uform_mesh_directory_has(&d, "a") && !uform_mesh_directory_has(NULL, "a"), "has before meet");
    uform_mesh_directory_leave(&d);
    uform_mesh_directory_leave(NULL);
}

static void remove_tree(const char *path) {
    char command[600];
    snprintf(command, sizeof(command), "rm -rf '%s'", path);
    CHECK(system(command) == 0, "remove %s", path);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof(root), "%s/uform-mesh-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(root)) {
        printf("test_mesh_directory: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    double start = seconds_now();
    test_arguments();
    test_one_host();
    test_hosts(2, "pair");
    test_hosts(4, "four");
    test_stale();
    test_two_jobs();
    test_follower_missing();
    test_leader_missing();
    test_host_count_mismatch();
    remove_tree(root);
    printf("test_mesh_directory: %d passed, %d failed (%.2f s)\n", passed, failed, seconds_now() - start);
    return failed ? 1 : 0;
}
