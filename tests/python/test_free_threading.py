"""Free-threaded CPython (3.13t and later): importing caibridge must leave
the GIL off, which needs the module to declare Py_mod_gil."""
import os
import subprocess
import sys
import sysconfig

import pytest

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


@pytest.mark.skipif(not FREE_THREADED,
                    reason="not a free-threaded build of CPython")
@pytest.mark.xfail(reason="the module does not declare Py_mod_gil yet, so "
                   "importing it turns the GIL on", strict=False)
def test_import_leaves_the_gil_off():
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    result = subprocess.run(
        [sys.executable, "-c",
         "import sys, caibridge; print(sys._is_gil_enabled())"],
        capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False"], \
        "sys._is_gil_enabled() after import: " + result.stdout + result.stderr
