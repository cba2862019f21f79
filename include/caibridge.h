/*
 * caibridge: zero-copy translation between the CUDA Array Interface (CAI)
 * and DLPack.
 *
 * The core has no Python dependency.  Every function returns 0 (CAI_OK) or a
 * negative cai_status_t, and fills an optional caller-owned cai_error_t with
 * a message that names the field and the rule broken.  There is no global
 * error state, so every function may be called from any thread.
 *
 * Rules every function keeps (the comments below say only what differs):
 * - NULL: err may always be NULL.  Any other pointer argument that a
 *   comment does not allow to be NULL is checked: a NULL one fails with
 *   CAI_EINVAL and err's field names the argument ("out", "desc").  A
 *   conversion still releases its owner then.
 * - Options: a bit of an options argument this library does not know
 *   (a newer header's) fails with CAI_EINVAL naming the bits; it is never
 *   ignored.
 * - Outputs: after a failure a caller-owned result holds nothing to use,
 *   except where a comment says what it holds (NULL, 0).
 * - ABI: see "The ABI promise" in docs/reference/c.rst.  The exported
 *   functions carry the symbol version CAIBRIDGE_0.1; the structs below
 *   keep their layout for as long as the soname libcaibridge.so.0 lasts.
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef CAIBRIDGE_H
#define CAIBRIDGE_H

#include <stddef.h>
#include <stdint.h>

#include <caibridge/dlpack.h>

#if !defined(DLPACK_MAJOR_VERSION) || DLPACK_MAJOR_VERSION < 1
#error \
    "caibridge needs the DLPack 1.x ABI; an older dlpack.h was included first"
#endif

#define CAIBRIDGE_VERSION_MAJOR 0
#define CAIBRIDGE_VERSION_MINOR 1
#define CAIBRIDGE_VERSION_PATCH 0
#define CAIBRIDGE_VERSION_STRING "0.1.0"

/* The DLPack version this ABI was declared for (and that we produce). */
#define CAIBRIDGE_DLPACK_MAJOR 1
#define CAIBRIDGE_DLPACK_MINOR 3

#if defined(_WIN32)
#if defined(CAIBRIDGE_BUILDING)
#define CAI_API __declspec(dllexport)
#else
#define CAI_API __declspec(dllimport)
#endif
#elif defined(__GNUC__) && defined(CAIBRIDGE_BUILDING)
#define CAI_API __attribute__((visibility("default")))
#else
#define CAI_API
#endif

/* No nonnull attribute: the library checks its pointers (CAI_EINVAL), and
 * the attribute would let a compiler drop those checks. */
#if defined(__GNUC__)
#define CAI_WUR __attribute__((warn_unused_result))
#else
#define CAI_WUR
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Most dimensions a descriptor may have (NumPy 2 allows 64, so do we). */
#define CAI_MAX_NDIM 64

/* Longest typestr we format, with its terminating NUL ("<c16"). */
#define CAI_TYPESTR_MAX 8

/* Stream values of the DLPack protocol and of CAI v3. */
#define CAI_STREAM_LEGACY ((intptr_t)1)     /* cudaStreamLegacy */
#define CAI_STREAM_PER_THREAD ((intptr_t)2) /* cudaStreamPerThread */
#define CAI_STREAM_NO_SYNC ((intptr_t)-1)   /* consumer: do not order */

/* What every function returns: 0 or one of the negative values. */
typedef enum cai_status {
    CAI_OK = 0,
    CAI_EINVAL = -1,       /* malformed descriptor or argument */
    CAI_EUNSUPPORTED = -2, /* well-formed, but the target cannot express it */
    CAI_ENOMEM = -3,       /* allocation failed */
    CAI_EREADONLY = -4,    /* read-only data asked for as a legacy tensor */
    CAI_EVERSION = -5,     /* DLPack major version other than ours */
    CAI_ENOCUDA = -6,      /* no usable CUDA runtime or driver */
    CAI_ECUDA = -7         /* a CUDA runtime call failed */
} cai_status_t;
/* The name before 0.1.0 had _t, kept. */
typedef cai_status_t cai_status;

/* Filled on failure; status is 0 on success.  field is "" when none applies.
 * Both strings are always NUL-terminated. */
typedef struct cai_error {
    int status;
    char field[32];
    char message[224];
} cai_error_t;

