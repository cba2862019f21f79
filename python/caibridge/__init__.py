"""caibridge: zero-copy hand-over between the CUDA Array Interface and DLPack.

    >>> import torch, caibridge
    >>> t = torch.from_dlpack(caibridge.as_dlpack(producer))  # CAI -> DLPack
    >>> view = caibridge.from_dlpack(t)  # DLPack -> CAI / array interface

Or make a class a producer of the other protocol once, in two lines:

    >>> caibridge.add_dlpack(MyCAIArray)         # now torch.from_dlpack(x)
    >>> caibridge.add_array_interface(MyTensor)  # now np.asarray(x)

``as_dlpack``, ``to_dlpack``, ``from_dlpack`` and the methods those two
functions give are C functions of ``caibridge._core``: no Python code runs on
the hand-over path.
"""

import enum
import os as _os
import sys as _sys

from ._core import (
    DLPACK_VERSION,
    SYNC_ENABLED,
    CAIView,
    CUDAError,
    DLPackView,
    __version__,
    add_array_interface,
    add_dlpack,
    as_dlpack,
    _runtime_info,
    cuda_built,
    from_dlpack,
    to_dlpack,
)


class DeviceType(enum.IntEnum):
    """DLPack's device types (``DLDeviceType``), as ``__dlpack_device__``
    reports them: ``view.__dlpack_device__() == (DeviceType.kDLCUDA, 0)``.
    caibridge exports kDLCPU, kDLCUDA, kDLCUDAHost and kDLCUDAManaged."""

    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16
    kDLMAIA = 17
    kDLTrn = 18


def _runtime_dirs():
    """The folders of NVIDIA's pip wheels that may hold libcudart, in
    sys.path order: nvidia/cu13/lib (CUDA 13 on), nvidia/cuda_runtime/lib
    (before).  Only absolute sys.path entries: a relative one would depend
    on the working directory.  The C core asks for these before each search
    for the runtime."""
    dirs = []
    for entry in _sys.path:
        if not isinstance(entry, str) or not _os.path.isabs(entry):
            continue
        for sub in ("cu13", "cuda_runtime"):
            lib = _os.path.join(entry, "nvidia", sub, "lib")
            if lib not in dirs and _os.path.isdir(lib):
                dirs.append(lib)
    return dirs


def cuda_runtime_info():
    """The CUDA runtime caibridge uses, loading it first if need be, as a
    dict: ``path`` (its file), ``how`` (how it was found:
    ``"CAIBRIDGE_CUDART"``, ``"already loaded"``, ``"pip wheel"``,
    ``"conda"`` or ``"system"``) and ``version`` (13000 for 13.0).  Raises
    CUDAError saying why when there is none; a later call searches again."""
    return _runtime_info()


def show_config(file=None):
    """Prints what caibridge was built with and what it finds here: the
    version, the build, the CUDA runtime and driver, each device, and a
    self-test.  ``python -m caibridge`` prints the same."""
    from ._config import show_config as show

    return show(file)


# The four device types caibridge describes, as module constants too.
kDLCPU = DeviceType.kDLCPU
kDLCUDA = DeviceType.kDLCUDA
kDLCUDAHost = DeviceType.kDLCUDAHost
kDLCUDAManaged = DeviceType.kDLCUDAManaged

__all__ = [
    "DLPACK_VERSION",
    "SYNC_ENABLED",
    "CAIView",
    "CUDAError",
    "DLPackView",
    "DeviceType",
    "__version__",
    "add_array_interface",
    "add_dlpack",
    "as_dlpack",
    "cuda_built",
    "cuda_runtime_info",
    "from_dlpack",
    "kDLCPU",
    "kDLCUDA",
    "kDLCUDAHost",
    "kDLCUDAManaged",
    "show_config",
    "to_dlpack",
]
