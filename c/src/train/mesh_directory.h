/* mesh_directory.h: the rendezvous of a multi-host training mesh through a
 * shared directory (an NFS folder every host sees). The handshake, and why it
 * is correct with files left by earlier or crashed runs, is described at the
 * top of mesh_directory.c. */
#ifndef UFORM_MESH_DIRECTORY_H
#define UFORM_MESH_DIRECTORY_H

#include "core/internal.h"

/* The meeting place of one run: <directory>/<job>/ holds the handshake files,
 * <directory>/<job>/run-<id>/ the run's own keys (fresh for every run). */
typedef struct {
    char job_path[4096];   /* <directory>/<job> */
    char run_path[4096];   /* <directory>/<job>/run-<32 hex digits> */
    char run_id[33];       /* 128 random bits as hex, from getrandom() */
    size_t host, hosts;
    uint64_t timeout_ms;
} uform_mesh_directory_t;

/* Meets the other hosts of `job` under `directory` (created if missing, as is
 * <directory>/<job>; mode 0777 & ~umask). Blocks until every host arrived or
 * timeout_ms passed. On timeout: UFORM_MESH with a message naming the hosts that
 * did not arrive, e.g. "mesh: job \"run-17\" in /x: hosts 2, 3 of 4 did not arrive within 5000 ms".
 * Checks: directory non-NULL, non-empty, exists or creatable; job non-empty, at
 * most 128 bytes, only [A-Za-z0-9._-], not "." or ".."; hosts >= 1, host < hosts,
 * hosts <= 65536, timeout_ms >= 1: else UFORM_INVALID_ARGUMENT naming the field
 * ("host_domain_index", "host_domain_count", "directory", "job", "timeout_ms").
 * A directory that cannot be created or written: UFORM_FILE naming the path and
 * strerror. On failure *out is zeroed (leave on it is a no-op). */
UFORM_INTERNAL uform_status_t uform_mesh_directory_meet(const char *directory, const char *job,
                                                        size_t host, size_t hosts,
                                                        uint64_t timeout_ms,
                                                        uform_mesh_directory_t *out);
/* Publishes key=value in the run's folder atomically (a reader sees all of it or
 * nothing). key: [A-Za-z0-9._-]+, at most 200 bytes, not starting with '.', and
 * not one of the meeting's own names ("ready", "abort", "ack.*"). size: at most
 * 64 MiB. */
UFORM_INTERNAL uform_status_t uform_mesh_directory_set(const uform_mesh_directory_t *d,
                                                       const char *key, const void *value,
                                                       size_t size);
/* Waits (polling with a short sleep that grows from 1 ms to 50 ms) until key
 * exists in the run's folder, at most timeout_ms, then reads it into a malloc'd
 * buffer (*value, *size; the caller frees). Timeout: UFORM_MESH naming the key.
 * A key over 64 MiB: UFORM_FORMAT. */
UFORM_INTERNAL uform_status_t uform_mesh_directory_get(const uform_mesh_directory_t *d,
                                                       const char *key, uint64_t timeout_ms,
                                                       void **value, size_t *size);
/* Whether the key exists now (no waiting); false for an invalid key. */
UFORM_INTERNAL bool uform_mesh_directory_has(const uform_mesh_directory_t *d, const char *key);
/* Host 0 only, optional: removes the run's folder and its files (best effort)
 * and the handshake files of this run. Other hosts: no-op. Call it once every
 * host is done with the run's keys (after a last exchange of keys, say): a
 * host still reading keys would wait for ones that are gone. */
UFORM_INTERNAL void uform_mesh_directory_leave(uform_mesh_directory_t *d);

#endif /* UFORM_MESH_DIRECTORY_H */
