/* host_device.h: UFORM_HOST_DEVICE marks an inline function that the CPU's
 * loops and the CUDA backend's kernels both call, so the two compute the same
 * bits from one definition (f16_widen.h, output_scalars.h). */
#ifndef UFORM_CORE_HOST_DEVICE_H
#define UFORM_CORE_HOST_DEVICE_H

#if defined(__CUDACC__)   /* nvcc includes cuda_runtime.h first: both are defined */
#define UFORM_HOST_DEVICE __host__ __device__
#else                      /* a C compiler, or the emulation (all of it host code) */
#define UFORM_HOST_DEVICE
#endif

#endif /* UFORM_CORE_HOST_DEVICE_H */
