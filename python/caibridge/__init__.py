"""caibridge: zero-copy hand-over between the CUDA Array Interface and DLPack.

    >>> import numpy as np, caibridge
    >>> producer = np.arange(3.0)  # anything with __(cuda_)array_interface__
    >>> np.from_dlpack(caibridge.as_dlpack(producer))  # CAI -> DLPack
    array([0., 1., 2.])
    >>> view = caibridge.from_dlpack(producer)  # DLPack -> CAI / array interface
    >>> view.__array_interface__["shape"]
    (3,)

Or make a class a producer of the other protocol once, in two lines:

    >>> class Frame:
    ...     pixels = np.zeros(4)
    ...     @property
    ...     def __array_interface__(self):
    ...         return self.pixels.__array_interface__
    >>> Frame = caibridge.add_dlpack(Frame)  # now np.from_dlpack(Frame())
    >>> np.from_dlpack(Frame()).shape
    (4,)

(``caibridge.add_array_interface(cls)`` is the reverse.)  ``as_dlpack``,
``to_dlpack``, ``from_dlpack`` and the methods those two functions give are
C functions of ``caibridge._core``: no Python code runs on the hand-over
path.  The documentation: ``make docs``, or docs/ in the source tree.
"""

import enum
import os as _os
import sys as _sys

from . import _core

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
    as_dlpack_all,
    _runtime_info,
    cuda_built,
    from_dlpack,
    to_dlpack,
)


class DLPackProducer:
    """A base for classes given to :func:`add_dlpack`, for type checkers.

    ``add_dlpack`` adds ``__dlpack__`` and ``__dlpack_device__`` at run time,
    which a type checker cannot see; a class that also derives from this one
    shows them, so ``np.from_dlpack(MyArray(...))`` passes ``mypy --strict``::

        @caibridge.add_dlpack
        class MyArray(caibridge.DLPackProducer):
            ...

    Its own methods only raise TypeError: they are what a subclass that was
    never given to ``add_dlpack`` answers.
    """

    __slots__ = ()

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None,
                   copy=None):
        raise self._not_added()

    def __dlpack_device__(self):
        raise self._not_added()

    def _not_added(self):
        return TypeError(
            "%s derives from caibridge.DLPackProducer but was not given to "
            "caibridge.add_dlpack" % type(self).__qualname__)


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


def _site_dirs():
    """The folders pip installs into for this interpreter, in the order
    Python imports from them: the user site (when Python uses it), then
    site.getsitepackages()."""
    import site

    dirs = []
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    dirs.extend(site.getsitepackages())
    return dirs


def _runtime_dirs():
    """The folders of NVIDIA's pip wheels that may hold libcudart: in each
    site-packages folder, nvidia/cu13/lib (CUDA 13 on), then
    nvidia/cuda_runtime/lib (before).  Returned as (searched, others):
    others are the same folders under the rest of sys.path (the working
    directory, a script's folder, PYTHONPATH), where anyone may have put a
    library; the C core never loads from them and reports a runtime there
    as refused.  The core asks for these before each search."""
    def wheels(entries):
        found = []
        for entry in entries:
            if not isinstance(entry, str):
                continue
            for sub in ("cu13", "cuda_runtime"):
                lib = _os.path.join(entry, "nvidia", sub, "lib")
                if lib not in found and _os.path.isdir(lib):
                    found.append(lib)
        return found

    sites = _site_dirs()
    searched = wheels(sites)
    real = {_os.path.realpath(d) for d in searched}
    others = [_os.path.abspath(d) for d in wheels(
        e for e in _sys.path if e not in sites)
        if _os.path.realpath(d) not in real]
    return searched, others


def cuda_runtime_info():
    """The CUDA runtime caibridge uses, loading it first if need be, as a
    dict: ``path`` (its file), ``how`` (how it was found:
    ``"CAIBRIDGE_CUDART"``, ``"already loaded"``, ``"pip wheel"``,
    ``"conda"`` or ``"system"``), ``version`` (13000 for 13.0) and
    ``refused``: the candidates the search passed over, each as
    ``"path: reason"`` (a runtime outside the site-packages folders, or in
    a file or folder others may write), empty when none; more keys may
    follow.  A later call searches again after a failure.

    :returns: ``{"path": str, "how": str, "version": int, "refused": list,
        ...}``
    :raises CUDAError: saying why, when no usable runtime is found; its
        ``refused`` attribute lists every candidate passed over, as above
        (the message, of limited length, may name only the first).
    """
    return _runtime_info()


def show_config(file=None):
    """Prints what caibridge was built with and what it finds here: the
    version, the build, the CUDA runtime and driver, each device, and a
    self-test.  ``python -m caibridge`` prints the same (``--json`` for a
    bug report).

    :param file: where to print (a text stream); None is ``sys.stdout``.
    :returns: the exit status of ``python -m caibridge``: 0 when every step
        ran (no GPU is not a failure), 1 when a step failed (its line says
        ``FAILED``).
    :raises: nothing: every failure is a line of the report.
    """
    from ._config import show_config as show

    return show(file)


def stats():
    """What caibridge did for ordering in this process, counted since it
    loaded (process-wide, every interpreter): a dict of ints.

    ``views`` DLPack tensors made (copies too); ``records`` events recorded (a fence on
    a producer's stream, a release's on a consumer's); ``waits``
    ``cudaStreamWaitEvent`` queued; ``waits_skipped`` waits not needed,
    the consumer's stream proven the one already ordered; ``host_waits``
    the host waited for an event, stream or device; ``releases_now``
    producers released at once; ``releases_deferred`` kept until the
    consumer's work ran, of which ``releases_pending`` are kept now and
    ``let_go_waiter`` / ``let_go_call`` were let go by caibridge's waiter
    thread or at a call; ``device_copies``, ``host_copies`` and their
    ``*_bytes``; ``cuda_errors`` CUDA calls that failed.

    :returns: the counters by name, each an int.
    :raises: nothing.
    """
    return _core._stats()


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
    "DLPackProducer",
    "DLPackView",
    "DeviceType",
    "__version__",
    "add_array_interface",
    "add_dlpack",
    "as_dlpack",
    "as_dlpack_all",
    "cuda_built",
    "cuda_runtime_info",
    "from_dlpack",
    "kDLCPU",
    "kDLCUDA",
    "kDLCUDAHost",
    "kDLCUDAManaged",
    "show_config",
    "stats",
    "to_dlpack",
]
