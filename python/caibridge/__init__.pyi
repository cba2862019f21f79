from typing import Any, Protocol, Tuple, Union, final

from typing_extensions import CapsuleType

__all__ = [
    "DLPACK_VERSION",
    "SYNC_ENABLED",
    "CAIView",
    "CUDAError",
    "DLPackView",
    "__version__",
    "as_dlpack",
    "cuda_built",
    "from_dlpack",
    "to_dlpack",
]

__version__: str
DLPACK_VERSION: Tuple[int, int]
SYNC_ENABLED: int

_Device = Tuple[int, int]

class _CUDAStream(Protocol):
    def __cuda_stream__(self) -> Tuple[int, int]: ...

_Stream = Union[None, int, _CUDAStream]

class CUDAError(BufferError): ...

@final
class DLPackView:
    """A DLPack producer for a CAI / array-interface object (see as_dlpack)."""

    __dlpack_c_exchange_api__: CapsuleType
    @property
    def obj(self) -> Any: ...
    def __dlpack__(
        self,
        *,
        stream: _Stream = None,
        max_version: Tuple[int, int] | None = None,
        dl_device: _Device | None = None,
        copy: bool | None = None,
    ) -> CapsuleType: ...
    def __dlpack_device__(self) -> _Device: ...

@final
class CAIView:
    """Owns a DLPack tensor; describes it as an array interface."""

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...
    @property
    def __array_interface__(self) -> dict[str, Any]: ...
    def __dlpack_device__(self) -> _Device: ...

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
) -> CapsuleType: ...
def from_dlpack(x: Any, *, stream: _Stream = None) -> CAIView: ...
def cuda_built() -> bool: ...
