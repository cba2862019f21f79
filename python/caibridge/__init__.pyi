import enum
from typing import (Any, Iterable, List, Protocol, Tuple, TypeVar, Union,
                    final, type_check_only)

from typing_extensions import CapsuleType

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

__version__: str
DLPACK_VERSION: Tuple[int, int]
SYNC_ENABLED: int

_Device = Tuple[int, int]

_T = TypeVar("_T", bound=type)

class _CUDAStream(Protocol):
    def __cuda_stream__(self) -> Tuple[int, int]: ...

_Stream = Union[None, int, _CUDAStream]

class DeviceType(enum.IntEnum):
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

kDLCPU: DeviceType
kDLCUDA: DeviceType
kDLCUDAHost: DeviceType
kDLCUDAManaged: DeviceType

class CUDAError(BufferError): ...

# The DLPack methods: of both views, and of classes given to add_dlpack.
@type_check_only
class _DLPackMethods:
    def __dlpack__(
        self,
        *,
        stream: _Stream = None,
        max_version: Tuple[int, int] | None = None,
        dl_device: _Device | None = None,
        copy: bool | None = None,
    ) -> CapsuleType:
        """
        :param stream: the consumer's stream: None (the legacy default
            stream for CUDA data; the only value for host data), -1 (no
            ordering), 1, 2, a ``cudaStream_t`` as an integer, or an object
            with ``__cuda_stream__()``.
        :param max_version: the highest DLPack version the consumer reads;
            1.x gives a versioned capsule, None or 0.x a legacy one.
        :param dl_device: where the consumer wants the data: None or the
            data's own device; ``(kDLCPU, 0)`` for pinned or managed memory
            (the host waits for the producer's stream), or for CUDA memory
            (a host copy, the host waiting for that copy only).
        :param copy: True copies (marked ``IS_COPIED``; CUDA memory on the
            consumer's stream, without a host wait); False never copies;
            None copies only for a device change.
        :returns: a capsule named ``"dltensor_versioned"`` or ``"dltensor"``
            that keeps the producer alive until its deleter runs.
        :raises BufferError: for a stream given with host data, a copy that
            cannot be made, read-only data asked for as a legacy capsule.
        :raises ValueError: for ``stream=0`` or a malformed argument.
        :raises caibridge.CUDAError: when a CUDA call fails.
        """
    def __dlpack_device__(self) -> _Device:
        """
        :returns: ``(device_type, device_id)`` of the data, such as
            ``(DeviceType.kDLCUDA, 0)``.
        """

# What both views have: DLPack producers publishing the C exchange API.
@type_check_only
class _Producer(_DLPackMethods):
    __dlpack_c_exchange_api__: CapsuleType

@final
class DLPackView(_Producer):
    """A DLPack producer for a CAI / array-interface object (see as_dlpack)."""

    @property
    def obj(self) -> Any: ...

@final
class CAIView(_Producer):
    """Owns a DLPack tensor; describes it as an array interface and
    re-exports it as a DLPack producer."""

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...
    @property
    def __array_interface__(self) -> dict[str, Any]: ...

class DLPackProducer(_DLPackMethods):
    """A base for classes given to add_dlpack, for type checkers: it shows
    the methods add_dlpack adds."""

def as_dlpack(
    obj: Any,
    *,
    device: _Device | None = None,
    sync: bool = True,
    allow_readonly_legacy: bool = False,
) -> DLPackView:
    """
    :param obj: an object with ``__cuda_array_interface__``,
        ``__array_interface__`` or the buffer protocol.
    :param device: ``(device_type, device_id)`` of the data, which skips
        the CUDA pointer lookup; None asks CUDA for CUDA data.
    :param sync: False turns stream ordering off for this view.
    :param allow_readonly_legacy: True lets read-only data go out as a
        legacy capsule, which cannot say it is read-only.
    :returns: a :class:`DLPackView`, a DLPack producer over obj's memory.
    :raises TypeError: when obj describes no array, or a field has the
        wrong type.
    :raises ValueError: for a malformed descriptor (the message names the
        field and the rule).
    :raises BufferError: for a well-formed array DLPack cannot hold.
    :raises caibridge.CUDAError: when CUDA is missing or fails.
    """
