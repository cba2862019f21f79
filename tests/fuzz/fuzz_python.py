"""Structured fuzzing of caibridge's Python face (atheris).

Each input is decoded into one scenario: an interface dict (every entry
drawn from a menu of valid, hostile and extreme values: offsets and strides
near 2**63, buffers that are strided or reversed memoryviews, zero-size
arrays at NULL or wrapping pointers, ints whose __index__ edits the dict)
handed to as_dlpack / to_dlpack with fuzzed keywords; a hand-made DLPack
capsule handed to from_dlpack; or a call of the DLPack C exchange API
through ctypes.  Nothing is filtered out: the module must refuse what it
cannot take with a documented exception (TypeError, ValueError,
BufferError, caibridge.CUDAError, MemoryError), and whatever it accepts
from a buffer it copies (copy=True), so that ASan sees every byte it would
read.  Any other exception, or a sanitizer report, is a finding.

Run on the module built with -fsanitize=address,undefined (.ci/harden):
  LD_PRELOAD=<atheris>/asan_with_fuzzer.so PYTHONPATH=<stage> \\
      python3 tests/fuzz/fuzz_python.py -max_total_time=60
"""
import array
import ctypes
import mmap
import os
import sys

import atheris

with atheris.instrument_imports():
    import caibridge

import numpy as np

# The DLPack structs and own-buffer producers the tests use too.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))
from shared import (  # noqa: E402
    DLTENSOR_FROM_PY, LEGACY_DELETER, VERSIONED_DELETER, WORK_STREAM,
    DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned,
    DLPackVersion, DLTensor, OwnBuffer, PyCapsule_New, exchange_table)

DOCUMENTED = (TypeError, ValueError, BufferError, MemoryError,
              caibridge.CUDAError)
I64 = [0, 1, 2, 3, 4, 7, 8, 16, -1, -8, 2**31, 2**62, 2**63 - 1, 2**63 - 8,
       -2**63, -2**62, 2**63, 2**64, 2**64 + 1, 2**40]

# Memory the pointers of the scenarios point into, alive all run long.
BACKING = np.arange(4096, dtype=np.uint8)
BASE = BACKING.ctypes.data


class Iface:
    def __init__(self, iface, attr):
        self.iface = iface
        self.attr = attr

    def __getattr__(self, name):
        if name == self.attr:
            return self.iface
        raise AttributeError(name)


class Meddler(int):
    """An int whose __index__ edits the dict being read."""

    target = None

    def __index__(self):
        if Meddler.target is not None:
            Meddler.target.clear()
        return int(self)


class Stream:
    def __init__(self, pair):
        self.pair = pair

    def __cuda_stream__(self):
        return self.pair


def pick(fdp, options):
    return options[fdp.ConsumeIntInRange(0, len(options) - 1)]


def an_int(fdp):
    kind = fdp.ConsumeIntInRange(0, 9)
    if kind < 4:
        return fdp.ConsumeIntInRange(0, 9)
    if kind < 7:
        return pick(fdp, I64)
    if kind == 7:
        return fdp.ConsumeIntInRange(-2**63, 2**63 - 1)
    if kind == 8:
        return Meddler(fdp.ConsumeIntInRange(0, 4))
    return pick(fdp, [1.5, "3", None, True, (1,), 2**100])


def a_buffer(fdp, nbytes):
    kind = fdp.ConsumeIntInRange(0, 9)
    raw = bytes(range(256)) * (nbytes // 256 + 1)
    raw = raw[:nbytes]
    if kind == 0:
        return raw
    if kind == 1:
        return bytearray(raw)
    if kind == 2:
        step = pick(fdp, [1, 2, 3, -1, -2, -3])
        base = memoryview(bytearray(nbytes * 3 + 8))
        start = fdp.ConsumeIntInRange(0, len(base))
        stop = fdp.ConsumeIntInRange(0, len(base))
        view = base[start:stop:step]
        return view.toreadonly() if fdp.ConsumeBool() else view
    if kind == 3:
        return array.array(pick(fdp, "bBhdq"), raw[: nbytes - nbytes % 8])
    if kind == 4 and nbytes > 0:
        m = mmap.mmap(-1, nbytes)
        m[:] = raw
        return m
    if kind == 5:
        a = np.frombuffer(bytearray(raw), np.uint8).copy()
        a.flags.writeable = fdp.ConsumeBool()
        return a
    if kind == 6:
        a = np.zeros((nbytes + 1) * 2, np.uint8)
        return pick(fdp, [a[::2], a[::-1], a.reshape(2, -1).T, a[1:]])
    if kind == 7:
        return memoryview(bytearray(raw)).cast("B")
    return bytearray(raw)


def a_typestr(fdp):
    if fdp.ConsumeIntInRange(0, 4) == 0:
        return fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 12))
    return pick(fdp, ["<f4", "<f8", "|u1", "|b1", "<i2", "<c8", "<c16",
                      "f8", ">u1", ">f8", "<f16", "<M8[s]", "|O", "|V8",
                      "<f3", "", "<", "<fé", "<f2", "=i8", "|S3", 7])


