/* NVTX marks and ranges of caibridge's stream work, in a "caibridge"
 * domain (trace.c).  Built in where configure (or setup.py) found NVTX v3's
 * header, else compiled out; with it, nothing is done until a tool is
 * named by NVTX_INJECTION64_PATH (read once), so the cost without a tool
 * is one load and branch.  Streams are shown as 1, 2 or a handle in hex. */
#ifndef CAIBRIDGE_TRACE_H
#define CAIBRIDGE_TRACE_H

#include <stddef.h>
#include <stdint.h>

/* 1 when NVTX was built in. */
int cai_trace_built(void);

#ifdef HAVE_NVTX
/* 1 on, 0 unknown yet, -1 off. */
extern int cai_trace_state;
int cai_trace_start(void);
void cai_trace_mark(const char *what, intptr_t stream, intptr_t other,
                    size_t bytes);
void cai_trace_push(const char *what, intptr_t stream, intptr_t other);
void cai_trace_pop(void);
#define CAI_TRACING()                                            \
    (__atomic_load_n(&cai_trace_state, __ATOMIC_RELAXED) >= 0 && \
     cai_trace_start())
/* what, the stream it is on, the other stream (0: none), bytes (0: none) */
#define CAI_MARK(what, stream, other, bytes) \
    (CAI_TRACING() ? cai_trace_mark(what, stream, other, bytes) : (void)0)
#define CAI_PUSH(what, stream, other) \
    (CAI_TRACING() ? cai_trace_push(what, stream, other) : (void)0)
#define CAI_POP() (CAI_TRACING() ? cai_trace_pop() : (void)0)
#else
#define CAI_MARK(what, stream, other, bytes) ((void)0)
#define CAI_PUSH(what, stream, other) ((void)0)
#define CAI_POP() ((void)0)
#endif

#endif
