"""python -m caibridge and caibridge.show_config(): what was built in and
what is found here, and a self-test.  Exit status 0 on a machine without a
GPU, which it says; every failing CUDA step (fake runtimes below) is a
FAILED line of the report and exit status 1, never a traceback."""

import ctypes
import io
import json
import os
import re
import subprocess
import sys

import pytest

import caibridge
from caibridge import _config


def run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "caibridge", *args],
                          capture_output=True, text=True, timeout=120,
                          env=env)


def test_python_m_caibridge_reports_and_exits_0():
    out = run()
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert text.startswith("caibridge %s\n" % caibridge.__version__)
    assert re.search(r"DLPack ABI:\s+%d\.%d" % caibridge.DLPACK_VERSION, text)
    assert re.search(r"free-threaded:\s+(yes|no)", text)
    assert "host round trip (no CUDA call):\n    ok (zero-copy" in text, text
    # Either a GPU's round trip, or the reason there is none.
    assert ("device round trip: skipped: no GPU here" in text or
            re.search(r"device 0 round trip \(cudaSetDevice\(0\), "
                      r"cudaMalloc.*\n    ok", text)), text
    assert out.stderr == ""


def test_platform_and_origin():
    text = run().stdout
    import platform
    assert "OS:              %s" % platform.system() in text
    assert platform.machine() in text
    pkg = os.path.dirname(os.path.abspath(caibridge.__file__))
    assert "imported from:   %s\n" % pkg in text


def test_json_report_for_bug_reports():
    env = dict(os.environ, CAIBRIDGE_REPORT_MARK="x1",
               CONDA_PREFIX="/nowhere/conda")
    out = run("--json", env=env)
    data = json.loads(out.stdout)
    assert data["exit_status"] == out.returncode == 0, out.stdout
    assert data["version"] == caibridge.__version__
    assert data["platform"]["architecture"]
    assert data["environment"]["CAIBRIDGE_REPORT_MARK"] == "x1"
    assert data["environment"]["CONDA_PREFIX"] == "/nowhere/conda"
    import numpy
    assert data["packages"]["NumPy"] == numpy.__version__
    assert data["build"]["dlpack_abi"] == "%d.%d" % caibridge.DLPACK_VERSION
    assert data["self_test"]["host"].startswith("ok")
    assert "runtime" in data


def test_help_documents_the_exit_status_and_what_is_touched():
    out = run("--help")
    assert out.returncode == 0
    assert "--json" in out.stdout
    assert re.search(r"^\s+1\s+a self-test or a CUDA query failed", out.stdout,
                     re.M), out.stdout
    assert "cudaSetDevice" in out.stdout and "cudaMalloc" in out.stdout


def test_wrong_argument_is_status_2():
    out = run("--no-such-option")
    assert out.returncode == _config.EXIT_USAGE == 2
    assert "Traceback" not in out.stderr


def test_build_section_names_the_cuda_headers():
    buf = io.StringIO()
    assert caibridge.show_config(buf) == 0
    text = buf.getvalue()
    if caibridge.cuda_built():
        assert re.search(r"CUDA support:\s+yes", text)
        assert re.search(r"CUDA headers:\s+1[1-9]\.\d+", text), text
    else:
        assert "CUDA support:    NO" in text


def test_runtime_section_matches_cuda_runtime_info():
    buf = io.StringIO()
    caibridge.show_config(buf)
    text = buf.getvalue()
    try:
        info = caibridge.cuda_runtime_info()
    except caibridge.CUDAError as e:
        assert "  none: %s" % e in text
    else:
        assert "  path:            %s\n" % info["path"] in text
        assert "  found:           %s\n" % info["how"] in text
        assert info["how"] in ("CAIBRIDGE_CUDART", "already loaded",
                               "pip wheel", "conda", "system")


# ---- Fake runtimes: each failure is a line, never a traceback ------------

def _out(ref):
    """The ctypes object behind a byref() argument."""
    return ref._obj