def interface(fdp):
    """An interface dict and the object that exposes it."""
    iface = {}
    ndim = pick(fdp, [0, 1, 1, 2, 2, 3, 4, 64, 65])
    if fdp.ConsumeIntInRange(0, 15):
        iface["shape"] = tuple(
            fdp.ConsumeIntInRange(0, 4) if fdp.ConsumeIntInRange(0, 3)
            else an_int(fdp) for _ in range(ndim))
    elif fdp.ConsumeBool():
        iface["shape"] = pick(fdp, [[2], 3, None, (2.0,)])
    if fdp.ConsumeIntInRange(0, 15):
        iface["typestr"] = a_typestr(fdp)
    if fdp.ConsumeIntInRange(0, 15):
        iface["version"] = pick(fdp, [3, 3, 3, 2, 0, 1, 4, -1, Meddler(3),
                                      "3"])
    if fdp.ConsumeBool():
        n = ndim if fdp.ConsumeIntInRange(0, 5) else ndim + 1
        iface["strides"] = pick(fdp, [None, tuple(an_int(fdp)
                                                  for _ in range(n))])
    if fdp.ConsumeIntInRange(0, 9) == 0:
        iface["mask"] = pick(fdp, [None, 1, np.ones(2, bool)])
    if fdp.ConsumeIntInRange(0, 5) == 0:
        iface["stream"] = an_int(fdp)
    if fdp.ConsumeIntInRange(0, 3) == 0:
        iface["offset"] = an_int(fdp)
    cuda = fdp.ConsumeIntInRange(0, 3) == 0
    kind = fdp.ConsumeIntInRange(0, 7)
    buffer = None
    if kind <= 2:
        pointer = pick(fdp, [BASE, BASE + 8, BASE + 4095, 0, 8,
                             2**64 - 1, 2**64 - 8, 2**63, -1, 2**64])
        iface["data"] = (pointer, pick(fdp, [False, True, 0, 1, 2, None]))
    elif kind <= 5:
        buffer = a_buffer(fdp, fdp.ConsumeIntInRange(0, 96))
        iface["data"] = buffer
    elif kind == 6:
        own = OwnBuffer(bytes(fdp.ConsumeIntInRange(0, 96)))
        if fdp.ConsumeBool():
            iface["data"] = None
        own.iface = iface
        Meddler.target = iface if fdp.ConsumeIntInRange(0, 7) == 0 else None
        return own, False, own
    else:
        iface["data"] = pick(fdp, [[1, 2], (1,), (BASE, False, 1),
                                   ("x", False), 1.5, None])
    Meddler.target = iface if fdp.ConsumeIntInRange(0, 7) == 0 else None
    attr = "__cuda_array_interface__" if cuda else "__array_interface__"
    return Iface(iface, attr), cuda, buffer


def keywords(fdp, names):
    kw = {}
    for name in names:
        if fdp.ConsumeIntInRange(0, 3) == 0:
            kw[name] = pick(fdp, {
                "device": [None, (1, 0), (2, 0), (3, 0), (13, 0), (2, -1),
                           (0, 0), (2**40, 0), [1, 0], (1,), "cpu"],
                "dl_device": [None, (1, 0), (2, 0), (1, 1), (1,)],
                "stream": [None, -1, 0, 1, 2, 7, -5, 2**63, 2**64,
                           Stream((0, 5)), Stream((0, 2**70)),
                           Stream((1, 5)), Stream((0, -3)), "s"],
                "max_version": [None, (1, 0), (1, 3), (0, 8), (2, 0), (1,),
                                ("1", 0), (2**70, 0)],
                "copy": [None, True, False, 1, "yes"],
                "sync": [True, False, 0, 1, "no"],
                "allow_readonly_legacy": [True, False, 2, None],
                "legacy_writable": [True, False, 1, "x"],
            }[name])
    if fdp.ConsumeIntInRange(0, 31) == 0:
        kw["bogus"] = 1
    return kw


