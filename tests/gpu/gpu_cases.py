"""The cases of tests/gpu/check-gpu.py: caibridge on a real GPU.

Each case is a function registered with @case; check-gpu.py runs each in a
child process of its own.  A case returns (passed, detail) or raises Skip
with the reason; any other exception fails it.  Libraries are imported only
by the cases that use them (a child pays for what it needs).

The race cases follow tests/cuda/test_race.py on real CUDA: the producer's
long kernel (torch.cuda._sleep, then a fill) writes on stream A; the
consumer reads on stream B at once, or on the host.  With ordering the
values are right in every repeat; without it (sync=False, stream=-1) the
race shows, or the case is skipped saying the window was not hit.  The
streams live across the repeats: a hand-over never meets a destroyed one.
"""
import ctypes
import gc
import importlib
import subprocess
import re
import sys
import threading
import time
import weakref

import numpy as np

import caibridge

KDLCPU, KDLCUDA, KDLCUDAHOST, KDLCUDAMANAGED = 1, 2, 3, 13
REPEATS = 50
UNORDERED_REPEATS = 10
SLEEP_CYCLES = 50_000_000  # tens of milliseconds on current GPUs
N = 1 << 20

CASES = []


class Skip(Exception):
    """Raised by a case that cannot run here; the reason is the message."""


def case(description, devices=(0,)):
    """Registers fn(libs, device) once per device it needs (cuda:1 cases
    are skipped on a one-GPU machine)."""
    def register(fn):
        for device in devices:
            CASES.append((f"{fn.__name__}@{device}",
                          description.format(device=device), fn, device))
        return fn
    return register


def diag(text):
    print(f"# {text}")
    sys.stdout.flush()


# ---- libraries, imported on first use ----

class Libs:
    """torch, cupy, numba.cuda, jax, cuda.core's StridedMemoryView: each
    imported when a case first asks, or Skip with the reason."""

    def __init__(self):
        self._loaded = {}

    def _load(self, name):
        if name in self._loaded:
            mod, why = self._loaded[name]
        else:
            mod, why = None, None
            try:
                mod = self._import(name)
            except Skip as e:
                why = str(e)
            except Exception as e:  # noqa: BLE001 - any failure is a reason
                why = f"{name}: {type(e).__name__}: {e}"
            self._loaded[name] = (mod, why)
        if mod is None:
            raise Skip(why)
        return mod

    @staticmethod
    def _import(name):
        if name == "torch":
            torch = importlib.import_module("torch")
            if not torch.cuda.is_available():
                raise Skip("torch: no CUDA in this torch")
            return torch
        if name == "cupy":
            cupy = importlib.import_module("cupy")
            if cupy.cuda.runtime.getDeviceCount() < 1:
                raise Skip("cupy: no CUDA device")
            return cupy
        if name == "numba.cuda":
            cuda = importlib.import_module("numba.cuda")
            if not cuda.is_available():
                raise Skip("numba.cuda: no CUDA")
            return cuda
        if name == "jax":
            jax = importlib.import_module("jax")
            importlib.import_module("jax.dlpack")
            if not jax.devices("gpu"):
                raise Skip("jax: no GPU backend")
            return jax
        if name == "cuda.core":
            for module in ("cuda.core.utils", "cuda.core.experimental.utils"):
                try:
                    mod = importlib.import_module(module)
                except ImportError:
                    continue
                if hasattr(mod, "StridedMemoryView"):
                    return mod.StridedMemoryView
            raise Skip("cuda.core: no StridedMemoryView")
        raise Skip(f"{name}: unknown")

    _NAMES = {"torch": "torch", "cupy": "cupy", "numba_cuda": "numba.cuda",
              "jax": "jax", "smv": "cuda.core"}

    def __getattr__(self, attr):
        if attr not in Libs._NAMES:
            raise AttributeError(attr)
        return self._load(Libs._NAMES[attr])

    def has(self, name):
        try:
            self._load(name)
            return True
        except Skip:
            return False


def torch_with_stream_protocol(libs):
    """torch, when its streams speak __cuda_stream__; else Skip."""
    torch = libs.torch
    if not hasattr(torch.cuda.Stream, "__cuda_stream__"):
        raise Skip(f"torch {torch.__version__} has no "
                   "Stream.__cuda_stream__")
    return torch


# ---- producers and helpers ----

class CAI:
    """A CAI v3 dict around any memory, with the stream and read-only flag
    given; base keeps the memory alive."""

    def __init__(self, base, ptr, shape, typestr="<f4", stream=None,
                 readonly=False):
        self.base = base
        self.__cuda_array_interface__ = {
            "data": (ptr, readonly), "shape": tuple(shape),
            "typestr": typestr, "strides": None, "version": 3,
            "stream": stream}


@caibridge.add_dlpack
class PatchedCAI(CAI):
    """The same, made a DLPack producer by add_dlpack."""


@caibridge.add_array_interface
class DLPackOnly:
    """A DLPack-only wrapper given __cuda_array_interface__."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        return self.tensor.__dlpack__(**kwargs)


class Unordered:
    """A consumer that asks for no ordering: another's data, exported with
    stream=-1 whatever stream the consumer names."""

    def __init__(self, inner):
        self.inner = inner

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()

    def __dlpack__(self, stream=None, **kwargs):
        return self.inner.__dlpack__(stream=-1, **kwargs)


class ToDLPack:
    """caibridge.to_dlpack(obj, sync=sync) as a DLPack producer."""

    def __init__(self, obj, device, sync=True):
        self.obj, self.device, self.sync = obj, device, sync

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, **kwargs):
        return caibridge.to_dlpack(self.obj, sync=self.sync, **kwargs)


def streamed(base, stream):
    """Any CAI producer's data re-announced with work pending on stream."""
    iface = base.__cuda_array_interface__
    return CAI(base, iface["data"][0], iface["shape"], iface["typestr"],
               stream=stream)


def located_on(obj, device):
    """(as_dlpack(obj) is on device, where it is)."""
    where = caibridge.as_dlpack(obj).__dlpack_device__()
    return where == device, f"{where}"


def on_side_stream(torch):
    """A torch tensor's data announced on a stream of its own (kept)."""
    side = torch.cuda.Stream()
    source = streamed(torch.arange(4.0, device="cuda:0"), side.cuda_stream)
    source.side = side
    return source


def cai_ptr(obj):
    return obj.__cuda_array_interface__["data"][0]