class FakeRuntime:
    """A runtime of Python functions, counting calls: one GPU, driver 13.0,
    unless a test changes it."""

    def __init__(self, devices=1):
        self.devices = devices
        self.calls = {}
        self.memory = (ctypes.c_float * 4)()

    def _count(self, name):
        self.calls[name] = self.calls.get(name, 0) + 1

    def cudaDriverGetVersion(self, ref):
        self._count("cudaDriverGetVersion")
        _out(ref).value = 13000
        return 0

    def cudaGetDeviceCount(self, ref):
        self._count("cudaGetDeviceCount")
        _out(ref).value = self.devices
        return 0

    def cudaDeviceGetAttribute(self, ref, attribute, device):
        self._count("cudaDeviceGetAttribute")
        _out(ref).value = 1
        return 0

    def cudaSetDevice(self, device):
        self._count("cudaSetDevice")
        return 0

    def cudaMalloc(self, ref, size):
        self._count("cudaMalloc")
        _out(ref).value = ctypes.addressof(self.memory)
        return 0

    def cudaMemcpy(self, dst, src, size, kind):
        self._count("cudaMemcpy")
        ctypes.memmove(dst, src, size)
        return 0

    def cudaFree(self, pointer):
        self._count("cudaFree")
        return 0


@pytest.fixture
def fake(monkeypatch):
    rt = FakeRuntime()
    monkeypatch.setattr(caibridge, "cuda_runtime_info", lambda: {
        "path": "/fake/libcudart.so.13", "how": "system", "version": 13000})
    monkeypatch.setattr(_config, "_open_runtime", lambda path: rt)
    monkeypatch.setattr(_config, "_device_name", lambda device: "Fake GPU")
    return rt


def report():
    buf = io.StringIO()
    status = caibridge.show_config(buf)
    return status, buf.getvalue()


def _no_traceback(text):
    assert "Traceback" not in text


def test_fake_runtime_pointer_lookup_fails(fake, monkeypatch):
    def refuse(obj, **kwargs):
        raise caibridge.CUDAError(
            "cudaPointerGetAttributes failed: error 700 (an illegal address)")
    monkeypatch.setattr(caibridge, "as_dlpack", refuse)
    status, text = report()
    assert status == 1
    assert "device 0 round trip" in text
    assert "FAILED (CUDAError: cudaPointerGetAttributes failed" in text, text
    assert fake.calls["cudaFree"] == 1, "the block is freed after a failure"
    _no_traceback(text)


def test_fake_runtime_without_device_count(fake, monkeypatch):
    monkeypatch.delattr(FakeRuntime, "cudaGetDeviceCount")
    status, text = report()
    assert status == 1
    assert "devices:           FAILED (the runtime has no " \
           "cudaGetDeviceCount)" in text, text
    assert "device round trip: skipped" in text
    _no_traceback(text)


def test_fake_runtime_malloc_returns_null(fake, monkeypatch):
    def malloc(self, ref, size):
        _out(ref).value = None
        return 0
    monkeypatch.setattr(FakeRuntime, "cudaMalloc", malloc)
    status, text = report()
    assert status == 1
    assert "FAILED (cudaMalloc returned success and a NULL pointer)" in text
    _no_traceback(text)


def test_fake_runtime_malloc_error_by_name(fake, monkeypatch):
    monkeypatch.setattr(FakeRuntime, "cudaMalloc", lambda self, r, s: 2)
    status, text = report()
    assert status == 1
    assert "FAILED (cudaMalloc returned 2 (cudaErrorMemoryAllocation))" \
        in text, text


def test_fake_runtime_device_count_is_bounded(fake):
    fake.devices = 100000
    status, text = report()
    assert status == 1
    assert "cudaGetDeviceCount reported 100000" in text
    assert "cudaDeviceGetAttribute" not in fake.calls, "no device was asked"
    assert "cudaSetDevice" not in fake.calls


