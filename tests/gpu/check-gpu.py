#!/usr/bin/env python3
"""caibridge on a real GPU, in TAP.

Run it in one command after `pip install .` (or through `make check-gpu`):

    python tests/gpu/check-gpu.py

It needs NumPy and uses whichever of CuPy, numba-cuda, cuda-core, PyTorch
(CUDA) and JAX (CUDA) are importable; a case whose library is missing is a
TAP skip naming it.  Without a usable GPU it prints one skip line with the
reason and exits 0.  The checks prove the rules rather than call them:

- real producers and consumers both ways, zero-copy, values, device ids;
- a race test: a long kernel writes on stream A and the CAI producer says
  `stream: A`; a consumer reading on another stream at once sees the final
  values in every repeat, and with `sync=False` the race shows (or the
  script says the window was not hit);
- memory kinds (device, pinned, managed), a second device, read-only data,
  zero-size arrays;
- pinned and managed memory read by NumPy right after a kernel (the host
  must wait);
- the DLPack C exchange API: a tensor is safe on the stream that
  `current_work_stream` reports;
- per-thread default streams across threads; a thread that never used CUDA
  is left with no context, and no primary context appears on GPU 0; a
  PyCUDA-style non-primary context stays current;
- graph capture in torch, both sides; `torch.cuda.default_stream()` as the
  consumer stream.
"""

import ctypes
import importlib
import os
import subprocess
import sys
import threading
import traceback

import numpy as np

import caibridge

KDLCPU, KDLCUDA, KDLCUDAHOST, KDLCUDAMANAGED = 1, 2, 3, 13
REPEATS = 100


class Skip(Exception):
    """Raised by a case that cannot run here; the reason is the message."""


class Tap:
    def __init__(self):
        self.count = 0
        self.failed = 0

    def _line(self, text):
        print(text)
        sys.stdout.flush()

    def ok(self, passed, description, detail=None):
        self.count += 1
        if not passed:
            self.failed += 1
        self._line(f"{'ok' if passed else 'not ok'} {self.count} - "
                   f"{description}")
        if not passed and detail:
            for line in str(detail).splitlines():
                self._line(f"#   {line}")

    def skip(self, description, reason):
        self.count += 1
        self._line(f"ok {self.count} - {description} # SKIP {reason}")

    def check(self, description, body):
        """Runs body(); it returns (passed, detail) or raises Skip.  Any
        other exception fails the case."""
        try:
            passed, detail = body()
        except Skip as e:
            self.skip(description, str(e))
            return
        except Exception:  # noqa: BLE001 - every failure is reported
            passed, detail = False, traceback.format_exc()
        self.ok(passed, description, detail)

    def finish(self):
        self._line(f"1..{self.count}")
        return 1 if self.failed else 0


def diag(text):
    print(f"# {text}")
    sys.stdout.flush()


# ---- producers and helpers ----

class ZeroSizeProbe:
    """A zero-size CAI array: locating it asks CUDA for a device."""

    __cuda_array_interface__ = {"data": (0, False), "shape": (0,),
                                "typestr": "<f4", "version": 3}


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


def streamed(base, stream):
    """Any CAI producer's data re-announced with work pending on stream."""
    iface = base.__cuda_array_interface__
    return CAI(base, iface["data"][0], iface["shape"], iface["typestr"],
               stream=stream)


def import_optional(name):
    try:
        return importlib.import_module(name), None
    except Exception as e:  # noqa: BLE001 - any import failure is a reason
        return None, f"{name}: {type(e).__name__}: {e}"


