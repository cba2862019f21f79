"""caibridge.show_config() and python -m caibridge: the platform, where
caibridge was imported from, the build, the libraries beside it, the
environment, the CUDA runtime and driver found, each device, and a
self-test.  The devices are asked through ctypes of the runtime caibridge
itself loaded (the same file, so the same instance) and of the driver.

Every step is guarded: a failing or missing CUDA entry point, or an
exception of any kind, becomes a line of the report and makes the exit
status 1, never a traceback.
"""
import argparse
import array
import ctypes
import importlib
import json
import os
import platform
import sys
import sysconfig

import caibridge

# By name: the stubs describe the package, not its extension module.
_core = importlib.import_module("caibridge._core")

# Exit status of python -m caibridge and show_config().
EXIT_OK = 0        # every step ran; a missing GPU or runtime is not a failure
EXIT_FAILED = 1    # a self-test or a CUDA query failed: see the FAILED lines
EXIT_USAGE = 2     # the command line was wrong (argparse's own status)

# More devices than any machine has: a runtime reporting more is broken,
# and asking each one would take minutes.
MAX_DEVICES = 64

# cudaDeviceAttr values (stable across CUDA 11 to 13).
_ATTRIBUTES = [
    ("compute capability major", 75),
    ("compute capability minor", 76),
    ("memory pools supported", 115),
    ("concurrentManagedAccess", 89),
    ("pageable memory access", 88),
]

# Names of the errors users meet, for a runtime without cudaGetErrorName.
_ERROR_NAMES = {
    0: "cudaSuccess",
    1: "cudaErrorInvalidValue",
    2: "cudaErrorMemoryAllocation",
    3: "cudaErrorInitializationError",
    4: "cudaErrorCudartUnloading",
    34: "cudaErrorStubLibrary",
    35: "cudaErrorInsufficientDriver",
    36: "cudaErrorCallRequiresNewerDriver",
    46: "cudaErrorDevicesUnavailable",
    100: "cudaErrorNoDevice",
    101: "cudaErrorInvalidDevice",
    209: "cudaErrorNoKernelImageForDevice",
    222: "cudaErrorUnsupportedPtxVersion",
    304: "cudaErrorOperatingSystem",
    400: "cudaErrorInvalidResourceHandle",
    600: "cudaErrorNotReady",
    700: "cudaErrorIllegalAddress",
    719: "cudaErrorLaunchFailure",
    800: "cudaErrorNotPermitted",
    801: "cudaErrorNotSupported",
    803: "cudaErrorSystemDriverMismatch",
    804: "cudaErrorCompatNotSupportedOnDevice",
    999: "cudaErrorUnknown",
}

# Libraries reported when installed, by distribution name; read from their
# metadata, so none is imported.
_PACKAGES = [
    ("NumPy", ("numpy",)),
    ("torch", ("torch",)),
    ("CuPy", ("cupy", "cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x")),
    ("Numba", ("numba",)),
    ("numba-cuda", ("numba-cuda",)),
    ("JAX", ("jax",)),
    ("jaxlib", ("jaxlib",)),
    ("cuda-core", ("cuda-core",)),
    ("cuda-python", ("cuda-python", "cuda-bindings")),
    ("nvidia-cuda-runtime", ("nvidia-cuda-runtime",
                             "nvidia-cuda-runtime-cu12",
                             "nvidia-cuda-runtime-cu11")),
]

# Variables that change what caibridge finds, besides CAIBRIDGE_*.
_ENVIRONMENT = ("CONDA_PREFIX", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES",
                "CUDA_HOME")


