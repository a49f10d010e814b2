/* mesh_directory.c: the rendezvous of a multi-host mesh through a shared folder.
 *
 * Layout. <directory>/<job>/ holds the handshake files: hello.<h> (one per host
 * h >= 1) and run (written by host 0). <directory>/<job>/run-<R>/ is the run's
 * own folder: ack.<h>, ready, abort (the meeting's) and the callers' keys. R is
 * 128 random bits drawn by host 0 for every meeting, so the run folder is new
 * and empty when the meeting starts: nothing in it can be left from before.
 *
 * Every file is written atomically: the bytes go to a temporary file in the
 * same folder (.<name>.tmp.<host>.<pid>.<counter>), which is fsynced and then
 * renamed over the final name. rename is atomic, so open + read of the final
 * name always gives one whole version of the file, never a torn one; a
 * temporary file is removed on any failure.
 *
 * The handshake:
 * 1. Host h >= 1 draws a 128-bit nonce (getrandom, else /dev/urandom) and
 *    publishes hello.<h> = nonce, overwriting any stale hello.<h>.
 * 2. Host 0 draws R, creates run-R/, and polls: it reads every hello.<h> of a
 *    host that has not acknowledged yet and writes run = "R, hosts, the nonce it
 *    read from each hello.<h> (or none)", again whenever a hello it reads has
 *    changed (a stale hello it read first is later replaced by its host's fresh
 *    one) or the run file went missing. It waits until every host h >= 1 wrote
 *    run-R/ack.<h> holding the nonce that run lists for h, then writes
 *    run-R/ready. At the deadline the hosts without an ack are named; host 0
 *    also writes run-R/abort with its message so that followers stop waiting.
 * 3. Host h >= 1 polls run until it lists its own nonce at position h, and only
 *    then takes R from it and writes run-R/ack.<h> = "nonce hosts". It then
 *    waits for run-R/ready (or abort).
 *
 * Why stale files cannot mislead anyone:
 * - A follower's nonce is drawn fresh and is unguessable, so a run file that
 *   lists it was written by a host 0 that read this follower's hello after the
 *   follower published it: a host 0 of this meeting, never a run file left by an
 *   earlier or crashed run (which can list only nonces of earlier processes).
 * - A stale hello.<h> read by host 0 only puts a dead nonce into run; no live
 *   host acknowledges it, and when host h publishes its fresh hello host 0
 *   rewrites run with it. A stale hello of a host that never comes is just a
 *   host that did not arrive.
 * - ack.<h>, ready and abort live in run-R, which host 0 created empty for this
 *   meeting; an ack counts only if it holds the nonce host 0 listed for h. So
 *   every ack host 0 counts is from a live host of this meeting, and ready is
 *   written only after all of them.
 * - A follower that finds run-R gone while it waits for ready concludes that
 *   host 0 finished the meeting and already left (only a successful host 0
 *   removes run-R), and goes on.
 * - Host counts: a follower whose nonce run lists but whose host count differs
 *   fails with "host_domain_count: this host says N, host 0 says M"; its ack
 *   carries its count, so host 0 fails with the same complaint without waiting.
 * - Both sides republish their handshake file (hello.<h>, run) if it vanished,
 *   e.g. removed by a previous run's host 0 leaving at the same moment.
 * Two live meetings of one job at once (two host 0s) are not supported: pick
 * distinct job names. On NFS the usual close-to-open consistency is enough;
 * caching of missing names (lookupcache=all) can only delay a meeting.
 *
 * Polling sleeps grow from 1 ms to 50 ms and never sleep past the deadline, so
 * a meeting or a get fails within a few ms of its timeout. */
#include "train/mesh_directory.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define MESH_MAX_HOSTS 65536u
#define MESH_MAX_JOB 128u
#define MESH_MAX_KEY 200u
#define MESH_MAX_VALUE ((size_t)64 << 20)
/* <directory> + "/" + job + "/run-" + 32 + "/" + the longest temporary name fit in 4096. */
#define MESH_MAX_DIRECTORY 3584u
#define MESH_PATH 4096
#define MESH_SMALL_FILE 256u          /* hello, ack */
#define MESH_RUN_FILE ((size_t)4 << 20) /* header + 65535 nonces of 33 bytes */
#define MESH_ABORT_FILE 4096u

static atomic_uint_fast64_t mesh_counter;

/* ---- time ---------------------------------------------------------------- */

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static uint64_t deadline_after(uint64_t timeout_ms) {
    uint64_t now = now_ns(), span;
    if (__builtin_mul_overflow(timeout_ms, (uint64_t)1000000u, &span) || span > UINT64_MAX - now)
        return UINT64_MAX;
    return now + span;
}

