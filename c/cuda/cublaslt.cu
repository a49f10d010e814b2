/* cublaslt.cu: loads cuBLASLt on first use (cublaslt.h). Run on an H200
 * (tests/gpu/test_cuda_ops.c, 2026-12-04); the load itself runs wherever a CUDA
 * backend is asked for. */
#include "cuda_internal.h"
#include "cublaslt.h"
#include "library_loader.h"

#include <pthread.h>

#ifndef UFORM_CUBLAS_LIB_DIR
#define UFORM_CUBLAS_LIB_DIR ""
#endif

static uform_cublaslt_t uform_cublaslt_api;
static bool uform_cublaslt_loaded;
static char uform_cublaslt_error[512];
static pthread_once_t uform_cublaslt_once = PTHREAD_ONCE_INIT;

static void uform_cublaslt_load(void) {
    void *library = uform_library_open("libcublasLt.so.13", UFORM_CUBLAS_LIB_DIR,
                                       "cuBLASLt (libcublasLt.so.13, from the PyPI wheel nvidia-cublas)",
                                       uform_cublaslt_error, sizeof(uform_cublaslt_error));
    if (!library) return;
    uform_cublaslt_t *api = &uform_cublaslt_api;
    bool complete = true;
#define UFORM_LOAD UFORM_LIBRARY_SYMBOL
    UFORM_LOAD(create, cublasLtCreate)
    UFORM_LOAD(destroy, cublasLtDestroy)
    UFORM_LOAD(status_string, cublasLtGetStatusString)
    UFORM_LOAD(matmul_desc_create, cublasLtMatmulDescCreate)
    UFORM_LOAD(matmul_desc_destroy, cublasLtMatmulDescDestroy)
    UFORM_LOAD(matmul_desc_set, cublasLtMatmulDescSetAttribute)
    UFORM_LOAD(layout_create, cublasLtMatrixLayoutCreate)
    UFORM_LOAD(layout_destroy, cublasLtMatrixLayoutDestroy)
    UFORM_LOAD(preference_create, cublasLtMatmulPreferenceCreate)
    UFORM_LOAD(preference_destroy, cublasLtMatmulPreferenceDestroy)
    UFORM_LOAD(preference_set, cublasLtMatmulPreferenceSetAttribute)
    UFORM_LOAD(heuristic, cublasLtMatmulAlgoGetHeuristic)
    UFORM_LOAD(matmul, cublasLtMatmul)
#undef UFORM_LOAD
    if (!complete) {
        snprintf(uform_cublaslt_error, sizeof(uform_cublaslt_error),
                 "cuBLASLt (libcublasLt.so.13) lacks a function this build calls: an older version?");
        dlclose(library);
        return;
    }
    uform_cublaslt_loaded = true;   /* the library stays loaded for the process */
}

const uform_cublaslt_t *uform_cublaslt(void) {
    pthread_once(&uform_cublaslt_once, uform_cublaslt_load);
    if (uform_cublaslt_loaded) return &uform_cublaslt_api;
    uform_fail(UFORM_UNSUPPORTED, "%s", uform_cublaslt_error);
    return NULL;
}
