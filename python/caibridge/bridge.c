/*
 * add_dlpack and add_array_interface: two calls that turn a user's class
 * into a producer of the other protocol, with no Python code per call.
 *
 * add_dlpack gives a CAI or array-interface class __dlpack__ and
 * __dlpack_device__ as method descriptors of our own type: the interpreter
 * calls them with the instance first (Py_TPFLAGS_METHOD_DESCRIPTOR), no
 * bound object is made, and each call goes down to_dlpack's own path with
 * the instance as the producer.  The class also gets the DLPack C exchange
 * API.  add_array_interface gives a DLPack class the two interface
 * properties, read through from_dlpack's path.
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#include "caibridge_module.h"

#include <string.h>

/* ------------------------------------------------------------------ */
/* The methods add_dlpack gives a class                                */

/* Ends the signature line of a method's doc. */
#define SIGNATURE_END ")\n--\n\n"

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *module; /* whose state the calls use */
    cai_state *st;    /* its state, kept as long as module is */
    const char *name;
    const char *doc;
} BridgeMethodObject;

/* A call of method name with nargs positional arguments has the instance
 * to describe first (any object with an interface, as before). */
static inline int method_self(const char *name, Py_ssize_t nargs)
{
    if (nargs > 0)
        return 0;
    PyErr_Format(PyExc_TypeError,
                 "descriptor '%s' needs an instance to describe", name);
    return -1;
}

/* Signatures as CPython writes them for its own methods (the descriptors
 * below parse them); the methods of our type show them the same way. */
static const char dlpack_doc[] =
    "__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, "
    "copy=None)\n--\n\n"
    "Export the instance's __cuda_array_interface__ or __array_interface__ "
    "as\n"
    "a DLPack capsule (given by caibridge.add_dlpack).\n\n"
    "The same protocol as caibridge.DLPackView.__dlpack__: a versioned "
    "capsule\n"
    "when max_version asks for 1.x, else a legacy one (refused for read-only\n"
    "data); stream ordering on CUDA (None: legacy default, -1: none, 0\n"
    "refused); copy=True makes a copy (of CUDA memory: on the consumer's\n"
    "stream).  Pinned and managed memory with\n"
    "no stream, or asked for as dl_device=(1, 0), make the host wait for the\n"
    "producer's stream.  The capsule keeps the instance alive until the\n"
    "consumer's deleter runs.";

static const char dlpack_device_doc[] =
    "__dlpack_device__($self, /)\n--\n\n"
    "The (device_type, device_id) of the instance's data (given by\n"
    "caibridge.add_dlpack).";

/* __dlpack__ on obj, with the state of the module that patched its
 * class; args and nargs after the instance. */
static inline PyObject *dlpack_call(cai_state *st, PyObject *obj,
                                    PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames)
{
    cai_request_t req;

    if (nargs != 0)
        return PyErr_Format(
            PyExc_TypeError,
            "__dlpack__() takes no positional arguments but %zd were given",
            nargs);
    if (kwnames == NULL) { /* every keyword its default */
        req.stream = req.dl_device = NULL;
        req.versioned = req.copy = req.readonly_legacy_ok = 0;
        req.never_copy = 0;
        req.sync = 1;
    } else if (dlpack_request(st, args, kwnames, &req) != 0) {
        return NULL;
    }
    return object_export(st, obj, NULL, &req);
}

/* __dlpack_device__ on obj, nargs and kwnames after the instance. */
static PyObject *dlpack_device_call(cai_state *st, PyObject *obj,
                                    Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *keep;
    cai_desc_t d;

    if (nargs != 0 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0))
        return PyErr_Format(PyExc_TypeError,
                            "__dlpack_device__() takes no arguments");
    d.device.device_type = (DLDeviceType)0;
    if (describe(st, obj, NULL, NULL, &d, &keep) != 0)
        return NULL;
    Py_XDECREF(keep);
    return device_pair(d.device);
}

static PyObject *patched_dlpack(PyObject *self, PyObject *const *args,
                                size_t nargsf, PyObject *kwnames)
{
    BridgeMethodObject *m = (BridgeMethodObject *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);

    if (method_self(m->name, nargs) != 0)
        return NULL;
    return dlpack_call(m->st, args[0], args + 1, nargs - 1, kwnames);
}

