"""Where caibridge finds the CUDA runtime, and where it must not.

Found: NVIDIA's pip wheels (nvidia/cu13/lib, nvidia/cuda_runtime/lib) in
the site-packages folders (site.getsitepackages(), the user site),
$CONDA_PREFIX/lib and CAIBRIDGE_CUDART, searched again after a failed
search, with Python told which runtime was loaded, from where and how.

Never loaded: a library in any other folder on sys.path (the working
directory, a script's folder, PYTHONPATH, sys.path.append), or one that
others may write or own (the file, or any folder on its path).  The
planted library (tests/cuda/planted.c) creates $PLANTED_MARKER when
loaded, so each case checks the file was never made, and that the
diagnostic (``cuda_runtime_info()["refused"]``, or the CUDAError when
nothing was found) names the file and says why.

Each case runs in a fresh interpreter of a virtual environment made here,
whose site-packages folder is the test's own: a runtime, once loaded,
stays for the life of the process, and the tests' own environment may
hold a real one.  The runtime is the recording double
(tests/cuda/cudart-double.c), copied as libcudart.so.13.
"""

import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import caibridge

pytestmark = pytest.mark.skipif(not caibridge.cuda_built(),
                                reason="built without CUDA support")

ROOT = os.geteuid() == 0
NOBODY = 65534


@pytest.fixture(autouse=True)
def _umask_022():
    """The folders these tests make must pass caibridge's checks (or fail
    them only where a test says) whatever the caller's umask: under 002
    every folder would be group-writable."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def built(name):
    """A library built in tests/cuda: its copy in the private folder make
    check made (tests/cuda/private-doubles.sh), else the build's own
    (<build>/python/stage/caibridge is where the package is staged)."""
    private = os.environ.get("CAIBRIDGE_TEST_DOUBLES")
    if private:
        path = pathlib.Path(private) / name
        assert path.exists(), f"not copied: {path}"
        return path
    spec = importlib.util.find_spec("caibridge")
    build = pathlib.Path(spec.origin).resolve().parents[3]
    path = build / "tests" / "cuda" / ".libs" / name
    assert path.exists(), f"not built: {path}"
    return path


def package_dir():
    """The folder holding the caibridge package, for PYTHONPATH."""
    return pathlib.Path(importlib.util.find_spec("caibridge").origin) \
        .resolve().parents[1]


def put(lib_dir, library="libcudart-double.so", mode=0o644):
    """lib_dir/libcudart.so.13: the double, or the planted library."""
    lib_dir.mkdir(parents=True, exist_ok=True)
    target = lib_dir / "libcudart.so.13"
    shutil.copy(built(library), target)
    target.chmod(mode)
    return target


def plant(lib_dir, mode=0o644):
    return put(lib_dir, "libplanted.so", mode)


class Env:
    """A virtual environment of the test's own (no pip, no packages): its
    site-packages folder is the only one searched, unless the user site is
    turned on."""

    def __init__(self, tmp_path, user_site=False):
        self.root = tmp_path / "env"
        (self.root / "bin").mkdir(parents=True)
        base = pathlib.Path(sys._base_executable).resolve()
        self.python = self.root / "bin" / "python"
        self.python.symlink_to(base)
        (self.root / "pyvenv.cfg").write_text(
            "home = %s\ninclude-system-site-packages = %s\n"
            % (base.parent, "true" if user_site else "false"))
        self.marker = tmp_path / "planted-was-loaded"
        self.userbase = tmp_path / "userbase"
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("CAIBRIDGE_", "PYTHON"))
                    and k != "CONDA_PREFIX"}
        self.env.update(PYTHONPATH=str(package_dir()),
                        PYTHONUSERBASE=str(self.userbase),
                        PYTHONDONTWRITEBYTECODE="1",
                        PLANTED_MARKER=str(self.marker))
        self.site = pathlib.Path(self.run(
            "import site; print(site.getsitepackages()[0])")[0])
        self.site.mkdir(parents=True, exist_ok=True)

    def wheel(self, sub="cu13"):
        return self.site / "nvidia" / sub / "lib"

    def run(self, code=None, args=None, cwd=None, **env_changes):
        env = dict(self.env, **env_changes)
        argv = [str(self.python)] + (args if args is not None
                                     else ["-c", code])
        out = subprocess.run(argv, env=env, cwd=cwd or self.root,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout.splitlines()

    def search(self, before="", cwd=None, **env_changes):
        """Searches once, after the code before: what was found, or the
        error, and the refusals."""
        code = before + SEARCH
        (line,) = [s for s in self.run(code, cwd=cwd, **env_changes)
                   if s.startswith("{")]
        return json.loads(line)

    def planted_loaded(self):
        return self.marker.exists()


SEARCH = """
import json, caibridge
try:
    info = caibridge.cuda_runtime_info()