/*
 * A CAI (or NumPy __array_interface__) descriptor in C.
 *
 * data already includes any byte offset.  strides are in bytes and are read
 * only when has_strides is set; otherwise the layout is C-contiguous.
 * Only shape[0..ndim) and strides[0..ndim) are read.
 *
 * version is the CAI (or array interface) version the producer's dict
 * declared, 0 to 3; anything else is refused.  A C producer sets 3.  It
 * changes nothing in a conversion: the CAI v3 rules (a stream of 0
 * refused, a mask refused) apply to every version, and from_* write 3.
 *
 * device.device_type == 0 means "not known yet": cai_cuda_locate() fills it
 * for CAI pointers, and host arrays use kDLCPU.  cai_desc_validate, the
 * conversions and the from_* functions apply one set of rules: a device
 * type DLPack defines (0 is refused with CAI_EINVAL, an unknown one with
 * CAI_EUNSUPPORTED), a device_id >= 0, and a dtype code DLPack defines
 * (CAI_EUNSUPPORTED otherwise), then the layout's rules.
 */
typedef struct cai_desc {
    void *data;
    int readonly;
    int ndim;
    int version;     /* CAI / array-interface version, 0..3 */
    int has_strides; /* 0: strides absent or None (C-contiguous) */
    int has_mask;    /* a non-None mask entry; always refused */
    int has_stream;  /* 0: stream absent or None */
    intptr_t stream; /* the producer's stream when has_stream */
    DLDataType dtype;
    DLDevice device;
    int64_t shape[CAI_MAX_NDIM];
    int64_t strides[CAI_MAX_NDIM];
} cai_desc_t;

/* Called exactly once with the owner passed to a conversion.  Wherever a
 * release is taken it may be NULL: then nothing is called, and owner is
 * only carried (a DLPack tensor's manager_ctx). */
typedef void (*cai_release_fn)(void *owner);

/* Options for the conversions to DLPack (their options argument); any
 * other bit is refused. */
enum {
    /* Export read-only data as a legacy tensor anyway (the caller opted in). */
    CAI_OPT_LEGACY_READONLY_OK = 1u << 0,
    /* Set DLPACK_FLAG_BITMASK_IS_COPIED: the data is a copy made for this. */
    CAI_OPT_IS_COPIED = 1u << 1
};

/* The library's version, "MAJOR.MINOR.PATCH", a static string. */
CAI_API const char *cai_version(void);

/* The short English name of a status ("invalid descriptor"), a static string. */
CAI_API const char *cai_status_name(int status);

/* Reads typestr (len bytes, no NUL needed) into *out; nothing is allocated.
 * typestr and out must not be NULL (CAI_EINVAL). */
CAI_API int cai_typestr_parse(const char *typestr, size_t len, DLDataType *out,
                              cai_error_t *err) CAI_WUR;

/* Writes dtype's NUL-terminated typestr into out, which the caller owns
 * (not NULL). */
CAI_API int cai_typestr_format(DLDataType dtype, char out[CAI_TYPESTR_MAX],
                               cai_error_t *err) CAI_WUR;

/* Bytes per element of dtype, or 0 when it is not whole bytes. */
CAI_API int64_t cai_dtype_itemsize(DLDataType dtype);

/* Writes ndim element strides into out (caller-owned); refuses any byte
 * stride that is not a multiple of itemsize on a dimension longer than 1.
 * shape, bytes and out may be NULL only when ndim is 0 or less. */
CAI_API int cai_strides_bytes_to_elements(int ndim, const int64_t *shape,
                                          const int64_t *bytes,
                                          int64_t itemsize, int64_t *out,
                                          cai_error_t *err) CAI_WUR;

/* Writes ndim byte strides into out (caller-owned), refusing overflow.
 * elements and out may be NULL only when ndim is 0 or less. */
CAI_API int cai_strides_elements_to_bytes(int ndim, const int64_t *elements,
                                          int64_t itemsize, int64_t *out,
                                          cai_error_t *err) CAI_WUR;

/* 1 when byte strides (NULL: none given) describe a C-contiguous layout,
 * else 0 (a status is never returned).  With strides, a NULL shape gives 0
 * unless ndim is 0 or less. */
CAI_API int cai_is_c_contiguous(int ndim, const int64_t *shape,
                                const int64_t *strides_bytes,
                                int64_t itemsize);

