/*
 * Capsules and the release of what tensors own.  A tensor's deleter may run
 * on any thread, with or without the GIL, in any interpreter, or after
 * shutdown has begun; capsule destructors run with no module at hand.  So
 * nothing here reads module state: a capsule finds its tensor in its own
 * context, a tensor its owner (and the interpreter that made it) in its own
 * block.  The rule: an owner is released in the interpreter that made it.
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#include "caibridge_module.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030D0000
#include <pythread.h>
#endif

const char CAPSULE_LEGACY[] = "dltensor";
const char CAPSULE_VERSIONED[] = "dltensor_versioned";
static const char CAPSULE_LEGACY_USED[] = "used_dltensor";
static const char CAPSULE_VERSIONED_USED[] = "used_dltensor_versioned";

/*
 * Owners released on a thread that does not hold the GIL.  Such a thread
 * must never wait for the GIL: if the interpreter starts finalizing while
 * it waits, CPython ends it with a forced unwind (pthread_exit), which a
 * C++ noexcept frame of the caller (a thread pool's task runner) turns into
 * std::terminate; and a check for finalization before waiting is a race.
 * So the owner is queued here and one pending call (Py_AddPendingCall
 * needs no GIL) drops the queue in the main thread.  The interpreter's
 * exit (an atexit hook) drops what is queued and closes the queue: owners
 * released after that are left to the end of the process, by design.
 *
 * Process-wide, not module state: pending calls and the hook belong to the
 * main interpreter, and the lock makes the hook and a release exclusive,
 * so no release touches the interpreter once the hook has run.  Until the
 * hook is registered (the module imported only in a sub-interpreter), a
 * release takes the GIL as before.
 */
struct released {
    struct released *next;
    PyObject *owner;
};

static pthread_mutex_t release_lock = PTHREAD_MUTEX_INITIALIZER;
static struct released *release_queue; /* guarded by release_lock */
static int release_scheduled;          /* a pending call is queued */
/* The atexit hook: 0 none, 1 being registered (claimed under the lock, so
 * two threads never both register it), 2 registered. */
static int release_hooked;
static int release_closed; /* the interpreter is exiting */

/* Drops the queued owners; the GIL is held.  Releasing one may run Python
 * code that releases more: they go straight through (this thread holds
 * the GIL) or into a queue that the next pending call drains. */
static int drain_released(void *unused)
{
    struct released *r;

    (void)unused;
    pthread_mutex_lock(&release_lock);
    r = release_queue;
    release_queue = NULL;
    release_scheduled = 0;
    pthread_mutex_unlock(&release_lock);
    while (r != NULL) {
        struct released *next = r->next;

        Py_DECREF(r->owner);
        PyMem_RawFree(r);
        r = next;
    }
    return 0;
}

/* The atexit hook: from here on the interpreter is left alone. */
static PyObject *close_release_queue(PyObject *unused, PyObject *noargs)
{
    (void)unused;
    (void)noargs;
    pthread_mutex_lock(&release_lock);
    release_closed = 1;
    pthread_mutex_unlock(&release_lock);
    drain_released(NULL);
    Py_RETURN_NONE;
}

static PyMethodDef close_release_queue_def = {
    "_close_release_queue", close_release_queue, METH_NOARGS,
    "Drops the owners released on other threads; later ones are left."};

/* Registers the hook once per process, from the main interpreter. */
int release_queue_init(void)
{
    int hooked, failed;

    if (PyInterpreterState_Get() != PyInterpreterState_Main())
        return 0;
    pthread_mutex_lock(&release_lock);
    hooked = release_hooked;
    if (!hooked)
        release_hooked = 1;
    pthread_mutex_unlock(&release_lock);
    if (hooked)
        return 0;
    /* Python code runs here: not under the lock. */
    failed = call_at_exit(PyCFunction_New(&close_release_queue_def, NULL));
    pthread_mutex_lock(&release_lock);
    release_hooked = failed ? 0 : 2;
    pthread_mutex_unlock(&release_lock);
    return failed;
}

/* Queues owner for the main thread; 0 when queued or deliberately left
 * (the interpreter is exiting), -1 when there is no hook yet. */
