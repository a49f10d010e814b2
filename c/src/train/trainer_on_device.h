/* trainer_on_device.h: a trainer whose step runs on a given backend: the
 * entry Trainer.init_vram is to take with the CUDA backend, and
 * tests/c/test_device_trainer.c with a device-like CPU backend. */
#ifndef UFORM_TRAINER_ON_DEVICE_H
#define UFORM_TRAINER_ON_DEVICE_H

#include "backend/backend.h"

/* As uform_trainer_init_ram, with the flat buffers and workspaces in the
 * memory of `device` and the step's math on its operations, every item kind
 * and term, alone or on a mesh (its collectives through host copies); a term
 * whose loss the backend lacks answers UFORM_UNSUPPORTED. */
UFORM_INTERNAL uform_status_t uform_trainer_init_on_device(uform_executor_t *executor,
                                                           const uform_trainer_options_t *options,
                                                           const uform_backend_t *device,
                                                           uform_trainer_t **result);

/* The same over several devices: a replica per device, each such a trainer,
 * stepping together in one process (replica_group.c); one device is
 * uform_trainer_init_on_device. Not on a mesh (UFORM_UNSUPPORTED). */
UFORM_INTERNAL uform_status_t uform_trainer_init_on_devices(uform_executor_t *executor,
                                                            const uform_trainer_options_t *options,
                                                            const uform_backend_t *devices, size_t count,
                                                            uform_trainer_t **result);

/* Replica r of a trainer over several devices (r below their count), else NULL:
 * for tests, which check that the replicas stay equal. */
UFORM_INTERNAL uform_trainer_t *uform_trainer_replica(const uform_trainer_t *t, size_t r);

#endif /* UFORM_TRAINER_ON_DEVICE_H */
