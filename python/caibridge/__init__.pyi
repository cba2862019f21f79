from typing import Any, Protocol, Tuple, Union

from typing_extensions import CapsuleType

__version__: str
DLPACK_VERSION: Tuple[int, int]
SYNC_ENABLED: int

Device = Tuple[int, int]

class _CUDAStream(Protocol):
    def __cuda_stream__(self) -> Tuple[int, int]: ...

Stream = Union[None, int, _CUDAStream]

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
    """Owns a DLPack tensor; describes it as an array interface."""

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...
    @property
    def __array_interface__(self) -> dict[str, Any]: ...
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
) -> CapsuleType: ...
def from_dlpack(
    x: Any, *, stream: Stream = None, legacy_writable: bool = False
) -> CAIView: ...
def cuda_built() -> bool: ...