/*
 * The bytes a strided layout addresses, relative to its data pointer: every
 * element lies in [*lo, *hi), where
 *   *lo = byte_offset + sum of strides[i] * (shape[i] - 1) over negative ones,
 *   *hi = byte_offset + sum of the positive ones + itemsize.
 * Byte strides may be negative or zero; NULL means C-contiguous.  An axis of
 * length 1 never applies its stride.  A zero-size array addresses nothing:
 * *lo = *hi = byte_offset.  Every product and sum is overflow-checked; a
 * layout whose extent or element count does not fit in int64_t fails with
 * CAI_EINVAL naming shape, strides[i] or offset, so a buffer of len bytes
 * holds the array exactly when *lo >= 0 && *hi <= len.  No pointer is read
 * or formed.  On failure *lo = *hi = 0 (those of them not NULL).  lo and
 * hi must not be NULL; shape may be NULL only when ndim is 0.
 */
CAI_API int cai_layout_extent(int ndim, const int64_t *shape,
                              const int64_t *strides_bytes, int64_t itemsize,
                              int64_t byte_offset, int64_t *lo, int64_t *hi,
                              cai_error_t *err) CAI_WUR;

/* Checks every rule a descriptor must follow to be converted, the same
 * rules and statuses as the conversions; reads only.  desc: not NULL. */
CAI_API int cai_desc_validate(const cai_desc_t *desc,
                              cai_error_t *err) CAI_WUR;

/*
 * Builds a DLManagedTensorVersioned that views desc's memory.  The owner is
 * always consumed: on success the tensor's deleter calls release(owner) once,
 * and on failure release(owner) is called once before this returns (a NULL
 * desc or out, or an unknown options bit, included).  release may be NULL.
 * The tensor, its shape and its strides are one allocation freed by its
 * deleter, which is never NULL.  *out is NULL on failure.  desc is only
 * read, and may be reused or freed as soon as this returns.
 */
CAI_API int cai_desc_to_dlpack_versioned(const cai_desc_t *desc,
                                         unsigned options, void *owner,
                                         cai_release_fn release,
                                         DLManagedTensorVersioned **out,
                                         cai_error_t *err) CAI_WUR;

/*
 * Builds a legacy DLManagedTensor that views desc's memory, with the same
 * ownership as cai_desc_to_dlpack_versioned.  Read-only data fails with
 * CAI_EREADONLY unless options has CAI_OPT_LEGACY_READONLY_OK.
 */
CAI_API int cai_desc_to_dlpack(const cai_desc_t *desc, unsigned options,
                               void *owner, cai_release_fn release,
                               DLManagedTensor **out,
                               cai_error_t *err) CAI_WUR;

/*
 * Describes a borrowed DLTensor in *out; the tensor stays the caller's, and
 * out's data points into it.  tensor and out must not be NULL; on failure
 * *out holds nothing to use.  The from_* functions never call a deleter:
 * a tensor whose deleter is NULL is described all the same.
 */
CAI_API int cai_desc_from_dltensor(const DLTensor *tensor, cai_desc_t *out,
                                   cai_error_t *err) CAI_WUR;

/*
 * Describes a borrowed versioned tensor in *out; the tensor stays owned by
 * the caller, who must still call its deleter.  A major version other than
 * ours (CAIBRIDGE_DLPACK_MAJOR) fails with CAI_EVERSION after reading nothing
 * but the version.
 */
CAI_API int cai_desc_from_dlpack_versioned(const DLManagedTensorVersioned *t,
                                           cai_desc_t *out,
                                           cai_error_t *err) CAI_WUR;

/* Describes a borrowed legacy tensor in *out; the tensor stays the caller's.
 * As cai_desc_from_dltensor. */
CAI_API int cai_desc_from_dlpack(const DLManagedTensor *t, cai_desc_t *out,
                                 cai_error_t *err) CAI_WUR;

/* ---- CUDA (runtime resolved at first use; see docs/cuda.rst) ---- */

/* 1 when this build has CUDA support compiled in. */
CAI_API int cai_cuda_built(void);

/*
 * Loads the CUDA runtime if needed and writes its version (e.g. 13000) to
 * *version, which the caller owns (not NULL; 0 on failure).  Fails with
 * CAI_ENOCUDA when no runtime can be loaded.
 */
CAI_API int cai_cuda_runtime_version(int *version, cai_error_t *err) CAI_WUR;