static void sleep_ms(uint64_t ms) {
    struct timespec t = {(time_t)(ms / 1000u), (long)(ms % 1000u) * 1000000L}, rest;
    while (nanosleep(&t, &rest) != 0 && errno == EINTR) t = rest;
}

typedef struct {
    uint64_t deadline_ns;
    uint64_t pause_ms;
} mesh_poll_t;

static mesh_poll_t poll_start(uint64_t deadline_ns) { return (mesh_poll_t){deadline_ns, 1}; }

/* Sleeps the next pause (1, 2, 4, ... 50 ms), never past the deadline; false
 * once the deadline has passed (the caller has made its last check). */
static bool poll_wait(mesh_poll_t *poll) {
    uint64_t now = now_ns();
    if (now >= poll->deadline_ns) return false;
    uint64_t left_ms = (poll->deadline_ns - now + 999999u) / 1000000u;
    sleep_ms(poll->pause_ms < left_ms ? poll->pause_ms : left_ms);
    poll->pause_ms = poll->pause_ms * 2 > 50 ? 50 : poll->pause_ms * 2;
    return true;
}

/* ---- random -------------------------------------------------------------- */

static bool read_exactly(int fd, uint8_t *bytes, size_t count) {
    size_t got = 0;
    while (got < count) {
        ssize_t n = read(fd, bytes + got, count - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        got += (size_t)n;
    }
    return true;
}

/* 128 random bits as 32 lowercase hex digits. */
static uform_status_t mesh_random(char hex[33]) {
    uint8_t bytes[16];
    size_t got = 0;
    while (got < sizeof(bytes)) {
        ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    if (got < sizeof(bytes)) {
        int getrandom_error = errno, fd;
        do fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        while (fd < 0 && errno == EINTR);
        bool ok = fd >= 0 && read_exactly(fd, bytes, sizeof(bytes));
        int urandom_error = errno;
        if (fd >= 0) close(fd);
        if (!ok)
            return uform_fail(UFORM_MESH,
                              "mesh: cannot draw random bits: getrandom: %s; /dev/urandom: %s",
                              strerror(getrandom_error), strerror(urandom_error));
    }
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof(bytes); i++) {
        hex[2 * i] = digits[bytes[i] >> 4];
        hex[2 * i + 1] = digits[bytes[i] & 15u];
    }
    hex[32] = '\0';
    return UFORM_OK;
}

static bool is_hex32(const char *text, size_t length) {
    if (length != 32) return false;
    for (size_t i = 0; i < 32; i++)
        if (!((text[i] >= '0' && text[i] <= '9') || (text[i] >= 'a' && text[i] <= 'f'))) return false;
    return true;
}

/* ---- files --------------------------------------------------------------- */

static bool name_char(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

static bool join(char out[MESH_PATH], const char *folder, const char *name) {
    int n = snprintf(out, MESH_PATH, "%s/%s", folder, name);
    return n > 0 && n < MESH_PATH;
}

static bool exists(const char *path) {
    struct stat info;
    return stat(path, &info) == 0;
}

/* Reads the whole file into a malloc'd buffer with a NUL after its bytes. A
 * missing file (or one replaced under an NFS handle) sets *missing and is no
 * error; more than `limit` bytes is UFORM_FORMAT. */
static uform_status_t read_whole(const char *path, size_t limit, char **data, size_t *size,
                                 bool *missing) {
    *data = NULL;
    *size = 0;
    *missing = false;
    int fd;
    do fd = open(path, O_RDONLY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        if (errno == ENOENT || errno == ESTALE) {
            *missing = true;
            return UFORM_OK;
        }
        return uform_fail(UFORM_FILE, "mesh: cannot open '%s': %s", path, strerror(errno));
    }
    uform_status_t status = UFORM_OK;
    char *buffer = NULL;
    size_t used = 0, capacity = 0;
    struct stat info;
    if (fstat(fd, &info) != 0) {
        status = uform_fail(UFORM_FILE, "mesh: cannot stat '%s': %s", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(info.st_mode)) {
        status = uform_fail(UFORM_FORMAT, "mesh: '%s' is not a regular file", path);
        goto done;
    }
    if (info.st_size < 0 || (uint64_t)info.st_size > limit) {
        status = uform_fail(UFORM_FORMAT, "mesh: '%s' holds more than %zu bytes", path, limit);
        goto done;
    }
    /* One byte more than the size, so that a file that grew is noticed. */
    capacity = (size_t)info.st_size + 1;
    buffer = uform_alloc(capacity + 1, 1, "mesh: file contents");
    if (!buffer) {
        status = UFORM_OUT_OF_MEMORY;
        goto done;
    }
    for (;;) {
        if (used == capacity) {
            if (capacity > limit) {
                status = uform_fail(UFORM_FORMAT, "mesh: '%s' holds more than %zu bytes", path, limit);
                goto done;
            }
            size_t grown = capacity > limit / 2 ? limit + 1 : capacity * 2;
            char *larger = realloc(buffer, grown + 1);
            if (!larger) {
                status = uform_fail(UFORM_OUT_OF_MEMORY, "mesh: cannot allocate %zu bytes", grown + 1);
                goto done;
            }
            buffer = larger;
            capacity = grown;
        }
        ssize_t n = read(fd, buffer + used, capacity - used);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            if (errno == ESTALE) {
                *missing = true;
                goto done;
            }
            status = uform_fail(UFORM_FILE, "mesh: cannot read '%s': %s", path, strerror(errno));
            goto done;
        }
        if (n == 0) break;
        used += (size_t)n;
    }
    if (used > limit) {
        status = uform_fail(UFORM_FORMAT, "mesh: '%s' holds more than %zu bytes", path, limit);
        goto done;
    }
    buffer[used] = '\0';
done:
    close(fd);
    if (status != UFORM_OK || *missing) {
        free(buffer);
        return status;
    }
    *data = buffer;
    *size = used;
    return UFORM_OK;
}

/* Writes folder/name atomically: a temporary file in the same folder, fsync, rename. */
static uform_status_t write_atomic(const char *folder, const char *name, size_t host,
                                   const void *data, size_t size) {
    char final_path[MESH_PATH], temporary[MESH_PATH];
    uint64_t counter = (uint64_t)atomic_fetch_add(&mesh_counter, 1);
    int n = snprintf(temporary, sizeof(temporary), "%s/.%s.tmp.%zu.%ld.%llu", folder, name, host,
                     (long)getpid(), (unsigned long long)counter);
    if (!join(final_path, folder, name) || n <= 0 || n >= (int)sizeof(temporary))
        return uform_fail(UFORM_FILE, "mesh: the path of '%s' in '%s' is too long", name, folder);
    int fd;
    do fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) return uform_fail(UFORM_FILE, "mesh: cannot create '%s': %s", temporary, strerror(errno));
    const char *bytes = data;
    size_t done = 0;
    int error = 0;
    const char *what = "write";
    while (done < size) {
        size_t chunk = size - done < ((size_t)1 << 30) ? size - done : ((size_t)1 << 30);
        ssize_t wrote = write(fd, bytes + done, chunk);
        if (wrote < 0 && errno == EINTR) continue;
        if (wrote <= 0) {
            error = wrote < 0 ? errno : EIO;
            break;
        }
        done += (size_t)wrote;
    }
    if (!error) {
        int synced;
        do synced = fsync(fd);
        while (synced != 0 && errno == EINTR);
        if (synced != 0) {
            error = errno;
            what = "fsync";
        }
    }
    /* Linux releases the descriptor even when close fails (EINTR included). */
    if (close(fd) != 0 && errno != EINTR && !error) {
        error = errno;
        what = "close";
    }
    if (!error && rename(temporary, final_path) != 0) {
        error = errno;
        what = "rename";
    }
    if (error) {
        unlink(temporary);
        if (strcmp(what, "rename") == 0)
            return uform_fail(UFORM_FILE, "mesh: cannot rename '%s' to '%s': %s", temporary,
                              final_path, strerror(error));
        return uform_fail(UFORM_FILE, "mesh: cannot %s '%s': %s", what, temporary, strerror(error));
    }
    return UFORM_OK;
}

/* mkdir -p with mode 0777 (less the umask); an existing folder is fine. */
static uform_status_t make_folder(char *path) {
    if (mkdir(path, 0777) == 0) return UFORM_OK;
    int error = errno;
    if (error == ENOENT) {
        char *slash = strrchr(path, '/');
        if (slash && slash != path) {
            *slash = '\0';
            uform_status_t status = make_folder(path);
            *slash = '/';
            if (status != UFORM_OK) return status;
            if (mkdir(path, 0777) == 0) return UFORM_OK;
            error = errno;
        }
    }
    if (error == EEXIST) {
        struct stat info;
        if (stat(path, &info) == 0 && S_ISDIR(info.st_mode)) return UFORM_OK;
        error = ENOTDIR;
    }
    return uform_fail(UFORM_FILE, "mesh: cannot create the folder '%s': %s", path, strerror(error));
}

/* ---- the meeting ---------------------------------------------------------- */

typedef struct {
    const char *directory, *job;
    uform_mesh_directory_t *d;
    uint64_t deadline_ns;
} mesh_meeting_t;

/* The next line of [*cursor, end): its start and length without the newline. */
static bool next_line(const char **cursor, const char *end, const char **line, size_t *length) {
    if (*cursor >= end) return false;
    const char *newline = memchr(*cursor, '\n', (size_t)(end - *cursor));
    *line = *cursor;
    *length = (size_t)((newline ? newline : end) - *cursor);
    *cursor = newline ? newline + 1 : end;
    return true;
}

static bool parse_size(const char *text, size_t length, size_t *value) {
    if (length == 0 || length > 9) return false;
    size_t result = 0;
    for (size_t i = 0; i < length; i++) {
        if (text[i] < '0' || text[i] > '9') return false;
        result = result * 10 + (size_t)(text[i] - '0');
    }
    *value = result;
    return true;
}

static const char RUN_HEADER[] = "uform mesh run 1";

/* Parses a run file: its id, host count and the nonce listed for `host` (an
 * empty string when none or when host is past the count). False if malformed. */
static bool parse_run(const char *text, size_t size, size_t host, char id[33], size_t *hosts,
                      char nonce[33]) {
    const char *cursor = text, *end = text + size, *line;
    size_t length;
    nonce[0] = '\0';
    if (!next_line(&cursor, end, &line, &length) || length != sizeof(RUN_HEADER) - 1 ||
        memcmp(line, RUN_HEADER, length) != 0)
        return false;
    if (!next_line(&cursor, end, &line, &length) || length != 35 || memcmp(line, "id ", 3) != 0 ||
        !is_hex32(line + 3, 32))
        return false;
    memcpy(id, line + 3, 32);
    id[32] = '\0';
    if (!next_line(&cursor, end, &line, &length) || length < 7 || memcmp(line, "hosts ", 6) != 0 ||
        !parse_size(line + 6, length - 6, hosts) || *hosts < 1 || *hosts > MESH_MAX_HOSTS)
        return false;
    if (host == 0 || host >= *hosts) return true;
    for (size_t h = 1; h <= host; h++)
        if (!next_line(&cursor, end, &line, &length)) return false;
    if (is_hex32(line, length)) {
        memcpy(nonce, line, 32);
        nonce[32] = '\0';
    }
    return true;
}

/* "nonce\n" (hello) or "nonce hosts\n" (ack): the nonce, and the count if any. */
static bool parse_small(const char *text, size_t size, char nonce[33], size_t *hosts) {
    const char *cursor = text, *line;
    size_t length;
    if (!next_line(&cursor, text + size, &line, &length) || length < 32 || !is_hex32(line, 32))
        return false;
    memcpy(nonce, line, 32);
    nonce[32] = '\0';
    *hosts = 0;
    if (length == 32) return true;
    return line[32] == ' ' && parse_size(line + 33, length - 33, hosts);
}

/* Text written by another process, made safe to put into a message. */
static void printable(char *text) {
    size_t length = strlen(text);
    while (length > 0 && (text[length - 1] == '\n' || text[length - 1] == '\r')) text[--length] = '\0';
    for (size_t i = 0; i < length; i++)
        if ((unsigned char)text[i] < 0x20 || (unsigned char)text[i] >= 0x7f) text[i] = '?';
}

static uform_status_t lead(mesh_meeting_t *m) {
    uform_mesh_directory_t *d = m->d;
    size_t hosts = d->hosts;
    for (int attempt = 0;; attempt++) {
        UFORM_TRY(mesh_random(d->run_id));
        int n = snprintf(d->run_path, sizeof(d->run_path), "%s/run-%s", d->job_path, d->run_id);
        if (n <= 0 || n >= (int)sizeof(d->run_path))
            return uform_fail(UFORM_FILE, "mesh: the path '%s/run-...' is too long", d->job_path);
        if (mkdir(d->run_path, 0777) == 0) break;
        if (errno != EEXIST || attempt == 3)
            return uform_fail(UFORM_FILE, "mesh: cannot create the folder '%s': %s", d->run_path,
                              strerror(errno));
    }
    uform_status_t status = UFORM_OK;
    char (*published)[33] = uform_alloc_zeroed(hosts, sizeof(*published), "mesh: nonces");
    bool *acked = uform_alloc_zeroed(hosts, sizeof(bool), "mesh: acknowledgements");
    size_t run_capacity = 128 + (hosts - 1) * 33;
    char *run_text = uform_alloc(run_capacity, 1, "mesh: run file");
    char run_file[MESH_PATH];
    if (!published || !acked || !run_text) {
        status = UFORM_OUT_OF_MEMORY;
        goto done;
    }
    if (!join(run_file, d->job_path, "run")) {
        status = uform_fail(UFORM_FILE, "mesh: the path '%s/run' is too long", d->job_path);
        goto done;
    }
    size_t arrived = 1;
    bool rewrite = true;
    mesh_poll_t poll = poll_start(m->deadline_ns);
    char detail[768];
    for (;;) {
        for (size_t h = 1; h < hosts; h++) {
            if (acked[h]) continue;
            char name[32], path[MESH_PATH], nonce[33] = "", *text;
            size_t size, unused;
            bool missing;
            snprintf(name, sizeof(name), "hello.%zu", h);
            if (!join(path, d->job_path, name)) {
                status = uform_fail(UFORM_FILE, "mesh: the path '%s/%s' is too long", d->job_path, name);
                goto done;
            }
            status = read_whole(path, MESH_SMALL_FILE, &text, &size, &missing);
            if (status == UFORM_FORMAT) status = UFORM_OK; /* foreign junk: no hello yet */
            if (status != UFORM_OK) goto done;
            if (!missing && !parse_small(text, size, nonce, &unused)) nonce[0] = '\0';
            free(text);
            if (strcmp(nonce, published[h]) != 0) {
                memcpy(published[h], nonce, sizeof(nonce));
                rewrite = true;
            }
        }
        if (rewrite || !exists(run_file)) {
            int n = snprintf(run_text, run_capacity, "%s\nid %s\nhosts %zu\n", RUN_HEADER, d->run_id,
                             hosts);
            size_t used = (size_t)n;
            for (size_t h = 1; h < hosts; h++) {
                size_t length = published[h][0] ? 32 : 1;
                memcpy(run_text + used, published[h][0] ? published[h] : "-", length);
                run_text[used + length] = '\n';
                used += length + 1;
            }
            status = write_atomic(d->job_path, "run", 0, run_text, used);
            if (status != UFORM_OK) goto done;
            rewrite = false;
        }
        for (size_t h = 1; h < hosts; h++) {
            if (acked[h] || !published[h][0]) continue;
            char name[32], path[MESH_PATH], nonce[33], *text;
            size_t size, their_hosts = 0;
            bool missing, valid = false;
            snprintf(name, sizeof(name), "ack.%zu", h);
            if (!join(path, d->run_path, name)) {
                status = uform_fail(UFORM_FILE, "mesh: the path '%s/%s' is too long", d->run_path, name);
                goto done;
            }
            status = read_whole(path, MESH_SMALL_FILE, &text, &size, &missing);
            if (status == UFORM_FORMAT) status = UFORM_OK;
            if (status != UFORM_OK) goto done;
            if (!missing) valid = parse_small(text, size, nonce, &their_hosts);
            free(text);
            if (!valid || strcmp(nonce, published[h]) != 0) continue;
            if (their_hosts != hosts) {
                snprintf(detail, sizeof(detail), "host_domain_count: host 0 says %zu, host %zu says %zu",
                         hosts, h, their_hosts);
                goto give_up;
            }
            acked[h] = true;
            arrived++;
        }
        if (arrived == hosts) {
            status = write_atomic(d->run_path, "ready", 0, "ready\n", 6);
            goto done;
        }
        if (!poll_wait(&poll)) break;
    }
    /* The deadline: name the hosts without an ack. */
    {
        size_t missing = hosts - arrived, listed = 0, used;
        used = (size_t)snprintf(detail, sizeof(detail), "host%s ", missing > 1 ? "s" : "");
        for (size_t h = 1; h < hosts && listed < 32; h++) {
            if (acked[h]) continue;
            used += (size_t)snprintf(detail + used, sizeof(detail) - used, "%s%zu", listed ? ", " : "", h);
            listed++;
        }
        if (listed < missing)
            used += (size_t)snprintf(detail + used, sizeof(detail) - used, " and %zu more", missing - listed);
        snprintf(detail + used, sizeof(detail) - used, " of %zu did not arrive within %llu ms", hosts,
                 (unsigned long long)d->timeout_ms);
    }
give_up:
    /* Best effort: tell the followers (their waits end early), then record ours. */
    write_atomic(d->run_path, "abort", 0, detail, strlen(detail));
    status = uform_fail(UFORM_MESH, "mesh: job \"%s\" in %s: %s", m->job, m->directory, detail);
done:
    free(published);
    free(acked);
    free(run_text);
    return status;
}

static uform_status_t follow(mesh_meeting_t *m) {
    uform_mesh_directory_t *d = m->d;
    char nonce[33], hello[34], hello_name[32], hello_path[MESH_PATH], run_file[MESH_PATH];
    UFORM_TRY(mesh_random(nonce));
    memcpy(hello, nonce, 32);
    hello[32] = '\n';
    hello[33] = '\0';
    snprintf(hello_name, sizeof(hello_name), "hello.%zu", d->host);
    if (!join(hello_path, d->job_path, hello_name) || !join(run_file, d->job_path, "run"))
        return uform_fail(UFORM_FILE, "mesh: the paths in '%s' are too long", d->job_path);
    UFORM_TRY(write_atomic(d->job_path, hello_name, d->host, hello, 33));

    /* Until run lists our nonce at our position. */
    mesh_poll_t poll = poll_start(m->deadline_ns);
    size_t newest_hosts = 0; /* the host count of the newest valid run file not listing us */
    for (;;) {
        char *text, id[33], listed[33];
        size_t size, their_hosts = 0;
        bool missing, valid = false;
        uform_status_t status = read_whole(run_file, MESH_RUN_FILE, &text, &size, &missing);
        if (status == UFORM_FORMAT) status = UFORM_OK;
        if (status != UFORM_OK) return status;
        if (!missing) valid = parse_run(text, size, d->host, id, &their_hosts, listed);
        free(text);
        if (valid && strcmp(listed, nonce) == 0) {
            memcpy(d->run_id, id, sizeof(id));
            int n = snprintf(d->run_path, sizeof(d->run_path), "%s/run-%s", d->job_path, id);
            if (n <= 0 || n >= (int)sizeof(d->run_path))
                return uform_fail(UFORM_FILE, "mesh: the path '%s/run-...' is too long", d->job_path);
            char ack_name[32], ack[64];
            snprintf(ack_name, sizeof(ack_name), "ack.%zu", d->host);
            int length = snprintf(ack, sizeof(ack), "%s %zu\n", nonce, d->hosts);
            status = write_atomic(d->run_path, ack_name, d->host, ack, (size_t)length);
            if (their_hosts != d->hosts)
                return uform_fail(UFORM_MESH,
                                  "mesh: job \"%s\" in %s: host_domain_count: this host says %zu, "
                                  "host 0 says %zu",
                                  m->job, m->directory, d->hosts, their_hosts);
            if (status != UFORM_OK) return status;
            break;
        }
        if (valid) newest_hosts = their_hosts;
        if (!exists(hello_path)) UFORM_TRY(write_atomic(d->job_path, hello_name, d->host, hello, 33));
        if (!poll_wait(&poll)) {
            if (newest_hosts != 0 && d->host >= newest_hosts)
                return uform_fail(UFORM_MESH,
                                  "mesh: job \"%s\" in %s: host 0 (the leader) did not arrive within "
                                  "%llu ms (the newest run file names %zu hosts, too few for host %zu: "
                                  "a stale file, or host 0 has another host_domain_count)",
                                  m->job, m->directory, (unsigned long long)d->timeout_ms,
                                  newest_hosts, d->host);
            return uform_fail(UFORM_MESH,
                              "mesh: job \"%s\" in %s: host 0 (the leader) did not arrive within %llu ms",
                              m->job, m->directory, (unsigned long long)d->timeout_ms);
        }
    }

    /* Until host 0 says every host arrived. */
    char ready_path[MESH_PATH], abort_path[MESH_PATH];
    if (!join(ready_path, d->run_path, "ready") || !join(abort_path, d->run_path, "abort"))
        return uform_fail(UFORM_FILE, "mesh: the paths in '%s' are too long", d->run_path);
    poll = poll_start(m->deadline_ns);
    for (;;) {
        if (exists(ready_path)) return UFORM_OK;
        char *text;
        size_t size;
        bool missing;
        uform_status_t status = read_whole(abort_path, MESH_ABORT_FILE, &text, &size, &missing);
        if (status == UFORM_FORMAT) status = UFORM_OK;
        if (status != UFORM_OK) return status;
        if (!missing) {
            char reason[512];
            snprintf(reason, sizeof(reason), "%s", text);
            free(text);
            printable(reason);
            return uform_fail(UFORM_MESH, "mesh: job \"%s\" in %s: host 0 (the leader) gave up: %s",
                              m->job, m->directory, reason);
        }
        /* Only a host 0 that finished the meeting removes the run folder. */
        struct stat info;
        if (stat(d->run_path, &info) != 0 && errno == ENOENT) return UFORM_OK;
        if (!poll_wait(&poll))
            return uform_fail(UFORM_MESH,
                              "mesh: job \"%s\" in %s: host 0 (the leader) did not finish the meeting "
                              "within %llu ms (host %zu joined run %s; host 0 waits for every host, so "
                              "another host may be missing)",
                              m->job, m->directory, (unsigned long long)d->timeout_ms, d->host,
                              d->run_id);
    }
}

uform_status_t uform_mesh_directory_meet(const char *directory, const char *job, size_t host,
                                         size_t hosts, uint64_t timeout_ms,
                                         uform_mesh_directory_t *out) {
    if (!out) return uform_fail(UFORM_INVALID_ARGUMENT, "mesh: out is NULL");
    memset(out, 0, sizeof(*out));
    if (!directory || !directory[0])
        return uform_fail(UFORM_INVALID_ARGUMENT, "directory: %s", directory ? "empty" : "NULL");
    size_t directory_length = strnlen(directory, MESH_MAX_DIRECTORY + 1);
    if (directory_length > MESH_MAX_DIRECTORY)
        return uform_fail(UFORM_INVALID_ARGUMENT, "directory: longer than %u bytes", MESH_MAX_DIRECTORY);
    if (!job || !job[0]) return uform_fail(UFORM_INVALID_ARGUMENT, "job: %s", job ? "empty" : "NULL");
    size_t job_length = strnlen(job, MESH_MAX_JOB + 1);
    if (job_length > MESH_MAX_JOB)
        return uform_fail(UFORM_INVALID_ARGUMENT, "job: longer than %u bytes", MESH_MAX_JOB);
    for (size_t i = 0; i < job_length; i++)
        if (!name_char(job[i]))
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "job: \"%s\" has a character outside [A-Za-z0-9._-] at byte %zu", job, i);
    if (strcmp(job, ".") == 0 || strcmp(job, "..") == 0)
        return uform_fail(UFORM_INVALID_ARGUMENT, "job: \"%s\" names no folder of its own", job);
    if (hosts < 1 || hosts > MESH_MAX_HOSTS)
        return uform_fail(UFORM_INVALID_ARGUMENT, "host_domain_count: %zu is not in 1..%u", hosts,
                          MESH_MAX_HOSTS);
    if (host >= hosts)
        return uform_fail(UFORM_INVALID_ARGUMENT, "host_domain_index: %zu is not below host_domain_count %zu",
                          host, hosts);
    if (timeout_ms < 1) return uform_fail(UFORM_INVALID_ARGUMENT, "timeout_ms: 0, must be at least 1");

    mesh_meeting_t m = {directory, job, out, deadline_after(timeout_ms)};
    /* The folder without trailing slashes (but "/" stays "/"). */
    char folder[MESH_PATH];
    memcpy(folder, directory, directory_length + 1);
    while (directory_length > 1 && folder[directory_length - 1] == '/') folder[--directory_length] = '\0';
    uform_status_t status = make_folder(folder);
    if (status == UFORM_OK) {
        int n = snprintf(out->job_path, sizeof(out->job_path), "%s%s%s", folder,
                         strcmp(folder, "/") == 0 ? "" : "/", job);
        if (n <= 0 || n >= (int)sizeof(out->job_path))
            status = uform_fail(UFORM_INVALID_ARGUMENT, "directory: too long");
    }
    if (status == UFORM_OK) status = make_folder(out->job_path);
    if (status == UFORM_OK && access(out->job_path, W_OK | X_OK) != 0)
        status = uform_fail(UFORM_FILE, "mesh: cannot write in the folder '%s': %s", out->job_path,
                            strerror(errno));
    if (status == UFORM_OK) {
        out->host = host;
        out->hosts = hosts;
        out->timeout_ms = timeout_ms;
        status = host == 0 ? lead(&m) : follow(&m);
    }
    if (status != UFORM_OK) memset(out, 0, sizeof(*out));
    return status;
}

