"""The type stubs describe the module as it is: mypy's stubtest compares
caibridge/__init__.pyi with the module it imports."""
import os
import subprocess
import sys

from conftest import consumer

mypy, needs_mypy = consumer("mypy")


@needs_mypy
def test_stubs_match_the_module(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "caibridge"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env=dict(os.environ, MYPY_CACHE_DIR=str(tmp_path / "mypy-cache")))
    assert result.returncode == 0, \
        result.stdout[-6000:] + result.stderr[-2000:]


# A class given to add_dlpack, passed where NumPy's stubs want a DLPack
# producer.  Deriving from caibridge.DLPackProducer shows the methods
# add_dlpack adds; without it mypy --strict refuses the call.
ADD_DLPACK_USER = '''
from typing import Any

import numpy as np
import numpy.typing as npt

import caibridge


@caibridge.add_dlpack
class MyArray{base}:
    def __init__(self, array: npt.NDArray[np.float32]) -> None:
        self.array = array

    @property
    def __array_interface__(self) -> dict[str, Any]:
        return self.array.__array_interface__


result = np.from_dlpack(MyArray(np.arange(3, dtype=np.float32)))
print(result.tolist())
'''


def mypy_strict(tmp_path, source):
    path = tmp_path / "user.py"
    path.write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", str(path)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env=dict(os.environ, MYPY_CACHE_DIR=str(tmp_path / "mypy-cache")))


@needs_mypy
def test_add_dlpack_class_is_a_dlpack_producer_to_mypy(tmp_path):
    source = ADD_DLPACK_USER.format(base="(caibridge.DLPackProducer)")
    result = mypy_strict(tmp_path, source)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
    run = subprocess.run([sys.executable, "-c", source], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[0.0, 1.0, 2.0]"


@needs_mypy
def test_add_dlpack_class_without_the_base_fails_mypy(tmp_path):
    result = mypy_strict(tmp_path, ADD_DLPACK_USER.format(base=""))
    assert result.returncode == 1
    assert 'incompatible type "MyArray"; expected "_SupportsDLPack' in \
        result.stdout


def test_dlpack_producer_base_alone_says_add_dlpack_is_missing():
    import caibridge

    class Forgot(caibridge.DLPackProducer):
        pass

    for method in (Forgot().__dlpack__, Forgot().__dlpack_device__):
        try:
            method()
        except TypeError as exc:
            assert "was not given to caibridge.add_dlpack" in str(exc)
            assert "Forgot" in str(exc)
        else:
            raise AssertionError("the base's methods raise")
