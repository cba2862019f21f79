"""Where caibridge finds the CUDA runtime: NVIDIA's pip wheels
(nvidia/cu13/lib, nvidia/cuda_runtime/lib) in the folders on sys.path,
searched again after a failed search, and Python told which runtime was
loaded, from where and how.  The runtime is the recording double
(tests/cuda/cudart-double.c), copied as libcudart.so.13 into a fake wheel
layout.  Each case runs in a fresh interpreter: a runtime, once loaded,
stays for the life of the process.
"""

import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import caibridge

pytestmark = pytest.mark.skipif(not caibridge.cuda_built(),
                                reason="built without CUDA support")


def double_path():
    """The double beside the staged package: <build>/python/stage/caibridge
    and <build>/tests/cuda/.libs."""
    spec = importlib.util.find_spec("caibridge")
    build = pathlib.Path(spec.origin).resolve().parents[3]
    path = build / "tests" / "cuda" / ".libs" / "libcudart-double.so"
    assert path.exists(), f"the CUDA runtime double is not built: {path}"
    return path


def fake_wheel(root, sub):
    """root/nvidia/<sub>/lib/libcudart.so.13: the double."""
    lib = root / "nvidia" / sub / "lib"
    lib.mkdir(parents=True)
    shutil.copy(double_path(), lib / "libcudart.so.13")
    return lib / "libcudart.so.13"


def run(code, path_entries=(), **env_changes):
    """Runs code with sys.path entries first; prints come back as lines.
    Without the site packages (-S): a CUDA runtime pip installed there
    would be found before $CONDA_PREFIX/lib."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CAIBRIDGE_CUDART", "CONDA_PREFIX")}
    env.update(env_changes)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(p) for p in path_entries] + [env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-S", "-c", code], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


INFO = """
import caibridge
info = caibridge.cuda_runtime_info()
print(info["how"]); print(info["path"]); print(info["version"])
"""


@pytest.mark.parametrize("sub", ["cu13", "cuda_runtime"])
def test_pip_wheel_folder_on_sys_path_is_found(tmp_path, sub):
    lib = fake_wheel(tmp_path, sub)
    how, path, version = run(INFO, [tmp_path])
    assert how == "pip wheel"
    assert pathlib.Path(path).resolve() == lib.resolve()
    assert int(version) >= 11000


def test_runtime_dirs_lists_only_absolute_existing_folders(tmp_path):
    lib = fake_wheel(tmp_path, "cu13")
    code = ("import sys, caibridge; sys.path[:0] = ['', 'relative', %r]; "
            "print(caibridge._runtime_dirs())" % str(tmp_path))
    (line,) = run(code)
    assert line == repr([str(lib.parent)])


def test_failed_search_is_retried(tmp_path):
    """The first search fails (CAIBRIDGE_CUDART names no file); once the
    variable is gone and a wheel folder is on sys.path, the next call
    finds the runtime there, in the same process."""
    lib = fake_wheel(tmp_path, "cu13")
    code = """
import os, sys, caibridge
try:
    caibridge.cuda_runtime_info()
except caibridge.CUDAError as e:
    print("first:", e)
del os.environ["CAIBRIDGE_CUDART"]
sys.path.insert(0, %r)
info = caibridge.cuda_runtime_info()
print("second:", info["how"], info["path"])
""" % str(tmp_path)
    first, second = run(code, CAIBRIDGE_CUDART="/nonexistent/libcudart.so.13")
    assert first.startswith("first: CAIBRIDGE_CUDART=/nonexistent/")
    assert "could not be loaded" in first
    how_path = second.split(" ", 1)[1]
    assert how_path.startswith("pip wheel ")
    assert pathlib.Path(how_path[len("pip wheel "):]).resolve() == \
        lib.resolve()


def test_chosen_runtime_wins_and_is_reported(tmp_path):
    fake_wheel(tmp_path, "cu13")
    chosen = double_path().resolve()
    how, path, _ = run(INFO, [tmp_path], CAIBRIDGE_CUDART=str(chosen))
    assert how == "CAIBRIDGE_CUDART"
    assert pathlib.Path(path).resolve() == chosen


def test_relative_chosen_runtime_is_refused(tmp_path):
    code = """
import caibridge
try:
    caibridge.cuda_runtime_info()
except caibridge.CUDAError as e:
    print(e)
"""
    (line,) = run(code, CAIBRIDGE_CUDART="libcudart.so.13")
    assert "must be an absolute path" in line


def test_conda_prefix_lib_is_searched(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copy(double_path(), lib / "libcudart.so.13")
    how, path, _ = run(INFO, CONDA_PREFIX=str(tmp_path))
    assert how == "conda"
    assert pathlib.Path(path).resolve() == (lib / "libcudart.so.13").resolve()
