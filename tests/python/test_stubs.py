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
