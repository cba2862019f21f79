"""Deleters on a C++ thread pool racing the interpreter's exit.

A framework's worker threads run tensor deleters inside noexcept functions.
A deleter that waits for the GIL while the interpreter finalizes is ended by
CPython with a forced unwind (pthread_exit), which a noexcept frame turns
into std::terminate: exit 134.  caibridge's deleters never wait for the GIL
on a thread that does not hold it; they hand the owner's release to the
interpreter, and once it is finalizing they leave the owner alone.

The pool is a small C++ library compiled here (CXX or c++) and loaded with
ctypes.  Each run starts the pool from an atexit handler, so its deleters
run while the interpreter is going away; every run must exit 0.
CAIBRIDGE_EXIT_RUNS sets the number of runs (default 100), and
CAIBRIDGE_EXIT_PYTHON the interpreter they run on (default: this one).
"""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

RUNS = int(os.environ.get("CAIBRIDGE_EXIT_RUNS", "100"))
PYTHON = os.environ.get("CAIBRIDGE_EXIT_PYTHON") or sys.executable

POOL_SOURCE = r"""
#include <chrono>
#include <cstddef>
#include <thread>
#include <vector>

extern "C" {
typedef void (*deleter_fn)(void *);
struct item {
    deleter_fn deleter;
    void *tensor;
};
}

/* The worker's body: noexcept, as a thread pool's task runner is; a forced
 * unwind through it calls std::terminate. */
static void work(std::vector<item> items, unsigned pause_us) noexcept
{
    for (const item &i : items) {
        i.deleter(i.tensor);
        if (pause_us != 0)
            std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
    }
}

extern "C" int pool_release(const item *items, size_t n, unsigned threads,
                            unsigned pause_us)
{
    try {
        for (unsigned t = 0; t < threads; t++) {
            std::vector<item> mine;
            for (size_t k = t; k < n; k += threads)
                mine.push_back(items[k]);
            std::thread(work, std::move(mine), pause_us).detach();
        }
    } catch (...) {
        return -1;
    }
    return 0;
}
"""

# A host producer with no NumPy: short runs, many of them.
RUN_SCRIPT = textwrap.dedent("""
    import atexit, ctypes, sys
    import caibridge

    pool = ctypes.CDLL(sys.argv[1])
    pause = int(sys.argv[2])

    class Item(ctypes.Structure):
        _fields_ = [("deleter", ctypes.c_void_p), ("tensor", ctypes.c_void_p)]

    api = ctypes.pythonapi
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
    USED = {True: b"used_dltensor_versioned", False: b"used_dltensor"}

    buffer = (ctypes.c_float * 64)()

    class Producer:
        __array_interface__ = {"shape": (64,), "typestr": "<f4",
                               "data": (ctypes.addressof(buffer), False),
                               "version": 3}

    def take(capsule, versioned):
        name = b"dltensor_versioned" if versioned else b"dltensor"
        tensor = api.PyCapsule_GetPointer(capsule, name)
        api.PyCapsule_SetName(capsule, USED[versioned])
        deleter = ctypes.c_void_p.from_address(
            tensor + (16 if versioned else 56)).value
        return Item(deleter, tensor)

    producer = Producer()
    view = caibridge.as_dlpack(producer)
    taken = []
    for i in range(240):
        versioned = i % 2 == 0
        kind = i % 3
        if kind == 0:
            capsule = caibridge.to_dlpack(producer,
                                          max_version=(1, 3) if versioned
                                          else None)
        else:
            capsule = view.__dlpack__(max_version=(1, 3) if versioned
                                      else None)
        taken.append(take(capsule, versioned))
    items = (Item * len(taken))(*taken)

    @atexit.register
    def race():
        # The workers run while the rest of finalization does.
        assert pool.pool_release(items, len(taken), 4, pause) == 0

    print("exiting", flush=True)
""")


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        pytest.skip("no C++ compiler (CXX, c++ or g++) to build the pool")
    where = tmp_path_factory.mktemp("pool")
    source = where / "pool.cc"
    source.write_text(POOL_SOURCE)
    library = where / "libpool.so"
    subprocess.run([*cxx.split(), "-std=c++11", "-O1", "-fPIC", "-shared",
                    "-pthread", "-o", str(library), str(source)],
                   check=True, capture_output=True, text=True)
    return library