class Libs:
    """The usable libraries, each None with a reason when not."""

    def __init__(self):
        self.reasons = {}
        self.torch = self._load("torch", lambda m: m.cuda.is_available(),
                                "no CUDA in this torch")
        self.cupy = self._load("cupy", lambda m: m.cuda.runtime
                               .getDeviceCount() > 0, "no CUDA device")
        self.numba_cuda = self._load("numba.cuda", lambda m: m.is_available(),
                                     "no CUDA")
        self.jax = self._load("jax", self._jax_gpu, "no GPU backend")
        if self.jax is not None:
            importlib.import_module("jax.dlpack")
        self.smv = None
        for name in ("cuda.core.utils", "cuda.core.experimental.utils"):
            mod, why = import_optional(name)
            if mod is not None and hasattr(mod, "StridedMemoryView"):
                self.smv = mod.StridedMemoryView
                self.reasons.pop("cuda.core", None)
                break
            self.reasons["cuda.core"] = why or f"{name} has no " \
                "StridedMemoryView"

    @staticmethod
    def _jax_gpu(jax):
        try:
            return bool(jax.devices("gpu"))
        except RuntimeError:
            return False

    def _load(self, name, usable, why_not):
        mod, why = import_optional(name)
        if mod is None:
            self.reasons[name] = why
            return None
        try:
            if usable(mod):
                return mod
        except Exception as e:  # noqa: BLE001
            why_not = f"{type(e).__name__}: {e}"
        self.reasons[name] = f"{name}: {why_not}"
        return None

    def need(self, *names):
        for name in names:
            attr = {"numba.cuda": "numba_cuda", "cuda.core": "smv"}.get(
                name, name)
            if getattr(self, attr) is None:
                raise Skip(self.reasons.get(name, f"{name} is not usable"))

    def device_count(self):
        if self.torch is not None:
            return self.torch.cuda.device_count()
        if self.cupy is not None:
            return self.cupy.cuda.runtime.getDeviceCount()
        if self.numba_cuda is not None:
            return len(self.numba_cuda.gpus)
        return 1


@caibridge.add_dlpack
class PatchedCAI(CAI):
    """A CuPy-free CAI v3 class made a DLPack producer by add_dlpack: a
    float32 torch tensor's memory with work pending on stream."""

    def __init__(self, tensor, stream):
        super().__init__(tensor, tensor.data_ptr(), tuple(tensor.shape),
                         stream=stream)


