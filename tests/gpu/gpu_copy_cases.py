"""tests/gpu cases for __dlpack__(copy=True) of CUDA memory (issue 35):
each path's copy, on the consumer's stream after the producer's long
kernel, holds the final values in fresh, C-contiguous memory; strided,
reversed and broadcast layouts come out right; a host consumer gets a host
copy; copy=False with a device change is refused.  Registered in
gpu_cases.CASES when gpu_cases is imported."""
import ctypes

import numpy as np

import caibridge
from gpu_cases import (CAI, PatchedCAI, case, slow_fill, warm)

N = 1 << 16


def torch_of(torch, capsule):
    return torch.utils.dlpack.from_dlpack(capsule)


def producer(torch, value):
    """x filled with value by a long kernel on side stream a."""
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    warm(torch, a)
    x = torch.zeros(N, device="cuda:0")
    slow_fill(torch, x, value, a)
    return x, a, b


def copy_as_dlpack(x, a, b):
    return caibridge.as_dlpack(CAI(x, x.data_ptr(), (N,),
                                   stream=a.cuda_stream)).__dlpack__(
        stream=b.cuda_stream, copy=True, max_version=(1, 3))


def copy_to_dlpack(x, a, b):
    return caibridge.to_dlpack(CAI(x, x.data_ptr(), (N,),
                                   stream=a.cuda_stream),
                               stream=b.cuda_stream, copy=True,
                               max_version=(1, 3))


def copy_add_dlpack(x, a, b):
    return PatchedCAI(x, x.data_ptr(), (N,), stream=a.cuda_stream).__dlpack__(
        stream=b.cuda_stream, copy=True, max_version=(1, 3))


def copy_caiview(x, a, b):
    capsule = caibridge.to_dlpack(CAI(x, x.data_ptr(), (N,)),
                                  max_version=(1, 3))
    view = caibridge.from_dlpack(capsule, stream=a.cuda_stream)
    return view.__dlpack__(stream=b.cuda_stream, copy=True,
                           max_version=(1, 3))


def copy_case(path):
    def fn(libs, device):
        torch = libs.torch
        x, a, b = producer(torch, 3.0)
        t = torch_of(torch, path(x, a, b))
        with torch.cuda.stream(b):
            total = t.sum().item()
        fresh = t.data_ptr() != x.data_ptr()
        return (fresh and t.is_contiguous() and total == 3.0 * N,
                f"sum {total}, fresh {fresh}")
    fn.__name__ = path.__name__
    return case(f"cuda:0: {path.__name__[5:]} copy=True: a fresh copy on "
                "the consumer's stream, after the producer's kernel")(fn)


for _path in (copy_as_dlpack, copy_to_dlpack, copy_add_dlpack, copy_caiview):
    copy_case(_path)


@case("cuda:0: copy=True of strided, reversed and broadcast layouts: "
      "C-contiguous copies with the right values")
def copy_layouts(libs, device):
    torch = libs.torch
    base = torch.arange(64, dtype=torch.uint8, device="cuda:0")
    host = base.cpu().numpy()
    layouts = [((4, 4), (8, 1), 0, host.reshape(8, 8)[:4, :4]),
               ((8, 8), (-8, 1), 56, host.reshape(8, 8)[::-1]),
               ((8, 8), (1, -8), 56, host.reshape(8, 8)[::-1].T),
               ((3, 8), (0, 1), 0, np.broadcast_to(host[:8], (3, 8)))]
    torch.cuda.synchronize()
    for shape, strides, start, want in layouts:
        producer = CAI(base, base.data_ptr() + start, shape, typestr="|u1")
        producer.__cuda_array_interface__["strides"] = strides
        t = torch_of(torch, caibridge.as_dlpack(producer).__dlpack__(
            stream=1, copy=True, max_version=(1, 3)))
        got = t.cpu().numpy()
        if not np.array_equal(got, want):
            return False, f"strides {strides}: {got} != {want}"
    return True, f"{len(layouts)} layouts"


class Host:
    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, **kwargs):
        return self.capsule


@case("cuda:0: dl_device=(kDLCPU, 0): a host copy after the producer's "
      "kernel; copy=False refused naming both devices")
def copy_to_host(libs, device):
    torch = libs.torch
    x, a, b = producer(torch, 5.0)
    got = np.from_dlpack(Host(caibridge.to_dlpack(
        CAI(x, x.data_ptr(), (N,), stream=a.cuda_stream), dl_device=(1, 0),
        copy=True, max_version=(1, 3))))
    try:
        caibridge.to_dlpack(CAI(x, x.data_ptr(), (N,)), dl_device=(1, 0),
                            copy=False)
        refused = False
    except BufferError as e:
        refused = "kDLCPU" in str(e) and "kDLCUDA" in str(e)
    return (refused and float(got.sum()) == 5.0 * N and
            ctypes.c_void_p(got.ctypes.data).value != x.data_ptr(),
            f"sum {got.sum()}, refused {refused}")