class Driver:
    """libcuda through ctypes: current context, primary context state."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.lib.cuInit(0)

    def current(self):
        ctx = ctypes.c_void_p()
        rc = self.lib.cuCtxGetCurrent(ctypes.byref(ctx))
        assert rc == 0, f"cuCtxGetCurrent: {rc}"
        return ctx.value

    def set_current(self, ctx):
        rc = self.lib.cuCtxSetCurrent(ctypes.c_void_p(ctx))
        assert rc == 0, f"cuCtxSetCurrent: {rc}"

    def primary_active(self, device):
        flags, active = ctypes.c_uint(), ctypes.c_int()
        rc = self.lib.cuDevicePrimaryCtxGetState(
            ctypes.c_int(device), ctypes.byref(flags), ctypes.byref(active))
        assert rc == 0, f"cuDevicePrimaryCtxGetState: {rc}"
        return bool(active.value)

    def create_context(self, device):
        """A non-primary context (cuCtxCreate), made current."""
        ctx = ctypes.c_void_p()
        create = getattr(self.lib, "cuCtxCreate_v2", None)
        if create is None:
            raise Skip("libcuda has no cuCtxCreate_v2")
        rc = create(ctypes.byref(ctx), ctypes.c_uint(0), ctypes.c_int(device))
        assert rc == 0, f"cuCtxCreate_v2: {rc}"
        return ctx.value

    def destroy_context(self, ctx):
        self.lib.cuCtxDestroy_v2(ctypes.c_void_p(ctx))

    def device_count(self):
        count = ctypes.c_int()
        if self.lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return 0
        return count.value


def on_fresh_thread(fn):
    """fn() on a thread that never used CUDA; its result or exception."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - reported to the caller
            out["error"] = e
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


# ---- a long kernel on a stream, then the final values ----

SPIN_SOURCE = r"""
extern "C" __global__ void spin_fill(float *x, long long n,
                                     long long cycles, float value)
{
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
         i < n; i += (long long)blockDim.x * gridDim.x)
        x[i] = value;
}
"""


class Spinner:
    """CuPy: writes value into float32 memory at any address the GPU can
    reach (device, pinned, managed) after about `cycles` clock cycles, on a
    given CuPy stream."""

    def __init__(self, cupy):
        self.cupy = cupy
        self.kernel = cupy.RawKernel(SPIN_SOURCE, "spin_fill")
        try:
            self.kernel.compile()
        except Exception as e:  # noqa: BLE001 - NVRTC missing, say so
            raise Skip(f"CuPy cannot compile a kernel here: {e}") from e

    def fill(self, ptr, n, value, stream, cycles=SLEEP_CYCLES):
        with stream:
            self.kernel((64,), (256,),
                        (self.cupy.uint64(ptr), self.cupy.int64(n),
                         self.cupy.int64(cycles), self.cupy.float32(value)))


def warm(torch, stream):
    """Launches once, on stream, the kernels the timed cases use: under
    lazy module loading (CUDA's default) a kernel's first launch may wait
    for the whole context, which would end the consumer's long kernel
    before the release it is meant to outlast."""
    with torch.cuda.stream(stream):
        y = torch.zeros(N, device="cuda:0")
        y.fill_(1.0)
        y.sum()
        torch.cuda._sleep(1)
    torch.cuda.synchronize()


def slow_fill(torch, x, value, stream):
    """torch: on stream, a long kernel and then x.fill_(value)."""
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SLEEP_CYCLES)
        x.fill_(value)


# ---- real producers and consumers, both ways ----

VALUES = np.arange(12, dtype=np.float32).reshape(3, 4) * 1.5


def producer_array(libs, name, device):
    if name == "numba":
        cuda = libs.numba_cuda
        with cuda.gpus[device]:
            stream = cuda.stream()
            arr = cuda.to_device(VALUES, stream=stream)
            stream.synchronize()
            return arr
    if name == "cupy":
        cupy = libs.cupy
        with cupy.cuda.Device(device):
            return cupy.asarray(VALUES)
    return libs.torch.tensor(VALUES, device=f"cuda:{device}")


def consumers(libs, source, device):
    """Every usable DLPack consumer of as_dlpack(source): name -> (right,
    detail); the unusable ones are named in a diagnostic."""
    seen = {}
    view = caibridge.as_dlpack(source)
    seen["located"] = (view.__dlpack_device__() == (KDLCUDA, device),
                       f"{view.__dlpack_device__()}")
    if libs.has("torch"):
        t = libs.torch.from_dlpack(caibridge.as_dlpack(source))
        seen["torch"] = (t.device.index == device and
                         t.data_ptr() == cai_ptr(source) and
                         np.array_equal(t.cpu().numpy(), VALUES),
                         f"{t.device} {t.data_ptr():#x}")
    if libs.has("cupy"):
        with libs.cupy.cuda.Device(device):
            c = libs.cupy.from_dlpack(caibridge.as_dlpack(source))
        seen["cupy"] = (c.data.ptr == cai_ptr(source) and
                        np.array_equal(libs.cupy.asnumpy(c), VALUES),
                        f"{c.data.ptr:#x}")
    if libs.has("jax"):
        j = libs.jax.dlpack.from_dlpack(caibridge.as_dlpack(
            source, allow_readonly_legacy=True))
        dev = list(j.devices())[0]
        seen["jax"] = (dev.id == device and
                       np.array_equal(np.asarray(j), VALUES), f"{dev}")
    if libs.has("cuda.core"):
        v = libs.smv(caibridge.as_dlpack(source), stream_ptr=-1)
        seen["cuda.core"] = (v.ptr == cai_ptr(source) and
                             tuple(v.shape) == VALUES.shape and
                             v.device_id == device, f"ptr {v.ptr:#x}")
    return seen


def producer_case(name):
    def run(libs, device):
        source = producer_array(libs, name, device)
        seen = consumers(libs, source, device)
        missing = {"torch", "cupy", "jax", "cuda.core"} - set(seen)
        if missing:
            diag(f"consumers not usable here: {sorted(missing)}")
        bad = {k: d for k, (ok, d) in seen.items() if not ok}
        return not bad, f"wrong: {bad}"
    run.__name__ = f"producer_{name}"
    return run


for _name in ("numba", "cupy", "torch"):
    case(f"{_name} on cuda:{{device}} -> as_dlpack -> torch, CuPy, JAX, "
         "cuda.core: located, same memory, values",
         devices=(0, 1))(producer_case(_name))


@case("cuda:{device}: torch -> from_dlpack -> CuPy, Numba, torch: "
      "zero-copy, values, stream reported", devices=(0, 1))
