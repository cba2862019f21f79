"""pip build of caibridge: the same C sources as the Autotools build.

The lists of sources come from src/local.mk (the core) and python/local.mk
(the extension), see python/sources.py; src/ is on the include path for
the core's private header that the extension shares.  What configure would write to
config.h (HAVE_CUDA, CAI_CUDART_SONAME) is worked out here from the CUDA
headers, when present, and written to a config.h in the build directory.
"""
import os
import re
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(ROOT, "python"))
from sources import core_sources, module_sources  # noqa: E402

sys.path.pop(0)


def cuda_config():
    """config.h lines for the CUDA toolkit headers found, if any."""
    if os.environ.get("CAIBRIDGE_CUDA", "") == "0":
        return None, []
    for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                 "/usr/local/cuda"):
        if not base:
            continue
        header = os.path.join(base, "include", "cuda_runtime_api.h")
        if not os.path.exists(header):
            continue
        with open(header, encoding="utf-8", errors="replace") as f:
            match = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", f.read())
        if match is None:
            continue
        major = int(match.group(1)) // 1000
        return os.path.join(base, "include"), [
            "#define HAVE_CUDA 1",
            '#define CAI_CUDART_SONAME "libcudart.so.%d"' % major]
    return None, []


class BuildExt(build_ext):
    def build_extensions(self):
        cuda_include, lines = cuda_config()
        config_dir = os.path.join(self.build_temp, "caibridge-config")
        os.makedirs(config_dir, exist_ok=True)
        with open(os.path.join(config_dir, "config.h"), "w") as f:
            f.write("/* Written by setup.py for the pip build. */\n")
            f.write("\n".join(lines) + "\n")
        for ext in self.extensions:
            ext.include_dirs.insert(0, config_dir)
            if cuda_include:
                ext.include_dirs.append(cuda_include)
        super().build_extensions()


core = Extension(
    "caibridge._core",
    sources=core_sources(ROOT) + module_sources(ROOT),
    include_dirs=["include", "src"],
    define_macros=[("CAIBRIDGE_BUILDING", "1")],
    extra_compile_args=["-fvisibility=hidden"],
    libraries=["dl"] if sys.platform.startswith("linux") else [],
)

setup(
    ext_modules=[core],
    cmdclass={"build_ext": BuildExt},
    package_dir={"caibridge": "python/caibridge"},
    packages=["caibridge"],
    package_data={"caibridge": ["__init__.pyi", "py.typed"]},
    # Only what package_data names: the C sources stay out of the wheel.
    include_package_data=False,
)