@caibridge.add_array_interface
class DLPackOnly:
    """A DLPack-only wrapper given __cuda_array_interface__."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        return self.tensor.__dlpack__(**kwargs)


def check_patched(tap, torch, device):
    """add_dlpack: torch takes the instance itself, ordered on its stream;
    add_array_interface: torch.as_tensor reads the CAI it was given."""
    with torch.cuda.device(device):
        producer_stream = torch.cuda.Stream()
        with torch.cuda.stream(producer_stream):
            data = torch.zeros(1 << 20, device=f"cuda:{device}")
            torch.cuda._sleep(100_000_000)
            data.fill_(3.0)
        source = PatchedCAI(data, producer_stream.cuda_stream)

        def straight_into_torch():
            t = torch.from_dlpack(source)
            total = t.sum().item()
            return (t.data_ptr() == data.data_ptr() and
                    t.device.index == device and
                    total == 3.0 * (1 << 20)), f"sum {total}, {t.device}"
        tap.check(f"cuda:{device}: add_dlpack class -> torch.from_dlpack: "
                  "zero-copy, ordered on the producer's stream",
                  straight_into_torch)

        def cai_into_torch():
            wrapped = DLPackOnly(data)
            seen = torch.as_tensor(wrapped, device=f"cuda:{device}")
            return (not hasattr(wrapped, "__array_interface__") and
                    seen.data_ptr() == data.data_ptr()), f"{seen.device}"
        tap.check(f"cuda:{device}: add_array_interface class -> "
                  "torch.as_tensor through the CAI: zero-copy",
                  cai_into_torch)


def why_no_gpu():
    """None when caibridge reaches a CUDA device, else the reason."""
    if os.environ.get("CAIBRIDGE_CUDART"):
        return (f"CAIBRIDGE_CUDART={os.environ['CAIBRIDGE_CUDART']} is set; "
                "unset it to test the real runtime")
    try:
        caibridge.as_dlpack(ZeroSizeProbe())
    except caibridge.CUDAError as e:
        return str(e)
    return None


def cai_ptr(obj):
    return obj.__cuda_array_interface__["data"][0]


# ---- the driver, for contexts ----

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
    """Writes value into a float32 buffer after about `cycles` GPU clock
    cycles, on a given CuPy stream: the window a missing order falls in."""

    CYCLES = 50_000_000  # tens of milliseconds on current GPUs

    def __init__(self, cupy):
        self.cupy = cupy
        self.kernel = cupy.RawKernel(SPIN_SOURCE, "spin_fill")
        try:
            self.kernel.compile()
        except Exception as e:  # noqa: BLE001 - NVRTC missing, say so
            raise Skip(f"CuPy cannot compile a kernel here: {e}") from e

    def fill(self, ptr, n, value, stream, cycles=None):
        with stream:
            self.kernel((64,), (256,),
                        (self.cupy.uint64(ptr), self.cupy.int64(n),
                         self.cupy.int64(cycles or self.CYCLES),
                         self.cupy.float32(value)))


# ---- cases ----

def check_producers_to_consumers(tap, libs, device):
    """CAI producers through caibridge.as_dlpack into DLPack consumers."""
    values = np.arange(12, dtype=np.float32).reshape(3, 4) * 1.5
    makers = []
    if libs.numba_cuda is not None:
        def numba_array():
            with libs.numba_cuda.gpus[device]:
                stream = libs.numba_cuda.stream()
                arr = libs.numba_cuda.to_device(values, stream=stream)
                stream.synchronize()
                return arr
        makers.append(("numba", numba_array))
    if libs.cupy is not None:
        def cupy_array():
            with libs.cupy.cuda.Device(device):
                stream = libs.cupy.cuda.Stream(non_blocking=True)
                with stream:  # exported while its stream is current
                    return libs.cupy.asarray(values)
        makers.append(("cupy", cupy_array))
    if libs.torch is not None:
        makers.append(("torch", lambda: libs.torch.tensor(
            values, device=f"cuda:{device}")))
    for name, make in makers:
        where = f"{name} on cuda:{device}"
        source = make()

        def located():
            view = caibridge.as_dlpack(source)
            return view.__dlpack_device__() == (KDLCUDA, device), \
                f"__dlpack_device__() = {view.__dlpack_device__()}"
        tap.check(f"{where}: located on its own device", located)

        def to_torch():
            libs.need("torch")
            t = libs.torch.from_dlpack(caibridge.as_dlpack(source))
            return (t.device.index == device and
                    t.data_ptr() == cai_ptr(source) and
                    np.array_equal(t.cpu().numpy(), values)), \
                f"{t.device} {t.data_ptr():#x}"
        tap.check(f"{where} -> torch.from_dlpack: same memory, device, "
                  "values", to_torch)

        def to_cupy():
            libs.need("cupy")
            with libs.cupy.cuda.Device(device):
                c = libs.cupy.from_dlpack(caibridge.as_dlpack(source))
            return (c.data.ptr == cai_ptr(source) and
                    np.array_equal(libs.cupy.asnumpy(c), values)), \
                f"{c.data.ptr:#x}"
        tap.check(f"{where} -> cupy.from_dlpack: same memory, values",
                  to_cupy)

        def to_jax():
            libs.need("jax")
            j = libs.jax.dlpack.from_dlpack(caibridge.as_dlpack(
                source, allow_readonly_legacy=True))
            dev = list(j.devices())[0]
            return (dev.id == device and
                    np.array_equal(np.asarray(j), values)), f"{dev}"
        tap.check(f"{where} -> jax.dlpack.from_dlpack: device, values",
                  to_jax)

        def to_cuda_core():
            libs.need("cuda.core")
            view = libs.smv(caibridge.as_dlpack(source), stream_ptr=-1)
            return (view.ptr == cai_ptr(source) and
                    tuple(view.shape) == values.shape and
                    view.device_id == device and
                    view.is_device_accessible), \
                f"ptr {view.ptr:#x} shape {view.shape} dev {view.device_id}"
        tap.check(f"{where} -> cuda.core StridedMemoryView: pointer, "
                  "shape, device", to_cuda_core)


def check_dlpack_producers_to_cai(tap, libs, device):
    """DLPack producers through caibridge.from_dlpack into CAI consumers."""
    values = np.arange(6, dtype=np.float32) + 0.5

    def torch_to_consumers():
        libs.need("torch")
        t = libs.torch.tensor(values, device=f"cuda:{device}")
        s = libs.torch.cuda.Stream(device=device)
        view = caibridge.from_dlpack(t, stream=s.cuda_stream)
        cai = view.__cuda_array_interface__
        seen = []
        if libs.cupy is not None:
            with libs.cupy.cuda.Device(device):
                seen.append(("cupy", libs.cupy.asnumpy(
                    libs.cupy.asarray(view)), libs.cupy.asarray(view)
                    .data.ptr))
        if libs.numba_cuda is not None:
            with libs.numba_cuda.gpus[device]:
                arr = libs.numba_cuda.as_cuda_array(view)
                seen.append(("numba", arr.copy_to_host(),
                             arr.__cuda_array_interface__["data"][0]))
        again = libs.torch.from_dlpack(caibridge.as_dlpack(view))
        seen.append(("torch", again.cpu().numpy(), again.data_ptr()))
        bad = [n for n, v, p in seen
               if not np.array_equal(v, values) or p != t.data_ptr()]
        return (not bad and cai["data"][0] == t.data_ptr() and
                cai["stream"] == s.cuda_stream), f"bad: {bad}, CAI {cai}"
    tap.check(f"cuda:{device}: torch -> caibridge.from_dlpack -> CuPy, "
              "Numba, torch: zero-copy, values, stream reported",
              torch_to_consumers)

    def jax_to_cupy():
        libs.need("jax", "cupy")
        j = libs.jax.device_put(values, libs.jax.devices("gpu")[device])
        view = caibridge.from_dlpack(j)
        with libs.cupy.cuda.Device(device):
            c = libs.cupy.asarray(view)
            return np.array_equal(libs.cupy.asnumpy(c), values), \
                f"{libs.cupy.asnumpy(c)}"
    tap.check(f"cuda:{device}: JAX -> caibridge.from_dlpack -> CuPy: "
              "values", jax_to_cupy)

    def cupy_to_torch_via_dlpack():
        libs.need("cupy", "torch")
        with libs.cupy.cuda.Device(device):
            c = libs.cupy.asarray(values)
        view = caibridge.from_dlpack(c)
        t = libs.torch.as_tensor(view, device=f"cuda:{device}")
        return (t.data_ptr() == c.data.ptr and
                np.array_equal(t.cpu().numpy(), values)), f"{t}"
    tap.check(f"cuda:{device}: CuPy -> caibridge.from_dlpack -> "
              "torch.as_tensor (CAI): zero-copy", cupy_to_torch_via_dlpack)


def race(libs, spinner, sync, repeats):
    """How many of repeats a consumer on another stream saw the final
    values, the producer's long kernel having been queued on stream A."""
    cupy, torch = libs.cupy, libs.torch
    n = 1 << 20
    right = 0
    for _ in range(repeats):
        a = cupy.cuda.Stream(non_blocking=True)
        with a:
            x = cupy.zeros(n, dtype=cupy.float32)
            spinner.fill(x.data.ptr, n, 7.0, a)
            # CuPy reports the current stream (A) in its CAI dict.
            view = caibridge.as_dlpack(x, sync=sync)
        consumer = torch.cuda.Stream()
        with torch.cuda.stream(consumer):
            t = torch.from_dlpack(view)
            total = t.sum()
        consumer.synchronize()
        right += int(total.item() == 7.0 * n)
        a.synchronize()
    return right