static int defer_release(PyObject *owner)
{
    struct released *r;
    int rc = 0;

    pthread_mutex_lock(&release_lock);
    if (release_hooked != 2) {
        rc = -1;
    } else if (!release_closed) {
        /* Out of memory: the owner is leaked rather than risk a wait. */
        if ((r = PyMem_RawMalloc(sizeof *r)) != NULL) {
            r->owner = owner;
            r->next = release_queue;
            release_queue = r;
        }
        /* Under the lock, so the hook cannot run in between and the
         * interpreter is still whole.  A full pending-call table leaves
         * the flag clear: the next release, or the hook, tries again. */
        if (!release_scheduled && Py_AddPendingCall(drain_released, NULL) == 0)
            release_scheduled = 1;
    }
    pthread_mutex_unlock(&release_lock);
    return rc;
}

/*
 * Drops obj, which belongs to interp, from a thread attached to another
 * interpreter (here) or to none (NULL): a thread state of interp is made
 * for the drop, the way the C API switches interpreters.
 */
static void release_in(PyInterpreterState *interp, PyObject *obj,
                       PyThreadState *here)
{
    PyThreadState *ts = PyThreadState_New(interp);

    if (ts == NULL)
        return; /* no memory for a thread state: leaked */
    if (here != NULL)
        (void)PyEval_SaveThread();
    PyEval_RestoreThread(ts);
    Py_DECREF(obj);
    PyThreadState_Clear(ts);
    PyThreadState_DeleteCurrent();
    if (here != NULL)
        PyEval_RestoreThread(here);
}

/*
 * Drops the reference a tensor held on its Python owner, made in the main
 * interpreter, on any thread.  Most deleters run where that GIL is already
 * held (a capsule or view dying): the owner goes at once.  A thread
 * attached to another interpreter switches to the main one for the drop.
 * A thread attached to none never waits for the GIL: the owner is queued
 * for the main thread.  After finalization has begun the reference is
 * deliberately leaked, as touching the runtime would crash.
 */
void release_pyobject(void *owner)
{
    PyThreadState *here;
    PyGILState_STATE gil;

    here = attached_here();
    if (here != NULL && here->interp == PyInterpreterState_Main()) {
        if (!cai_is_finalizing())
            Py_DECREF((PyObject *)owner);
        return;
    }
    if (here != NULL) {
        if (Py_IsInitialized() && !cai_is_finalizing())
            release_in(PyInterpreterState_Main(), owner, here);
        return;
    }
    if (defer_release(owner) == 0)
        return;
    /* No hook, so no queue: the module lives only in sub-interpreters. */
    if (!Py_IsInitialized() || cai_is_finalizing())
        return;
    gil = PyGILState_Ensure();
    Py_DECREF((PyObject *)owner);
    PyGILState_Release(gil);
}

/* ------------------------------------------------------------------ */
/* Owners made in a sub-interpreter                                    */

/*
 * A tensor made in a sub-interpreter releases its owner there, whichever
 * thread and interpreter its deleter runs in.  The interpreter is known
 * through a home, shared by the module instance and every such owner;
 * it is closed when the interpreter's atexit callbacks run, and an owner
 * released after that is leaked, as after shutdown.
 */
struct cai_home {
    PyInterpreterState *interp;
    int open;  /* atomic */
    long refs; /* atomic */
};

typedef struct {
    PyObject *obj;
    cai_home *home;
} away_owner;

void home_release(cai_home *home)
{
    if (home != NULL &&
        __atomic_sub_fetch(&home->refs, 1, __ATOMIC_ACQ_REL) == 0)
        free(home);
}

static const char HOME_CAPSULE[] = "caibridge._core.home";

static void home_capsule_destructor(PyObject *capsule)
{
    home_release(PyCapsule_GetPointer(capsule, HOME_CAPSULE));
}

/* Registered with atexit in the home's interpreter. */
static PyObject *home_close(PyObject *capsule, PyObject *unused)
{
    cai_home *home = PyCapsule_GetPointer(capsule, HOME_CAPSULE);

    if (home == NULL)
        return NULL;
    __atomic_store_n(&home->open, 0, __ATOMIC_RELEASE);
    Py_RETURN_NONE;
}