def elements(shape):
    """The element count of a shape of ints, else None."""
    try:
        n = 1
        for x in shape:
            n *= int(x)
        return n
    except Exception:
        return None


def exercise_producer(fdp):
    p, cuda, buffer = interface(fdp)
    # The pointer's memory is known only for buffers: only then are the
    # bytes read (a copy in C, under ASan), and only then on the host.  A
    # broadcast (zero-stride) layout may fit a small buffer with 2**40
    # elements: its copy is a real allocation, left out.
    count = elements(p.iface.get("shape", ()) if hasattr(p, "iface")
                     else ())
    readable = (buffer is not None and not cuda and count is not None and
                count <= 2**16)
    if fdp.ConsumeBool():
        kw = keywords(fdp, ["device", "sync", "allow_readonly_legacy"])
        if cuda and "device" not in kw:
            kw["device"] = (2, 0)  # no GPU here: never look the pointer up
        view = caibridge.as_dlpack(p, **kw)
        repr(view)
        view.__dlpack_device__()
        for _ in range(fdp.ConsumeIntInRange(1, 3)):
            dkw = keywords(fdp, ["stream", "max_version", "dl_device",
                                 "copy"])
            if not readable:
                dkw.pop("copy", None)
            try:
                capsule = view.__dlpack__(**dkw)
            except DOCUMENTED:
                continue
            if fdp.ConsumeBool():
                caibridge.from_dlpack(capsule, **keywords(
                    fdp, ["legacy_writable", "allow_readonly_legacy"]))
        if readable:
            view.__dlpack__(copy=True, max_version=(1, 0))
            np.from_dlpack(view)
    else:
        kw = keywords(fdp, ["max_version", "device", "stream", "sync",
                            "allow_readonly_legacy"])
        if cuda and "device" not in kw:
            kw["device"] = (2, 0)
        capsule = caibridge.to_dlpack(p, **kw)
        view = caibridge.from_dlpack(capsule)
        d = (view.__cuda_array_interface__ if view.__dlpack_device__()[0]
             != 1 else view.__array_interface__)
        d.clear()  # a consumer may change its own dict


# ---- Hand-made DLPack tensors

# A capsule's name says which struct it holds; a name that lies about it
# would make any consumer read garbage, so names follow the struct.
NAMES = {True: [b"dltensor_versioned", b"dltensor_versioned",
                b"used_dltensor_versioned", b"other"],
         False: [b"dltensor", b"dltensor", b"used_dltensor", b"other"]}
# Deleters and structs stay alive (the module may call a deleter late).
KEEP = []


def tensor(fdp, versioned):
    ndim = pick(fdp, [0, 1, 2, 3, 64, 65, -1])
    n = max(ndim, 0)
    shape = (ctypes.c_int64 * max(n, 1))(*[
        fdp.ConsumeIntInRange(0, 4) if fdp.ConsumeIntInRange(0, 3)
        else pick(fdp, [-1, 2**62, 2**63 - 1, -2**63]) for _ in range(n)])
    strides = (ctypes.c_int64 * max(n, 1))(*[
        pick(fdp, [1, 2, 0, -1, 4, 2**62, -2**63]) for _ in range(n)])
    t = DLTensor()
    t.data = pick(fdp, [BASE, 0, 2**64 - 1, BASE + 1])
    t.device = DLDevice(pick(fdp, [1, 1, 2, 3, 13, 4, 0, -1]),
                        pick(fdp, [0, 0, 1, -1]))
    t.ndim = ndim
    t.dtype = DLDataType(pick(fdp, [0, 1, 2, 5, 6, 4, 7, 200]),
                         pick(fdp, [8, 16, 32, 64, 128, 1, 4, 0, 12]),
                         pick(fdp, [1, 1, 1, 0, 2, 4]))
    t.shape = shape if fdp.ConsumeIntInRange(0, 7) else None
    t.strides = strides if fdp.ConsumeBool() else None
    t.byte_offset = pick(fdp, [0, 0, 8, 2**63, 2**64 - 1])
    if versioned:
        m = DLManagedTensorVersioned(
            version=DLPackVersion(pick(fdp, [1, 1, 0, 2]), 3),
            flags=pick(fdp, [0, 1, 2, 3, 2**63]))
        m.deleter = VERSIONED_DELETER(lambda _p: None)
    else:
        m = DLManagedTensor()
        m.deleter = LEGACY_DELETER(lambda _p: None)
    m.dl_tensor = t
    KEEP.append((m, shape, strides, m.deleter))
    del KEEP[:-64]
    return m