static PyObject *patched_dlpack_device(PyObject *self, PyObject *const *args,
                                       size_t nargsf, PyObject *kwnames)
{
    BridgeMethodObject *m = (BridgeMethodObject *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);

    if (method_self(m->name, nargs) != 0)
        return NULL;
    return dlpack_device_call(m->st, args[0], nargs - 1, kwnames);
}

/*
 * From 3.11 on, in the main interpreter, add_dlpack gives CPython's own
 * method descriptors instead: the interpreter calls them directly
 * when no keyword is given (a specialized call, ~90 instructions less per
 * __dlpack__() or __dlpack_device__() on 3.11).  Every other call (with
 * keywords, from C, through the class) takes the descriptor's vectorcall,
 * which is set to ours: CPython's own would check the arguments again and
 * cost ~40 instructions more than the methods above.  Neither has a
 * closure to find a module state through, so both use the main
 * interpreter's first module's.  A strong reference keeps that module
 * from its import until the interpreter's atexit callbacks run; the state
 * is used until the module is cleared.  Classes patched by any other
 * module instance keep the methods above, and a call made after the main
 * one is cleared finds the state through the class's exchange capsule.
 */
#if PY_VERSION_HEX >= 0x030B0000
#define FAST_METHODS 1
#else /* 3.10 binds a descriptor for a call with keywords: a PyCFunction
       * costs ~60 instructions more to make and free than our method */
#define FAST_METHODS 0
#endif
static cai_state *main_state; /* atomic */
static PyObject *main_module; /* atomic: the reference, until atexit */

static cai_state *main_state_for(PyObject *obj)
{
    cai_state *st = __atomic_load_n(&main_state, __ATOMIC_ACQUIRE);

    return st != NULL ? st : bridge_state_of(obj);
}

/* The C functions CPython calls itself (its specialized calls, and the
 * bound methods it makes): the instance is the class's, checked by it. */
static PyObject *fast_dlpack(PyObject *obj, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kwnames)
{
    cai_state *st = main_state_for(obj);

    return st == NULL ? NULL : dlpack_call(st, obj, args, nargs, kwnames);
}

static PyObject *fast_dlpack_device(PyObject *obj, PyObject *unused)
{
    cai_state *st = main_state_for(obj);

    return st == NULL ? NULL : dlpack_device_call(st, obj, 0, NULL);
}

static PyMethodDef fast_dlpack_def = {
    "__dlpack__", (PyCFunction)(void (*)(void))fast_dlpack,
    METH_FASTCALL | METH_KEYWORDS, dlpack_doc};
static PyMethodDef fast_dlpack_device_def = {
    "__dlpack_device__", fast_dlpack_device, METH_NOARGS, dlpack_device_doc};

static PyObject *descr_dlpack(PyObject *descr, PyObject *const *args,
                              size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    cai_state *st;

    if (method_self("__dlpack__", nargs) != 0 ||
        (st = main_state_for(args[0])) == NULL)
        return NULL;
    return dlpack_call(st, args[0], args + 1, nargs - 1, kwnames);
}

static PyObject *descr_dlpack_device(PyObject *descr, PyObject *const *args,
                                     size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    cai_state *st;

    if (method_self("__dlpack_device__", nargs) != 0 ||
        (st = main_state_for(args[0])) == NULL)
        return NULL;
    return dlpack_device_call(st, args[0], nargs - 1, kwnames);
}

/* CPython's method descriptor for def on type, called through ours. */
static PyObject *fast_method(PyTypeObject *type, PyMethodDef *def)
{
    PyObject *descr = PyDescr_NewMethod(type, def);

    if (descr != NULL)
        ((PyMethodDescrObject *)descr)->vectorcall =
            def == &fast_dlpack_def ? descr_dlpack : descr_dlpack_device;
    return descr;
}

static PyObject *main_release(PyObject *module, PyObject *unused)
{
    Py_XDECREF(__atomic_exchange_n(&main_module, NULL, __ATOMIC_ACQ_REL));
    Py_RETURN_NONE;
}

