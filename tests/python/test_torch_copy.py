"""torch's test_dlpack copy cases (test_copy, test_no_copy) on the CPU,
with caibridge as the producer (an as_dlpack view of a NumPy array) and
as the middle (a CAIView of a torch tensor): copy=True gives torch memory
of its own with the same values, copy=False shares it, and a copy to
device="cpu" of host data is a copy too.  The CUDA cases are in
tests/gpu/gpu_copy_cases.py and, on the double, tests/cuda/test_copy.py."""
import numpy as np
import pytest

import caibridge
from conftest import consumer

torch, needs_torch = consumer("torch")


def numpy_view():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    return x, caibridge.as_dlpack(x), x.ctypes.data


def torch_caiview():
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    return t, caibridge.from_dlpack(t), t.data_ptr()


PRODUCERS = [numpy_view, torch_caiview]


def values(source):
    return np.asarray(source if isinstance(source, np.ndarray)
                      else source.numpy())


@needs_torch
@pytest.mark.parametrize("make", PRODUCERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("kwargs", [{"copy": True},
                                    {"copy": True, "device": "cpu"}],
                         ids=["copy", "copy-to-cpu"])
def test_copy(make, kwargs):
    source, producer, pointer = make()
    t = torch.from_dlpack(producer, **kwargs)
    assert t.data_ptr() != pointer, "copy=True shared the memory"
    assert np.array_equal(t.numpy(), values(source))
    t.fill_(-1)
    assert values(source)[0, 0] == 0, "the copy writes through"


@needs_torch
@pytest.mark.parametrize("make", PRODUCERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("kwargs", [{}, {"copy": False}],
                         ids=["default", "no-copy"])
def test_no_copy(make, kwargs):
    source, producer, pointer = make()
    t = torch.from_dlpack(producer, **kwargs)
    assert t.data_ptr() == pointer, "a copy was made where none was asked"
    t.fill_(-1)
    assert values(source)[0, 0] == -1, "zero-copy"