except caibridge.CUDAError as e:
    info = {"how": None, "path": None, "refused": e.refused, "error": str(e)}
print(json.dumps(info))
"""


def said(result, path, reason):
    """The diagnostic names path and gives reason: a line of refused, or
    the error when no runtime was found."""
    lines = result["refused"] + [result.get("error", "")]
    return any(str(path) in line and reason in line for line in lines)


def test_planted_library_marks_its_loading(tmp_path):
    """The control: loaded from a place that passes the checks, the planted
    library makes its marker (and is then refused as no runtime)."""
    env = Env(tmp_path)
    planted = plant(tmp_path / "safe")
    result = env.search(CAIBRIDGE_CUDART=str(planted))
    assert env.planted_loaded()
    assert "is not a usable CUDA runtime" in result["error"]


@pytest.mark.parametrize("sub", ["cu13", "cuda_runtime"])
def test_wheel_in_site_packages_is_found(tmp_path, sub):
    env = Env(tmp_path)
    lib = put(env.wheel(sub))
    result = env.search()
    assert result["how"] == "pip wheel"
    assert result["path"] == str(lib.resolve())
    assert result["version"] >= 11000
    assert result["refused"] == []


def test_cu13_is_searched_before_cuda_runtime(tmp_path):
    env = Env(tmp_path)
    newest = put(env.wheel("cu13"))
    put(env.wheel("cuda_runtime"))
    result = env.search()
    assert result["path"] == str(newest.resolve())


def test_user_site_is_searched(tmp_path):
    env = Env(tmp_path, user_site=True)
    (line,) = env.run("import site; print(site.getusersitepackages())")
    lib = put(pathlib.Path(line) / "nvidia" / "cu13" / "lib")
    result = env.search()
    assert result["how"] == "pip wheel"
    assert result["path"] == str(lib.resolve())


def test_working_directory_under_python_m(tmp_path):
    env = Env(tmp_path)
    work = tmp_path / "work"
    planted = plant(work / "nvidia" / "cu13" / "lib")
    env.run(args=["-m", "caibridge"], cwd=work)
    assert not env.planted_loaded()
    result = env.search(cwd=work)
    assert not env.planted_loaded()
    assert said(result, planted, "not searched")


def test_script_folder(tmp_path):
    env = Env(tmp_path)
    scripts = tmp_path / "scripts"
    planted = plant(scripts / "nvidia" / "cu13" / "lib")
    (scripts / "run.py").write_text(SEARCH)
    (line,) = env.run(args=[str(scripts / "run.py")])
    assert not env.planted_loaded()
    assert said(json.loads(line), planted, "not searched")


def test_world_writable_pythonpath_entry(tmp_path):
    env = Env(tmp_path)
    shared = tmp_path / "shared"
    planted = plant(shared / "nvidia" / "cu13" / "lib")
    shared.chmod(0o777)
    result = env.search(PYTHONPATH=os.pathsep.join(
        [str(shared), str(package_dir())]))
    assert not env.planted_loaded()
    assert said(result, planted, "not searched")


def test_sys_path_append_at_run_time(tmp_path):
    env = Env(tmp_path)
    later = tmp_path / "later"
    planted = plant(later / "nvidia" / "cu13" / "lib")
    result = env.search("import sys; sys.path.append(%r)\n" % str(later))
    assert not env.planted_loaded()
    assert said(result, planted, "not searched")


def test_world_writable_library_file(tmp_path):
    """Refused in cu13; the double in cuda_runtime is then loaded."""
    env = Env(tmp_path)
    planted = plant(env.wheel("cu13"), mode=0o666)
    good = put(env.wheel("cuda_runtime"))
    result = env.search()
    assert not env.planted_loaded()
    assert result["path"] == str(good.resolve())
    assert said(result, planted, "may be written by others (mode 0666)")


def test_world_writable_folder_above_the_library(tmp_path):
    """A folder two levels up, not sticky: others could rename the wheel's
    folders away and put their own."""
    env = Env(tmp_path)
    planted = plant(env.wheel("cu13"))
    (env.site / "nvidia").chmod(0o777)
    result = env.search()
    assert not env.planted_loaded()
    assert said(result, planted, "its folder %s may be written by others"
                % (env.site / "nvidia").resolve())


def test_relative_site_folder(tmp_path):
    """A relative site-packages folder (site.getsitepackages() as a
    relative sys.prefix gives it) would depend on the working directory."""
    env = Env(tmp_path)
    work = tmp_path / "work"
    plant(work / "relsite" / "nvidia" / "cu13" / "lib")
    result = env.search("import site; site.getsitepackages = "
                        "lambda: ['relsite']\n", cwd=work)
    assert not env.planted_loaded()
    assert said(result, "relsite/nvidia/cu13/lib", "relative folder")


def test_conda_prefix_lib_is_found(tmp_path):
    env = Env(tmp_path)
    lib = put(tmp_path / "conda" / "lib")
    result = env.search(CONDA_PREFIX=str(tmp_path / "conda"))
    assert result["how"] == "conda"
    assert result["path"] == str(lib.resolve())


def test_conda_prefix_lib_world_writable(tmp_path):
    env = Env(tmp_path)
    lib = tmp_path / "conda" / "lib"
    planted = plant(lib)
    lib.chmod(0o777)
    result = env.search(CONDA_PREFIX=str(tmp_path / "conda"))
    assert not env.planted_loaded()
    assert said(result, planted, "its folder %s may be written by others"
                % lib.resolve())


@pytest.mark.skipif(not ROOT, reason="giving a folder to another user "
                    "(chown) needs root")
def test_conda_prefix_lib_owned_by_another_user(tmp_path):
    env = Env(tmp_path)
    lib = tmp_path / "conda" / "lib"
    planted = plant(lib)
    os.chown(lib, NOBODY, NOBODY)
    result = env.search(CONDA_PREFIX=str(tmp_path / "conda"))
    assert not env.planted_loaded()
    assert said(result, planted, "its folder %s is owned by uid %d"
                % (lib.resolve(), NOBODY))


@pytest.mark.skipif(not ROOT, reason="giving a file to another user "
                    "(chown) needs root")
def test_library_file_owned_by_another_user(tmp_path):
    env = Env(tmp_path)
    planted = plant(env.wheel("cu13"))
    os.chown(planted, NOBODY, NOBODY)
    result = env.search()
    assert not env.planted_loaded()
    assert said(result, planted, "%s is owned by uid %d"
                % (planted.resolve(), NOBODY))


def test_relative_conda_prefix(tmp_path):
    env = Env(tmp_path)
    work = tmp_path / "work"
    plant(work / "rel" / "lib")
    result = env.search(cwd=work, CONDA_PREFIX="rel")
    assert not env.planted_loaded()
    assert said(result, "rel/lib", "CONDA_PREFIX=rel is not an absolute "
                "path")


def test_failed_search_is_retried(tmp_path):
    """The first search fails (CAIBRIDGE_CUDART names no file); once the
    variable is gone and a wheel is in site-packages, the next call finds
    the runtime there, in the same process."""
    env = Env(tmp_path)
    code = """