def test_fake_runtime_errors_by_name(fake, monkeypatch):
    # No cudaGetErrorName: the table names the common errors.
    monkeypatch.setattr(FakeRuntime, "cudaGetDeviceCount",
                        lambda self, ref: 35)
    status, text = report()
    assert status == 0, "no driver is a finding, not a failure"
    assert "cudaGetDeviceCount returned 35 (cudaErrorInsufficientDriver)" \
        in text, text
    # With it, the runtime's own name wins.
    def name(self, code):
        return b"cudaErrorFromTheRuntime"
    monkeypatch.setattr(FakeRuntime, "cudaGetErrorName", name, raising=False)
    assert _config.error_name(35, fake) == "cudaErrorFromTheRuntime"
    assert _config.error_name(100) == "cudaErrorNoDevice"


def test_fake_runtime_driver_entry_point_raises(fake, monkeypatch):
    def broken(self, ref):
        raise OSError("segfault averted")
    monkeypatch.setattr(FakeRuntime, "cudaDriverGetVersion", broken)
    status, text = report()
    assert status == 1
    assert "CUDA driver:       FAILED (cudaDriverGetVersion raised OSError: " \
           "segfault averted)" in text


def test_fake_runtime_passes_with_real_round_trip_code(fake, monkeypatch):
    # The device round trip runs every step against the fake; the hand-over
    # itself is host memory described as CUDA, so caibridge is given the
    # device instead of asking CUDA where the pointer lives.
    real = caibridge.as_dlpack

    def given_device(obj, **kw):
        if hasattr(obj, "__cuda_array_interface__"):
            kw["device"] = (2, 0)
        return real(obj, **kw)
    monkeypatch.setattr(caibridge, "as_dlpack", given_device)
    status, text = report()
    assert "device 0 round trip (cudaSetDevice(0), cudaMalloc of 16 bytes" \
        in text
    assert status == 0, text
    assert "    ok (zero-copy, 4 float32 values)" in text
    assert fake.calls["cudaSetDevice"] == 1
    assert fake.calls["cudaMalloc"] == fake.calls["cudaFree"] == 1
    assert "device 0: Fake GPU" in text


def test_runtime_info_lists_are_printed(fake, monkeypatch):
    monkeypatch.setattr(caibridge, "cuda_runtime_info", lambda: {
        "path": "/fake/libcudart.so.13", "how": "system", "version": 13000,
        "driver_missing": ["cuStreamGetCtx", "cuCtxGetDevice"],
        "refused": [("/tmp/x/libcudart.so.13", "the folder is writable by "
                     "others")]})
    status, text = report()
    assert "  driver missing:\n    cuStreamGetCtx\n    cuCtxGetDevice\n" \
        in text, text
    assert "  refused:\n    /tmp/x/libcudart.so.13 the folder is writable " \
           "by others\n" in text


def test_runtime_info_raising_is_a_line(fake, monkeypatch):
    def broken():
        raise RuntimeError("unexpected")
    monkeypatch.setattr(caibridge, "cuda_runtime_info", broken)
    status, text = report()
    assert status == 1
    assert "FAILED (cuda_runtime_info raised RuntimeError: unexpected)" in text
    assert "host round trip" in text, "the report goes on"


def test_json_of_a_failure(fake, monkeypatch):
    monkeypatch.delattr(FakeRuntime, "cudaGetDeviceCount")
    buf = io.StringIO()
    status = caibridge.show_config  # noqa: F841 (the text form is above)
    status = _config.show_config(buf, as_json=True)
    data = json.loads(buf.getvalue())
    assert status == data["exit_status"] == 1
    assert data["failures"] == [
        "devices: the runtime has no cudaGetDeviceCount"]


