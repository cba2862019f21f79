/*
 * NVTX v3, header only: the header's own loader finds the tool through
 * NVTX_INJECTION64_PATH (nothing is linked).  Each mark's text is made
 * only once a tool is there.
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "trace.h"

#ifdef HAVE_NVTX

#include <nvtx3/nvToolsExt.h>

int cai_trace_state;
static nvtxDomainHandle_t domain;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void start(void)
{
    const char *tool = getenv("NVTX_INJECTION64_PATH");

    if (tool != NULL && *tool != '\0')
        domain = nvtxDomainCreateA("caibridge");
    __atomic_store_n(&cai_trace_state, tool != NULL && *tool != '\0' ? 1 : -1,
                     __ATOMIC_RELAXED);
}

int cai_trace_start(void)
{
    pthread_once(&once, start);
    return __atomic_load_n(&cai_trace_state, __ATOMIC_RELAXED) > 0;
}

int cai_trace_built(void)
{
    return 1;
}

/* 1 and 2 by number, a handle in hex. */
static const char *stream_name(intptr_t stream, char *buf, size_t size)
{
    if (stream >= -1 && stream <= 2)
        snprintf(buf, size, "%ld", (long)stream);
    else
        snprintf(buf, size, "%#lx", (unsigned long)stream);
    return buf;
}

static void say(char *text, size_t size, const char *what, intptr_t stream,
                intptr_t other, size_t bytes)
{
    char a[32], b[32];
    int n = stream == 0 ? snprintf(text, size, "%s", what)
                        : snprintf(text, size, "%s %s", what,
                                   stream_name(stream, a, 32));

    if (other != 0 && n > 0 && (size_t)n < size)
        n += snprintf(text + n, size - (size_t)n, " -> %s",
                      stream_name(other, b, 32));
    if (bytes != 0 && n > 0 && (size_t)n < size)
        snprintf(text + n, size - (size_t)n, " %zu bytes", bytes);
}

static void attributes(nvtxEventAttributes_t *a, const char *text)
{
    *a = (nvtxEventAttributes_t){0};
    a->version = NVTX_VERSION;
    a->size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a->messageType = NVTX_MESSAGE_TYPE_ASCII;
    a->message.ascii = text;
}

void cai_trace_mark(const char *what, intptr_t stream, intptr_t other,
                    size_t bytes)
{
    nvtxEventAttributes_t a;
    char text[128];

    if (what == NULL)
        return;
    say(text, sizeof text, what, stream, other, bytes);
    attributes(&a, text);
    nvtxDomainMarkEx(domain, &a);
}

void cai_trace_push(const char *what, intptr_t stream, intptr_t other)
{
    nvtxEventAttributes_t a;
    char text[128];

    say(text, sizeof text, what, stream, other, 0);
    attributes(&a, text);
    nvtxDomainRangePushEx(domain, &a);
}

void cai_trace_pop(void)
{
    nvtxDomainRangePop(domain);
}

#else

int cai_trace_built(void)
{
    return 0;
}

#endif /* HAVE_NVTX */
