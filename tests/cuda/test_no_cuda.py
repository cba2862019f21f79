"""caibridge imports and converts host memory with no usable CUDA, and says
why a CUDA object cannot be handled.

Each case runs in a fresh interpreter, because the CUDA runtime is bound
once per process at its first use.
"""

import importlib.util
import os
import subprocess
import sys

import pytest

import caibridge  # binds no CUDA runtime in this process

# torch is optional: without it the torch case skips, naming why, and the
# CUDA cases still run.
HAVE_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(
    not HAVE_TORCH, reason="torch: not installed for this Python (%s); "
    "the CUDA cases ran without it" % sys.executable)

SCRIPT = r"""
import numpy as np, caibridge

try:
    import torch
except ImportError:
    print("torch: absent")
else:
    host = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    t = torch.from_dlpack(caibridge.as_dlpack(host))
    assert t.tolist() == host.tolist(), t
    assert caibridge.from_dlpack(t).__array_interface__["data"][0] == \
        host.ctypes.data
    print("torch: host memory converted")

class DeviceArray:
    __cuda_array_interface__ = {"data": (0x7F0000001000, False),
                                "shape": (4,), "typestr": "<f4",
                                "version": 3}
try:
    caibridge.as_dlpack(DeviceArray())
except caibridge.CUDAError as e:
    print("CUDAError:", e)
else:
    print("located")
"""


def run(**env_changes):
    env = dict(os.environ)
    for name, value in env_changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    torch_line, said = out.stdout.strip().split("\n", 1)
    assert torch_line == ("torch: host memory converted" if HAVE_TORCH
                          else "torch: absent")
    return said


# The core's messages for each case are missing-t.c's and no-driver-t.c's;
# here, that they reach Python as CUDAError while host memory converts into
# torch in the same process (where torch is installed).

@needs_torch
def test_host_memory_into_torch_without_cuda():
    # run() checks the line the torch part printed.
    assert run(CAIBRIDGE_CUDART="/nonexistent/libcudart.so.99")

def test_missing_runtime_is_a_cuda_error():
    path = "/nonexistent/caibridge-test/libcudart.so.99"
    said = run(CAIBRIDGE_CUDART=path)
    assert said.startswith("CUDAError: ")
    if caibridge.cuda_built():
        assert path in said, "the core's message, passed through"


def test_real_runtime_without_a_driver():
    said = run(CAIBRIDGE_CUDART=None)
    if said == "located":
        pytest.skip("a CUDA driver and device answered; this case needs a "
                    "machine without them")
    assert said.startswith("CUDAError: ") and len(said) > len("CUDAError: ")