def torch_to_cai_consumers(libs, device):
    torch = libs.torch
    values = np.arange(6, dtype=np.float32) + 0.5
    t = torch.tensor(values, device=f"cuda:{device}")
    s = torch.cuda.Stream(device=device)
    view = caibridge.from_dlpack(t, stream=s.cuda_stream)
    cai = view.__cuda_array_interface__
    seen = []
    if libs.has("cupy"):
        with libs.cupy.cuda.Device(device):
            c = libs.cupy.asarray(view)
            seen.append(("cupy", libs.cupy.asnumpy(c), c.data.ptr))
    if libs.has("numba.cuda"):
        with libs.numba_cuda.gpus[device]:
            arr = libs.numba_cuda.as_cuda_array(view)
            seen.append(("numba", arr.copy_to_host(),
                         arr.__cuda_array_interface__["data"][0]))
    again = torch.from_dlpack(caibridge.as_dlpack(view))
    seen.append(("torch", again.cpu().numpy(), again.data_ptr()))
    bad = [n for n, v, p in seen
           if not np.array_equal(v, values) or p != t.data_ptr()]
    return (not bad and cai["data"][0] == t.data_ptr() and
            cai["stream"] == s.cuda_stream), f"bad: {bad}, CAI {cai}"


@case("cuda:{device}: JAX -> from_dlpack -> CuPy: values", devices=(0, 1))
def jax_to_cupy(libs, device):
    jax, cupy = libs.jax, libs.cupy
    values = np.arange(6, dtype=np.float32) + 0.5
    j = jax.device_put(values, jax.devices("gpu")[device])
    view = caibridge.from_dlpack(j)
    with cupy.cuda.Device(device):
        c = cupy.asarray(view)
        return np.array_equal(cupy.asnumpy(c), values), f"{c}"


@case("cuda:{device}: CuPy -> from_dlpack -> torch.as_tensor (CAI): "
      "zero-copy", devices=(0, 1))
def cupy_to_torch(libs, device):
    cupy, torch = libs.cupy, libs.torch
    values = np.arange(6, dtype=np.float32) + 0.5
    with cupy.cuda.Device(device):
        c = cupy.asarray(values)
    view = caibridge.from_dlpack(c)
    t = torch.as_tensor(view, device=f"cuda:{device}")
    return (t.data_ptr() == c.data.ptr and
            np.array_equal(t.cpu().numpy(), values)), f"{t}"


@case("cuda:{device}: add_dlpack class -> torch.from_dlpack: zero-copy, "
      "ordered on the producer's stream", devices=(0, 1))
def patched_into_torch(libs, device):
    torch = libs.torch
    with torch.cuda.device(device):
        a = torch.cuda.Stream()
        data = torch.zeros(N, device=f"cuda:{device}")
        slow_fill(torch, data, 3.0, a)
        t = torch.from_dlpack(PatchedCAI(data, data.data_ptr(), (N,),
                                         stream=a.cuda_stream))
        total = t.sum().item()
        return (t.data_ptr() == data.data_ptr() and
                total == 3.0 * N), f"sum {total}, {t.device}"


@case("cuda:{device}: add_array_interface class -> torch.as_tensor "
      "through the CAI: zero-copy", devices=(0, 1))
def array_interface_into_torch(libs, device):
    torch = libs.torch
    data = torch.arange(4.0, device=f"cuda:{device}")
    wrapped = DLPackOnly(data)
    seen = torch.as_tensor(wrapped, device=f"cuda:{device}")
    return (not hasattr(wrapped, "__array_interface__") and
            seen.data_ptr() == data.data_ptr()), f"{seen.device}"


# ---- races on device memory: every path, ordered and not ----

def race(libs, read, ordered, repeats):
    """How many of repeats a consumer saw the values the producer's long
    kernel on stream A wrote.  read(torch, x, a, b, ordered) hands x over
    and sums it on the consumer's stream: (the sum, that stream)."""
    torch = libs.torch
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    x = torch.zeros(N, device="cuda:0")
    torch.cuda.synchronize()
    right = 0
    for i in range(repeats):
        value = float(i % 7 + 1)
        slow_fill(torch, x, value, a)
        total, stream = read(torch, x, a, b, ordered)
        stream.synchronize()
        right += int(total.item() == value * N)
        torch.cuda.synchronize()
    return right


def through_torch(hand_over):
    """hand_over(torch, x, a, b, ordered) gives what torch.from_dlpack
    takes; torch reads it on B."""
    def read(torch, x, a, b, ordered):
        with torch.cuda.stream(b):
            total = torch.from_dlpack(hand_over(torch, x, a, b,
                                                ordered)).sum()
        return total, b
    return read


def race_case(hand_over, what):
    def ordered(libs, device):
        right = race(libs, through_torch(hand_over), True, REPEATS)
        return right == REPEATS, f"{right} of {REPEATS} right"

    def unordered(libs, device):
        right = race(libs, through_torch(hand_over), False,
                     UNORDERED_REPEATS)
        if right == UNORDERED_REPEATS:
            raise Skip(f"the race window was not hit in {right} repeats")
        diag(f"{what} unordered: unfinished data in "
             f"{UNORDERED_REPEATS - right} of {UNORDERED_REPEATS}")
        return True, None
    name = hand_over.__name__
    ordered.__name__, unordered.__name__ = f"{name}", f"{name}_race"
    case(f"race, {what}: right in every repeat")(ordered)
    case(f"race, {what}, unordered: the race is seen")(unordered)


def cai_of(x, stream):
    return CAI(x, x.data_ptr(), tuple(x.shape), stream=stream.cuda_stream)


def via_as_dlpack(torch, x, a, b, ordered):
    return caibridge.as_dlpack(cai_of(x, a), sync=ordered)


def via_to_dlpack(torch, x, a, b, ordered):
    return caibridge.to_dlpack(cai_of(x, a), stream=b.cuda_stream,
                               sync=ordered, max_version=(1, 3))


def via_add_dlpack(torch, x, a, b, ordered):
    producer = PatchedCAI(x, x.data_ptr(), tuple(x.shape),
                          stream=a.cuda_stream)
    return producer if ordered else Unordered(producer)


def via_caiview(torch, x, a, b, ordered):
    """A CAIView whose data is ready on A, re-exported."""
    capsule = caibridge.to_dlpack(CAI(x, x.data_ptr(), tuple(x.shape)),
                                  max_version=(1, 3))
    view = caibridge.from_dlpack(capsule, stream=a.cuda_stream)
    return view if ordered else Unordered(view)


