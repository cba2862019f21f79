#!/usr/bin/env python3
"""caibridge on a real GPU, in TAP.

Feeds CUDA Array Interface producers (Numba device arrays, CuPy arrays,
PyTorch CUDA tensors, whichever are importable) through caibridge into
torch.from_dlpack and jax.dlpack.from_dlpack, and back through
caibridge.from_dlpack, on every device up to two.  Checks values, device
ids, zero-copy, and that a consumer on another stream sees the producer's
queued work.  Without a usable GPU it prints one skip line with the reason
and exits 0.  Run by `make check-gpu`.
"""

import importlib
import os
import sys
import traceback

import numpy as np

import caibridge

KDLCUDA = 2


class Tap:
    def __init__(self):
        self.count = 0
        self.failed = 0

    def ok(self, passed, description, detail=None):
        self.count += 1
        if not passed:
            self.failed += 1
        print(f"{'ok' if passed else 'not ok'} {self.count} - {description}")
        if not passed and detail:
            for line in str(detail).splitlines():
                print(f"#   {line}")
        sys.stdout.flush()

    def skip(self, description, reason):
        self.count += 1
        print(f"ok {self.count} - {description} # SKIP {reason}")

    def check(self, description, body):
        """Runs body(); it returns (passed, detail).  An exception fails."""
        try:
            passed, detail = body()
        except Exception:  # noqa: BLE001 - every failure is reported
            passed, detail = False, traceback.format_exc()
        self.ok(passed, description, detail)

    def finish(self):
        print(f"1..{self.count}")
        return 1 if self.failed else 0


class ZeroSizeProbe:
    """A zero-size CAI array: locating it asks CUDA for the current device."""

    __cuda_array_interface__ = {"data": (0, False), "shape": (0,),
                                "typestr": "<f4", "version": 3}


class StreamedArray:
    """Any CAI producer's data re-announced as CAI v3 with work pending on
    stream (a cudaStream_t as an int)."""

    def __init__(self, base, stream):
        self.base = base
        iface = dict(base.__cuda_array_interface__)
        iface["version"] = 3
        iface["stream"] = stream
        self.__cuda_array_interface__ = iface


@caibridge.add_dlpack
class PatchedCAI(StreamedArray):
    """A CuPy-free CAI v3 class made a DLPack producer by add_dlpack."""


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


def import_optional(name):
    try:
        return importlib.import_module(name), None
    except Exception as e:  # noqa: BLE001 - any import failure is a reason
        return None, f"{name}: {type(e).__name__}: {e}"


def producers(torch, cupy, numba_cuda):
    """(name, make(values, device) -> CAI object) for each usable library."""
    found = []
    if numba_cuda is not None:
        def numba_array(values, device):
            with numba_cuda.gpus[device]:
                stream = numba_cuda.stream()
                return numba_cuda.to_device(values, stream=stream)
        found.append(("numba", numba_array))
    if cupy is not None:
        def cupy_array(values, device):
            with cupy.cuda.Device(device), cupy.cuda.Stream(non_blocking=True):
                return cupy.asarray(values)
        found.append(("cupy", cupy_array))
    if torch is not None:
        def torch_tensor(values, device):
            return torch.tensor(values, device=f"cuda:{device}")
        found.append(("torch", torch_tensor))
    return found


def device_count(torch, cupy, numba_cuda):
    if torch is not None:
        return torch.cuda.device_count()
    if cupy is not None:
        return cupy.cuda.runtime.getDeviceCount()
    return len(numba_cuda.gpus)


def cai_pointer(obj):
    return obj.__cuda_array_interface__["data"][0]


def check_producer(tap, name, make, device, torch, jax):
    values = np.arange(12, dtype=np.float32).reshape(3, 4) * 1.5
    source = make(values, device)
    where = f"{name} on cuda:{device}"

    view = caibridge.as_dlpack(source)
    tap.ok(view.__dlpack_device__() == (KDLCUDA, device),
           f"{where}: located on its own device",
           f"__dlpack_device__() = {view.__dlpack_device__()}")

    if torch is not None:
        def to_torch():
            t = torch.from_dlpack(view)
            detail = f"device {t.device}, data_ptr {t.data_ptr():#x}"
            return (t.device.index == device and
                    t.data_ptr() == cai_pointer(source) and
                    np.array_equal(t.cpu().numpy(), values)), detail
        tap.check(f"{where} -> torch.from_dlpack: same memory, device, "
                  "values", to_torch)

    if jax is not None:
        def to_jax():
            j = jax.dlpack.from_dlpack(caibridge.as_dlpack(source))
            dev = list(j.devices())[0]
            return (dev.id == device and
                    np.array_equal(np.asarray(j), values)), f"device {dev}"
        tap.check(f"{where} -> jax.dlpack.from_dlpack: device and values",
                  to_jax)
    else:
        tap.skip(f"{where} -> jax", "jax has no GPU backend here")

    if torch is not None:
        def round_trip():
            t = torch.from_dlpack(caibridge.as_dlpack(source))
            s = torch.cuda.Stream(device=device)
            back = caibridge.from_dlpack(t, stream=s.cuda_stream)
            cai = back.__cuda_array_interface__
            again = torch.from_dlpack(caibridge.as_dlpack(back))
            detail = f"CAI {cai}"
            return (cai["data"][0] == t.data_ptr() and
                    cai["stream"] == s.cuda_stream and
                    again.device.index == device and
                    np.array_equal(again.cpu().numpy(), values)), detail
        tap.check(f"{where} -> torch -> caibridge.from_dlpack -> torch: "
                  "zero-copy, stream reported, values", round_trip)