/* ---- keys ------------------------------------------------------------------ */

static uform_status_t check_met(const uform_mesh_directory_t *d) {
    if (!d) return uform_fail(UFORM_INVALID_ARGUMENT, "mesh directory: NULL");
    if (d->hosts == 0 || !d->run_path[0])
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "mesh directory: not met (uform_mesh_directory_meet did not succeed on it)");
    return UFORM_OK;
}

static uform_status_t check_key(const char *key) {
    if (!key) return uform_fail(UFORM_INVALID_ARGUMENT, "key: NULL");
    size_t length = strnlen(key, MESH_MAX_KEY + 1);
    if (length == 0) return uform_fail(UFORM_INVALID_ARGUMENT, "key: empty");
    if (length > MESH_MAX_KEY)
        return uform_fail(UFORM_INVALID_ARGUMENT, "key: longer than %u bytes", MESH_MAX_KEY);
    for (size_t i = 0; i < length; i++)
        if (!name_char(key[i]))
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "key: \"%s\" has a character outside [A-Za-z0-9._-] at byte %zu", key, i);
    if (key[0] == '.')
        return uform_fail(UFORM_INVALID_ARGUMENT, "key: \"%s\" starts with '.' (kept for temporary files)",
                          key);
    if (strcmp(key, "ready") == 0 || strcmp(key, "abort") == 0 || strncmp(key, "ack.", 4) == 0)
        return uform_fail(UFORM_INVALID_ARGUMENT, "key: \"%s\" is one of the meeting's own names", key);
    return UFORM_OK;
}