def via_from_dlpack(torch, x, a, b, ordered):
    """torch as a DLPack producer (its current stream A) for a CAI consumer
    on B, which reads on the stream the CAI dict names.  Unordered: the
    consumer names another stream than the one it reads on."""
    other = torch.cuda.Stream()
    with torch.cuda.stream(a):
        view = caibridge.from_dlpack(
            x, stream=(b if ordered else other).cuda_stream)
    return caibridge.as_dlpack(view, sync=False)


def via_exchange_import(torch, x, a, b, ordered):
    """torch's DLPack C exchange table, read by from_dlpack: the CAI dict
    names torch's work stream (A), which the consumer on B orders after."""
    if not hasattr(type(x), "__dlpack_c_exchange_api__"):
        raise Skip(f"torch {torch.__version__} publishes no DLPack C "
                   "exchange API")
    before = caibridge._core._foreign_table_imports()
    with torch.cuda.stream(a):
        view = caibridge.from_dlpack(x)
    assert caibridge._core._foreign_table_imports() == before + 1
    assert view.__cuda_array_interface__["stream"] == a.cuda_stream
    return caibridge.as_dlpack(view, sync=ordered)


for _hand_over, _what in (
        (via_as_dlpack, "as_dlpack(x).__dlpack__"),
        (via_to_dlpack, "to_dlpack"),
        (via_add_dlpack, "an add_dlpack class"),
        (via_caiview, "a CAIView re-exported"),
        (via_from_dlpack, "from_dlpack of torch for a CAI consumer"),
        (via_exchange_import, "torch's exchange table read by from_dlpack")):
    race_case(_hand_over, _what)


def exchange_read(torch, x, a, b, ordered):
    """caibridge's table read by a C consumer (ctypes.PYFUNCTYPE: the
    table's functions take Python objects, so the GIL stays held): the
    tensor is used on the stream current_work_stream reports."""
    api = exchange_table(caibridge.DLPackView)
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    view = caibridge.as_dlpack(cai_of(x, a), sync=ordered)
    out, stream = ctypes.c_void_p(), ctypes.c_void_p()
    if FROM_PY(api.managed_tensor_from_py_object_no_sync)(
            view, ctypes.byref(out)) != 0:
        raise AssertionError("managed_tensor_from_py_object_no_sync failed")
    if WORK_STREAM(api.current_work_stream)(KDLCUDA, 0,
                                            ctypes.byref(stream)) != 0:
        raise AssertionError("current_work_stream failed")
    capsule = new(out.value, b"dltensor_versioned", None)
    # 1 is the legacy default stream, torch's default stream (handle 0),
    # which torch.cuda.ExternalStream refuses to wrap.
    reported = (torch.cuda.default_stream() if stream.value == 1
                else torch.cuda.ExternalStream(stream.value))
    with torch.cuda.stream(reported):
        total = torch.from_dlpack(capsule).sum()
    return total, reported


@case("race, caibridge's exchange table read by a C consumer: right on "
      "the reported work stream in every repeat")
def exchange_export(libs, device):
    right = race(libs, exchange_read, True, REPEATS)
    return right == REPEATS, f"{right} of {REPEATS} right"


@case("race, caibridge's exchange table, sync=False: the race is seen")
def exchange_export_race(libs, device):
    right = race(libs, exchange_read, False, UNORDERED_REPEATS)
    if right == UNORDERED_REPEATS:
        raise Skip(f"the race window was not hit in {right} repeats")
    return True, None


class ExchangeAPI(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("prev_api", ctypes.c_void_p),
                ("managed_tensor_allocator", ctypes.c_void_p),
                ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
                ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
                ("dltensor_from_py_object_no_sync", ctypes.c_void_p),
                ("current_work_stream", ctypes.c_void_p)]


FROM_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object,
                            ctypes.POINTER(ctypes.c_void_p))
WORK_STREAM = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int32,
                                ctypes.POINTER(ctypes.c_void_p))


def exchange_table(cls):
    capsule = cls.__dlpack_c_exchange_api__
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return ctypes.cast(get(capsule, b"dlpack_exchange_api"),
                       ctypes.POINTER(ExchangeAPI)).contents


# ---- host readers: NumPy on pinned and managed memory ----

def host_memory(cupy, kind, n):
    """n float32 of pinned or managed memory, zeroed: (owner, pointer)."""
    if kind == "pinned":
        mem = cupy.cuda.alloc_pinned_memory(n * 4)
        np.frombuffer(mem, np.float32, n)[:] = 0
        return mem, mem.ptr
    mem = cupy.cuda.malloc_managed(n * 4)
    cupy.ndarray((n,), cupy.float32, mem)[:] = 0
    cupy.cuda.Device().synchronize()
    return mem, mem.ptr


def host_via(path, owner, ptr, n, a, ordered):
    source = CAI(owner, ptr, (n,), stream=a.ptr)
    if path == "as_dlpack":
        return caibridge.as_dlpack(source, sync=ordered)
    if path == "to_dlpack":
        device = caibridge.as_dlpack(source, sync=False).__dlpack_device__()
        return ToDLPack(source, device, sync=ordered)
    if path == "add_dlpack":
        producer = PatchedCAI(owner, ptr, (n,), stream=a.ptr)
        return producer if ordered else Unordered(producer)
    capsule = caibridge.to_dlpack(CAI(owner, ptr, (n,)), max_version=(1, 3))
    view = caibridge.from_dlpack(capsule, stream=a.ptr)
    return view if ordered else Unordered(view)


def host_reads(libs, kind, path, ordered, repeats):
    cupy = libs.cupy
    spinner = Spinner(cupy)
    n = 1 << 16
    a = cupy.cuda.Stream(non_blocking=True)
    owner, ptr = host_memory(cupy, kind, n)
    right = 0
    for i in range(repeats):
        value = float(i % 7 + 1)
        spinner.fill(ptr, n, value, a)
        seen = np.from_dlpack(host_via(path, owner, ptr, n, a, ordered))
        right += int((seen == value).all())
        a.synchronize()
    return right


def host_case(kind, path):
    def ordered(libs, device):
        right = host_reads(libs, kind, path, True, 10)
        return right == 10, f"{right} of 10 reads saw the final values"
    ordered.__name__ = f"numpy_{kind}_{path}"
    case(f"NumPy reads {kind} memory through {path} right after a kernel: "
         "the host waits, final values")(ordered)


for _kind in ("pinned", "managed"):
    for _path in ("as_dlpack", "to_dlpack", "add_dlpack", "caiview"):
        host_case(_kind, _path)


@case("NumPy reads pinned memory through to_dlpack with sync=False: the "
      "race is seen")
def numpy_pinned_race(libs, device):
    right = host_reads(libs, "pinned", "to_dlpack", False, 5)
    if right == 5:
        raise Skip("the race window was not hit in 5 repeats")
    return True, None


