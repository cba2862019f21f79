/*
 * A test tool for NVTX v3, loaded by the NVTX header's own loader through
 * NVTX_INJECTION64_PATH: it writes each mark, range push and pop of the
 * "caibridge" domain as a line to the file CAI_NVTX_LOG names
 * ("mark TEXT", "push TEXT", "pop"), so tests/cuda/test_nvtx.py can hold
 * the exact sequence a hand-over shows in a profiler.
 */
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct nvtxDomainRegistration_st *ours;
static char ours_storage;

static void line(const char *kind, nvtxDomainHandle_t domain,
                 const nvtxEventAttributes_t *a)
{
    const char *path = getenv("CAI_NVTX_LOG");
    FILE *f;

    if (path == NULL || domain == NULL || domain != ours)
        return;
    pthread_mutex_lock(&lock);
    f = fopen(path, "a");
    if (f != NULL) {
        if (a != NULL && a->messageType == NVTX_MESSAGE_TYPE_ASCII)
            fprintf(f, "%s %s\n", kind, a->message.ascii);
        else
            fprintf(f, "%s\n", kind);
        fclose(f);
    }
    pthread_mutex_unlock(&lock);
}

static nvtxDomainHandle_t NVTX_API domain_create(const char *name)
{
    if (strcmp(name, "caibridge") != 0)
        return NULL;
    ours = (struct nvtxDomainRegistration_st *)(void *)&ours_storage;
    return ours;
}

static void NVTX_API mark(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    line("mark", d, a);
}

static int NVTX_API push(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    line("push", d, a);
    return 0;
}

static int NVTX_API pop(nvtxDomainHandle_t d)
{
    line("pop", d, NULL);
    return 0;
}

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get);

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get)
{
    const NvtxExportTableCallbacks *callbacks =
        (const NvtxExportTableCallbacks *)get(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable table = NULL;
    unsigned size = 0;

    if (callbacks == NULL ||
        !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table,
                                           &size) ||
        size <= NVTX_CBID_CORE2_DomainCreateA)
        return 0;
    *table[NVTX_CBID_CORE2_DomainCreateA] = (NvtxFunctionPointer)domain_create;
    *table[NVTX_CBID_CORE2_DomainMarkEx] = (NvtxFunctionPointer)mark;
    *table[NVTX_CBID_CORE2_DomainRangePushEx] = (NvtxFunctionPointer)push;
    *table[NVTX_CBID_CORE2_DomainRangePop] = (NvtxFunctionPointer)pop;
    return 1;
}