def as_dlpack_all(
    objs: Iterable[Any],
    *,
    device: _Device | None = None,
    sync: bool = True,
    allow_readonly_legacy: bool = False,
) -> List[DLPackView]:
    """
    :param objs: producers, each as for :func:`as_dlpack`.
    :param device: as for :func:`as_dlpack`, for every one.
    :param sync: as for :func:`as_dlpack`.
    :param allow_readonly_legacy: as for :func:`as_dlpack`.
    :returns: a view per producer, in order.  Views of one producer stream
        and device share one fence (one record), and hand-overs of the
        batch to one consumer stream wait once.
    :raises TypeError: as :func:`as_dlpack`, the message naming
        ``objs[i]``; and when objs is not iterable.
    :raises ValueError: as :func:`as_dlpack`, naming ``objs[i]``.
    :raises BufferError: as :func:`as_dlpack`, naming ``objs[i]``.
    :raises caibridge.CUDAError: as :func:`as_dlpack`.
    """
def to_dlpack(
    obj: Any,
    *,
    max_version: Tuple[int, int] | None = None,
    device: _Device | None = None,
    stream: _Stream = None,
    sync: bool = True,
    allow_readonly_legacy: bool = False,
    dl_device: _Device | None = None,
    copy: bool | None = None,
) -> CapsuleType:
    """
    :param obj: as for :func:`as_dlpack`.
    :param max_version: as for ``__dlpack__``.
    :param device: as for :func:`as_dlpack`.
    :param stream: the consumer's stream, as for ``__dlpack__``; the
        ordering is done now.
    :param sync: False orders nothing.
    :param allow_readonly_legacy: as for :func:`as_dlpack`.
    :param dl_device: as for ``__dlpack__``.
    :param copy: as for ``__dlpack__``.
    :returns: a capsule named ``"dltensor_versioned"`` (max_version 1.x)
        or ``"dltensor"``, keeping obj alive until its deleter runs.
    :raises TypeError: when obj describes no array, or a field has the
        wrong type.
    :raises ValueError: for a malformed descriptor or argument.
    :raises BufferError: for a well-formed array DLPack cannot hold, or a
        stream given with host data.
    :raises caibridge.CUDAError: when CUDA is missing or fails.
    """
def from_dlpack(
    x: Any,
    *,
    stream: _Stream = None,
    legacy_writable: bool = False,
    allow_readonly_legacy: bool = False,
) -> CAIView:
    """
    :param x: an object with ``__dlpack__`` and ``__dlpack_device__``, or a
        DLPack capsule.
    :param stream: the stream the data will be used on (None: the legacy
        default stream), passed to the producer for CUDA data and reported
        as the CAI ``stream``.
    :param legacy_writable: True describes a legacy (unversioned) tensor
        as writable; it is read-only otherwise.
    :param allow_readonly_legacy: True lets the view's ``__dlpack__`` hand
        read-only data out as a legacy capsule, which cannot say read-only
        (JAX asks for one): a promise that no consumer writes.  The view's
        interface and its versioned capsules still say read-only.
    :returns: a :class:`CAIView` owning the tensor.
    :raises TypeError: when x is neither a producer nor a capsule.
    :raises ValueError: for ``stream=-1`` with CUDA data through
        ``__dlpack__`` or a capsule, a stream below -1, a negative
        ``device_id``.
    :raises BufferError: for a used capsule, a tensor of another DLPack
        major version, a device an array interface cannot describe.
    :raises caibridge.CUDAError: when CUDA fails.
    """
def add_dlpack(cls: _T, /) -> _T:
    """
    :param cls: a class whose instances have ``__cuda_array_interface__``
        or ``__array_interface__``.
    :returns: cls itself, now with ``__dlpack__``, ``__dlpack_device__``
        and ``__dlpack_c_exchange_api__``.
    :raises TypeError: for a built-in or extension type, or a class with
        its own ``__dlpack__``.
    """
def add_array_interface(cls: _T, /) -> _T:
    """
    :param cls: a class whose instances have ``__dlpack__`` and
        ``__dlpack_device__``.
    :returns: cls itself, now with the properties
        ``__cuda_array_interface__`` and ``__array_interface__``.
    :raises TypeError: for a built-in or extension type.
    """
def cuda_built() -> bool:
    """
    :returns: True when CUDA support was compiled in (every wheel).
    """
def cuda_runtime_info() -> dict[str, Any]: ...
def show_config(file: Any = None) -> int: ...
def stats() -> dict[str, int]:
    """
    :returns: the process's counters by name (``views``, ``records``,
        ``waits``, ``waits_skipped``, ``host_waits``, ``releases_now``,
        ``releases_deferred``, ``releases_pending``, ``let_go_waiter``,
        ``let_go_call``, ``device_copies``, ``device_copy_bytes``,
        ``host_copies``, ``host_copy_bytes``, ``cuda_errors``): see
        :doc:`/ordering`.
    :raises: nothing.
    """