static PyMethodDef home_close_def = {
    "_close_home", home_close, METH_NOARGS,
    "Marks this interpreter gone for caibridge's tensor owners."};

/* The home of the calling interpreter, for the module's state; closed by
 * an atexit callback.  NULL with an exception on failure. */
cai_home *home_new(PyObject *module)
{
    cai_home *home = malloc(sizeof *home);
    PyObject *capsule, *closer;

    if (home == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    home->interp = PyInterpreterState_Get();
    home->open = 1;
    home->refs = 2; /* the state's and the capsule's */
    capsule = PyCapsule_New(home, HOME_CAPSULE, home_capsule_destructor);
    if (capsule == NULL) {
        free(home);
        return NULL;
    }
    closer = PyCFunction_NewEx(&home_close_def, capsule, NULL);
    Py_DECREF(capsule);
    if (call_at_exit(closer) != 0)
        goto fail;
    return home;

fail:
    home_release(home);
    return NULL;
}

static void release_away_owner(void *p)
{
    away_owner *a = p;
    PyThreadState *here;

    if (Py_IsInitialized() && !cai_is_finalizing() &&
        __atomic_load_n(&a->home->open, __ATOMIC_ACQUIRE)) {
        here = attached_here();
        if (here != NULL && here->interp == a->home->interp)
            Py_DECREF(a->obj);
        else
            release_in(a->home->interp, a->obj, here);
    }
    home_release(a->home);
    free(a);
}

/* Whether release(owner) will leave its object alive for good, its
 * interpreter having ended: what only that object would free is then the
 * caller's to free. */
int owner_left_behind(void *owner, cai_release_fn release)
{
    away_owner *a = owner;

    return release == release_away_owner &&
           (!Py_IsInitialized() || cai_is_finalizing() ||
            !__atomic_load_n(&a->home->open, __ATOMIC_ACQUIRE));
}

/* The owner for a tensor holding obj (whose reference is consumed) made in
 * home's interpreter.  -1 (obj dropped, no exception) without memory. */
int owner_away(cai_home *home, PyObject *obj, void **owner,
               cai_release_fn *release)
{
    away_owner *a = malloc(sizeof *a);

    if (a == NULL) {
        Py_DECREF(obj);
        return -1;
    }
    a->obj = obj;
    a->home = home;
    __atomic_add_fetch(&home->refs, 1, __ATOMIC_RELAXED);
    *owner = a;
    *release = release_away_owner;
    return 0;
}

/* Runs a tensor's own deleter, whoever made it. */
void delete_tensor(void *tensor, int versioned)
{
    if (versioned) {
        DLManagedTensorVersioned *t = tensor;

        if (t->deleter != NULL)
            t->deleter(t);
    } else {
        DLManagedTensor *t = tensor;

        if (t->deleter != NULL)
            t->deleter(t);
    }
}

/*
 * Capsule destructors delete the tensor only while the capsule is unused: a
 * consumer that took the tensor renamed the capsule.  Our own name pointer
 * is compared first, sparing a strcmp on the usual path, and the tensor is
 * read from the context (set at creation), sparing GetPointer's.  A capsule
 * dies on a thread attached to its interpreter (holding the GIL where there
 * is one), so a tensor owning a Python object drops it here, instead of
 * going through release_pyobject's thread-state checks, and with nothing
 * saved: a deallocator may run while an exception is set and must leave it
 * as it was (CPython's rule for tp_dealloc), even during finalization.  The
 * other releases and foreign deleters get the pending exception saved.
 */
static void delete_other(void *tensor, int versioned, int detached,
                         cai_release_fn release, void *owner)
{
    if (!detached)
        delete_tensor(tensor, versioned);
    else if (release != NULL)
        release(owner);
}

#if defined(__GNUC__)
__attribute__((always_inline)) /* one copy per capsule kind, no extra call */
#endif
static inline void
capsule_destructor(PyObject *capsule, const char *ours, int versioned)
{
    const char *name = PyCapsule_GetName(capsule);
    cai_release_fn release = NULL;
    void *tensor, *owner = NULL;
    int detached;

    if (name != ours && (name == NULL || strcmp(name, ours) != 0))
        return;
    tensor = PyCapsule_GetContext(capsule);
    if (tensor == NULL) /* made elsewhere, e.g. by desc_to_capsule */
        tensor = PyCapsule_GetPointer(capsule, name);
    if (tensor == NULL)
        return;
    detached = cai_tensor_detach(tensor, versioned, &release, &owner) == 0;
    if (detached && release == release_pyobject) {
        Py_DECREF((PyObject *)owner);
    } else if (detached && release == release_edge) {
        edge_unused(owner); /* no consumer, no work to wait for */
    } else if (!PyErr_Occurred()) {
        delete_other(tensor, versioned, detached, release, owner);
    } else {
        PyObject *type, *value, *tb;

        PyErr_Fetch(&type, &value, &tb);
        delete_other(tensor, versioned, detached, release, owner);
        PyErr_Restore(type, value, tb);
    }
}

void legacy_capsule_destructor(PyObject *capsule)
{
    capsule_destructor(capsule, CAPSULE_LEGACY, 0);
}

void versioned_capsule_destructor(PyObject *capsule)
{
    capsule_destructor(capsule, CAPSULE_VERSIONED, 1);
}

/* Builds a tensor for desc and wraps it in a capsule.  The owner is
 * consumed: released by the tensor's deleter, or at once on failure. */
PyObject *desc_to_capsule(cai_state *st, const cai_desc_t *desc, int versioned,
                          unsigned options, void *owner,
                          cai_release_fn release)
{
    cai_error_t err;
    PyObject *capsule;

    if (versioned) {
        DLManagedTensorVersioned *t;

        if (cai_desc_to_dlpack_versioned(desc, options, owner, release, &t,
                                         &err) != 0)
            return raise_status(st, &err);
        capsule =
            PyCapsule_New(t, CAPSULE_VERSIONED, versioned_capsule_destructor);
        if (capsule == NULL)
            t->deleter(t);
    } else {
        DLManagedTensor *t;

        if (cai_desc_to_dlpack(desc, options, owner, release, &t, &err) != 0)
            return raise_status(st, &err);
        capsule = PyCapsule_New(t, CAPSULE_LEGACY, legacy_capsule_destructor);
        if (capsule == NULL)
            t->deleter(t);
    }
    return capsule;
}

/* Takes the tensor out of a DLPack capsule, marking the capsule used, into
 * a CAIView reporting stream.  The name is read and changed in one
 * critical section: of two threads handed the same capsule, only one
 * takes the tensor (with a GIL, nothing can run in between anyway). */
PyObject *tensor_from_capsule(cai_state *st, PyObject *capsule,
                              PyObject *stream, int legacy_writable)
{
    const char *name;
    void *tensor = NULL;
    int versioned = -1, renamed = -1;

    Py_BEGIN_CRITICAL_SECTION(capsule);
    name = PyCapsule_GetName(capsule);
    if (name != NULL && strcmp(name, CAPSULE_VERSIONED) == 0)
        versioned = 1;
    else if (name != NULL && strcmp(name, CAPSULE_LEGACY) == 0)
        versioned = 0;
    if (versioned >= 0 &&
        (tensor = PyCapsule_GetPointer(capsule, name)) != NULL)
        /* Renamed at once: from here on only we may call the deleter. */
        renamed = PyCapsule_SetName(capsule, versioned ? CAPSULE_VERSIONED_USED
                                                       : CAPSULE_LEGACY_USED);
    Py_END_CRITICAL_SECTION();
    if (renamed == 0)
        /* A legacy tensor cannot say whether its memory may be written:
         * read only, as NumPy imports it, unless the caller knows
         * better. */
        return caiview_new(st, tensor, versioned, stream,
                           !versioned && !legacy_writable);
    if (PyErr_Occurred())
        return NULL;
    if (name != NULL && (strcmp(name, CAPSULE_VERSIONED_USED) == 0 ||
                         strcmp(name, CAPSULE_LEGACY_USED) == 0))
        PyErr_Format(PyExc_ValueError,
                     "the capsule is named '%s': its tensor was already "
                     "taken by a consumer",
                     name);
    else
        PyErr_Format(PyExc_TypeError,
                     "a capsule named '%s' is not a DLPack tensor",
                     name == NULL ? "(null)" : name);
    return NULL;
}