import os, caibridge, json
try:
    caibridge.cuda_runtime_info()
except caibridge.CUDAError as e:
    print("first:", e)
del os.environ["CAIBRIDGE_CUDART"]
lib = %r
os.makedirs(os.path.dirname(lib))
import shutil; shutil.copy(%r, lib)
info = caibridge.cuda_runtime_info()
print("second:", info["how"], info["path"])
""" % (str(env.wheel() / "libcudart.so.13"),
       str(built("libcudart-double.so")))
    first, second = env.run(
        code, CAIBRIDGE_CUDART="/nonexistent/libcudart.so.13")
    assert first.startswith("first: CAIBRIDGE_CUDART=/nonexistent/")
    assert "could not be loaded" in first
    assert second == "second: pip wheel %s" % (
        env.wheel() / "libcudart.so.13").resolve()


def test_chosen_runtime_wins_and_is_reported(tmp_path):
    env = Env(tmp_path)
    put(env.wheel())
    chosen = built("libcudart-double.so").resolve()
    result = env.search(CAIBRIDGE_CUDART=str(chosen))
    assert result["how"] == "CAIBRIDGE_CUDART"
    assert result["path"] == str(chosen)


def test_chosen_link_reports_and_checks_its_target(tmp_path):
    """A link is followed: its target is what is checked, loaded and
    reported."""
    env = Env(tmp_path)
    target = put(tmp_path / "safe")
    link = tmp_path / "libcudart.so.13"
    link.symlink_to(target)
    result = env.search(CAIBRIDGE_CUDART=str(link))
    assert result["path"] == str(target.resolve())

    bad = tmp_path / "open"
    planted = plant(bad)
    bad.chmod(0o777)
    link.unlink()
    link.symlink_to(planted)
    result = env.search(CAIBRIDGE_CUDART=str(link))
    assert not env.planted_loaded()
    assert said(result, link, "its folder %s may be written by others"
                % bad.resolve()), result


def test_relative_chosen_runtime_is_refused(tmp_path):
    env = Env(tmp_path)
    result = env.search(CAIBRIDGE_CUDART="libcudart.so.13")
    assert "must be an absolute path" in result["error"]


def special_file(tmp_path, kind):
    """A FIFO, a listening socket or a character device where a runtime is
    looked for; returns its path and what keeps it (a socket)."""
    import socket
    keep = None
    if kind == "fifo":
        path = tmp_path / "lib" / "libcudart.so.13"
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path)
    elif kind == "socket":
        path = tmp_path / "lib" / "libcudart.so.13"
        path.parent.mkdir(parents=True, exist_ok=True)
        keep = socket.socket(socket.AF_UNIX)
        keep.bind(str(path))
    else:
        path = pathlib.Path("/dev/null")
    return path, keep


KINDS = {"fifo": "a named pipe (FIFO)", "socket": "a socket",
         "device": "a character device"}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_chosen_special_file_is_refused_promptly(tmp_path, kind):
    """CAIBRIDGE_CUDART naming a FIFO (which blocked the open forever), a
    socket or a device: refused at once with a message naming its type."""
    env = Env(tmp_path)
    path, keep = special_file(tmp_path, kind)
    result = env.search(CAIBRIDGE_CUDART=str(path))   # 120 s timeout
    assert said(result, path.resolve(), "is %s, not a regular file"
                % KINDS[kind]), result
    if keep is not None:
        keep.close()


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_special_file_in_a_wheel_folder_is_refused(tmp_path, kind):
    """The same file where NVIDIA's wheel would be: refused, the search
    goes on, and no thread is held."""
    env = Env(tmp_path)
    lib = env.wheel()
    lib.mkdir(parents=True)
    path, keep = special_file(tmp_path, kind)
    os.replace(path, lib / "libcudart.so.13")
    result = env.search()
    assert said(result, lib / "libcudart.so.13", "not a regular file"), \
        result
    if keep is not None:
        keep.close()


@pytest.mark.parametrize("entry", ["", "lib"])
def test_relative_ld_library_path_entry_is_not_loaded(tmp_path, entry):
    """LD_LIBRARY_PATH "/x:" (an empty entry) or "/x:lib" names a folder
    relative to the working directory, where the loader would find a
    planted libcudart.so.13 by soname: it is refused, never loaded."""
    env = Env(tmp_path)
    work = tmp_path / "work"
    plant(work / entry if entry else work)
    result = env.search(cwd=work, LD_LIBRARY_PATH="/nonexistent:" + entry)
    assert not env.planted_loaded()
    where = "libcudart.so.13" if not entry else "lib/libcudart.so.13"
    assert said(result, where, "relative to the working directory"), result


def test_long_reasons_are_cut_at_a_word_with_a_pointer(tmp_path):
    """A first reason longer than the C error message has room for is
    whole in the CUDAError (the C message ends at a word and says where
    all the reasons are); the refused list has each whole, with the error
    too."""
    env = Env(tmp_path)
    deep = tmp_path / ("a-rather-long-folder-name-" * 6) / "lib"
    deep.mkdir(parents=True)
    os.mkfifo(deep / "libcudart.so.13")
    result = env.search(CAIBRIDGE_CUDART=str(deep / "libcudart.so.13"))
    assert "..." not in result["error"], result["error"]
    assert result["error"].endswith(
        "is a named pipe (FIFO), not a regular file"), result["error"]
    assert said(result, deep.resolve() / "libcudart.so.13",
                "is a named pipe (FIFO), not a regular file"), result


HAND_OVER = """
import ctypes, json, caibridge
a = ctypes.create_string_buffer(24)
class C:
    __cuda_array_interface__ = {"shape": (3,), "typestr": "<f8",
                                "data": (ctypes.addressof(a), False),
                                "version": 3, "stream": None}
