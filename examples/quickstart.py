"""caibridge quick start: one producer, fed to PyTorch and JAX, zero-copy.

With a CUDA GPU, the producer is CUDA memory seen only through its
__cuda_array_interface__; without one, it is a host array seen only through
its __array_interface__.  Either way the consumers get the producer's own
memory, and caibridge.from_dlpack turns a DLPack tensor back into an array
interface.  Run it with:  make demo   (or: python examples/quickstart.py)
"""
import numpy as np

import caibridge


class InterfaceOnly:
    """Exposes one array interface of `array`, nothing else: the situation
    of a video decoder, RMM buffer or custom class that knows no DLPack."""

    def __init__(self, array, attribute):
        self._array = array
        setattr(self, attribute, getattr(array, attribute))


def gpu_available(torch):
    try:
        return torch is not None and torch.cuda.is_available()
    except Exception:
        return False


def main():
    try:
        import torch
    except ImportError:
        torch = None
    try:
        import jax
        import jax.dlpack
    except ImportError:
        jax = None

    print(f"caibridge {caibridge.__version__} (CUDA support built: "
          f"{caibridge.cuda_built()})")
    if gpu_available(torch):
        source = torch.arange(12, dtype=torch.float32, device="cuda")
        source = source.reshape(3, 4)
        producer = InterfaceOnly(source, "__cuda_array_interface__")
        pointer = source.data_ptr()
        expected = source.cpu().numpy()
        print("producer: CUDA memory behind __cuda_array_interface__ "
              f"(shape {tuple(source.shape)}, float32)")
    else:
        # XLA (JAX) takes host memory zero-copy only when it is 64-byte
        # aligned, and copies it otherwise; so align the demo's buffer.
        raw = np.empty(12 * 4 + 64, np.uint8)
        start = -raw.ctypes.data % 64
        source = raw[start:start + 48].view(np.float32).reshape(3, 4)
        source[...] = np.arange(12).reshape(3, 4)
        producer = InterfaceOnly(source, "__array_interface__")
        pointer = source.__array_interface__["data"][0]
        expected = source
        print("producer: no GPU here, so a host array behind "
              f"__array_interface__ (shape {source.shape}, float32)")

    if torch is not None:
        tensor = torch.from_dlpack(caibridge.as_dlpack(producer))
        same = tensor.data_ptr() == pointer
        print(f"torch.from_dlpack(as_dlpack(producer)): {tensor.device} "
              f"tensor, same memory: {same}, sum {tensor.sum().item():g}")
        assert same and np.array_equal(tensor.cpu().numpy(), expected)

        back = caibridge.from_dlpack(tensor)
        iface = (back.__cuda_array_interface__ if tensor.is_cuda
                 else back.__array_interface__)
        print(f"caibridge.from_dlpack(tensor): an array interface of shape "
              f"{iface['shape']}, typestr {iface['typestr']!r}, same memory: "
              f"{iface['data'][0] == pointer}")
    else:
        print("torch is not installed: skipped")

    if jax is not None:
        platform = "gpu" if gpu_available(torch) else "cpu"
        try:
            jax.devices(platform)
        except RuntimeError:
            print(f"JAX has no {platform} backend here: skipped")
        else:
            array = jax.dlpack.from_dlpack(caibridge.as_dlpack(producer))
            same = array.unsafe_buffer_pointer() == pointer
            print(f"jax.dlpack.from_dlpack(as_dlpack(producer)): "
                  f"{array.device}, same memory: {same}, "
                  f"sum {float(array.sum()):g}")
            assert np.array_equal(np.asarray(array), expected)
    else:
        print("JAX is not installed: skipped")


if __name__ == "__main__":
    main()