@case("dl_device=(kDLCPU, 0) on pinned memory through as_dlpack, "
      "to_dlpack, add_dlpack and a CAIView: accepted, (kDLCPU, 5) refused")
def cpu_device_request(libs, device):
    cupy = libs.cupy
    a = cupy.cuda.Stream(non_blocking=True)
    owner, ptr = host_memory(cupy, "pinned", 4)
    bad = []
    for path in ("as_dlpack", "to_dlpack", "add_dlpack", "caiview"):
        x = host_via(path, owner, ptr, 4, a, True)
        back = caibridge.from_dlpack(x.__dlpack__(
            max_version=(1, 3), dl_device=(KDLCPU, 0)))
        if back.__dlpack_device__() != (KDLCPU, 0):
            bad.append(f"{path}: {back.__dlpack_device__()}")
        try:
            x.__dlpack__(max_version=(1, 3), dl_device=(KDLCPU, 5))
            bad.append(f"{path}: (kDLCPU, 5) accepted")
        except BufferError:
            pass
    return not bad, f"{bad}"


@case("a Python host function queued on the producer's stream before the "
      "fence: a host wait does not deadlock")
def host_function_before_the_fence(libs, device):
    ran = []

    def queue(a):
        # Runs on the driver's thread once the kernel is done: it needs
        # the GIL.
        a.launch_host_func(lambda arg: ran.append(arg), 1)
    seen = pinned_reader(libs, 5.0, SLEEP_CYCLES, queue)()
    return ran == [1] and bool((seen == 5.0).all()), f"ran {ran}"


def pinned_reader(libs, value, cycles, then=None):
    """Queues a kernel of `cycles` filling pinned memory with value on
    stream A (then(A) after it); returns NumPy's read of it through
    as_dlpack, to call."""
    cupy = libs.cupy
    spinner = Spinner(cupy)
    n = 1 << 16
    a = cupy.cuda.Stream(non_blocking=True)
    owner, ptr = host_memory(cupy, "pinned", n)
    spinner.fill(ptr, n, value, a, cycles=cycles)
    if then is not None:
        then(a)
    return lambda: np.from_dlpack(caibridge.as_dlpack(
        CAI(owner, ptr, (n,), stream=a.ptr)))


@case("another Python thread runs while one waits on the host for the "
      "producer")
def thread_runs_during_a_host_wait(libs, device):
    # About half a second of GPU time: another thread that holds no GIL
    # counts millions of steps meanwhile; with the GIL held by the wait it
    # gets one switch interval (5 ms) before the wait begins, at most.
    read = pinned_reader(libs, 2.0, 20 * SLEEP_CYCLES)
    steps, done = [0], []

    def count():
        while not done:
            steps[0] += 1
    counter = threading.Thread(target=count)
    counter.start()
    before = steps[0]
    seen = read()
    during = steps[0] - before
    done.append(1)
    counter.join()
    return during > 1_000_000 and bool((seen == 2.0).all()), \
        f"the other thread made {during} steps during the wait"


# ---- the reverse edge ----

def reverse_edge(libs, block, repeats):
    """torch reads x on its default stream (stream 1, which a release may
    name) behind a long kernel and releases it; the producer then
    overwrites x on its own stream A.  With CAIBRIDGE_RELEASE=block the
    release has the host wait for the read, so the write comes after it
    and the read sees the old values.  By default (poll) nothing waits:
    the release keeps the producer's object until the read has run, not
    its stream, so an in-place write can overtake the read (the release
    rules of docs/cuda.rst)."""
    torch = libs.torch
    caibridge._core._set_release_blocking(block)
    a = torch.cuda.Stream()
    default = torch.cuda.default_stream()
    x = torch.zeros(N, device="cuda:0")
    right = 0
    for _ in range(repeats):
        x.fill_(7.0)
        torch.cuda.synchronize()
        view = caibridge.as_dlpack(
            CAI(x, x.data_ptr(), (N,), stream=a.cuda_stream))
        with torch.cuda.stream(default):
            t = torch.from_dlpack(view)
            torch.cuda._sleep(SLEEP_CYCLES)
            out = t.sum()
        del t                                      # the release
        with torch.cuda.stream(a):
            x.fill_(9.0)
        default.synchronize()
        right += int(out.item() == 7.0 * N)
        torch.cuda.synchronize()
    return right


@case("reverse edge, CAIBRIDGE_RELEASE=block, consumer on stream 1: the "
      "producer's later write on its own stream waits for the consumer's "
      "read")
def reverse_edge_block(libs, device):
    right = reverse_edge(libs, True, 20)
    return right == 20, f"{right} of 20 reads saw the old values"


@case("reverse edge, default release (poll), consumer on stream 1: "
      "nothing waits, so the producer's in-place write can overtake the "
      "read (the race is seen: what block is for)")
def reverse_edge_block_race(libs, device):
    right = reverse_edge(libs, False, 10)
    if right == 10:
        raise Skip("the race window was not hit in 10 repeats")
    diag(f"poll release: the write overtook the read in {10 - right} of 10")
    return True, None


@case("the producer destroys its stream (CuPy) before the consumer on "
      "stream 1 releases: the release never names it, returns before the "
      "consumer's read has run, leaves no error pending, and the read's "
      "values are right")
def destroyed_producer_stream(libs, device):
    """The consumer's read runs on torch's default stream behind a long
    kernel; A is destroyed; the release records on stream 1 only (the
    producer's stream is never named at release) and waits for nothing."""
    cupy, torch = libs.cupy, libs.torch
    rt = Runtime()
    spinner = Spinner(cupy)
    x = cupy.zeros(N, dtype=cupy.float32)
    cupy.cuda.Device().synchronize()
    a = cupy.cuda.Stream(non_blocking=True)
    default = torch.cuda.default_stream()
    warm(torch, default)
    spinner.fill(x.data.ptr, N, 4.0, a)
    view = caibridge.as_dlpack(CAI(x, x.data.ptr, (N,), stream=a.ptr))
    with torch.cuda.stream(default):
        t = torch.from_dlpack(view)
        torch.cuda._sleep(SLEEP_CYCLES * 10)
        out = t.sum()
    del view
    a = None                  # CuPy destroys the stream with its object
    gc.collect()
    queued = not default.query()
    del t                     # the release: a must not be named
    read_running = not default.query()
    pending = rt.pending_error()
    torch.cuda.synchronize()
    total = out.item()
    return total == 4.0 * N and queued and read_running and pending == 0, \
        f"sum {total} (want {4.0 * N}); consumer's read queued before the " \
        f"release: {queued}, still running after it: {read_running}; " \
        f"error left pending {pending}"