try:
    caibridge.as_dlpack(C())
except caibridge.CUDAError as e:
    print(json.dumps({"error": str(e),
                      "refused": getattr(e, "refused", "no attribute")}))
"""


def test_hand_over_error_has_refused_and_the_whole_reason(tmp_path):
    """cuda.rst: the CUDAError raised when no runtime is found carries
    .refused, the one a hand-over raises too, and its message gives the
    first reason whole, however long the path."""
    env = Env(tmp_path)
    deep = tmp_path / ("a-rather-long-folder-name-" * 6)
    lib = put(deep)
    deep.chmod(0o777)
    (line,) = [s for s in env.run(HAND_OVER, CAIBRIDGE_CUDART=str(lib))
               if s.startswith("{")]
    result = json.loads(line)
    reason = "its folder %s may be written by others (mode 0777)" % deep
    assert result["error"].startswith("data: CAIBRIDGE_CUDART=%s is not "
                                      "used: %s" % (lib, reason)), result
    assert "..." not in result["error"]
    assert said(result, lib, reason), result


def test_cut_reasons_keep_the_first_whole(tmp_path):
    """Many reasons: the message has the first whole, then says where the
    rest are."""
    env = Env(tmp_path)
    for sub in ("cu13", "cuda_runtime"):
        folder = env.wheel(sub)
        folder.mkdir(parents=True)
        os.mkfifo(folder / "libcudart.so.13")
    long_prefix = tmp_path / ("a-rather-long-folder-name-" * 6)
    long_prefix.mkdir()
    result = env.search(CONDA_PREFIX=str(long_prefix))
    if result["how"] is not None:
        pytest.skip("a CUDA runtime was found on this machine (%s): the "
                    "search does not fail here" % result["path"])
    first = "%s is a named pipe (FIFO), not a regular file" % (
        env.wheel("cu13") / "libcudart.so.13")
    assert first in result["error"], result["error"]
    assert result["error"].endswith("...; all reasons: python -m caibridge")


@pytest.mark.skipif("srcdir" not in os.environ,
                    reason="run outside make check, which makes the "
                           "private folder (tests/cuda/private-doubles.sh)")
def test_make_check_loads_the_double_from_a_private_folder(tmp_path):
    """A tree unpacked with umask 002 (git archive | tar -x as root) has
    0775 folders, where caibridge rightly refuses a runtime: make check
    gives each test copies of the doubles in a 0700 folder, so the tests
    pass whatever the umask of whoever unpacked the tree."""
    private = os.environ.get("CAIBRIDGE_TEST_DOUBLES")
    assert private, "make check named no private folder for the doubles"
    assert os.stat(private).st_mode & 0o7777 == 0o700
    double = built("libcudart-double.so")
    assert double.parent == pathlib.Path(private)
    result = Env(tmp_path).search(CAIBRIDGE_CUDART=str(double))
    assert result["how"] == "CAIBRIDGE_CUDART", result
    assert result["refused"] == []