uform_status_t uform_mesh_directory_set(const uform_mesh_directory_t *d, const char *key,
                                        const void *value, size_t size) {
    UFORM_TRY(check_met(d));
    UFORM_TRY(check_key(key));
    if (!value && size) return uform_fail(UFORM_INVALID_ARGUMENT, "value: NULL with size %zu", size);
    if (size > MESH_MAX_VALUE)
        return uform_fail(UFORM_INVALID_ARGUMENT, "size: %zu bytes, over the %zu a key holds", size,
                          MESH_MAX_VALUE);
    return write_atomic(d->run_path, key, d->host, size ? value : "", size);
}

uform_status_t uform_mesh_directory_get(const uform_mesh_directory_t *d, const char *key,
                                        uint64_t timeout_ms, void **value, size_t *size) {
    if (value) *value = NULL;
    if (size) *size = 0;
    UFORM_TRY(check_met(d));
    UFORM_TRY(check_key(key));
    if (!value || !size) return uform_fail(UFORM_INVALID_ARGUMENT, "%s: NULL", value ? "size" : "value");
    char path[MESH_PATH];
    if (!join(path, d->run_path, key))
        return uform_fail(UFORM_FILE, "mesh: the path of key \"%s\" is too long", key);
    mesh_poll_t poll = poll_start(deadline_after(timeout_ms));
    for (;;) {
        char *text;
        size_t length;
        bool missing;
        UFORM_TRY(read_whole(path, MESH_MAX_VALUE, &text, &length, &missing));
        if (!missing) {
            *value = text;
            *size = length;
            return UFORM_OK;
        }
        if (!poll_wait(&poll))
            return uform_fail(UFORM_MESH, "mesh: key \"%s\" did not appear in %s within %llu ms", key,
                              d->run_path, (unsigned long long)timeout_ms);
    }
}

