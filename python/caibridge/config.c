/*
 * What show_config reports from C, and the runtime search's link to
 * Python: before each search for the CUDA runtime, the folders of NVIDIA's
 * pip wheels are asked of caibridge._runtime_dirs() (sys.path may have
 * changed since the last search), and the candidates the search passed
 * over are given back with the runtime's description.
 */
#include "caibridge_module.h"

#include "cuda-release.h"
#include "cuda-search.h"
#include "trace.h"

#include <string.h>

/* Most folders passed down in each list; sys.path is rarely longer. */
#define MAX_DIRS 256

/* Encodes the str items of list into paths (their bytes kept in fs, *n of
 * them); 0 when all fit, else -1. */
static int encode_dirs(PyObject *list, const char **paths, PyObject **fs,
                       Py_ssize_t *n)
{
    Py_ssize_t i;

    *n = 0;
    if (!PyList_Check(list) || PyList_GET_SIZE(list) > MAX_DIRS)
        return -1;
    for (i = 0; i < PyList_GET_SIZE(list); i++) {
        PyObject *b = PyUnicode_EncodeFSDefault(PyList_GET_ITEM(list, i));

        if (b == NULL)
            return -1;
        fs[*n] = b;
        paths[(*n)++] = PyBytes_AS_STRING(b);
    }
    return 0;
}

/* Called by the core before each search.  Only from a thread already
 * running Python (it then holds the interpreter), and without raising: a
 * failure leaves the last folders in place. */
static void offer_dirs(void)
{
    PyObject *name, *module = NULL, *dirs = NULL;
    PyObject *fs[MAX_DIRS], *other_fs[MAX_DIRS];
    const char *paths[MAX_DIRS], *others[MAX_DIRS];
    Py_ssize_t i, n = 0, other_n = 0;

    if (!PyGILState_Check() || Py_IsInitialized() == 0)
        return;
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *saved = PyErr_GetRaisedException();
#else
    PyObject *saved_type, *saved_value, *saved_tb;

    PyErr_Fetch(&saved_type, &saved_value, &saved_tb);
#endif
    name = PyUnicode_FromString("caibridge");
    if (name != NULL)
        module = PyImport_GetModule(name);
    Py_XDECREF(name);
    if (module != NULL)
        dirs = PyObject_CallMethod(module, "_runtime_dirs", NULL);
    /* (the site-packages folders' wheel folders, the other ones) */
    if (dirs != NULL && PyTuple_Check(dirs) && PyTuple_GET_SIZE(dirs) == 2 &&
        encode_dirs(PyTuple_GET_ITEM(dirs, 0), paths, fs, &n) == 0 &&
        encode_dirs(PyTuple_GET_ITEM(dirs, 1), others, other_fs, &other_n) ==
            0)
        (void)cai_cuda_search_dirs(paths, (size_t)n, others, (size_t)other_n);
    for (i = 0; i < n; i++)
        Py_DECREF(fs[i]);
    for (i = 0; i < other_n; i++)
        Py_DECREF(other_fs[i]);
    Py_XDECREF(dirs);
    Py_XDECREF(module);
    PyErr_Clear();
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(saved);
#else
    PyErr_Restore(saved_type, saved_value, saved_tb);
#endif
}

/* CUDAError for err (raise_status gives it its refused attribute). */
static PyObject *raise_with_refused(PyObject *module, cai_error_t *err)
{
    return raise_status(PyModule_GetState(module), err);
}

static PyObject *runtime_info(PyObject *module, PyObject *unused)
{
    char path[4096];
    const char *how;
    cai_error_t err;
    PyObject *refused, *info, *missing;
    const char *name;
    int version;

    if (cai_cuda_runtime_info(path, sizeof path, &how, &version, &err) != 0)
        return raise_with_refused(module, &err);
    refused = refused_list();
    if (refused == NULL)
        return NULL;
    info = Py_BuildValue("{s:O&,s:s,s:i,s:N}", "path",
                         PyUnicode_DecodeFSDefault, path, "how", how,
                         "version", version, "refused", refused);
    /* A driver lacking an entry point is not bound: say which. */
    missing = info == NULL ? NULL : PyList_New(0);
    for (name = cai_cuda_driver_missing(); missing != NULL && *name != '\0';
         name += strlen(name) + 1) {
        PyObject *s = PyUnicode_FromString(name);

        if (s == NULL || PyList_Append(missing, s) != 0)
            Py_CLEAR(missing);
        Py_XDECREF(s);
    }
    if (missing == NULL ||
        PyDict_SetItemString(info, "driver_missing", missing) != 0)
        Py_CLEAR(info);
    Py_XDECREF(missing);
    return info;
}

