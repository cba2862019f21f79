"""tests/gpu/check-gpu.py without a GPU: it imports, registers its cases,
skips with the reason, and reports a probe that fails in any other way as
a TAP failure rather than losing the TAP to a traceback."""
import importlib.util
import os
import subprocess
import sys

import pytest

import caibridge

GPU = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu")
SCRIPT = os.path.join(GPU, "check-gpu.py")


@pytest.fixture(scope="module")
def script():
    sys.path.insert(0, GPU)
    spec = importlib.util.spec_from_file_location("check_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.path.remove(GPU)


def test_cases_are_registered_once_each(script):
    import gpu_cases
    names = [c[0] for c in gpu_cases.CASES]
    assert len(names) == len(set(names))
    for name in ("destroyed_producer_stream@0", "destroyed_consumer_stream@0",
                 "non_blocking_release@0", "side_stream_release@0",
                 "reverse_edge_block@0", "reverse_edge_block_race@0",
                 "pooled_events_across_device_reset@0",
                 "consumer_capturing@0", "consumer_capturing_race@0",
                 "releases_behind_a_long_kernel@0",
                 "pipeline_at_the_price_of_ordering_by_hand@0",
                 "producer_goes_promptly@0",
                 "torch_as_tensor_ignores_the_stream@0",
                 "batch_into_torch@0"):
        assert name in names
    assert all(callable(c[2]) for c in gpu_cases.CASES)


def test_runtime_helper_is_the_one_caibridge_uses(script):
    """The cases read errors left pending from caibridge's own runtime: a
    framework's copy of libcudart keeps its own error state."""
    import gpu_cases
    rt = gpu_cases.Runtime()
    assert rt.lib._name == caibridge._core._runtime_info()["path"]
    assert isinstance(rt.pending_error(), int)


def test_without_a_gpu_one_skip_line_and_success():
    env = dict(os.environ)
    env.pop("OUT", None)
    env["CAIBRIDGE_CUDART"] = "/nonexistent/libcudart.so"
    out = subprocess.run([sys.executable, SCRIPT], capture_output=True,
                         env=env, timeout=60)
    assert out.returncode == 0
    assert out.stdout.decode().startswith("1..0 # SKIP no CUDA device: ")


def test_a_probe_that_raises_is_a_failure_not_a_skip(script, monkeypatch):
    def broken(obj, **kwargs):
        raise RuntimeError("probe broke")
    monkeypatch.delenv("CAIBRIDGE_CUDART", raising=False)
    monkeypatch.setattr(caibridge, "as_dlpack", broken)
    reason, failure = script.why_no_gpu()
    assert reason is None
    assert "RuntimeError: probe broke" in failure


def test_a_cuda_error_in_the_probe_is_a_skip(script, monkeypatch):
    def no_device(obj, **kwargs):
        raise caibridge.CUDAError("no device here")
    monkeypatch.delenv("CAIBRIDGE_CUDART", raising=False)
    monkeypatch.setattr(caibridge, "as_dlpack", no_device)
    assert script.why_no_gpu() == ("no device here", None)
