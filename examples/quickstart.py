"""caibridge quick start: arrays handed over zero-copy.

First with nothing but caibridge: a producer from the standard library (a
bytearray described by __array_interface__) goes out as DLPack through
caibridge.as_dlpack and comes back as an array interface through
caibridge.from_dlpack, still the bytearray's own memory.

Then, when NumPy is installed, one producer fed to NumPy, PyTorch and JAX:
with a CUDA GPU, CUDA memory seen only through its
__cuda_array_interface__; without one, a host array seen only through its
__array_interface__.  Run it with:  make demo   (or: python
examples/quickstart.py)
"""
import array
import ctypes

import caibridge


class Float32Matrix:
    """A rows x cols float32 matrix in a bytearray, known to the world only
    by its __array_interface__: a producer that needs no NumPy."""

    def __init__(self, rows, cols):
        self.shape = (rows, cols)
        self.buffer = bytearray(array.array("f", range(rows * cols)))

    @property
    def __array_interface__(self):
        # "data" may be any object with a writable buffer: the view keeps
        # that export alive for as long as a consumer holds the data.
        return {"shape": self.shape, "typestr": "<f4", "data": self.buffer,
                "version": 3}

    def address(self):
        return ctypes.addressof(ctypes.c_char.from_buffer(self.buffer))


def standard_library_only():
    producer = Float32Matrix(3, 4)
    view = caibridge.as_dlpack(producer)    # a DLPack producer
    back = caibridge.from_dlpack(view)      # a DLPack consumer
    iface = back.__array_interface__
    pointer = iface["data"][0]
    print(f"caibridge.from_dlpack(caibridge.as_dlpack(producer)): shape "
          f"{iface['shape']}, typestr {iface['typestr']!r}, same memory as "
          f"the bytearray: {pointer == producer.address()}")
    assert pointer == producer.address()
    # A write through the consumer's pointer lands in the producer's bytes.
    values = (ctypes.c_float * 12).from_address(pointer)
    values[5] = 42.0
    seen = array.array("f", bytes(producer.buffer))[5]
    print(f"written through the view, read in the bytearray: {seen:g}")
    assert seen == 42.0


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
    print(f"caibridge {caibridge.__version__} (CUDA support built: "
          f"{caibridge.cuda_built()})")
    standard_library_only()
    try:
        import numpy as np
    except ImportError:
        print("NumPy is not installed: the NumPy, torch and JAX hand-overs "
              "are skipped (pip install numpy torch jax)")
        return
    with_consumers(np)


def with_consumers(np):
    try:
        import torch
    except ImportError:
        torch = None
    try:
        import jax
        import jax.dlpack
    except ImportError:
        jax = None

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

    if not gpu_available(torch):
        result = np.from_dlpack(caibridge.as_dlpack(producer))
        same = result.__array_interface__["data"][0] == pointer
        print(f"np.from_dlpack(as_dlpack(producer)): same memory: {same}, "
              f"sum {result.sum():g}")
        assert same and np.array_equal(result, expected)

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
