"""pip build of caibridge: the same C sources as the Autotools build.

The lists of sources come from src/local.mk (the core) and python/local.mk
(the extension), see python/sources.py; src/ is on the include path for
the core's private header that the extension shares.  What configure would
write to config.h (HAVE_CUDA, CAI_CUDART_SONAME) is worked out here from the
CUDA headers and written to a config.h in the build directory.

CUDA support is always built: the headers come from NVIDIA's pip package
nvidia-cuda-runtime (a build requirement in pyproject.toml), or from the
toolkit that CUDA_HOME or CUDA_PATH names.  A build without CUDA happens
only when CAIBRIDGE_CUDA=0 asks for it, and says so.  Every object is
compiled again on every build (no stale build/ state decides what a rebuild
gives), and the version is read from include/caibridge.h, its one place.
"""
import os
import re
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(ROOT, "python"))
from sources import cuda_include_dirs, cudart_version, version  # noqa: E402
from sources import nvtx_include_dirs  # noqa: E402
from sources import core_sources, module_sources  # noqa: E402

sys.path.pop(0)


def cuda_config():
    """(include folder, config.h lines) for the CUDA headers to build with."""
    if os.environ.get("CAIBRIDGE_CUDA", "") == "0":
        sys.stderr.write(
            "caibridge: CAIBRIDGE_CUDA=0: building WITHOUT CUDA support; "
            "CUDA arrays will raise CUDAError\n")
        return None, []
    for include in cuda_include_dirs():
        found = cudart_version(include)
        if found is None:
            continue
        sys.stderr.write("caibridge: CUDA %d.%d headers from %s\n"
                         % (found // 1000, found % 1000 // 10, include))
        return include, [
            "#define HAVE_CUDA 1",
            '#define CAI_CUDART_SONAME "libcudart.so.%d"' % (found // 1000)]
    raise SystemExit(
        "caibridge: no CUDA headers (cuda_runtime_api.h, cuda.h, "
        "crt/host_defines.h) found (tried %s).  pip installs them from the "
        "build requirements nvidia-cuda-runtime and nvidia-cuda-crt; "
        "without build isolation, `pip install nvidia-cuda-runtime "
        "nvidia-cuda-crt` or set "
        "CUDA_HOME to a CUDA toolkit.  CAIBRIDGE_CUDA=0 builds without CUDA."
        % "CUDA_HOME, CUDA_PATH, nvidia/cu*/include on sys.path, "
        "/usr/local/cuda")


def target_machine():
    """The machine a cross build targets (_PYTHON_HOST_PLATFORM=linux-aarch64,
    as .ci/wheels sets with zig's cross compiler), else None."""
    target = os.environ.get("_PYTHON_HOST_PLATFORM", "")
    if not target.startswith("linux-"):
        return None
    machine = target[len("linux-"):]
    return None if machine == os.uname().machine else machine


class BuildExt(build_ext):
    def get_ext_filename(self, fullname):
        # A cross build names the module for the target's interpreter
        # (_core.cpython-311-aarch64-linux-gnu.so), not the host's.
        name = super().get_ext_filename(fullname)
        machine = target_machine()
        if machine is not None:
            name = name.replace("-%s-linux-" % os.uname().machine,
                                "-%s-linux-" % machine)
        return name

    def finalize_options(self):
        super().finalize_options()
        # The CUDA headers found may differ from the last build's: compile
        # everything again rather than trust timestamps in build/.
        self.force = True

    def build_extensions(self):
        cuda_include, lines = cuda_config()
        nvtx = nvtx_include_dirs() if cuda_include else []
        # NVTX v3 is header only: marks in a profiler where its header is
        # found (a toolkit, nvidia-nvtx), else compiled out.
        sys.stderr.write("caibridge: NVTX marks: %s\n" % (
            "header from " + nvtx[0] if nvtx else "compiled out (no "
            "nvtx3/nvToolsExt.h beside the CUDA headers, in nvidia-nvtx or "
            "/usr/local/cuda*)"))
        if nvtx:
            lines.append("#define HAVE_NVTX 1")
        config_dir = os.path.join(self.build_temp, "caibridge-config")
        os.makedirs(config_dir, exist_ok=True)
        with open(os.path.join(config_dir, "config.h"), "w") as f:
            f.write("/* Written by setup.py for the pip build. */\n")
            f.write("\n".join(lines) + "\n")
        for ext in self.extensions:
            ext.include_dirs.insert(0, config_dir)
            if cuda_include:
                ext.include_dirs.append(cuda_include)
            if nvtx:
                ext.include_dirs.append(nvtx[0])
        super().build_extensions()


# Only PyInit__core leaves the extension: the core's cai_* functions stay
# inside, so a system libcaibridge in the same process cannot clash.
link_args = []
if sys.platform.startswith("linux"):
    link_args = ["-Wl,--version-script=" + os.path.join(
        "python", "caibridge", "_core.map")]

core = Extension(
    "caibridge._core",
    sources=core_sources(ROOT) + module_sources(ROOT),
    include_dirs=["include", "src"],
    define_macros=[("CAIBRIDGE_BUILDING", "1")],
    extra_compile_args=["-fvisibility=hidden"],
    extra_link_args=link_args,
    libraries=["dl", "pthread"] if sys.platform.startswith("linux") else [],
)

setup(
    version=version(ROOT),
    ext_modules=[core],
    cmdclass={"build_ext": BuildExt},
    package_dir={"caibridge": "python/caibridge"},
    packages=["caibridge"],
    package_data={"caibridge": ["__init__.pyi", "py.typed"]},
    # Only what package_data names: the C sources stay out of the wheel.
    include_package_data=False,
)