def check_race(tap, libs):
    try:
        libs.need("cupy", "torch")
        spinner = Spinner(libs.cupy)
    except Skip as e:
        tap.skip("race: long kernel on stream A, consumer on another stream",
                 str(e))
        tap.skip("race with sync=False", str(e))
        return
    cai = None
    with libs.cupy.cuda.Stream(non_blocking=True) as s:
        cai = libs.cupy.zeros(4).__cuda_array_interface__
        expected = s.ptr
    if cai.get("stream") != expected:
        diag(f"CuPy's CAI dict does not carry the current stream "
             f"({cai.get('stream')} != {expected:#x}); set "
             "CUPY_CUDA_ARRAY_INTERFACE_SYNC=1")

    def ordered():
        right = race(libs, spinner, True, REPEATS)
        return right == REPEATS, f"{right} of {REPEATS} right"
    tap.check(f"race: a long kernel on stream A, CAI stream: A, torch "
              f"reads on another stream at once: right in {REPEATS} of "
              f"{REPEATS}", ordered)

    def unordered():
        right = race(libs, spinner, False, 20)
        if right == 20:
            raise Skip("the race window was not hit in 20 repeats")
        diag(f"sync=False: the consumer saw unfinished data in {20 - right} "
             "of 20 repeats: the race is real")
        return True, None
    tap.check("race with sync=False: the consumer can see unfinished data",
              unordered)