/*
 * Finds where ptr lives and writes it to *out (caller-owned); nothing is
 * allocated.  Device memory -> kDLCUDA and its own device; pinned host ->
 * kDLCUDAHost 0; managed, or pageable memory on a system whose devices read
 * it coherently (HMM, ATS) -> kDLCUDAManaged 0; the device alias of
 * registered host memory -> kDLCUDA on its device.  Other host memory (or a
 * freed device pointer, which CUDA cannot tell from it) fails with
 * CAI_EUNSUPPORTED.  A NULL ptr (zero-size array) takes the device of the
 * thread's current CUDA context, else the runtime's current device, and
 * creates no context.  out must not be NULL; on failure its device_type
 * is 0.
 */
CAI_API int cai_cuda_locate(const void *ptr, DLDevice *out,
                            cai_error_t *err) CAI_WUR;

/*
 * Like cai_cuda_locate for desc->data, but a zero-size array whose producer
 * names a stream handle takes that stream's device.  desc stays the
 * caller's and is only read; *out is caller-owned.  Neither may be NULL.
 */
CAI_API int cai_cuda_locate_desc(const cai_desc_t *desc, DLDevice *out,
                                 cai_error_t *err) CAI_WUR;

/*
 * The stream value for a raw cudaStream_t handle, as the __cuda_stream__
 * protocol gives it: handle 0 (the NULL stream) is the legacy default
 * stream, CAI_STREAM_LEGACY, unlike the bare integer 0 that DLPack and
 * CAI v3 disallow.  Pure arithmetic: no CUDA call, nothing owned.
 */
CAI_API intptr_t cai_cuda_stream_from_handle(uintptr_t handle);

/*
 * Makes work on consumer_stream wait for work already queued on the
 * producer's stream (CAI v3 "Synchronization"), without blocking the host:
 * a fence recorded, waited on and destroyed in one call, so the producer's
 * stream is resolved now, on this thread.  Only producer->has_stream,
 * stream and device are read.  No CUDA call is made when the producer has
 * no stream, when the consumer passes CAI_STREAM_NO_SYNC, or when both are
 * the same stream.  A consumer stream of 0 is refused (CAI_EINVAL).
 * Nothing is allocated; producer stays the caller's (not NULL).
 */
CAI_API int cai_cuda_order(const cai_desc_t *producer,
                           intptr_t consumer_stream, cai_error_t *err) CAI_WUR;

/* Blocks the host until all work queued on stream has finished; nothing is
 * owned. */
CAI_API int cai_cuda_stream_synchronize(intptr_t stream,
                                        cai_error_t *err) CAI_WUR;

/*
 * A point in a producer's stream, taken when a view is made: an event
 * recorded on that stream (in that stream's CUDA context) at that moment.
 * Waiting on it later, from any thread, orders after exactly the work queued
 * before it, even if the producer's stream handle is a per-thread default
 * stream of another thread or has been destroyed since.
 */
typedef struct cai_fence cai_fence_t;

/*
 * Records a fence on producer->stream now and writes it to *out, which the
 * caller then owns and must pass to cai_fence_destroy.  producer's
 * has_stream, stream, device, ndim and shape are read.  *out is set to NULL
 * (success, nothing to own) when no ordering is needed: no producer stream,
 * no elements, or a default stream on a thread with no CUDA context (that
 * thread queued nothing).  The event is created in the stream's context
 * (the data's device for the default streams 1 and 2 with device memory),
 * and the caller's exact current context, NULL included, is restored.  On
 * failure *out is NULL and nothing is left allocated.  producer and out
 * must not be NULL.
 *
 * Threads: a fence may be used from several threads at once (wait,
 * wait_once, synchronize, release, release_owner, share): what those calls
 * keep in it (the streams waited, the owners' count, whether a capture
 * named it) is guarded by a lock or kept atomic.  They take a const fence
 * because they never change what it stands for, the point recorded in
 * the producer's stream; that bookkeeping is never the caller's to read.
 * cai_fence_destroy is the exception: each owner calls it once, when no
 * other call of that owner on the fence can still run.
 */
CAI_API int cai_fence_record(const cai_desc_t *producer, cai_fence_t **out,
                             cai_error_t *err) CAI_WUR;

/*
 * Makes consumer_stream wait on fence on the device, without blocking the
 * host.  The fence stays the caller's; a NULL fence or CAI_STREAM_NO_SYNC
 * makes no call, and consumer stream 0 is refused.  A consumer stream that
 * is capturing a CUDA graph gets an external-event wait node (the capture
 * stays valid); a fence recorded inside a capture is refused for a consumer
 * outside it (CAI_EUNSUPPORTED) before any wait is queued.
 */