def check_ordering(tap, torch, device):
    """A producer queues a slow kernel and then the final write on stream P;
    the consumer reads on stream S.  Without the event ordering, S would
    read the earlier zeros.  Correctness is asserted, never timing."""
    n = 1 << 20
    with torch.cuda.device(device):
        producer_stream = torch.cuda.Stream()
        consumer_stream = torch.cuda.Stream()
        with torch.cuda.stream(producer_stream):
            data = torch.zeros(n, device=f"cuda:{device}")
            torch.cuda._sleep(200_000_000)  # pending work on P
            data.fill_(7.0)
        source = StreamedArray(data, producer_stream.cuda_stream)

        def consumer_waits():
            with torch.cuda.stream(consumer_stream):
                seen = torch.from_dlpack(caibridge.as_dlpack(source))
                total = seen.sum()
            pending = not producer_stream.query()
            torch.cuda.synchronize(device)
            print(f"# producer work still pending when the hand-over "
                  f"returned: {pending} (the host was not blocked)")
            return total.item() == 7.0 * n, f"sum {total.item()}"
        tap.check(f"cuda:{device}: consumer stream sees the producer "
                  "stream's queued work (event ordering)", consumer_waits)


def main():
    reason = why_no_gpu()
    if reason is not None:
        print(f"1..0 # SKIP no CUDA device: {reason}")
        return 0

    reasons = []
    torch, why = import_optional("torch")
    if torch is not None and not torch.cuda.is_available():
        why, torch = f"torch {torch.__version__}: no CUDA", None
    if why:
        reasons.append(why)
    cupy, why = import_optional("cupy")
    if why:
        reasons.append(why)
    numba_cuda, why = import_optional("numba.cuda")
    if numba_cuda is not None and not numba_cuda.is_available():
        why, numba_cuda = "numba.cuda: no CUDA", None
    if why:
        reasons.append(why)
    found = producers(torch, cupy, numba_cuda)
    if not found:
        print("1..0 # SKIP no CUDA device: no CUDA producer library is "
              "usable (" + "; ".join(reasons) + ")")
        return 0

    jax, why = import_optional("jax")
    if jax is not None:
        importlib.import_module("jax.dlpack")
        try:
            jax.devices("gpu")
        except RuntimeError as e:
            print(f"# jax has no GPU backend: {e}")
            jax = None
    elif why:
        print(f"# {why}")

    tap = Tap()
    for r in reasons:
        print(f"# not used: {r}")
    devices = min(device_count(torch, cupy, numba_cuda), 2)
    if devices < 2:
        print("# one CUDA device: the second-device cases are not run")
    for device in range(devices):
        for name, make in found:
            check_producer(tap, name, make, device, torch, jax)
        if torch is not None:
            check_ordering(tap, torch, device)
            check_patched(tap, torch, device)
    if devices == 2 and torch is not None:
        def other_device_while_current_is_0():
            torch.cuda.set_device(0)
            producer_stream = torch.cuda.Stream(device=1)
            with torch.cuda.stream(producer_stream):
                data = torch.arange(4.0, device="cuda:1")
            view = caibridge.as_dlpack(StreamedArray(
                data, producer_stream.cuda_stream))
            t = torch.from_dlpack(view)  # ordered on cuda:1's stream
            return (view.__dlpack_device__() == (KDLCUDA, 1) and
                    t.device.index == 1 and t.tolist() == [0, 1, 2, 3] and
                    torch.cuda.current_device() == 0), f"{t.device}"
        tap.check("data on cuda:1 with cuda:0 current: found on 1, current "
                  "device left at 0", other_device_while_current_is_0)
    return tap.finish()


if __name__ == "__main__":
    sys.exit(main())