def exercise_capsule(fdp):
    versioned = fdp.ConsumeBool()
    m = tensor(fdp, versioned)
    name = pick(fdp, NAMES[versioned])
    capsule = PyCapsule_New(ctypes.addressof(m), name, None)
    view = caibridge.from_dlpack(capsule, **keywords(
        fdp, ["stream", "legacy_writable", "allow_readonly_legacy"]))
    repr(view)
    device = view.__dlpack_device__()
    try:
        view.__array_interface__ if device[0] == 1 else \
            view.__cuda_array_interface__
    except AttributeError:
        pass


# ---- The DLPack C exchange API, called as a C consumer would

ERROR_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p,
                            ctypes.c_char_p)

# The table's functions; tensors passed as void * where only the fuzzer
# hands them on.
API = exchange_table(caibridge.DLPackView)
table_allocator = ctypes.PYFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(DLTensor), ctypes.POINTER(ctypes.c_void_p),
    ctypes.c_void_p, ERROR_CB)(API.allocator)
table_from_py = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object,
                                  ctypes.POINTER(ctypes.c_void_p))(
                                      API.from_py)
table_to_py = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p,
                                ctypes.POINTER(ctypes.c_void_p))(API.to_py)
table_dltensor_from_py = DLTENSOR_FROM_PY(API.dltensor_from_py)
table_work_stream = WORK_STREAM(API.work_stream)
py_decref = ctypes.pythonapi.Py_DecRef
py_decref.argtypes = [ctypes.c_void_p]


def to_py(tensor):
    """managed_tensor_to_py_object_no_sync: the object, whose reference
    (given by the module) is handed back, or None on failure."""
    out = ctypes.c_void_p()
    if table_to_py(tensor, ctypes.byref(out)) != 0:
        return None
    obj = ctypes.cast(out, ctypes.py_object).value
    py_decref(out)
    return obj


ERRORS = []
ON_ERROR = ERROR_CB(lambda ctx, kind, text: ERRORS.append((kind, text)))


def exercise_exchange(fdp):
    op = fdp.ConsumeIntInRange(0, 3)
    if op == 0:
        m = tensor(fdp, True)
        proto = m.dl_tensor
        if proto.shape and 0 <= proto.ndim <= 64:
            # The allocator really allocates (and the bytes are read): a
            # size that fits in 64 bits stays small; one that overflows is
            # kept, to be refused.
            n = elements(proto.shape[i] for i in range(proto.ndim))
            size = (proto.dtype.bits * proto.dtype.lanes + 7) // 8
            if n is not None and 2**16 < n * max(size, 16) and \
                    n * size < 2**63:
                for i in range(proto.ndim):
                    proto.shape[i] = min(proto.shape[i], 1)
        out = ctypes.c_void_p()
        if table_allocator(ctypes.byref(proto), ctypes.byref(out), None,
                           ON_ERROR) == 0:
            # Hand it to the module, which now owns (and deletes) it.
            view = to_py(out)
            if view is not None:
                np.asarray(view).tobytes()  # allocated by caibridge: known
        del ERRORS[:]
        return
    p, cuda, buffer = interface(fdp)
    obj = p
    if fdp.ConsumeIntInRange(0, 3):
        obj = caibridge.as_dlpack(p, device=(2, 0) if cuda else None)
    if op == 1:
        out = ctypes.c_void_p()
        if table_from_py(obj, ctypes.byref(out)) == 0:
            to_py(out)
    elif op == 2:
        table_dltensor_from_py(obj, ctypes.byref(DLTensor()))
    else:
        table_work_stream(pick(fdp, [1, 2, 3, 0, -1]), pick(fdp, [0, 1, -1]),
                          ctypes.byref(ctypes.c_void_p()))


SCENARIOS = [exercise_producer, exercise_producer, exercise_capsule,
             exercise_exchange]


def test_one_input(data):
    fdp = atheris.FuzzedDataProvider(data)
    scenario = pick(fdp, SCENARIOS)
    try:
        scenario(fdp)
    except DOCUMENTED:
        pass
    finally:
        Meddler.target = None


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
