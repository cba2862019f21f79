"""Free-threaded CPython (3.13t and later): importing caibridge must leave
the GIL off (the module declares Py_mod_gil = Py_MOD_GIL_NOT_USED) and say
nothing about it.  The thread tests (test_threads.py) then run without a
GIL on these builds."""
import os
import subprocess
import sys
import sysconfig

import pytest

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
needs_free_threading = pytest.mark.skipif(
    not FREE_THREADED,
    reason="not a free-threaded build of CPython (Py_GIL_DISABLED unset): "
    "there is no GIL to leave off")


def run(code, **env_overrides):
    # PYTHON_GIL=1 would force the GIL on whatever the module declares.
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    env.update(env_overrides)
    return subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=120, env=env)


@needs_free_threading
def test_import_leaves_the_gil_off():
    result = run("import sys, caibridge; print(sys._is_gil_enabled())")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False"], \
        "sys._is_gil_enabled() after import: " + result.stdout + result.stderr
    # CPython warns (RuntimeWarning) when a module turns the GIL back on.
    assert "GIL" not in result.stderr, result.stderr


@needs_free_threading
def test_import_with_warnings_as_errors():
    """-W error turns the GIL warning into an ImportError: the import
    must still succeed, with the GIL off after hand-overs in each
    direction."""
    result = run("import sys, array, caibridge\n"
                 "a = array.array('f', [1, 2, 3])\n"
                 "v = caibridge.from_dlpack(caibridge.as_dlpack(a))\n"
                 "c = caibridge.to_dlpack(a, max_version=(1, 3))\n"
                 "assert v.__array_interface__['shape'] == (3,)\n"
                 "print(sys._is_gil_enabled())",
                 PYTHONWARNINGS="error")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False"], result.stdout + result.stderr