CAI_API int cai_fence_wait(const cai_fence_t *fence, intptr_t consumer_stream,
                           cai_error_t *err) CAI_WUR;

/*
 * Blocks the host until the work before fence has finished: for a consumer
 * on the CPU reading pinned or managed memory.  For managed memory on a
 * device without concurrent managed access (cudaDevAttrConcurrentManagedAccess
 * 0: Windows, WSL2, some vGPUs) it also waits for the whole device, where
 * the CPU may not touch managed memory while any kernel runs.  The fence
 * stays the caller's; NULL returns at once.  A fence recorded inside a graph
 * capture is refused (its work runs when the graph is launched).
 */
CAI_API int cai_fence_synchronize(const cai_fence_t *fence,
                                  cai_error_t *err) CAI_WUR;

/*
 * The reverse edge, for when a consumer releases the data, without
 * blocking the host: records an event on consumer_stream, and makes the
 * producer's stream wait for it on the device only when that stream cannot
 * have been destroyed: 1, or 2 released on the thread that recorded the
 * fence.  A producer's stream handle is never named (it may be gone by
 * now); to keep the producer's memory until the consumer's work is done,
 * use cai_fence_release_owner.  consumer_stream must exist now: name only
 * a stream that cannot have been destroyed (1, 2 of this thread, or a
 * handle whose owner you hold).  The fence stays the caller's.  NULL fence
 * or CAI_STREAM_NO_SYNC: no call.  A consumer stream capturing a CUDA
 * graph is refused (CAI_EUNSUPPORTED).
 */
CAI_API int cai_fence_release(const cai_fence_t *fence,
                              intptr_t consumer_stream,
                              cai_error_t *err) CAI_WUR;

/* Options for cai_fence_release_owner; any other bit is refused.
 * CAI_RELEASE_BLOCK is for producers that write in place right after. */
enum {
    /* The host waits for the consumer's work, then release runs. */
    CAI_RELEASE_BLOCK = 1u << 0
};

/*
 * The reverse edge for a producer's owner: records an event on
 * consumer_stream and keeps owner until that event has completed, when
 * release(owner) runs.  Nothing blocks.  It depends on consumer_stream
 * alone: a NULL fence (a producer with nothing to order) and the fence's
 * own stream handle still keep owner, as the consumer's work still reads
 * the data.  When there is nothing to wait for (CAI_STREAM_NO_SYNC, no
 * CUDA context on a default stream), or on failure, release runs at once
 * (after the host has waited for a default stream whose record failed, as
 * the consumer's work there may still run), on
 * this thread, before this call returns.  Otherwise it is deferred: it
 * runs once the event has completed (or its context is gone), inside the
 * first cai_release_poll or cai_fence_release_owner call that finds it so,
 * on the thread making that call (this very call polls too), after the
 * caller's CUDA context is put back and with no lock held, so release may
 * call caibridge again.  In C nothing else runs deferred releases (in
 * Python the module's release waiter does): a library must call
 * cai_release_poll (from its own loop, or with wait nonzero before it
 * unloads or at exit), or the deferred owners are never released.  With
 * CAI_RELEASE_BLOCK in options the host waits for the event here and
 * release runs before this call returns; an unknown options bit fails
 * with CAI_EINVAL, release run at once.  release may be NULL: nothing is
 * run for the owner.  The
 * fence may be destroyed as soon as this returns.  consumer_stream follows
 * cai_fence_release's rule.
 */
CAI_API int cai_fence_release_owner(const cai_fence_t *fence,
                                    intptr_t consumer_stream, unsigned options,
                                    void *owner, cai_release_fn release,
                                    cai_error_t *err) CAI_WUR;

/*
 * Runs, on the calling thread, the release callbacks of
 * cai_fence_release_owner whose consumer's work has finished (asked with
 * cuEventQuery, only the oldest of each stream until one is not done);
 * with wait nonzero the host waits for all of them first (at exit), with
 * no lock held, so other threads' calls are not held behind it.  Without
 * pending releases it makes no CUDA call.  A failed query is reported; its
 * owner is released only when the error says the work can never run (a
 * sticky launch error, 700-719), else it stays pending.  In C, caibridge has no
 * thread of its own (the Python module's release waiter calls this): a
 * library that defers releases must call it, or the deferred owners are
 * never released.
 */
