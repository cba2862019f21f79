/* Where the CUDA runtime was found, and the folders the Python module adds
 * to the search (NVIDIA's pip wheels in the site-packages folders).  Needs no CUDA header,
 * so the extension can include it; a build without CUDA has stubs. */
#ifndef CAIBRIDGE_CUDA_SEARCH_H
#define CAIBRIDGE_CUDA_SEARCH_H

#include <stddef.h>

#include "caibridge.h"

/* Called, without any caibridge lock held, before each search for the
 * runtime (the first CUDA call, and every call after a failed search), so
 * the caller can offer its folders by cai_cuda_search_dirs. */
void cai_cuda_search_hook(void (*hook)(void));

/* Folders searched for libcudart.so.N after a runtime already loaded and
 * before $CONDA_PREFIX/lib (the site-packages folders' wheel folders), and
 * others (the rest of sys.path's): never searched, a runtime there is
 * only reported as refused.  Copied.  -1 if they do not fit. */
int cai_cuda_search_dirs(const char *const *dirs, size_t count,
                         const char *const *others, size_t other_count);

/* The candidates the last search passed over, each "path: reason" ended
 * by a NUL, the list ended by another NUL, in list (of room size; entries
 * that do not fit are left out).  Returns how many were copied. */
size_t cai_cuda_search_refused(char *list, size_t size);

/* Why the last search (or load) failed, whole: the message of a CUDAError
 * has room for its start only.  In text (of room size, cut to fit);
 * returns its length. */
size_t cai_cuda_search_problem(char *text, size_t size);

/* The runtime in use, searching for it first if none is yet: its file, how
 * it was found ("CAIBRIDGE_CUDART", "already loaded", "pip wheel",
 * "conda", "system"), and its version.  CAI_ENOCUDA with the reason
 * otherwise. */
int cai_cuda_runtime_info(char *path, size_t size, const char **how,
                          int *version, cai_error_t *err);

/* CUDART_VERSION of the headers built with (13000 for 13.0); 0 without
 * CUDA support. */
int cai_cuda_headers_version(void);

#endif /* CAIBRIDGE_CUDA_SEARCH_H */