def test_recording_double_lacks_device_count():
    """A real library without cudaGetDeviceCount (the tests' recording
    double, tests/cuda) loaded through CAIBRIDGE_CUDART: a FAILED line and
    exit status 1, where an AttributeError's traceback used to be."""
    double = os.path.join(
        os.environ.get("CAIBRIDGE_TEST_DOUBLES")
        or os.path.join(os.getcwd(), "tests", "cuda", ".libs"),
        "libcudart-double.so")
    if not os.path.isfile(double):
        pytest.skip("the recording double is not built here (tests/cuda)")
    env = dict(os.environ, CAIBRIDGE_CUDART=double)
    out = run(env=env)
    assert "Traceback" not in out.stderr, out.stderr
    assert "found:           CAIBRIDGE_CUDART" in out.stdout
    data = json.loads(run("--json", env=env).stdout)
    assert data["exit_status"] == out.returncode
    assert data["runtime"]["how"] == "CAIBRIDGE_CUDART"
    if hasattr(ctypes.CDLL(double), "cudaGetDeviceCount"):
        pytest.skip("the double has cudaGetDeviceCount now: the report "
                    "ran without a traceback, the rest is for fakes above")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "devices:           FAILED (the runtime has no " \
           "cudaGetDeviceCount)" in out.stdout


def _env(**values):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CAIBRIDGE_")}
    env.update(values)
    return env


def test_settings_in_effect_are_shown():
    """The ordering, release mode and event pool in effect, in the text
    and in --json."""
    out = run(env=_env(CAIBRIDGE_RELEASE="block", CAIBRIDGE_EVENT_POOL="3",
                       CAIBRIDGE_SYNC="off"))
    assert "release:         block" in out.stdout
    assert "event pool:      3 per context" in out.stdout
    assert "ordering:        off" in out.stdout.split("settings in effect:")[1]
    data = json.loads(run("--json", env=_env(CAIBRIDGE_RELEASE="block"))
                      .stdout)
    assert data["settings"] == {"event_pool": 8, "release": "block",
                                "ordering": True}


def test_each_setting_is_said_once_and_off_says_off():
    """"ordering" is printed once (it was under build and under settings),
    and an event pool of 0 reads "off", not "0 per context"."""
    out = run(env=_env(CAIBRIDGE_EVENT_POOL="0"))
    assert out.stdout.count("ordering:") == 1, out.stdout
    assert "event pool:      off (CAIBRIDGE_EVENT_POOL=0)" in out.stdout
    assert "0 per context" not in out.stdout


@pytest.mark.parametrize("name, value, said", [
    # Misspelt on purpose, and spelt in two parts, so that the check that
    # the environment page lists every name of the tree passes it over.
    ("CAIBRIDGE_" "EVENTPOOL", "3", "did you mean CAIBRIDGE_EVENT_POOL?"),
    ("CAIBRIDGE_RELEASE", "BLOCK", "case-sensitive"),
    ("CAIBRIDGE_SYNC", "maybe", "ordering stays on"),
    ("CAIBRIDGE_EVENT_POOL", "0x10", "decimal digits only"),
])
def test_settings_not_understood_are_warned_in_text_and_json(name, value,
                                                             said):
    out = run(env=_env(**{name: value}))
    assert out.returncode == 0
    assert any(line.startswith("  WARNING: ") and said in line
               for line in out.stdout.splitlines()), out.stdout
    data = json.loads(run("--json", env=_env(**{name: value})).stdout)
    assert any(said in w for w in data["warnings"]), data["warnings"]


def test_import_warning_names_the_environment_not_importlib():
    out = subprocess.run([sys.executable, "-c", "import caibridge"],
                         env=_env(CAIBRIDGE_SYNC="maybe"),
                         capture_output=True, text=True, timeout=60)
    assert "<environment>:0: RuntimeWarning: CAIBRIDGE_SYNC" in out.stderr
    assert "importlib" not in out.stderr


def test_broken_chosen_runtime_is_a_failure(tmp_path):
    """CAIBRIDGE_CUDART names a runtime that cannot be used: FAILED and
    exit status 1, not "no runtime" and 0."""
    out = run(env=_env(CAIBRIDGE_CUDART=str(tmp_path / "libcudart.so.13")))
    assert out.returncode == 1, out.stdout
    assert "FAILED: runtime: CAIBRIDGE_CUDART is set and unusable" in \
        out.stdout
