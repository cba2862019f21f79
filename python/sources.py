"""The C sources, read from the Automake fragments so the Autotools build
and the pip build (setup.py) share one list: the core's from src/local.mk
(CAI_CORE_SOURCES), the extension's from python/local.mk
(CAI_PY_SOURCES).  Also the other facts both builds read: the version
(include/caibridge.h, its one place) and the folders that may hold the
CUDA headers.

    python python/sources.py               the C sources
    python python/sources.py --version     the version
    python python/sources.py --cuda-include
                                           the first folder with CUDA headers
"""
import glob
import os
import re
import sys


def _make_list(root, fragment, variable):
    """The .c files that variable lists in the Automake fragment."""
    with open(os.path.join(root, fragment), encoding="utf-8") as f:
        text = f.read().replace("\\\n", " ")
    match = re.search(r"^%s\s*=(.*)$" % variable, text, re.MULTILINE)
    if match is None:
        raise RuntimeError("%s defines no %s" % (fragment, variable))
    sources = match.group(1).split()
    if not sources or not all(s.endswith(".c") for s in sources):
        raise RuntimeError("%s in %s should list only .c files, got %r"
                           % (variable, fragment, sources))
    return sources


def core_sources(root):
    """Paths, relative to root, of the core library's C sources."""
    return _make_list(root, os.path.join("src", "local.mk"),
                      "CAI_CORE_SOURCES")


def module_sources(root):
    """Paths, relative to root, of the extension module's C sources."""
    return _make_list(root, os.path.join("python", "local.mk"),
                      "CAI_PY_SOURCES")


def version(root):
    """The version, from CAIBRIDGE_VERSION_STRING in include/caibridge.h."""
    with open(os.path.join(root, "include", "caibridge.h"),
              encoding="utf-8") as f:
        match = re.search(r'^#define CAIBRIDGE_VERSION_STRING "([^"]+)"',
                          f.read(), re.MULTILINE)
    if match is None:
        raise RuntimeError("include/caibridge.h defines no "
                           "CAIBRIDGE_VERSION_STRING")
    return match.group(1)


def cuda_include_dirs():
    """Folders that may hold the CUDA runtime headers, in the order tried:
    the toolkit CUDA_HOME or CUDA_PATH names, NVIDIA's pip package
    nvidia-cuda-runtime (nvidia/cu13/include from 13.0 on,
    nvidia/cuda_runtime/include before) on sys.path, /usr/local/cuda.
    Only folders with all the headers the build includes."""
    dirs = [os.path.join(os.environ[name], "include")
            for name in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(name)]
    for entry in sys.path:
        base = os.path.join(entry or os.curdir, "nvidia")
        dirs += sorted(glob.glob(os.path.join(base, "cu[0-9]*", "include")),
                       reverse=True)
        dirs.append(os.path.join(base, "cuda_runtime", "include"))
    dirs.append("/usr/local/cuda/include")
    # crt/ comes in its own package (nvidia-cuda-crt) from CUDA 13 on.
    return [d for d in dirs if all(os.path.isfile(os.path.join(d, h)) for h in
                                   ("cuda_runtime_api.h", "cuda.h",
                                    os.path.join("crt", "host_defines.h")))]


def nvtx_include_dirs():
    """Folders holding NVTX v3's header-only nvtx3/nvToolsExt.h, in the
    order tried: the toolkit CUDA_HOME or CUDA_PATH names, NVIDIA's pip
    packages (nvidia-nvtx: nvidia/cu*/include or nvidia/nvtx/include) on
    sys.path, /usr/local/cuda, then /usr/local/cuda-*, newest first."""
    dirs = [os.path.join(os.environ[name], "include")
            for name in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(name)]
    for entry in sys.path:
        base = os.path.join(entry or os.curdir, "nvidia")
        dirs += sorted(glob.glob(os.path.join(base, "cu[0-9]*", "include")),
                       reverse=True)
        dirs.append(os.path.join(base, "nvtx", "include"))
    dirs.append("/usr/local/cuda/include")
    dirs += sorted(glob.glob("/usr/local/cuda-*/include"), reverse=True)
    return [d for d in dirs
            if os.path.isfile(os.path.join(d, "nvtx3", "nvToolsExt.h"))]


def cudart_version(include):
    """CUDART_VERSION of the headers in include (13000 for 13.0), or None."""
    try:
        with open(os.path.join(include, "cuda_runtime_api.h"),
                  encoding="utf-8", errors="replace") as f:
            match = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", f.read())
    except OSError:
        return None
    return int(match.group(1)) if match else None


if __name__ == "__main__":
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if sys.argv[1:] == ["--version"]:
        print(version(top))
    elif sys.argv[1:] == ["--nvtx-include"]:
        found = nvtx_include_dirs()
        if not found:
            sys.exit(1)
        print(os.path.abspath(found[0]))
    elif sys.argv[1:] == ["--cuda-include"]:
        found = [d for d in cuda_include_dirs() if cudart_version(d)]
        if not found:
            sys.exit(1)
        print(os.path.abspath(found[0]))
    else:
        print("\n".join(core_sources(top) + module_sources(top)))
