/* library_loader.h: the CUDA backend's libraries that come from PyPI wheels
 * (cuBLASLt in cublaslt.cu, NCCL in collectives.cu) are opened at first use,
 * not linked: a build without them at run time still loads and runs on CPUs.
 * Each is looked for by its versioned soname on the library's rpath, then in
 * the wheel's folder found at build time. */
#ifndef UFORM_CUDA_LIBRARY_LOADER_H
#define UFORM_CUDA_LIBRARY_LOADER_H

#include <dlfcn.h>
#include <stdio.h>

/* The library `soname` (then `directory`/`soname` when directory is not
 * ""), or NULL with "<what> could not be loaded: <why>" written to `error`. */
static inline void *uform_library_open(const char *soname, const char *directory, const char *what, char *error,
                                       size_t error_bytes) {
    void *library = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!library && directory[0]) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", directory, soname);
        library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    if (!library) {
        const char *why = dlerror();
        snprintf(error, error_bytes, "%s could not be loaded: %s", what, why ? why : "not found");
    }
    return library;
}

/* api->field = the library's `symbol`, `complete` false when it lacks one
 * (inside a loader with `library`, `api` and `complete` in scope). */
#define UFORM_LIBRARY_SYMBOL(field, symbol)                                                        \
    api->field = (decltype(api->field))dlsym(library, #symbol);                                    \
    complete = complete && api->field != NULL;

#endif /* UFORM_CUDA_LIBRARY_LOADER_H */