def check_memory_kinds(tap, libs, devices):
    cupy = libs.cupy
    values = np.arange(8, dtype=np.float32)

    def pinned():
        libs.need("cupy")
        mem = cupy.cuda.alloc_pinned_memory(values.nbytes)
        host = np.frombuffer(mem, np.float32, values.size)
        host[:] = values
        view = caibridge.as_dlpack(CAI(mem, mem.ptr, values.shape))
        seen = np.from_dlpack(view)
        return (view.__dlpack_device__() == (KDLCUDAHOST, 0) and
                np.array_equal(seen, values)), \
            f"{view.__dlpack_device__()} {seen}"
    tap.check("pinned memory: kDLCUDAHost 0, read by NumPy", pinned)

    def managed():
        libs.need("cupy")
        mem = cupy.cuda.malloc_managed(values.nbytes)
        arr = cupy.ndarray(values.shape, cupy.float32, mem)
        arr[:] = cupy.asarray(values)
        cupy.cuda.Device().synchronize()
        view = caibridge.as_dlpack(arr)
        return view.__dlpack_device__() == (KDLCUDAMANAGED, 0), \
            f"{view.__dlpack_device__()}"
    tap.check("managed memory: kDLCUDAManaged 0", managed)

    def second_device():
        if devices < 2:
            raise Skip("one CUDA device")
        libs.need("cupy")
        with cupy.cuda.Device(1):
            arr = cupy.arange(4, dtype=cupy.float32)
        cupy.cuda.Device(0).use()
        view = caibridge.as_dlpack(arr)
        return view.__dlpack_device__() == (KDLCUDA, 1), \
            f"{view.__dlpack_device__()}"
    tap.check("data on cuda:1 with cuda:0 current: device id 1",
              second_device)

    def producer_stream_on_other_device():
        if devices < 2:
            raise Skip("one CUDA device")
        libs.need("torch")
        torch = libs.torch
        torch.cuda.set_device(0)
        data = torch.arange(4.0, device="cuda:1")
        other = torch.cuda.Stream(device=0)  # the current device's stream
        with torch.cuda.stream(other):
            torch.cuda._sleep(10_000_000)
        t = torch.from_dlpack(caibridge.as_dlpack(
            streamed(data, other.cuda_stream)))
        return (t.device.index == 1 and t.tolist() == [0, 1, 2, 3] and
                torch.cuda.current_device() == 0), f"{t.device}"
    tap.check("data on cuda:1, producer stream on cuda:0: ordered (the "
              "event is the stream's device's), cuda:0 still current",
              producer_stream_on_other_device)

    def readonly():
        libs.need("torch")
        t = libs.torch.arange(4.0, device="cuda:0")
        view = caibridge.as_dlpack(CAI(t, t.data_ptr(), (4,),
                                       readonly=True))
        back = caibridge.from_dlpack(view).__cuda_array_interface__
        return back["data"] == (t.data_ptr(), True), f"{back['data']}"
    tap.check("read-only CAI data stays read-only through DLPack and back",
              readonly)

    def zero_size():
        libs.need("torch")
        torch = libs.torch
        empty = torch.empty(0, device="cuda:0")
        view = caibridge.as_dlpack(CAI(empty, 0, (0,)))
        t = torch.from_dlpack(view)
        return (view.__dlpack_device__()[0] == KDLCUDA and
                tuple(t.shape) == (0,)), f"{view.__dlpack_device__()}"
    tap.check("zero-size array: a CUDA device, an empty tensor", zero_size)


