/*
 * What show_config reports from C, and the runtime search's link to
 * Python: before each search for the CUDA runtime, the folders of NVIDIA's
 * pip wheels are asked of caibridge._runtime_dirs() (sys.path may have
 * changed since the last search), and the candidates the search passed
 * over are given back with the runtime's description.
 */
#include "caibridge_module.h"

#include "cuda-search.h"

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
        encode_dirs(PyTuple_GET_ITEM(dirs, 1), others, other_fs,
                    &other_n) == 0)
        (void)cai_cuda_search_dirs(paths, (size_t)n, others,
                                   (size_t)other_n);
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

/* The candidates the last search passed over, as a list of str. */
static PyObject *refused_list(void)
{
    char list[8192];
    PyObject *out = PyList_New(0);
    const char *entry;

    if (out == NULL)
        return NULL;
    (void)cai_cuda_search_refused(list, sizeof list);
    for (entry = list; *entry != '\0'; entry += strlen(entry) + 1) {
        PyObject *s = PyUnicode_DecodeFSDefault(entry);

        if (s == NULL || PyList_Append(out, s) != 0) {
            Py_XDECREF(s);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(s);
    }
    return out;
}

static PyObject *runtime_info(PyObject *module, PyObject *unused)
{
    char path[4096];
    const char *how;
    cai_error_t err;
    PyObject *refused;
    int version;

    if (cai_cuda_runtime_info(path, sizeof path, &how, &version, &err) != 0)
        return raise_status(PyModule_GetState(module), &err);
    refused = refused_list();
    if (refused == NULL)
        return NULL;
    return Py_BuildValue("{s:O&,s:s,s:i,s:N}", "path",
                         PyUnicode_DecodeFSDefault, path, "how", how,
                         "version", version, "refused", refused);
}

static PyObject *build_info(PyObject *module, PyObject *unused)
{
    return Py_BuildValue("{s:i,s:(ii)}", "cuda_headers",
                         cai_cuda_headers_version(), "dlpack_abi",
                         CAIBRIDGE_DLPACK_MAJOR, CAIBRIDGE_DLPACK_MINOR);
}

static PyMethodDef config_methods[] = {
    {"_build_info", build_info, METH_NOARGS,
     "_build_info()\n--\n\nWhat was built in: {'cuda_headers': "
     "CUDART_VERSION or 0, 'dlpack_abi': (major, minor)}."},
    {"_runtime_info", runtime_info, METH_NOARGS,
     "_runtime_info()\n--\n\nThe CUDA runtime in use, searching for it "
     "first if need be: {'path', 'how', 'version', 'refused'}; CUDAError with the "
     "reason when there is none."},
    {NULL, NULL, 0, NULL}};

int config_init(PyObject *module)
{
    cai_cuda_search_hook(offer_dirs);
    return PyModule_AddFunctions(module, config_methods);
}