@case("the consumer's stream (CuPy) destroyed before its tensor is "
      "released: the release fails quietly, the next hand-over is ordered "
      "and right")
def destroyed_consumer_stream(libs, device):
    """A consumer may free its stream before the tensor.  The release must
    neither crash nor leave an error pending that the next CUDA call would
    report; the next hand-over then orders as ever."""
    cupy, torch = libs.cupy, libs.torch
    spinner = Spinner(cupy)
    x = cupy.zeros(N, dtype=cupy.float32)
    cupy.cuda.Device().synchronize()
    a = cupy.cuda.Stream(non_blocking=True)
    b = cupy.cuda.Stream(non_blocking=True)
    spinner.fill(x.data.ptr, N, 3.0, a)
    view = caibridge.as_dlpack(CAI(x, x.data.ptr, (N,), stream=a.ptr))
    t = torch.utils.dlpack.from_dlpack(
        view.__dlpack__(stream=b.ptr, max_version=(1, 0)))
    b.synchronize()
    b = None                  # CuPy destroys the stream with its object
    gc.collect()
    del t, view               # the release names the consumer's stream
    pending = Runtime().pending_error()
    c = torch.cuda.Stream()
    spinner.fill(x.data.ptr, N, 5.0, a)
    with torch.cuda.stream(c):
        total = torch.from_dlpack(caibridge.as_dlpack(
            CAI(x, x.data.ptr, (N,), stream=a.ptr))).sum()
    c.synchronize()
    return pending == 0 and total.item() == 5.0 * N, \
        f"error left pending {pending}; next hand-over sum {total.item()}"


