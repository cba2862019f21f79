"""caibridge: zero-copy hand-over between the CUDA Array Interface and DLPack.

    >>> import torch, caibridge
    >>> t = torch.from_dlpack(caibridge.as_dlpack(producer))  # CAI -> DLPack
    >>> view = caibridge.from_dlpack(t)  # DLPack -> CAI / array interface

``as_dlpack``, ``to_dlpack`` and ``from_dlpack`` are the C functions of
``caibridge._core`` themselves: no Python code runs on the hand-over path.
"""

from ._core import (
    DLPACK_VERSION,
    SYNC_ENABLED,
    CAIView,
    CUDAError,
    DLPackView,
    __version__,
    as_dlpack,
    cuda_built,
    from_dlpack,
    to_dlpack,
)

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
