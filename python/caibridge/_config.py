"""caibridge.show_config() and python -m caibridge: the version, the build,
the CUDA runtime and driver found, each device, and a self-test.  The
devices are asked through ctypes of the runtime caibridge itself loaded
(the same file, so the same instance) and of the driver."""
import array
import ctypes
import importlib
import platform
import sys
import sysconfig

import caibridge

# By name: the stubs describe the package, not its extension module.
_core = importlib.import_module("caibridge._core")

# cudaDeviceAttr values (stable across CUDA 11 to 13).
_ATTRIBUTES = [
    ("compute capability major", 75),
    ("compute capability minor", 76),
    ("memory pools supported", 115),
    ("concurrentManagedAccess", 89),
    ("pageable memory access", 88),
]


def _version(v):
    return "%d.%d" % (v // 1000, v % 1000 // 10) if v else "none"


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
    pointer = ctypes.c_void_p()
    if rt.cudaSetDevice(device) != 0:
        return "FAILED (cudaSetDevice)"
    if rt.cudaMalloc(ctypes.byref(pointer), ctypes.sizeof(host)) != 0:
        return "FAILED (cudaMalloc)"
    try:
        rt.cudaMemcpy(pointer, host, ctypes.sizeof(host), 1)  # to device
        back = caibridge.from_dlpack(caibridge.as_dlpack(
            _Array(pointer.value, n, True)))
        iface = back.__cuda_array_interface__
        if iface["data"][0] != pointer.value:
            return "FAILED (pointer changed)"
        if caibridge.DeviceType(back.__dlpack_device__()[0]) != \
                caibridge.kDLCUDA:
            return "FAILED (device type %r)" % (back.__dlpack_device__(),)
        out = (ctypes.c_float * n)()
        rt.cudaMemcpy(out, ctypes.c_void_p(iface["data"][0]),
                      ctypes.sizeof(out), 2)  # to host
        if list(out) != list(host):
            return "FAILED (values differ: %r)" % list(out)
        return "ok (zero-copy, %d float32 values)" % n
    finally:
        rt.cudaFree(pointer)


def _device_name(device):
    try:
        drv = ctypes.CDLL("libcuda.so.1")
        name = ctypes.create_string_buffer(256)
        if drv.cuInit(0) == 0 and drv.cuDeviceGetName(name, 256, device) == 0:
            return name.value.decode(errors="replace")
    except OSError:
        pass
    return "(name unknown: no libcuda.so.1)"


def show_config(file=None):
    """Prints the report; returns 0, or 1 when a self-test failed."""
    out = file if file is not None else sys.stdout

    def say(text=""):
        print(text, file=out)

    failed = False
    build = _core._build_info()
    gil_disabled = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    say("caibridge %s" % caibridge.__version__)
    say("  Python:          %s %s (%s)" % (
        platform.python_implementation(), platform.python_version(),
        sys.executable))
    say("build:")
    say("  CUDA support:    %s" % ("yes" if caibridge.cuda_built() else
                                   "NO (built with CAIBRIDGE_CUDA=0)"))
    say("  CUDA headers:    %s" % _version(build["cuda_headers"]))
    say("  DLPack ABI:      %d.%d" % build["dlpack_abi"])
    say("  free-threaded:   %s" % (
        "yes (GIL %s)" % ("enabled" if sys._is_gil_enabled() else
                          "disabled") if gil_disabled else "no"))
    say("  ordering:        %s" % ("on" if caibridge.SYNC_ENABLED else
                                   "off (CAIBRIDGE_SYNC)"))

    rt = None
    devices = 0
    say("CUDA runtime:")
    try:
        info = caibridge.cuda_runtime_info()
    except caibridge.CUDAError as e:
        say("  none: %s" % e)
    else:
        say("  path:            %s" % info["path"])
        say("  version:         %s" % _version(info["version"]))
        say("  found:           %s" % info["how"])
        try:
            rt = ctypes.CDLL(info["path"])
        except OSError as e:
            say("  cannot open it again for the device queries: %s" % e)
    if rt is not None:
        version = ctypes.c_int(0)
        rc = rt.cudaDriverGetVersion(ctypes.byref(version))
        say("CUDA driver:       %s" % (
            _version(version.value) if rc == 0 and version.value else
            "none (no NVIDIA driver here)"))
        count = ctypes.c_int(0)
        rc = rt.cudaGetDeviceCount(ctypes.byref(count))
        devices = count.value if rc == 0 else 0
        if rc != 0:
            say("devices:           none (cudaGetDeviceCount: error %d)" % rc)
        for device in range(devices):
            values = {}
            for name, attribute in _ATTRIBUTES:
                v = ctypes.c_int(-1)
                rt.cudaDeviceGetAttribute(ctypes.byref(v), attribute, device)
                values[name] = v.value
            say("device %d: %s" % (device, _device_name(device)))
            say("  compute capability:      %d.%d" % (
                values["compute capability major"],
                values["compute capability minor"]))
            for name, _ in _ATTRIBUTES[2:]:
                say("  %-24s %s" % (name + ":", "yes" if values[name] == 1
                                    else "no"))
    else:
        say("CUDA driver:       unknown (no runtime)")
    say("self-test:")
    result = _host_round_trip()
    failed |= result.startswith("FAILED")
    say("  host round trip:   %s" % result)
    if devices:
        for device in range(devices):
            result = _device_round_trip(rt, device)
            failed |= result.startswith("FAILED")
            say("  device %d round trip: %s" % (device, result))
    else:
        say("  device round trip: skipped: no GPU here")
    return 1 if failed else 0
