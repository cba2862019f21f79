/*
 * A buffer exporter for the tests, compiled by the test itself: it exports
 * a bytearray's memory as one dimension with the format and item size it
 * is given, even when they disagree, which no exporter in Python's
 * standard library lets a test choose.
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct {
    PyObject_HEAD
    PyObject *memory; /* a bytearray */
    char format[16];
    Py_ssize_t itemsize;
    Py_ssize_t shape;
} Exporter;

static int exporter_init(PyObject *self, PyObject *args, PyObject *kwargs)
{
    Exporter *e = (Exporter *)self;
    const char *format;
    PyObject *memory;

    (void)kwargs;
    if (!PyArg_ParseTuple(args, "Ysn", &memory, &format, &e->itemsize))
        return -1;
    if (e->itemsize <= 0 || strlen(format) >= sizeof e->format) {
        PyErr_SetString(PyExc_ValueError, "bad itemsize or format");
        return -1;
    }
    strcpy(e->format, format);
    e->shape = PyByteArray_GET_SIZE(memory) / e->itemsize;
    Py_XDECREF(e->memory);
    e->memory = Py_NewRef(memory);
    return 0;
}

static int exporter_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    Exporter *e = (Exporter *)self;

    (void)flags;
    view->obj = Py_NewRef(self);
    view->buf = PyByteArray_AS_STRING(e->memory);
    view->len = e->shape * e->itemsize;
    view->readonly = 1;
    view->itemsize = e->itemsize;
    view->format = e->format;
    view->ndim = 1;
    view->shape = &e->shape;
    view->strides = &e->itemsize;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}

static void exporter_dealloc(PyObject *self)
{
    Py_CLEAR(((Exporter *)self)->memory);
    Py_TYPE(self)->tp_free(self);
}

static PyBufferProcs exporter_buffer = {exporter_getbuffer, NULL};

static PyTypeObject ExporterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "xexporter.Exporter",
    .tp_basicsize = sizeof(Exporter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Exporter(memory: bytearray, format: str, itemsize: int)",
    .tp_new = PyType_GenericNew,
    .tp_init = exporter_init,
    .tp_dealloc = exporter_dealloc,
    .tp_as_buffer = &exporter_buffer,
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT,
                                        "xexporter",
                                        NULL,
                                        -1,
                                        NULL,
                                        NULL,
                                        NULL,
                                        NULL,
                                        NULL};

PyMODINIT_FUNC PyInit_xexporter(void);
PyMODINIT_FUNC PyInit_xexporter(void)
{
    PyObject *m;

    if (PyType_Ready(&ExporterType) < 0 ||
        (m = PyModule_Create(&module_def)) == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Exporter", (PyObject *)&ExporterType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
