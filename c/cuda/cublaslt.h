/* cublaslt.h: cuBLASLt, loaded when the first CUDA backend starts (dlopen), not
 * when libuform loads: the library is 500 MB, and a process that never uses a
 * GPU (every CPU user of a CUDA build) should not map it. The soname is the
 * versioned one of the PyPI wheel nvidia-cublas (libcublasLt.so.13), searched on
 * the library's rpath (the wheel's folder at build time), LD_LIBRARY_PATH, and
 * then at the folder the build found it in. */
#ifndef UFORM_CUDA_CUBLASLT_H
#define UFORM_CUDA_CUBLASLT_H

#include <cublasLt.h>

typedef struct {
    decltype(&cublasLtCreate) create;
    decltype(&cublasLtDestroy) destroy;
    decltype(&cublasLtGetStatusString) status_string;
    decltype(&cublasLtMatmulDescCreate) matmul_desc_create;
    decltype(&cublasLtMatmulDescDestroy) matmul_desc_destroy;
    decltype(&cublasLtMatmulDescSetAttribute) matmul_desc_set;
    decltype(&cublasLtMatrixLayoutCreate) layout_create;
    decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
    decltype(&cublasLtMatmulPreferenceCreate) preference_create;
    decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy;
    decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set;
    decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
    decltype(&cublasLtMatmul) matmul;
} uform_cublaslt_t;

/* The loaded functions, or NULL with UFORM_UNSUPPORTED recorded as the thread's
 * error (naming the library and dlerror's words). Loads once per process. */
const uform_cublaslt_t *uform_cublaslt(void);

#endif /* UFORM_CUDA_CUBLASLT_H */