def check_host_reads_after_kernel(tap, libs):
    """Pinned and managed memory read by NumPy right after a producer
    kernel: the host must wait for the kernel (an event synchronization)."""
    def case(kind):
        libs.need("cupy")
        cupy = libs.cupy
        spinner = Spinner(cupy)
        n = 1 << 16
        wrong = 0
        for _ in range(10):
            if kind == "pinned":
                mem = cupy.cuda.alloc_pinned_memory(n * 4)
                np.frombuffer(mem, np.float32, n)[:] = 0
                ptr = mem.ptr
            else:
                mem = cupy.cuda.malloc_managed(n * 4)
                cupy.ndarray((n,), cupy.float32, mem)[:] = 0
                cupy.cuda.Device().synchronize()
                ptr = mem.ptr
            a = cupy.cuda.Stream(non_blocking=True)
            spinner.fill(ptr, n, 3.0, a)
            seen = np.from_dlpack(caibridge.as_dlpack(
                CAI(mem, ptr, (n,), stream=a.ptr)))
            wrong += int(not (seen == 3.0).all())
            a.synchronize()
        return wrong == 0, f"{wrong} of 10 reads saw unfinished data"
    tap.check("pinned memory read by NumPy right after a kernel: final "
              "values", lambda: case("pinned"))
    tap.check("managed memory read by NumPy right after a kernel: final "
              "values", lambda: case("managed"))

    def cpu_device_request():
        libs.need("cupy")
        mem = libs.cupy.cuda.alloc_pinned_memory(16)
        view = caibridge.as_dlpack(CAI(mem, mem.ptr, (4,), stream=1))
        cap = view.__dlpack__(dl_device=(KDLCPU, 0))
        return type(cap).__name__ == "PyCapsule", type(cap).__name__
    tap.check("pinned memory with dl_device=(kDLCPU, 0): exported (the "
              "memory is host-accessible)", cpu_device_request)


class ExchangeAPI(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("prev_api", ctypes.c_void_p),
                ("managed_tensor_allocator", ctypes.c_void_p),
                ("managed_tensor_from_py_object_no_sync",
                 ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object,
                                  ctypes.POINTER(ctypes.c_void_p))),
                ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
                ("dltensor_from_py_object_no_sync", ctypes.c_void_p),
                ("current_work_stream",
                 ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int32,
                                  ctypes.POINTER(ctypes.c_void_p)))]


def exchange_table(obj):
    capsule = type(obj).__dlpack_c_exchange_api__
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return ctypes.cast(get(capsule, b"dlpack_exchange_api"),
                       ctypes.POINTER(ExchangeAPI)).contents