def _version(v):
    return "%d.%d" % (v // 1000, v % 1000 // 10) if v else "none"


def error_name(code, rt=None):
    """A CUDA runtime error's name: cudaGetErrorName of the runtime when it
    has one, else a table of the common ones."""
    if rt is not None:
        try:
            get = rt.cudaGetErrorName
            if isinstance(get, ctypes._CFuncPtr):
                get.restype = ctypes.c_char_p
                get.argtypes = [ctypes.c_int]
            name = get(code)
            if name and not name.startswith(b"unrecognized"):
                return name.decode(errors="replace")
        except Exception:
            pass
    return _ERROR_NAMES.get(code, "error")


def _call(rt, name, *args):
    """rt.name(*args) -> (status, None), or (None, why) when the runtime
    lacks the entry point or the call raises."""
    try:
        function = getattr(rt, name)
    except AttributeError:
        return None, "the runtime has no %s" % name
    try:
        return int(function(*args)), None
    except Exception as e:
        return None, "%s raised %s: %s" % (name, type(e).__name__, e)


def _failure(name, rc, rt):
    return "%s returned %d (%s)" % (name, rc, error_name(rc, rt))


class _Array:
    """A one-dimensional float32 producer at an address, through
    __array_interface__ or __cuda_array_interface__."""

    def __init__(self, pointer, n, cuda, keep=None):
        self.iface = {"shape": (n,), "typestr": "<f4",
                      "data": (pointer, False), "version": 3}
        if cuda:
            self.iface["stream"] = None
            self.__cuda_array_interface__ = self.iface
        else:
            self.__array_interface__ = self.iface
        self.keep = keep


def _host_round_trip():
    data = array.array("f", [1.5, -2.0, 3.25, 4.0])
    pointer, n = data.buffer_info()
    back = caibridge.from_dlpack(caibridge.as_dlpack(_Array(pointer, n,
                                                            False, data)))
    iface = back.__array_interface__
    if iface["data"][0] != pointer or tuple(iface["shape"]) != (n,):
        return "FAILED (pointer or shape changed)"
    values = list((ctypes.c_float * n).from_address(iface["data"][0]))
    if values != list(data):
        return "FAILED (values differ: %r)" % values
    return "ok (zero-copy, %d float32 values)" % n


def _device_round_trip(rt, device):
    n = 4
    host = (ctypes.c_float * n)(1.5, -2.0, 3.25, 4.0)
    size = ctypes.sizeof(host)
    pointer = ctypes.c_void_p()
    rc, why = _call(rt, "cudaSetDevice", device)
    if rc != 0:
        return "FAILED (%s)" % (why or _failure("cudaSetDevice", rc, rt))
    rc, why = _call(rt, "cudaMalloc", ctypes.byref(pointer), size)
    if rc != 0:
        return "FAILED (%s)" % (why or _failure("cudaMalloc", rc, rt))
    if not pointer.value:
        return "FAILED (cudaMalloc returned success and a NULL pointer)"
    try:
        rc, why = _call(rt, "cudaMemcpy", pointer, host, size, 1)  # to device
        if rc != 0:
            return "FAILED (%s)" % (why or _failure("cudaMemcpy", rc, rt))
        try:
            back = caibridge.from_dlpack(caibridge.as_dlpack(
                _Array(pointer.value, n, True)))
            iface = back.__cuda_array_interface__
            device_type = back.__dlpack_device__()
        except caibridge.CUDAError as e:
            return "FAILED (CUDAError: %s)" % e
        if iface["data"][0] != pointer.value:
            return "FAILED (pointer changed)"
        if device_type != (caibridge.kDLCUDA, device):
            return "FAILED (device %r, not (kDLCUDA, %d))" % (device_type,
                                                              device)
        out = (ctypes.c_float * n)()
        rc, why = _call(rt, "cudaMemcpy", out,
                        ctypes.c_void_p(iface["data"][0]), size, 2)  # to host
        if rc != 0:
            return "FAILED (%s)" % (why or _failure("cudaMemcpy", rc, rt))
        if list(out) != list(host):
            return "FAILED (values differ: %r)" % list(out)
        return "ok (zero-copy, %d float32 values)" % n
    finally:
        _call(rt, "cudaFree", pointer)


def _device_name(device):
    try:
        drv = ctypes.CDLL("libcuda.so.1")
        name = ctypes.create_string_buffer(256)
        if drv.cuInit(0) == 0 and drv.cuDeviceGetName(name, 256, device) == 0:
            return name.value.decode(errors="replace")
    except (OSError, AttributeError):
        pass
    return "(name unknown: no libcuda.so.1)"


def _platform():
    libc, libc_version = platform.libc_ver()
    return {
        "os": "%s %s" % (platform.system(), platform.release()),
        "architecture": platform.machine(),
        "libc": ("%s %s" % (libc, libc_version)).strip() or "unknown",
        "python": "%s %s" % (platform.python_implementation(),
                             platform.python_version()),
        "executable": sys.executable,
    }


def _packages():
    """{name: version} of the libraries installed beside caibridge."""
    from importlib import metadata

    found = {}
    for label, distributions in _PACKAGES:
        for dist in distributions:
            try:
                found[label] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
            except Exception as e:  # a broken metadata folder
                found[label] = "unreadable (%s)" % e
                break
    return found


# The CAIBRIDGE_* variables caibridge, its build and its tests read
# (docs/environment.rst); any other such name is likely misspelt.
KNOWN_VARIABLES = ("CAIBRIDGE_CUDART", "CAIBRIDGE_SYNC",
                   "CAIBRIDGE_EVENT_POOL", "CAIBRIDGE_RELEASE",
                   "CAIBRIDGE_CUDA", "CAIBRIDGE_CACHE",
                   "CAIBRIDGE_BENCH_CACHE", "CAIBRIDGE_EXIT_PYTHON",
                   "CAIBRIDGE_EXIT_RUNS", "CAIBRIDGE_ORACLE_EXAMPLES",
                   "CAIBRIDGE_SOAK_JAX_N", "CAIBRIDGE_SOAK_N",
                   "CAIBRIDGE_TEST_NO_JAX")
_KNOWN_PREFIXES = ("CAIBRIDGE_WHY_NO_",)

_SYNC_WORDS = ("", "0", "false", "no", "off", "1", "true", "yes", "on")


def _setting_warnings(env):
    """What is wrong with the CAIBRIDGE_* variables set: a value not
    understood (the import warns too) or a name caibridge does not read."""
    found = []
    for name, value in env.items():
        if not name.startswith("CAIBRIDGE_"):
            continue
        if (name not in KNOWN_VARIABLES and
                not name.startswith(_KNOWN_PREFIXES)):
            close = [k for k in KNOWN_VARIABLES
                     if k.replace("_", "") == name.replace("_", "")]
            found.append("%s is not a variable caibridge reads%s"
                         % (name, " (did you mean %s?)" % close[0]
                            if close else ""))
        elif name == "CAIBRIDGE_SYNC" and value.lower() not in _SYNC_WORDS:
            found.append("CAIBRIDGE_SYNC=%r is not understood: ordering "
                         "stays on" % value)
        elif name == "CAIBRIDGE_RELEASE" and value not in ("", "poll",
                                                           "block"):
            found.append("CAIBRIDGE_RELEASE=%r is not understood "
                         "(poll or block, case-sensitive): releases are "
                         "polled" % value)
        elif name == "CAIBRIDGE_EVENT_POOL" and not (value == "" or
                                                     value.isdigit()):
            found.append("CAIBRIDGE_EVENT_POOL=%r is not understood "
                         "(decimal digits only): the pool keeps 8" % value)
    return found


def _environment():
    env = {k: v for k, v in sorted(os.environ.items())
           if k.startswith("CAIBRIDGE_")}
    for name in _ENVIRONMENT:
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def _open_runtime(path):
    return ctypes.CDLL(path)


class _Report:
    """The report as data (for --json) and as lines (for people)."""

    def __init__(self):
        self.data = {}
        self.lines = []
        self.failed = False

    def say(self, text=""):
        self.lines.append(text)

    def fail(self, key, text):
        self.failed = True
        self.data.setdefault("failures", []).append("%s: %s" % (key, text))


def _runtime_section(report):
    """The runtime, driver and devices; returns (rt, device count)."""
    say = report.say
    say("CUDA runtime:")
    runtime = report.data["runtime"] = {}
    try:
        info = caibridge.cuda_runtime_info()
    except caibridge.CUDAError as e:
        runtime["none"] = str(e)
        if os.environ.get("CAIBRIDGE_CUDART"):
            # Named, so meant to be used: not the same as no runtime.
            report.fail("runtime", "CAIBRIDGE_CUDART is set and unusable: "
                        "%s" % e)
            say("  FAILED: %s" % e)
        else:
            say("  none: %s" % e)
        # Every candidate passed over, which the message has no room for.
        refused = runtime["refused"] = list(getattr(e, "refused", []))
        say("  refused:%s" % ("" if refused else " none"))
        for item in refused:
            say("    %s" % item)
        say("CUDA driver:       unknown (no runtime)")
        return None, 0
    except Exception as e:
        report.fail("runtime", "%s: %s" % (type(e).__name__, e))
        say("  FAILED (cuda_runtime_info raised %s: %s)" % (type(e).__name__,
                                                            e))
        return None, 0
    runtime.update({k: v for k, v in info.items()})
    say("  path:            %s" % info.get("path"))
    say("  version:         %s" % _version(info.get("version") or 0))
    say("  found:           %s" % info.get("how"))
    # Lists the runtime search adds (missing driver entry points, runtimes
    # refused and why), whatever their names.
    for key, value in info.items():
        if key in ("path", "version", "how"):
            continue
        label = key.replace("_", " ")
        if isinstance(value, (list, tuple)):
            say("  %s:%s" % (label, "" if value else " none"))
            for item in value:
                say("    %s" % (" ".join(map(str, item))
                                if isinstance(item, (list, tuple)) else item))
        elif isinstance(value, dict):
            say("  %s:" % label)
            for k, v in value.items():
                say("    %s: %s" % (k, v))
        else:
            say("  %-17s%s" % (label + ":", value))
    try:
        rt = _open_runtime(info["path"])
    except Exception as e:
        report.fail("runtime", "cannot open %s again: %s" % (info.get("path"),
                                                            e))
        say("  FAILED: cannot open it again for the device queries: %s" % e)
        return None, 0

    version = ctypes.c_int(0)
    rc, why = _call(rt, "cudaDriverGetVersion", ctypes.byref(version))
    if why:
        report.fail("driver", why)
        say("CUDA driver:       FAILED (%s)" % why)
    elif rc != 0:
        report.data["driver"] = {"error": rc, "name": error_name(rc, rt)}
        say("CUDA driver:       none (%s)" % _failure("cudaDriverGetVersion",
                                                     rc, rt))
    elif not version.value:
        report.data["driver"] = {"version": None}
        say("CUDA driver:       none (no NVIDIA driver here)")
    else:
        report.data["driver"] = {"version": _version(version.value)}
        say("CUDA driver:       %s" % _version(version.value))

    count = ctypes.c_int(0)
    rc, why = _call(rt, "cudaGetDeviceCount", ctypes.byref(count))
    devices = report.data["devices"] = []
    if why:
        report.fail("devices", why)
        say("devices:           FAILED (%s)" % why)
        return rt, 0
    if rc != 0:
        report.data["device_count_error"] = {"error": rc,
                                             "name": error_name(rc, rt)}
        say("devices:           none (%s)" % _failure("cudaGetDeviceCount",
                                                     rc, rt))
        return rt, 0
    n = count.value
    if n < 0 or n > MAX_DEVICES:
        report.fail("devices", "cudaGetDeviceCount reported %d devices" % n)
        say("devices:           FAILED (cudaGetDeviceCount reported %d; "
            "at most %d are believed, none is asked)" % (n, MAX_DEVICES))
        return rt, 0
    if n == 0:
        say("devices:           none (cudaGetDeviceCount: 0)")
    for device in range(n):
        values = {}
        entry = {"index": device, "name": _device_name(device)}
        for name, attribute in _ATTRIBUTES:
            v = ctypes.c_int(-1)
            rc, why = _call(rt, "cudaDeviceGetAttribute", ctypes.byref(v),
                            attribute, device)
            values[name] = v.value if rc == 0 else None
            if why or rc != 0:
                entry.setdefault("errors", []).append(
                    why or _failure("cudaDeviceGetAttribute(%d)" % attribute,
                                    rc, rt))
        entry.update(values)
        devices.append(entry)
        say("device %d: %s" % (device, entry["name"]))
        major, minor = (values["compute capability major"],
                        values["compute capability minor"])
        say("  compute capability:      %s" % (
            "%d.%d" % (major, minor) if major is not None and minor is not None
            else "unknown"))
        for name, _ in _ATTRIBUTES[2:]:
            say("  %-24s %s" % (name + ":", {1: "yes", 0: "no"}.get(
                values[name], "unknown")))
        for why in entry.get("errors", ()):
            report.fail("device %d" % device, why)
            say("  FAILED: %s" % why)
    return rt, n


def collect():
    """Builds the report: (data, lines, exit status)."""
    report = _Report()
    say = report.say
    say("caibridge %s" % caibridge.__version__)
    report.data["version"] = caibridge.__version__

    plat = report.data["platform"] = _platform()
    say("  Python:          %s (%s)" % (plat["python"], plat["executable"]))
    say("  OS:              %s, %s, %s" % (plat["os"], plat["architecture"],
                                          plat["libc"]))
    where = report.data["imported_from"] = {
        "package": os.path.dirname(os.path.abspath(caibridge.__file__)),
        "extension": getattr(_core, "__file__", None),
    }
    say("  imported from:   %s" % where["package"])
    say("  extension:       %s" % where["extension"])

    say("build:")
    try:
        build = _core._build_info()
        gil_disabled = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
        gil = (("enabled" if sys._is_gil_enabled() else "disabled")
               if gil_disabled else None)
        report.data["build"] = {
            "cuda_support": caibridge.cuda_built(),
            "cuda_headers": _version(build["cuda_headers"]),
            "dlpack_abi": "%d.%d" % tuple(build["dlpack_abi"]),
            "free_threaded": gil_disabled,
            "gil": gil,
            "ordering": bool(caibridge.SYNC_ENABLED),
            "nvtx": bool(build.get("nvtx")),
        }
        say("  CUDA support:    %s" % ("yes" if caibridge.cuda_built() else
                                       "NO (built with CAIBRIDGE_CUDA=0)"))
        say("  CUDA headers:    %s" % _version(build["cuda_headers"]))
        say("  DLPack ABI:      %d.%d" % tuple(build["dlpack_abi"]))
        say("  NVTX marks:      %s" % (
            "built in (shown when NVTX_INJECTION64_PATH names a tool, as "
            "nsys does)" if build.get("nvtx") else
            "compiled out (built without nvtx3/nvToolsExt.h)"))
        say("  free-threaded:   %s" % ("yes (GIL %s)" % gil if gil_disabled
                                       else "no"))
        # Ordering is a setting, said once, under "settings in effect".
    except Exception as e:
        report.fail("build", "%s: %s" % (type(e).__name__, e))
        say("  FAILED (%s: %s)" % (type(e).__name__, e))

    packages = report.data["packages"] = _packages()
    say("libraries:")
    if not packages:
        say("  none of NumPy, torch, CuPy, Numba, JAX, cuda-core")
    for label, version in packages.items():
        say("  %-21s%s" % (label + ":", version))

    env = report.data["environment"] = _environment()
    say("environment:")
    if not env:
        say("  no CAIBRIDGE_* variable, nor %s" % ", ".join(_ENVIRONMENT))
    for name, value in env.items():
        say("  %s=%s" % (name, value))
    warned = report.data["warnings"] = _setting_warnings(env)
    for text in warned:
        say("  WARNING: %s" % text)

    say("settings in effect:")
    try:
        settings = report.data["settings"] = _core._settings()
        say("  ordering:        %s" % ("on" if settings["ordering"]
                                       else "off (CAIBRIDGE_SYNC)"))
        say("  release:         %s" % settings["release"])
        say("  event pool:      %s" % (
            "%d per context" % settings["event_pool"]
            if settings["event_pool"] else "off (CAIBRIDGE_EVENT_POOL=0)"))
    except Exception as e:
        report.fail("settings", "%s: %s" % (type(e).__name__, e))
        say("  FAILED (%s: %s)" % (type(e).__name__, e))

    try:
        rt, devices = _runtime_section(report)
    except Exception as e:  # a step this code did not foresee
        report.fail("runtime", "%s: %s" % (type(e).__name__, e))
        say("  FAILED (%s: %s)" % (type(e).__name__, e))
        rt, devices = None, 0

    say("self-test:")
    tests = report.data["self_test"] = {}
    say("  host round trip (no CUDA call):")
    try:
        result = _host_round_trip()
    except Exception as e:
        result = "FAILED (%s: %s)" % (type(e).__name__, e)
    tests["host"] = result
    say("    %s" % result)
    if result.startswith("FAILED"):
        report.fail("host round trip", result)
    if devices:
        for device in range(devices):
            say("  device %d round trip (cudaSetDevice(%d), cudaMalloc of 16 "
                "bytes, cudaMemcpy both ways, cudaFree):" % (device, device))
            try:
                result = _device_round_trip(rt, device)
            except Exception as e:
                result = "FAILED (%s: %s)" % (type(e).__name__, e)
            tests["device %d" % device] = result
            say("    %s" % result)
            if result.startswith("FAILED"):
                report.fail("device %d round trip" % device, result)
    else:
        tests["device"] = "skipped: no GPU here"
        say("  device round trip: skipped: no GPU here")
    say("counters (caibridge.stats(), this process, the self-test's "
        "included):")
    try:
        counts = report.data["stats"] = caibridge.stats()
        for name, value in counts.items():
            say("  %-21s%d" % (name + ":", value))
    except Exception as e:
        report.fail("stats", "%s: %s" % (type(e).__name__, e))
        say("  FAILED (%s: %s)" % (type(e).__name__, e))
    status = EXIT_FAILED if report.failed else EXIT_OK
    report.data["exit_status"] = status
    if report.failed:
        say("FAILED: %s" % "; ".join(report.data["failures"]))
    return report.data, report.lines, status


def show_config(file=None, as_json=False):
    """Prints the report (JSON when as_json); returns the exit status."""
    out = file if file is not None else sys.stdout
    data, lines, status = collect()
    if as_json:
        json.dump(data, out, indent=2, default=str)
        out.write("\n")
    else:
        for line in lines:
            print(line, file=out)
    return status


_EPILOG = """\
exit status:
  0  every step ran (no GPU or no CUDA runtime is not a failure)
  1  a self-test or a CUDA query failed: the report's FAILED lines say which
  2  the command line was wrong

What it touches: the host round trip makes no CUDA call.  The CUDA part
loads the runtime (as the first CUDA hand-over would), asks its version,
the driver's and the device count, and per device its attributes
(cudaDeviceGetAttribute) and name (the driver's cuDeviceGetName).  The
device self-test calls, per device, cudaSetDevice (which makes the
device's primary context current), cudaMalloc of 16 bytes, cudaMemcpy both
ways and cudaFree.  For a bug report: python -m caibridge --json
"""


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m caibridge",
        description="Says what caibridge was built with and what it finds "
                    "here (platform, libraries, environment, CUDA runtime, "
                    "driver and devices), then runs a self-test.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true",
                        help="print the report as JSON (for bug reports)")
    args = parser.parse_args(argv)
    try:
        return show_config(as_json=args.json)
    except BrokenPipeError:
        # A reader that stopped early (| head): not a failure to report.
        sys.stderr.close()
        return EXIT_OK