bool uform_mesh_directory_has(const uform_mesh_directory_t *d, const char *key) {
    if (!d || d->hosts == 0 || !d->run_path[0] || !key) return false;
    size_t length = strnlen(key, MESH_MAX_KEY + 1);
    if (length == 0 || length > MESH_MAX_KEY || key[0] == '.') return false;
    for (size_t i = 0; i < length; i++)
        if (!name_char(key[i])) return false;
    char path[MESH_PATH];
    return join(path, d->run_path, key) && exists(path);
}

void uform_mesh_directory_leave(uform_mesh_directory_t *d) {
    if (!d || d->hosts == 0 || d->host != 0 || !d->run_path[0]) return;
    /* Best effort throughout; the caller's last error message is kept. */
    char saved[1024];
    snprintf(saved, sizeof(saved), "%s", uform_last_error());
    char path[MESH_PATH];
    DIR *folder = opendir(d->run_path);
    if (folder) {
        struct dirent *entry;
        while ((entry = readdir(folder)) != NULL) {
            if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
            if (join(path, d->run_path, entry->d_name)) unlink(path);
        }
        closedir(folder);
    }
    rmdir(d->run_path);
    /* The handshake files, only while they are still this run's. */
    char run_file[MESH_PATH], *text = NULL, id[33], listed[33];
    size_t size, hosts;
    bool missing;
    if (join(run_file, d->job_path, "run") &&
        read_whole(run_file, MESH_RUN_FILE, &text, &size, &missing) == UFORM_OK && !missing &&
        parse_run(text, size, 0, id, &hosts, listed) && strcmp(id, d->run_id) == 0) {
        /* The nonce lines follow the three header lines, one a host from host 1. */
        const char *cursor = text, *end = text + size, *line;
        size_t length;
        for (int skip = 0; skip < 3; skip++) next_line(&cursor, end, &line, &length);
        for (size_t h = 1; h < hosts && next_line(&cursor, end, &line, &length); h++) {
            char name[32], *hello = NULL, theirs[33];
            size_t hello_size, unused;
            bool gone;
            if (!is_hex32(line, length)) continue;
            snprintf(name, sizeof(name), "hello.%zu", h);
            if (join(path, d->job_path, name) &&
                read_whole(path, MESH_SMALL_FILE, &hello, &hello_size, &gone) == UFORM_OK && !gone &&
                parse_small(hello, hello_size, theirs, &unused) && memcmp(theirs, line, 32) == 0)
                unlink(path);
            free(hello);
        }
        unlink(run_file);
    }
    free(text);
    uform_set_error_text(saved);
    memset(d, 0, sizeof(*d));
}