static PyObject *build_info(PyObject *module, PyObject *unused)
{
    return Py_BuildValue("{s:i,s:(ii),s:O}", "cuda_headers",
                         cai_cuda_headers_version(), "dlpack_abi",
                         CAIBRIDGE_DLPACK_MAJOR, CAIBRIDGE_DLPACK_MINOR,
                         "nvtx", cai_trace_built() ? Py_True : Py_False);
}

/* Warns that variable=env is not understood, saying what is used. */
static int warn_env(const char *variable, const char *env, const char *rule)
{
    PyObject *value = PyUnicode_DecodeFSDefault(env);
    int rc;

    if (value == NULL)
        return -1;
    rc = PyErr_WarnExplicitFormat(PyExc_RuntimeWarning, "<environment>", 0,
                                  "caibridge", NULL,
                                  "%s=%.100R is not "
                                  "understood: %s",
                                  variable, value, rule);
    Py_DECREF(value);
    return rc;
}

/* The release settings at import, with a RuntimeWarning for a value not
 * understood (-1: the warning was made an error).  CAIBRIDGE_EVENT_POOL
 * is read by the core with the same rule. */
static int read_release_env(void)
{
    const char *pool = getenv("CAIBRIDGE_EVENT_POOL");
    const char *release = getenv("CAIBRIDGE_RELEASE");
    int size;

    if (cai_event_pool_parse(pool, &size) != 0 &&
        warn_env("CAIBRIDGE_EVENT_POOL", pool,
                 "use a count of events kept per context in decimal digits "
                 "(0 turns the pool off, more than 8 keeps 8); the pool "
                 "keeps 8") != 0)
        return -1;
    set_release_blocking(release != NULL && strcmp(release, "block") == 0);
    if (release != NULL && release[0] != '\0' &&
        strcmp(release, "block") != 0 && strcmp(release, "poll") != 0 &&
        warn_env("CAIBRIDGE_RELEASE", release,
                 "use block (the host waits at release for the consumer's "
                 "work) or poll; releases are polled") != 0)
        return -1;
    return 0;
}

static PyObject *release_poll(PyObject *module, PyObject *const *args,
                              Py_ssize_t nargs)
{
    cai_error_t err;
    int wait = 0, rc;

    if (nargs > 1)
        return PyErr_Format(PyExc_TypeError,
                            "_release_poll() takes at most "
                            "1 argument (%zd given)",
                            nargs);
    if (nargs == 1 && (wait = PyObject_IsTrue(args[0])) < 0)
        return NULL;
    if (wait) {
        Py_BEGIN_ALLOW_THREADS
        rc = cai_release_poll(1, &err);
        Py_END_ALLOW_THREADS
    } else {
        rc = cai_release_poll(0, &err);
    }
    if (rc != 0)
        return raise_status(PyModule_GetState(module), &err);
    return PyLong_FromLong(cai_release_pending_count());
}

static PyObject *release_blocking(PyObject *module, PyObject *on)
{
    int value = PyObject_IsTrue(on);

    if (value < 0)
        return NULL;
    set_release_blocking(value);
    Py_RETURN_NONE;
}

/* At exit: the main interpreter's stops the waiter (the interpreter is
 * going; another interpreter's leaves it alone), then the releases whose
 * consumer is done go. */
static PyObject *release_exit(PyObject *module, PyObject *unused)
{
    waiter_close();
    (void)cai_release_poll(0, NULL);
    Py_RETURN_NONE;
}

static PyObject *release_waiter(PyObject *module, PyObject *on)
{
    int value = PyObject_IsTrue(on);

    if (value < 0)
        return NULL;
    waiter_pause(!value);
    return PyBool_FromLong(waiter_running());
}

