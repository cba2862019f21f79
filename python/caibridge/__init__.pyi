import enum
from typing import Any, Protocol, Tuple, TypeVar, Union

from typing_extensions import CapsuleType

__version__: str
DLPACK_VERSION: Tuple[int, int]
SYNC_ENABLED: int

Device = Tuple[int, int]

_T = TypeVar("_T", bound=type)

class _CUDAStream(Protocol):
    def __cuda_stream__(self) -> Tuple[int, int]: ...

Stream = Union[None, int, _CUDAStream]

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

class DLPackView:
    """A DLPack producer for a CAI / array-interface object (see as_dlpack)."""

    __dlpack_c_exchange_api__: CapsuleType
    @property
    def obj(self) -> Any: ...
    def __dlpack__(
        self,
        *,
        stream: Stream = None,
        max_version: Tuple[int, int] | None = None,
        dl_device: Device | None = None,
        copy: bool | None = None,
    ) -> CapsuleType: ...
    def __dlpack_device__(self) -> Device: ...

class CAIView:
    """Owns a DLPack tensor; describes it as an array interface and
    re-exports it as a DLPack producer."""

    __dlpack_c_exchange_api__: CapsuleType
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...
    @property
    def __array_interface__(self) -> dict[str, Any]: ...
    def __dlpack__(
        self,
        *,
        stream: Stream = None,
        max_version: Tuple[int, int] | None = None,
        dl_device: Device | None = None,
        copy: bool | None = None,
    ) -> CapsuleType: ...
    def __dlpack_device__(self) -> Device: ...

def as_dlpack(
    obj: Any,
    *,
    device: Device | None = None,
    sync: bool = True,
    allow_readonly_legacy: bool = False,
) -> DLPackView: ...
def to_dlpack(
    obj: Any,
    *,
    max_version: Tuple[int, int] | None = None,
    device: Device | None = None,
    stream: Stream = None,
    sync: bool = True,
    allow_readonly_legacy: bool = False,
    dl_device: Device | None = None,
    copy: bool | None = None,
) -> CapsuleType: ...
def from_dlpack(x: Any, *, stream: Stream = None) -> CAIView: ...
def add_dlpack(cls: _T, /) -> _T: ...
def add_array_interface(cls: _T, /) -> _T: ...
def cuda_built() -> bool: ...