def test_deleters_on_a_noexcept_pool_racing_exit(pool):
    """RUNS processes, each exiting while 4 pool threads run 240 deleters
    (pauses of 0, 20 and 100 us between them, so they land at every stage
    of finalization): every one exits 0."""
    bad = []
    for run in range(RUNS):
        pause = (0, 20, 100)[run % 3]
        result = subprocess.run(
            [PYTHON, "-c", RUN_SCRIPT, str(pool), str(pause)],
            capture_output=True, text=True, timeout=120)
        if result.returncode != 0 or "exiting" not in result.stdout:
            bad.append((run, result.returncode, result.stderr[-500:]))
    assert not bad, f"{len(bad)} of {RUNS} runs ended abnormally: {bad[:3]}"


NO_WAIT_SCRIPT = textwrap.dedent("""
    import ctypes, sys, time
    import caibridge

    api = ctypes.pythonapi
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
    libc = ctypes.CDLL(None)
    libc.pthread_create.argtypes = [ctypes.POINTER(ctypes.c_ulong),
                                    ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_void_p]
    # PyDLL: the call keeps the GIL, so the deleter's thread cannot get it.
    join = ctypes.PyDLL(None).pthread_join
    join.argtypes = [ctypes.c_ulong, ctypes.c_void_p]

    buffer = (ctypes.c_float * 4)()

    class Producer:
        __array_interface__ = {"shape": (4,), "typestr": "<f4",
                               "data": (ctypes.addressof(buffer), False),
                               "version": 3}

    producer = Producer()
    before = sys.getrefcount(producer)
    capsule = caibridge.to_dlpack(producer, max_version=(1, 3))
    tensor = api.PyCapsule_GetPointer(capsule, b"dltensor_versioned")
    api.PyCapsule_SetName(capsule, b"used_dltensor_versioned")
    deleter = ctypes.c_void_p.from_address(tensor + 16).value
    del capsule
    tid = ctypes.c_ulong()
    assert libc.pthread_create(ctypes.byref(tid), None, deleter, tensor) == 0
    assert join(tid.value, None) == 0, "the deleter returned"
    # The main thread runs the pending call once it next takes the GIL.
    for _ in range(1000):
        if sys.getrefcount(producer) == before:
            break
        time.sleep(0.001)
    print(sys.getrefcount(producer) - before)
""")


def test_deleter_never_waits_for_the_gil():
    """A deleter on a native thread while another thread holds the GIL
    (and waits for the deleter): it returns at once, and the owner is
    released by the main thread once it next takes the GIL.  Waiting for the
    GIL there would deadlock."""
    result = subprocess.run([PYTHON, "-c", NO_WAIT_SCRIPT],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["0"], "the owner was released"


def test_pool_releases_leave_nothing_behind(pool):
    """While the interpreter lives, every owner released on the pool's
    threads is released: 20000 deleters on 4 threads, twice, then the
    producer's reference count is back where it was and resident memory
    has not grown by 1 MiB in one of the two rounds."""
    import ctypes
    import gc
    import time

    import numpy as np

    import caibridge
    from conftest import HostProducer, take_tensor

    lib = ctypes.CDLL(str(pool))

    class Item(ctypes.Structure):
        _fields_ = [("deleter", ctypes.c_void_p), ("tensor", ctypes.c_void_p)]

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    producer = HostProducer(np.arange(16, dtype=np.float32))
    view = caibridge.as_dlpack(producer)

    def batch(n):
        items = (Item * n)()
        for i in range(n):
            capsule = (caibridge.to_dlpack(producer, max_version=(1, 3))
                       if i % 2 else view.__dlpack__(max_version=(1, 3)))
            tensor, deleter = take_tensor(capsule)
            items[i] = Item(deleter, tensor)
        assert lib.pool_release(items, n, 4, 0) == 0

    def settle(refs):
        for _ in range(5000):
            if sys.getrefcount(producer) == refs and \
                    sys.getrefcount(view) == view_refs:
                return
            time.sleep(0.001)

    gc.collect()
    refs, view_refs = sys.getrefcount(producer), sys.getrefcount(view)
    batch(2000)  # warm-up
    settle(refs)
    # Twice 20000: a leak grows both times alike, while an allocator's
    # per-thread pages (mimalloc on a free-threaded build) settle in the
    # first.
    grown = []
    for _ in range(2):
        before = rss()
        for _ in range(10):
            batch(2000)
        settle(refs)
        grown.append(rss() - before)
    assert sys.getrefcount(producer) == refs
    assert sys.getrefcount(view) == view_refs
    # AddressSanitizer's quarantine keeps freed memory resident: there the
    # reference counts above are the check.
    if "libasan" not in os.environ.get("LD_PRELOAD", ""):
        assert min(grown) < 1 << 20, grown
