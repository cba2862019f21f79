"""What the pip build (setup.py, python/sources.py) decides: CUDA headers
from NVIDIA's pip package on sys.path, a build without CUDA only when
CAIBRIDGE_CUDA=0 asks and then said aloud, every object compiled afresh,
and the version from its one place.  setup.py is run with setuptools'
setup() stubbed out, so nothing is compiled."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

import caibridge

TOP = pathlib.Path(__file__).resolve().parents[2]

pytest.importorskip("setuptools", reason="setuptools is not installed in "
                    "this environment (Python 3.12+ venvs lack it)")

PROBE = r"""
import json, os, runpy, sys
import setuptools
setuptools.setup = lambda **kw: None
os.chdir(sys.argv[1])
g = runpy.run_path("setup.py")
if sys.argv[2] == "cuda":
    print(json.dumps(g["cuda_config"]()))
else:
    from setuptools.dist import Distribution
    cmd = g["BuildExt"](Distribution())
    cmd.ensure_finalized()
    print(json.dumps(cmd.force))
"""


def probe(what, path_first=None, **env_changes):
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_HOME", "CUDA_PATH", "CAIBRIDGE_CUDA")}
    env.update(env_changes)
    if path_first is not None:
        env["PYTHONPATH"] = str(path_first)
    out = subprocess.run([sys.executable, "-c", PROBE, str(TOP), what],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip(), out.stderr


def fake_headers(root, version=13020, crt=True):
    inc = root / "nvidia" / "cu13" / "include"
    (inc / "crt").mkdir(parents=True)
    (inc / "cuda_runtime_api.h").write_text(
        "#define CUDART_VERSION %d\n" % version)
    (inc / "cuda.h").write_text("/* driver API */\n")
    if crt:
        (inc / "crt" / "host_defines.h").write_text("/* crt */\n")
    return inc


def test_no_cuda_only_by_name_and_said(tmp_path):
    out, err = probe("cuda", CAIBRIDGE_CUDA="0")
    assert out == "[null, []]"
    assert "CAIBRIDGE_CUDA=0: building WITHOUT CUDA support" in err


def test_headers_from_pip_package_on_sys_path(tmp_path):
    inc = fake_headers(tmp_path)
    out, err = probe("cuda", path_first=tmp_path)
    assert out == ('["%s", ["#define HAVE_CUDA 1", "#define '
                   'CAI_CUDART_SONAME \\"libcudart.so.13\\""]]' % inc)
    assert "CUDA 13.2 headers from %s" % inc in err


def test_headers_without_crt_are_passed_over(tmp_path):
    inc = fake_headers(tmp_path, crt=False)
    out, _ = probe("cuda", path_first=tmp_path)
    assert str(inc) not in out


def test_cuda_home_comes_first(tmp_path):
    fake_headers(tmp_path / "pip")
    home = tmp_path / "toolkit"
    inc = fake_headers(home, version=12080)
    out, err = probe("cuda", path_first=tmp_path / "pip",
                     CUDA_HOME=str(inc.parent))
    assert "libcudart.so.12" in out and str(inc) in out, out


def test_every_build_compiles_afresh():
    out, _ = probe("force")
    assert out == "true"


def test_one_version():
    sys.path.insert(0, str(TOP / "python"))
    try:
        import sources
    finally:
        sys.path.pop(0)
    assert sources.version(str(TOP)) == caibridge.__version__
    configure = (TOP / "configure.ac").read_text()
    init = configure.split("AC_INIT", 1)[1].split("\n\n", 1)[0]
    assert "include/caibridge.h" in init
    assert not re.search(r"\d+\.\d+\.\d+", init), \
        "configure.ac reads the version from include/caibridge.h"