static PyMethodDef main_release_def = {
    "_release_main_state", main_release, METH_NOARGS,
    "Drops the reference that kept the main interpreter's module."};

int bridge_main_init(PyObject *module)
{
    cai_state *expected = NULL, *st = PyModule_GetState(module);

    if (!FAST_METHODS ||
        PyInterpreterState_Get() != PyInterpreterState_Main() ||
        __atomic_load_n(&main_state, __ATOMIC_ACQUIRE) != NULL)
        return 0;
    if (call_at_exit(PyCFunction_NewEx(&main_release_def, module, NULL)) != 0)
        return -1;
    if (__atomic_compare_exchange_n(&main_state, &expected, st, 0,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        __atomic_store_n(&main_module, Py_NewRef(module), __ATOMIC_RELEASE);
    return 0;
}

/* The main module is being cleared: its state is no longer used. */
void bridge_main_forget(cai_state *st)
{
    (void)__atomic_compare_exchange_n(&main_state, &st, NULL, 0,
                                      __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* One of the main interpreter's descriptors above. */
static int is_fast_method(PyObject *o)
{
    return Py_IS_TYPE(o, &PyMethodDescr_Type) &&
           (((PyMethodDescrObject *)o)->d_method == &fast_dlpack_def ||
            ((PyMethodDescrObject *)o)->d_method == &fast_dlpack_device_def);
}

static PyObject *method_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

/* Methods given by add_dlpack, in any interpreter: one function. */
static inline int is_bridge_method(PyObject *o)
{
    return o != NULL &&
           (Py_TYPE(o)->tp_descr_get == method_get || is_fast_method(o));
}

static int method_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(((BridgeMethodObject *)self)->module);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int method_clear(PyObject *self)
{
    ((BridgeMethodObject *)self)->st = NULL;
    Py_CLEAR(((BridgeMethodObject *)self)->module);
    return 0;
}

static void method_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);

    PyObject_GC_UnTrack(self);
    (void)method_clear(self);
    type->tp_free(self);
    Py_DECREF(type);
}

static PyObject *method_repr(PyObject *self)
{
    return PyUnicode_FromFormat("<caibridge method '%s'>",
                                ((BridgeMethodObject *)self)->name);
}

static PyObject *method_get_name(PyObject *self, void *unused)
{
    return PyUnicode_FromString(((BridgeMethodObject *)self)->name);
}

/* The doc after its signature line, and the signature, as CPython's own
 * method descriptors give them. */
static PyObject *method_get_doc(PyObject *self, void *unused)
{
    const char *doc = ((BridgeMethodObject *)self)->doc;

    return PyUnicode_FromString(strstr(doc, SIGNATURE_END) +
                                strlen(SIGNATURE_END));
}

static PyObject *method_get_text_signature(PyObject *self, void *unused)
{
    const char *doc = ((BridgeMethodObject *)self)->doc;
    const char *open = strchr(doc, '(');

    return PyUnicode_FromStringAndSize(open,
                                       strstr(doc, SIGNATURE_END) + 1 - open);
}

static PyGetSetDef method_getset[] = {
    {"__name__", method_get_name, NULL, NULL, NULL},
    {"__qualname__", method_get_name, NULL, NULL, NULL},
    {"__doc__", method_get_doc, NULL, NULL, NULL},
    {"__text_signature__", method_get_text_signature, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef method_members[] = {
    {"__vectorcalloffset__", Py_T_PYSSIZET,
     offsetof(BridgeMethodObject, vectorcall), Py_READONLY, NULL},
    {NULL, 0, 0, 0, NULL}};

static PyType_Slot method_slots[] = {{Py_tp_dealloc, method_dealloc},
                                     {Py_tp_traverse, method_traverse},
                                     {Py_tp_clear, method_clear},
                                     {Py_tp_repr, method_repr},
                                     {Py_tp_call, PyVectorcall_Call},
                                     {Py_tp_descr_get, method_get},
                                     {Py_tp_getset, method_getset},
                                     {Py_tp_members, method_members},
                                     {0, NULL}};

PyType_Spec bridge_method_spec = {
    "caibridge._BridgeMethod", sizeof(BridgeMethodObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
        Py_TPFLAGS_METHOD_DESCRIPTOR | Py_TPFLAGS_IMMUTABLETYPE |
        Py_TPFLAGS_DISALLOW_INSTANTIATION,
    method_slots};

static PyObject *method_new(cai_state *st, PyObject *module,
                            vectorcallfunc call, const char *name,
                            const char *doc)
{
    BridgeMethodObject *m =
        PyObject_GC_New(BridgeMethodObject, st->BridgeMethod_Type);

    if (m == NULL)
        return NULL;
    m->vectorcall = call;
    m->module = Py_NewRef(module);
    m->st = PyModule_GetState(module);
    m->name = name;
    m->doc = doc;
    PyObject_GC_Track(m);
    return (PyObject *)m;
}

/* ------------------------------------------------------------------ */
/* Patching a class                                                    */

/* The class's own entry for name, when it is one that is not ours. */
static int check_not_defined(PyObject *cls, PyObject *name,
                             int (*ours)(PyObject *), const char *fname)
{
    PyObject *own;
    int found = cai_dict_get_ref(((PyTypeObject *)cls)->tp_dict, name, &own);

    if (found <= 0)
        return found;
    found = ours(own);
    Py_DECREF(own);
    if (found)
        return 0;
    PyErr_Format(PyExc_TypeError,
                 "%s(): %.100s already defines %U; caibridge does not "
                 "replace it",
                 fname, ((PyTypeObject *)cls)->tp_name, name);
    return -1;
}

/* Refuses what is not a class, classes whose attributes are fixed
 * (built-in and static extension types, immutable heap types), and classes
 * that define either of the two names fname adds with something not
 * ours. */
static int check_patchable(PyObject *cls, const char *fname,
                           const char *alternative, PyObject *name1,
                           PyObject *name2, int (*ours)(PyObject *))
{
    PyTypeObject *type;

    if (!PyType_Check(cls)) {
        PyErr_Format(PyExc_TypeError,
                     "%s() takes a class (or decorates one), got a %.100s "
                     "instance",
                     fname, Py_TYPE(cls)->tp_name);
        return -1;
    }
    type = (PyTypeObject *)cls;
    if (!(type->tp_flags & Py_TPFLAGS_HEAPTYPE) ||
        (type->tp_flags & Py_TPFLAGS_IMMUTABLETYPE)) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): %.100s is a built-in or extension type whose "
                     "attributes cannot be set; use %s on its instances "
                     "instead",
                     fname, type->tp_name, alternative);
        return -1;
    }
    if (check_not_defined(cls, name1, ours, fname) != 0 ||
        check_not_defined(cls, name2, ours, fname) != 0)
        return -1;
    return 0;
}

/* Our exchange API capsule: its context is the module (a strong
 * reference, dropped with the capsule). */
static void bridge_capsule_destructor(PyObject *capsule)
{
    Py_XDECREF((PyObject *)PyCapsule_GetContext(capsule));
}

static int is_bridge_capsule(PyObject *o)
{
    return PyCapsule_CheckExact(o) &&
           PyCapsule_GetDestructor(o) == bridge_capsule_destructor;
}

static int set_new(PyObject *cls, PyObject *name, PyObject *value)
{
    int rc;

    if (value == NULL)
        return -1;
    rc = PyObject_SetAttr(cls, name, value);
    Py_DECREF(value);
    return rc;
}

const char add_dlpack_doc[] =
    "add_dlpack($module, cls, /)\n--\n\n"
    "Make a class whose instances have __cuda_array_interface__ or\n"
    "__array_interface__ a DLPack producer: gives it __dlpack__ and\n"
    "__dlpack_device__, and publishes the DLPack C exchange API on it.\n"
    "Returns cls, so it also works as a class decorator:\n\n"
    "    @caibridge.add_dlpack\n"
    "    class MyArray: ...\n"
    "    torch.from_dlpack(MyArray(...))\n\n"
    "The methods read the instance's interface at each call, with the full\n"
    "protocol of DLPackView.__dlpack__ (stream ordering, max_version,\n"
    "dl_device, copy, read-only); each capsule keeps the instance alive "
    "until\n"
    "the consumer releases the tensor.  Built-in and extension types cannot\n"
    "take methods: TypeError, use caibridge.as_dlpack(obj) for them.  A "
    "class\n"
    "that defines its own __dlpack__ is refused too.";

PyObject *add_dlpack(PyObject *module, PyObject *cls)
{
    cai_state *st = PyModule_GetState(module);
    PyObject *capsule;
    int publish;

    if (check_patchable(cls, "add_dlpack", "caibridge.as_dlpack(obj)",
                        st->name[N_DLPACK], st->name[N_DLPACK_DEVICE],
                        is_bridge_method) != 0)
        return NULL;
    if (st == __atomic_load_n(&main_state, __ATOMIC_ACQUIRE)) {
        PyTypeObject *type = (PyTypeObject *)cls;

        if (set_new(cls, st->name[N_DLPACK],
                    fast_method(type, &fast_dlpack_def)) != 0 ||
            set_new(cls, st->name[N_DLPACK_DEVICE],
                    fast_method(type, &fast_dlpack_device_def)) != 0)
            return NULL;
    } else if (set_new(cls, st->name[N_DLPACK],
                       method_new(st, module, patched_dlpack, "__dlpack__",
                                  dlpack_doc)) != 0 ||
               set_new(cls, st->name[N_DLPACK_DEVICE],
                       method_new(st, module, patched_dlpack_device,
                                  "__dlpack_device__", dlpack_device_doc)) !=
                   0) {
        return NULL;
    }
    /* DLPack 1.3: the exchange API in the producer type's dict, unless the
     * class publishes one of its own. */
    if (cai_dict_get_ref(((PyTypeObject *)cls)->tp_dict,
                         st->name[N_EXCHANGE_API], &capsule) < 0)
        return NULL;
    publish = capsule == NULL || is_bridge_capsule(capsule);
    Py_XDECREF(capsule);
    if (publish) {
        capsule = PyCapsule_New((void *)(uintptr_t)&bridge_exchange_api,
                                "dlpack_exchange_api",
                                bridge_capsule_destructor);
        if (capsule == NULL)
            return NULL;
        if (PyCapsule_SetContext(capsule, Py_NewRef(module)) != 0) {
            Py_DECREF(module);
            Py_DECREF(capsule);
            return NULL;
        }
        if (set_new(cls, st->name[N_EXCHANGE_API], capsule) != 0)
            return NULL;
    }
    return Py_NewRef(cls);
}

/* The state of the module that patched o's class, found through the
 * exchange API capsule the consumer found too; NULL with TypeError when
 * the class was not patched. */
cai_state *bridge_state_of(PyObject *o)
{
    /* The module state is what is sought, so the name cannot come from it:
     * an identifier keeps one interned str per interpreter, found by index
     * (making and interning the str each call cost ~800 instructions). */
    _Py_IDENTIFIER(__dlpack_c_exchange_api__);
    PyObject *name, *capsule;
    cai_state *st = NULL;

    name = _PyUnicode_FromId(&PyId___dlpack_c_exchange_api__); /* borrowed */
    if (name == NULL)
        return NULL;
#ifdef Py_GIL_DISABLED
    /* Another thread may replace the attribute: held while read. */
    capsule = _PyType_LookupRef(Py_TYPE(o), name);
#else
    capsule = _PyType_Lookup(Py_TYPE(o), name); /* borrowed */
#endif
    if (capsule != NULL && is_bridge_capsule(capsule))
        st = PyModule_GetState((PyObject *)PyCapsule_GetContext(capsule));
#ifdef Py_GIL_DISABLED
    Py_XDECREF(capsule);
#endif
    if (st == NULL)
        PyErr_Format(PyExc_TypeError,
                     "%.100s was not given DLPack by caibridge.add_dlpack",
                     Py_TYPE(o)->tp_name);
    return st;
}

/* ------------------------------------------------------------------ */
/* The properties add_array_interface gives a class                    */

static PyObject *interface_get(PyObject *module, PyObject *obj, int is_cuda)
{
    return caiview_interface_of_producer(PyModule_GetState(module), obj,
                                         is_cuda);
}

static PyObject *get_cai(PyObject *module, PyObject *obj)
{
    return interface_get(module, obj, 1);
}

static PyObject *get_ai(PyObject *module, PyObject *obj)
{
    return interface_get(module, obj, 0);
}

#define LIFETIME_DOC                                                          \
    "Given by caibridge.add_array_interface.  Each read takes a tensor "      \
    "from\n"                                                                  \
    "the instance's __dlpack__ (copy=False: the layout must be the\n"         \
    "instance's own memory), describes it in a fresh dict and releases it\n"  \
    "before returning.  The lifetime rule is CAI's: the instance keeps its\n" \
    "memory alive, and the consumer keeps the instance (NumPy makes it the\n" \
    "array's base); the dict holds no reference.  A producer that copies\n"   \
    "(IS_COPIED) is refused with BufferError."

static PyMethodDef get_cai_def = {
    "__cuda_array_interface__", get_cai, METH_O,
    "CAI version 3 of the instance's CUDA memory (kDLCUDA, kDLCUDAHost,\n"
    "kDLCUDAManaged); AttributeError for host memory.  The stream entry is\n"
    "the legacy default stream (1), which __dlpack__ was asked to "
    "order.\n\n" LIFETIME_DOC};

static PyMethodDef get_ai_def = {
    "__array_interface__", get_ai, METH_O,
    "NumPy's array interface (version 3) of the instance's host memory;\n"
    "AttributeError for CUDA memory.\n\n" LIFETIME_DOC};

static int is_bridge_property(PyObject *o)
{
    PyObject *fget;
    int ours;

    if (!PyObject_TypeCheck(o, &PyProperty_Type))
        return 0;
    fget = PyObject_GetAttrString(o, "fget");
    if (fget == NULL) {
        PyErr_Clear();
        return 0;
    }
    ours = PyCFunction_Check(fget) &&
           (PyCFunction_GET_FUNCTION(fget) == get_cai ||
            PyCFunction_GET_FUNCTION(fget) == get_ai);
    Py_DECREF(fget);
    return ours;
}

static PyObject *property_new(PyObject *module, PyMethodDef *def)
{
    PyObject *fget = PyCFunction_NewEx(def, module, NULL), *prop;

    if (fget == NULL)
        return NULL;
    prop = PyObject_CallOneArg((PyObject *)&PyProperty_Type, fget);
    Py_DECREF(fget);
    return prop;
}

const char add_array_interface_doc[] =
    "add_array_interface($module, cls, /)\n--\n\n"
    "Make a DLPack class (with __dlpack__ and __dlpack_device__) a CAI and\n"
    "array-interface producer: gives it the properties\n"
    "__cuda_array_interface__ (CUDA memory) and __array_interface__ (host\n"
    "memory); each raises AttributeError when the memory is of the other\n"
    "kind, so hasattr probes answer correctly.  Returns cls (a decorator).\n\n"
    "The lifetime rule is CAI's: the instance keeps its memory alive, and a\n"
    "consumer keeps the instance.  Each read asks __dlpack__ for the data\n"
    "without a copy (copy=False), describes it in a fresh dict and releases\n"
    "the tensor before returning; the dict holds no reference.  A producer\n"
    "whose export is a copy (IS_COPIED) is refused with BufferError.  CUDA\n"
    "data is asked for on the legacy default stream, the dict's 'stream'.\n"
    "Built-in and extension types: TypeError, use caibridge.from_dlpack(obj).";

PyObject *add_array_interface(PyObject *module, PyObject *cls)
{
    cai_state *st = PyModule_GetState(module);

    if (check_patchable(cls, "add_array_interface",
                        "caibridge.from_dlpack(obj)", st->name[N_CAI],
                        st->name[N_AI], is_bridge_property) != 0)
        return NULL;
    if (set_new(cls, st->name[N_CAI], property_new(module, &get_cai_def)) !=
            0 ||
        set_new(cls, st->name[N_AI], property_new(module, &get_ai_def)) != 0)
        return NULL;
    return Py_NewRef(cls);
}