def check_exchange_api(tap, libs):
    """A tensor handed out through the table is safe on the stream that
    current_work_stream reports (the contract of the README)."""
    def case():
        libs.need("cupy", "torch")
        cupy, torch = libs.cupy, libs.torch
        spinner = Spinner(cupy)
        n = 1 << 20
        api = exchange_table(caibridge.as_dlpack(cupy.zeros(1)))
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        right = 0
        for _ in range(20):
            a = cupy.cuda.Stream(non_blocking=True)
            with a:
                x = cupy.zeros(n, dtype=cupy.float32)
                spinner.fill(x.data.ptr, n, 5.0, a)
                view = caibridge.as_dlpack(x)
            out = ctypes.c_void_p()
            rc = api.managed_tensor_from_py_object_no_sync(
                view, ctypes.byref(out))
            if rc != 0:
                return False, f"managed_tensor_from_py_object_no_sync: {rc}"
            stream = ctypes.c_void_p()
            rc = api.current_work_stream(KDLCUDA, 0, ctypes.byref(stream))
            if rc != 0:
                return False, f"current_work_stream: {rc}"
            capsule = new(out.value, b"dltensor_versioned", None)
            reported = (torch.cuda.ExternalStream(stream.value)
                        if stream.value else torch.cuda.default_stream())
            with torch.cuda.stream(reported):
                total = torch.from_dlpack(capsule).sum()
            reported.synchronize()
            right += int(total.item() == 5.0 * n)
            a.synchronize()
        return right == 20, f"{right} of 20 right on the reported stream"
    tap.check("exchange API: the tensor is ready on the stream "
              "current_work_stream reports (producer stream A busy)", case)


