import enum
from typing import Any, Protocol, Tuple, TypeVar, Union, final, type_check_only

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
    ) -> CapsuleType: ...
    def __dlpack_device__(self) -> _Device: ...

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
) -> DLPackView: ...
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
) -> CapsuleType: ...
def from_dlpack(
    x: Any, *, stream: _Stream = None, legacy_writable: bool = False
) -> CAIView: ...
def add_dlpack(cls: _T, /) -> _T: ...
def add_array_interface(cls: _T, /) -> _T: ...
def cuda_built() -> bool: ...
def cuda_runtime_info() -> dict[str, Any]: ...
def show_config(file: Any = None) -> int: ...