def kernel_seconds(torch, stream, cycles):
    """How long torch.cuda._sleep(cycles) runs on stream, measured."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000.0


def long_read(torch, a, b, cycles):
    """A producer with work on A, watched by a weakref, handed to torch,
    which reads it on B behind a kernel of `cycles`: (its memory, kept
    apart from the producer's life; the weakref; the tensor; its sum).
    Only the tensor holds the view then."""
    x = torch.zeros(N, device="cuda:0")
    torch.cuda.synchronize()
    producer = CAI(x, x.data_ptr(), (N,), stream=a.cuda_stream)
    alive = weakref.ref(producer)
    view = caibridge.as_dlpack(producer)
    del producer
    with torch.cuda.stream(b):
        t = torch.from_dlpack(view)
        torch.cuda._sleep(cycles)
        out = t.sum()
    return x, alive, t, out


@case("non-blocking release: `del` of the consumer's tensor returns long "
      "before the consumer's kernel ends, and the producer is kept alive "
      "until that kernel is done")
def non_blocking_release(libs, device):
    """The release must not block the host on the consumer's work: it
    returns in a fraction of a kernel of measured length, while the
    producer object (watched through a weakref) stays alive until the
    consumer's stream is done, and is let go after."""
    torch = libs.torch
    # The consumer on torch's default stream: stream 1, which the release
    # names (a side stream's handle takes no reverse edge).
    a, b = torch.cuda.Stream(), torch.cuda.default_stream()
    cycles = SLEEP_CYCLES * 10
    warm(torch, b)
    length = kernel_seconds(torch, b, cycles)
    x, alive, t, out = long_read(torch, a, b, cycles)
    start = time.monotonic()
    del t                     # the release
    took = time.monotonic() - start
    kept = alive() is not None and not b.query()
    b.synchronize()
    deadline = time.monotonic() + 5
    while alive() is not None and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    freed = alive() is None
    diag(f"kernel {length * 1e3:.1f} ms, release returned in "
         f"{took * 1e3:.2f} ms")
    return took < length / 4 and kept and freed and out.item() == 0.0, \
        f"release {took:.4f} s of a {length:.4f} s kernel; producer kept " \
        f"while the kernel ran: {kept}; let go after: {freed}"


@case("torch on a side stream (an integer handle) releases: the handle is "
      "never named, so the producer goes at once, with no error left")
def side_stream_release(libs, device):
    """The release rules' row for torch on a side stream: the handle may
    be gone by the release, so it takes no reverse edge and keeps nothing,
    while torch's read may still run."""
    torch = libs.torch
    rt = Runtime()
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    warm(torch, b)
    x, alive, t, out = long_read(torch, a, b, SLEEP_CYCLES * 10)
    queued = not b.query()
    del t                     # the release
    at_once = alive() is None
    # A deleter that torch runs without the GIL hands the drop to the
    # interpreter's next pending call: a moment, well inside the read.
    deadline = time.monotonic() + 0.05
    while alive() is not None and time.monotonic() < deadline:
        time.sleep(0.001)
    gone, running = alive() is None, not b.query()
    pending = rt.pending_error()
    b.synchronize()
    diag(f"side-stream release: producer gone before the next bytecode: "
         f"{at_once}")
    return queued and gone and running and pending == 0 and \
        out.item() == 0.0, \
        f"read queued before the release: {queued}; producer gone within " \
        f"50 ms: {gone}; read still running then: {running}; error left " \
        f"pending {pending}; sum {out.item()}"


class Runtime:
    """The libcudart caibridge uses (another copy in the process keeps its
    own error state), for what the frameworks cannot survive or do not
    expose: a device reset, the error left pending."""

    def __init__(self):
        try:
            path = caibridge._core._runtime_info()["path"]
        except caibridge.CUDAError as e:
            raise Skip(f"caibridge found no CUDA runtime: {e}") from e
        self.lib = ctypes.CDLL(path)

    def pending_error(self):
        """The error left pending on this thread, not cleared."""
        return self.lib.cudaPeekAtLastError()

    def check(self, call, *args):
        rc = getattr(self.lib, call)(*args)
        assert rc == 0, f"{call}: CUDA error {rc}"

    def stream(self):
        s = ctypes.c_void_p()
        self.check("cudaStreamCreateWithFlags", ctypes.byref(s), 1)
        return s.value

    def malloc(self, n):
        p = ctypes.c_void_p()
        self.check("cudaMalloc", ctypes.byref(p), ctypes.c_size_t(n))
        return p.value


@case("pooled events across cudaDeviceReset: hand-overs before and after "
      "the reset are ordered and right, and none fails")
def pooled_events_across_device_reset(libs, device):
    """Events kept for the primary context die with it at a reset; the
    next hand-over must not name one.  CUDA runtime calls only (a
    framework's caches do not survive a reset): the producer sets bytes on
    A, the consumer copies them to the host on B."""
    rt = Runtime()
    n = 1 << 24
    host = np.zeros(n, dtype=np.uint8)
    seen = []

    def hand_over(value):
        a, b = rt.stream(), rt.stream()
        ptr = rt.malloc(n)
        rt.check("cudaMemsetAsync", ctypes.c_void_p(ptr), value,
                 ctypes.c_size_t(n), ctypes.c_void_p(a))
        view = caibridge.as_dlpack(CAI(None, ptr, (n,), "|u1", stream=a))
        capsule = view.__dlpack__(stream=b, max_version=(1, 3))
        rt.check("cudaMemcpyAsync", host.ctypes.data_as(ctypes.c_void_p),
                 ctypes.c_void_p(ptr), ctypes.c_size_t(n), 2,
                 ctypes.c_void_p(b))
        rt.check("cudaStreamSynchronize", ctypes.c_void_p(b))
        del capsule, view
        seen.append(bool((host == value).all()))
        rt.check("cudaDeviceSynchronize")
        rt.check("cudaFree", ctypes.c_void_p(ptr))
        for s in (a, b):
            rt.check("cudaStreamDestroy", ctypes.c_void_p(s))

    hand_over(1)
    hand_over(2)              # the events are kept now
    rt.check("cudaDeviceReset")
    hand_over(3)
    hand_over(4)
    return all(seen), f"values right per hand-over: {seen}"


# ---- memory kinds, devices, contexts ----

@case("pinned memory: kDLCUDAHost 0, read by NumPy")
def pinned(libs, device):
    cupy = libs.cupy
    values = np.arange(8, dtype=np.float32)
    mem = cupy.cuda.alloc_pinned_memory(values.nbytes)
    np.frombuffer(mem, np.float32, values.size)[:] = values
    view = caibridge.as_dlpack(CAI(mem, mem.ptr, values.shape))
    seen = np.from_dlpack(view)
    return (view.__dlpack_device__() == (KDLCUDAHOST, 0) and
            np.array_equal(seen, values)), f"{view.__dlpack_device__()}"


@case("managed memory: kDLCUDAManaged 0")
def managed(libs, device):
    cupy = libs.cupy
    mem = cupy.cuda.malloc_managed(32)
    arr = cupy.ndarray((8,), cupy.float32, mem)
    arr[:] = 1
    cupy.cuda.Device().synchronize()
    return located_on(arr, (KDLCUDAMANAGED, 0))


@case("pool memory (cudaMallocAsync) located on a fresh thread: device "
      "memory, and no context made there")
def pool_memory_on_a_fresh_thread(libs, device):
    cupy = libs.cupy
    try:
        pool = cupy.cuda.MemoryAsyncPool()
    except Exception as e:  # noqa: BLE001 - too old a driver or CuPy
        raise Skip(f"no MemoryAsyncPool here: {e}") from e
    with cupy.cuda.using_allocator(pool.malloc):
        x = cupy.arange(4, dtype=cupy.float32)
    cupy.cuda.Device().synchronize()
    driver = Driver()

    # A bare CAI dict: CuPy's own property may touch CUDA on this thread.
    source = CAI(x, x.data.ptr, (4,))

    def fresh():
        before = driver.current()
        located = caibridge.as_dlpack(source).__dlpack_device__()
        return before, located, driver.current()
    before, located, after = on_fresh_thread(fresh)
    return (located == (KDLCUDA, 0) and before is None and
            after is None), f"{located}, context before {before} after " \
        f"{after}"


@case("data on cuda:1 with cuda:0 current: device id 1")
def second_device(libs, device):
    cupy = libs.cupy
    if Driver().device_count() < 2:
        raise Skip("one CUDA device")
    with cupy.cuda.Device(1):
        arr = cupy.arange(4, dtype=cupy.float32)
    cupy.cuda.Device(0).use()
    return located_on(arr, (KDLCUDA, 1))


@case("data on cuda:1, producer stream on cuda:0: ordered, cuda:0 still "
      "current")
def producer_stream_on_other_device(libs, device):
    torch = libs.torch
    if torch.cuda.device_count() < 2:
        raise Skip("one CUDA device")
    torch.cuda.set_device(0)
    data = torch.arange(4.0, device="cuda:1")
    other = torch.cuda.Stream(device=0)
    with torch.cuda.stream(other):
        torch.cuda._sleep(10_000_000)
    t = torch.from_dlpack(caibridge.as_dlpack(
        streamed(data, other.cuda_stream)))
    return (t.device.index == 1 and t.tolist() == [0, 1, 2, 3] and
            torch.cuda.current_device() == 0), f"{t.device}"


@case("read-only CAI data stays read-only through DLPack and back")
def readonly(libs, device):
    t = libs.torch.arange(4.0, device="cuda:0")
    view = caibridge.as_dlpack(CAI(t, t.data_ptr(), (4,), readonly=True))
    back = caibridge.from_dlpack(view).__cuda_array_interface__
    return back["data"] == (t.data_ptr(), True), f"{back['data']}"


@case("zero-size array: a CUDA device, an empty tensor")
def zero_size(libs, device):
    torch = libs.torch
    empty = torch.empty(0, device="cuda:0")
    view = caibridge.as_dlpack(CAI(empty, 0, (0,)))
    t = torch.from_dlpack(view)
    return (view.__dlpack_device__()[0] == KDLCUDA and
            tuple(t.shape) == (0,)), f"{view.__dlpack_device__()}"


@case("per-thread stream 2 of a producer thread, consumed on another "
      "thread: ordered after the producer's work")
def per_thread_across_threads(libs, device):
    cupy, torch = libs.cupy, libs.torch
    spinner = Spinner(cupy)
    made = {}
    s = torch.cuda.Stream()

    def producer():
        x = cupy.zeros(N, dtype=cupy.float32)
        cupy.cuda.Device().synchronize()
        spinner.fill(x.data.ptr, N, 9.0, cupy.cuda.Stream.ptds)
        made["view"] = caibridge.as_dlpack(CAI(x, x.data.ptr, (N,),
                                               stream=2))
        made["x"] = x
    right = 0
    for _ in range(10):
        on_fresh_thread(producer)
        with torch.cuda.stream(s):
            total = torch.from_dlpack(made["view"]).sum()
        s.synchronize()
        right += int(total.item() == 9.0 * N)
        cupy.cuda.Device().synchronize()
    return right == 10, f"{right} of 10 right"


@case("a thread that never used CUDA has no context current after "
      "caibridge ordered and waited on it")
def fresh_thread_no_context(libs, device):
    torch = libs.torch
    driver, source = Driver(), on_side_stream(torch)
    other = torch.cuda.Stream()

    def fresh():
        before = driver.current()
        caibridge.as_dlpack(source).__dlpack__(stream=other.cuda_stream)
        caibridge.as_dlpack(source).__dlpack__(stream=1)
        caibridge.to_dlpack(source, stream=other.cuda_stream)
        return before, driver.current()
    before, after = on_fresh_thread(fresh)
    return before is None and after is None, f"{before} {after}"


@case("no primary context appears on cuda:0 for data on cuda:1 handled on "
      "a fresh thread")
def no_stray_primary_context(libs, device):
    _ = libs.cupy
    if Driver().device_count() < 2:
        raise Skip("needs two devices (data on cuda:1 only)")
    code = r"""
import ctypes, threading, cupy, caibridge
lib = ctypes.CDLL("libcuda.so.1"); lib.cuInit(0)
def active(d):
    f, a = ctypes.c_uint(), ctypes.c_int()
    lib.cuDevicePrimaryCtxGetState(d, ctypes.byref(f), ctypes.byref(a))
    return a.value
cupy.cuda.runtime.setDevice(1)
s = cupy.cuda.Stream(non_blocking=True)
with s:
    x = cupy.arange(4, dtype=cupy.float32)
def fresh():
    caibridge.as_dlpack(x).__dlpack__(stream=1)
t = threading.Thread(target=fresh); t.start(); t.join()
print(active(0), active(1))
"""
    out = subprocess.run([sys.executable, "-c", code], text=True,
                         capture_output=True, timeout=60)
    return out.stdout.split() == ["0", "1"], \
        f"primary contexts active (cuda:0, cuda:1): {out.stdout}{out.stderr}"


@case("a non-primary context (cuCtxCreate) stays current across a "
      "hand-over")
def non_primary_context_kept(libs, device):
    driver, source = Driver(), on_side_stream(libs.torch)

    def own_context():
        ctx = driver.create_context(0)
        try:
            driver.set_current(ctx)
            caibridge.as_dlpack(source).__dlpack__(stream=1)
            return driver.current() == ctx
        finally:
            driver.set_current(None)
            driver.destroy_context(ctx)
    kept = on_fresh_thread(own_context)
    return kept is True, f"{kept}"


@case("torch graph capture consuming a producer stream outside it: the "
      "capture stays valid, values right")
def consumer_capturing(libs, device):
    torch = libs.torch
    producer = torch.cuda.Stream()
    data = torch.zeros(1 << 16, device="cuda:0")
    slow_fill(torch, data, 4.0, producer)
    source = streamed(data, producer.cuda_stream)
    graph = torch.cuda.CUDAGraph()
    capture = torch.cuda.Stream()
    with torch.cuda.graph(graph, stream=capture):
        t = torch.from_dlpack(caibridge.as_dlpack(source))
        out = t * 2
    graph.replay()
    torch.cuda.synchronize()
    return bool((out == 8.0).all()), f"{out[:4]}"


@case("torch graph capture consuming a producer stream outside it, "
      "sync=False: the race is seen")
def consumer_capturing_race(libs, device):
    """The control run of consumer_capturing: without ordering the
    captured read does not wait for the producer's long kernel, so at
    some replay it reads unfinished data."""
    torch = libs.torch
    producer = torch.cuda.Stream()
    data = torch.zeros(1 << 16, device="cuda:0")
    torch.cuda.synchronize()
    source = streamed(data, producer.cuda_stream)
    graph = torch.cuda.CUDAGraph()
    capture = torch.cuda.Stream()
    with torch.cuda.graph(graph, stream=capture):
        t = torch.from_dlpack(caibridge.as_dlpack(source, sync=False))
        out = t * 2
    wrong = 0
    for i in range(UNORDERED_REPEATS):
        value = float(i % 7 + 1)
        data.zero_()
        torch.cuda.synchronize()
        slow_fill(torch, data, value, producer)
        graph.replay()
        torch.cuda.synchronize()
        wrong += int(not bool((out == 2 * value).all()))
    if wrong == 0:
        raise Skip(f"the race window was not hit in {UNORDERED_REPEATS} "
                   "replays")
    diag(f"captured read unordered: unfinished data in {wrong} of "
         f"{UNORDERED_REPEATS}")
    return True, None


@case("a producer stream capturing a graph, consumer outside: refused with "
      "a message, the capture ends cleanly")
def producer_capturing(libs, device):
    torch = libs.torch
    graph = torch.cuda.CUDAGraph()
    capture = torch.cuda.Stream()
    outside = torch.cuda.Stream()
    refused = None
    with torch.cuda.graph(graph, stream=capture):
        data = torch.ones(16, device="cuda:0")
        view = caibridge.as_dlpack(streamed(data, capture.cuda_stream))
        try:
            view.__dlpack__(stream=outside.cuda_stream)
        except BufferError as e:
            refused = str(e)
    graph.replay()
    torch.cuda.synchronize()
    return refused is not None and "capture" in refused, f"{refused}"


@case("torch.cuda.default_stream() as stream= (its handle 0 is the legacy "
      "stream)")
def default_stream(libs, device):
    torch = torch_with_stream_protocol(libs)
    t = torch.arange(4.0, device="cuda:0")
    view = caibridge.from_dlpack(t, stream=torch.cuda.default_stream())
    cai = view.__cuda_array_interface__
    return cai["stream"] == 1, f"{cai}"


@case("a torch stream object as stream=: its handle is used")
def stream_object(libs, device):
    torch = torch_with_stream_protocol(libs)
    s = torch.cuda.Stream()
    t = torch.arange(4.0, device="cuda:0")
    view = caibridge.from_dlpack(t, stream=s)
    cai = view.__cuda_array_interface__
    return cai["stream"] == s.cuda_stream, f"{cai}"


# ---- the docs' GPU-only examples (Numba, PyCUDA, CuPy), one case each ----

def _doc_example_case(example):
    def run_example(libs, device):
        missing = example.missing()
        if missing:
            raise Skip("not installed: " + ", ".join(missing))
        example.run()
        return True, None
    run_example.__name__ = "docs_" + re.sub(r"\W", "_", example.name)
    return run_example


def _register_doc_examples():
    import doc_examples
    for example in doc_examples.gpu_examples():
        case(f"docs example {example.name} runs")(_doc_example_case(example))


_register_doc_examples()

# What a hand-over costs the GPU: tests/gpu/release_cases.py.
import release_cases  # noqa: E402,F401 - registers its cases

# The copy cases (issue 35) live in their own file; importing it registers
# them here.
import gpu_copy_cases  # noqa: E402,F401
import gpu_dtype_cases  # noqa: E402,F401