/* The settings in effect, as python -m caibridge reports them. */
static PyObject *settings(PyObject *module, PyObject *unused)
{
    cai_state *st = PyModule_GetState(module);
    int pool;

    (void)cai_event_pool_parse(getenv("CAIBRIDGE_EVENT_POOL"), &pool);
    return Py_BuildValue("{s:i,s:s,s:O}", "event_pool", pool, "release",
                         release_blocks_now() ? "block" : "poll", "ordering",
                         st->sync_enabled ? Py_True : Py_False);
}

/* cai_stats as a dict, its fields by name. */
static PyObject *stats(PyObject *module, PyObject *unused)
{
    cai_stats_t s;
    cai_error_t err;

    if (cai_stats(&s, sizeof s, &err) != 0)
        return PyErr_Format(PyExc_RuntimeError, "%s", err.message);
    return Py_BuildValue(
        "{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K}",
        "views", s.views, "records", s.records, "waits", s.waits,
        "waits_skipped", s.waits_skipped, "host_waits", s.host_waits,
        "releases_now", s.releases_now, "releases_deferred",
        s.releases_deferred, "releases_pending", s.releases_pending,
        "let_go_waiter", s.let_go_waiter, "let_go_call", s.let_go_call,
        "device_copies", s.device_copies, "device_copy_bytes",
        s.device_copy_bytes, "host_copies", s.host_copies, "host_copy_bytes",
        s.host_copy_bytes, "cuda_errors", s.cuda_errors);
}

static PyObject *stats_reset(PyObject *module, PyObject *unused)
{
    cai_stats_reset();
    Py_RETURN_NONE;
}

static PyMethodDef config_methods[] = {
    {"_settings", settings, METH_NOARGS,
     "_settings()\n--\n\nThe settings in effect: {'event_pool', "
     "'release', 'ordering'}."},
    {"_release_exit", release_exit, METH_NOARGS,
     "_release_exit()\n--\n\nRun at exit: stops scheduling polls and "
     "drops the producers of finished releases."},
    {"_release_waiter", release_waiter, METH_O,
     "_release_waiter(on)\n--\n\nLets the release waiter run (True) or "
     "holds it still, with no CUDA call of its own, once this returns "
     "(False); returns whether its thread exists."},
    {"_set_release_blocking", release_blocking, METH_O,
     "_set_release_blocking(on)\n--\n\nAs CAIBRIDGE_RELEASE=block (True) "
     "or poll (False), from now on."},
    {"_release_poll", (PyCFunction)(void (*)(void))release_poll, METH_FASTCALL,
     "_release_poll(wait=False)\n--\n\nDrops the producers of releases "
     "whose consumer's work has finished (with wait, after the host waits "
     "for all); returns how many are still pending."},
    {"_stats", stats, METH_NOARGS,
     "_stats()\n--\n\nThe counters of cai_stats, as a dict."},
    {"_stats_reset", stats_reset, METH_NOARGS,
     "_stats_reset()\n--\n\nSets the counters to 0 (but "
     "releases_pending); for tests."},
    {"_build_info", build_info, METH_NOARGS,
     "_build_info()\n--\n\nWhat was built in: {'cuda_headers': "
     "CUDART_VERSION or 0, 'dlpack_abi': (major, minor), 'nvtx': NVTX "
     "marks built in}."},
    {"_runtime_info", runtime_info, METH_NOARGS,
     "_runtime_info()\n--\n\nThe CUDA runtime in use, searching for it "
     "first if need be: {'path', 'how', 'version', 'refused'}; CUDAError with "
     "the "
     "reason when there is none."},
    {NULL, NULL, 0, NULL}};

int config_init(PyObject *module)
{
    cai_cuda_search_hook(offer_dirs);

    if (read_release_env() != 0 ||
        PyModule_AddFunctions(module, config_methods) != 0)
        return -1;
    if (waiter_init() != 0)
        return -1;
    /* At exit the releases whose consumer is done go, without waiting;
     * the others are left (their owners are leaked once finalizing). */
    return call_at_exit(PyObject_GetAttrString(module, "_release_exit"));
}