CAI_API int cai_release_poll(int wait, cai_error_t *err);

/*
 * Many tensors, one fence.  Each owner of a shared fence calls
 * cai_fence_destroy once, and the last call destroys it (NULL stays
 * NULL).  A batch of tensors from one producer
 * stream can so share one record.
 *
 * cai_fence_wait_once is cai_fence_wait, remembered: once it has made a
 * consumer stream wait, a later call for the same stream queues nothing.
 * "The same" is proven, never taken from the value: stream 1 by its
 * context's id (cuCtxGetId), stream 2 by that and the calling thread, a
 * handle, which CUDA may reuse for a new stream, by the stream's id
 * (cuStreamGetId, driver 12.0+); without a proof it waits again.  A check
 * costs one or two of those queries, no record and no wait.  The fence
 * remembers the last 4 streams.  cai_fence_share makes fence one more
 * owner's and returns it.
 */
CAI_API cai_fence_t *cai_fence_share(cai_fence_t *fence);

/* cai_fence_wait, once per consumer stream proven the same (above): 0
 * whether it waited now or had already. */
CAI_API int cai_fence_wait_once(const cai_fence_t *fence,
                                intptr_t consumer_stream,
                                cai_error_t *err) CAI_WUR;

/*
 * Destroys fence (NULL is allowed) and frees it: the fence is consumed even
 * when CUDA reports an error, which is returned.
 */
CAI_API int cai_fence_destroy(cai_fence_t *fence, cai_error_t *err);

/*
 * Frees what caibridge keeps for the process, for a plugin that is about
 * to be unloaded (dlclose) or a program about to exit: the pooled CUDA
 * events (destroyed in their contexts) and the CUDA runtime it loaded
 * (dlclose).  The rules: call it last, after every fence is destroyed,
 * every tensor made from a fence is gone and no other thread is in a
 * caibridge call; make no CUDA call of caibridge after it.  A deferred
 * release still pending (cai_fence_release_owner) makes it fail with
 * CAI_EINVAL naming "releases", freeing nothing: call
 * cai_release_poll(1, &err) first.  Without CUDA, or with no runtime
 * loaded, it frees nothing and returns 0.  The host functions
 * (typestr, layout, descriptors, conversions) keep working after it.
 */
CAI_API int cai_shutdown(cai_error_t *err);

/* ---- Counters (see docs/ordering.rst) ---- */

/*
 * Counters: what caibridge did on the GPU's behalf in this process, so a
 * program can see that it orders anything.  Process-wide, counted with
 * relaxed atomics (a read during other threads' calls is a moment's
 * picture, each counter exact on its own).  cai_stats fills the first size
 * bytes of *out (size: sizeof(cai_stats_t) of the caller's header, at
 * least up to cuda_errors); version says which fields this library knows,
 * and later versions only add fields at the end.
 */
#define CAI_STATS_VERSION 1

typedef struct cai_stats {
    uint32_t version;           /* CAI_STATS_VERSION of the library */
    uint32_t size;              /* the bytes it filled */
    uint64_t views;             /* DLPack tensors made (copies too) */
    uint64_t records;           /* events recorded (fences, releases) */
    uint64_t waits;             /* cudaStreamWaitEvent queued */
    uint64_t waits_skipped;     /* stream proven already ordered */
    uint64_t host_waits;        /* on an event, a stream or the device */
    uint64_t releases_now;      /* owners released at once */
    uint64_t releases_deferred; /* owners kept for the consumer's work */
    uint64_t releases_pending;  /* of those, kept now */
    uint64_t let_go_waiter;     /* let go by the module's waiter thread */
    uint64_t let_go_call;       /* let go at a call */
    uint64_t device_copies;     /* copies into fresh device memory */
    uint64_t device_copy_bytes; /* their bytes */
    uint64_t host_copies;       /* copies into host memory */
    uint64_t host_copy_bytes;   /* their bytes */
    uint64_t cuda_errors;       /* CUDA calls of caibridge that failed */
} cai_stats_t;

/* Fills *out (see above); CAI_EINVAL naming "size" when size is too small
 * for version 1's fields. */
CAI_API int cai_stats(cai_stats_t *out, size_t size, cai_error_t *err);

/* Sets every counter to 0 but releases_pending, which is a count of what
 * is kept now; for tests. */
CAI_API void cai_stats_reset(void);

#ifdef __cplusplus
}
#endif

#endif /* CAIBRIDGE_H */