def check_threads_and_contexts(tap, libs):
    def per_thread_across_threads():
        libs.need("cupy", "torch")
        cupy, torch = libs.cupy, libs.torch
        spinner = Spinner(cupy)
        n = 1 << 20
        made = {}

        def producer():
            ptds = cupy.cuda.Stream.ptds
            x = cupy.zeros(n, dtype=cupy.float32)
            cupy.cuda.Device().synchronize()
            spinner.fill(x.data.ptr, n, 9.0, ptds)
            # Stream 2: this thread's per-thread default stream.
            made["view"] = caibridge.as_dlpack(CAI(x, x.data.ptr, (n,),
                                                   stream=2))
            made["x"] = x
        right = 0
        for _ in range(10):
            thread = threading.Thread(target=producer)
            thread.start()
            thread.join()
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                total = torch.from_dlpack(made["view"]).sum()
            s.synchronize()
            right += int(total.item() == 9.0 * n)
            cupy.cuda.Device().synchronize()
        return right == 10, f"{right} of 10 right"
    tap.check("per-thread stream 2 of a producer thread, consumed on "
              "another thread: ordered after the producer's work",
              per_thread_across_threads)

    def fresh_thread_no_context():
        libs.need("torch")
        driver = Driver()
        torch = libs.torch
        data = torch.arange(4.0, device="cuda:0")
        side, other = torch.cuda.Stream(), torch.cuda.Stream()
        source = streamed(data, side.cuda_stream)
        seen = {}

        def fresh():
            seen["before"] = driver.current()
            try:
                caibridge.as_dlpack(source).__dlpack__(
                    stream=other.cuda_stream)
                caibridge.as_dlpack(source).__dlpack__(stream=1)
            except Exception as e:  # noqa: BLE001
                seen["error"] = repr(e)
            seen["after"] = driver.current()
        thread = threading.Thread(target=fresh)
        thread.start()
        thread.join()
        return (seen.get("before") is None and seen.get("after") is None
                and "error" not in seen), f"{seen}"
    tap.check("a thread that never used CUDA has no context current after "
              "caibridge ordered on it", fresh_thread_no_context)

    def no_stray_primary_context():
        libs.need("cupy")
        if libs.device_count() < 2:
            raise Skip("needs two devices (data on cuda:1 only)")
        code = r"""
import ctypes, threading, cupy, caibridge
lib = ctypes.CDLL("libcuda.so.1"); lib.cuInit(0)
def active(d):
    f, a = ctypes.c_uint(), ctypes.c_int()
    lib.cuDevicePrimaryCtxGetState(d, ctypes.byref(f), ctypes.byref(a))
    return a.value
# cudaSetDevice, not cupy.cuda.Device: leaving that block would make
# device 0 current again, and so create its primary context.
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
                             capture_output=True, timeout=300)
        return out.stdout.split() == ["0", "1"], \
            f"primary contexts active (cuda:0, cuda:1): {out.stdout}" \
            f"{out.stderr}"
    tap.check("no primary context appears on cuda:0 for data on cuda:1 "
              "handled on a fresh thread", no_stray_primary_context)

    def non_primary_context_kept():
        libs.need("torch")
        torch = libs.torch
        driver = Driver()
        data = torch.arange(4.0, device="cuda:0")
        side = torch.cuda.Stream()
        source = streamed(data, side.cuda_stream)
        seen = {}

        def own_context():
            ctx = driver.create_context(0)
            try:
                driver.set_current(ctx)
                caibridge.as_dlpack(source).__dlpack__(stream=1)
                seen["kept"] = driver.current() == ctx
            except Exception as e:  # noqa: BLE001
                seen["error"] = repr(e)
            finally:
                driver.set_current(None)
                driver.destroy_context(ctx)
        thread = threading.Thread(target=own_context)
        thread.start()
        thread.join()
        return seen.get("kept") is True, f"{seen}"
    tap.check("a non-primary context (cuCtxCreate) stays current across a "
              "hand-over", non_primary_context_kept)


def check_graph_capture(tap, libs):
    def consumer_capturing():
        libs.need("torch")
        torch = libs.torch
        producer = torch.cuda.Stream()
        with torch.cuda.stream(producer):
            data = torch.zeros(1 << 16, device="cuda:0")
            torch.cuda._sleep(10_000_000)
            data.fill_(4.0)
        source = streamed(data, producer.cuda_stream)
        graph = torch.cuda.CUDAGraph()
        capture = torch.cuda.Stream()
        with torch.cuda.graph(graph, stream=capture):
            t = torch.from_dlpack(caibridge.as_dlpack(source))
            out = t * 2
        graph.replay()
        torch.cuda.synchronize()
        return bool((out == 8.0).all()), f"{out[:4]}"
    tap.check("torch graph capture consuming a producer stream outside it: "
              "the capture stays valid, values right", consumer_capturing)

    def producer_capturing():
        libs.need("torch")
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
    tap.check("a producer stream capturing a graph, consumer outside: "
              "refused with a message, the capture ends cleanly",
              producer_capturing)


def check_default_stream(tap, libs):
    def case():
        libs.need("torch")
        torch = libs.torch
        t = torch.arange(4.0, device="cuda:0")
        view = caibridge.from_dlpack(t, stream=torch.cuda.default_stream())
        cai = view.__cuda_array_interface__
        return cai["stream"] == 1, f"{cai}"
    tap.check("torch.cuda.default_stream() as stream= (its handle 0 is the "
              "legacy stream)", case)


def main():
    reason = why_no_gpu()
    if reason is not None:
        print(f"1..0 # SKIP no CUDA device: {reason}")
        return 0
    libs = Libs()
    tap = Tap()
    for why in libs.reasons.values():
        if why:
            diag(f"not usable: {why}")
    devices = min(libs.device_count(), 2)
    if devices < 2:
        diag("one CUDA device: the second-device cases are skipped")
    for device in range(devices):
        check_producers_to_consumers(tap, libs, device)
        check_dlpack_producers_to_cai(tap, libs, device)
        if libs.torch is not None:
            check_patched(tap, libs.torch, device)
    check_race(tap, libs)
    check_memory_kinds(tap, libs, devices)
    check_host_reads_after_kernel(tap, libs)
    check_exchange_api(tap, libs)
    check_threads_and_contexts(tap, libs)
    check_graph_capture(tap, libs)
    check_default_stream(tap, libs)
    return tap.finish()


if __name__ == "__main__":
    sys.exit(main())
