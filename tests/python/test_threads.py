"""Threads and shutdown: hand-overs on many threads, tensors freed on other
threads than the one that made them, deleters run from native threads that
have no Python thread state, and tensors still alive when the interpreter
exits.  An exception in any worker thread fails its test.

The native threads are real pthreads started through ctypes with the
tensor's deleter itself as the start routine, so the deleter runs with no
Python thread state at all, as it would from a consumer's C++ worker.
"""
import gc
import os
import queue
import subprocess
import sys
import textwrap
import threading
import weakref

import numpy as np
import pytest

import caibridge
from conftest import CAIProducer, HostProducer, Worker, cai_of, \
    join_native, start_native, take_tensor

THREADS = 8
PER_THREAD = 3000


def settle():
    for _ in range(3):
        gc.collect()


def contend(work):
    """work(k) on THREADS threads at once, switching between them as often
    as possible; an exception in any of them is raised here."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [Worker(work, k) for k in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)


# ---- tests


def test_concurrent_handovers(torch):
    """8 threads hand the same producer and their own over and over, into
    torch and NumPy and back; every value is right, and afterwards every
    reference the hand-overs took is gone."""
    shared = HostProducer(np.arange(12, dtype=np.float32).reshape(3, 4))
    start = threading.Barrier(THREADS)
    errors = []

    def work(k):
        own = HostProducer(np.full((2, 5), k, dtype=np.int64))
        try:
            start.wait()
            for i in range(PER_THREAD):
                t = torch.from_dlpack(caibridge.as_dlpack(shared))
                assert float(t[2, 3]) == 11.0
                a = np.from_dlpack(caibridge.as_dlpack(own))
                assert int(a[1, 4]) == k
                v = caibridge.from_dlpack(t)
                assert v.__array_interface__["data"][0] == \
                    shared.iface["data"][0]
                c = caibridge.to_dlpack(own, max_version=(1, 3))
                if i % 2:
                    caibridge.from_dlpack(c)
                del t, a, v, c
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    settle()
    before = sys.getrefcount(shared)
    contend(work)
    assert not errors, errors[:3]
    settle()
    assert sys.getrefcount(shared) == before


def test_tensors_freed_on_other_threads(torch):
    """One thread makes tensors, capsules and views; four others free them.
    The producer dies once the last one is gone."""
    producer = HostProducer(np.arange(6, dtype=np.float64))
    dead = weakref.ref(producer)
    made = queue.Queue(maxsize=256)
    count = 4000

    def make():
        for i in range(count):
            kind = i % 4
            if kind == 0:
                made.put(torch.from_dlpack(caibridge.as_dlpack(producer)))
            elif kind == 1:
                made.put(caibridge.to_dlpack(producer, max_version=(1, 3)))
            elif kind == 2:
                made.put(caibridge.as_dlpack(producer))
            else:
                made.put(caibridge.from_dlpack(
                    caibridge.as_dlpack(producer)))
        for _ in range(4):
            made.put(None)

    freed = [0] * 4

    def free(k):
        while True:
            item = made.get()
            if item is None:
                return
            del item
            freed[k] += 1

    maker = Worker(make)
    freers = [Worker(free, k) for k in range(4)]
    for t in freers + [maker]:
        t.start()
    maker.join()
    for t in freers:
        t.join()
    assert sum(freed) == count
    producer = None  # the last reference (make() reads the same cell)
    settle()
    assert dead() is None, "a tensor freed on another thread kept its owner"


def test_many_deleters_on_native_threads_while_python_runs(torch):
    """Deleters on 8 native threads at once, while Python threads keep the
    GIL busy with hand-overs of the same producer."""
    producer = HostProducer(np.arange(8, dtype=np.float32))
    settle()
    before = sys.getrefcount(producer)
    taken = [take_tensor(caibridge.to_dlpack(producer, max_version=(1, 3)))
             for _ in range(64)]
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            torch.from_dlpack(caibridge.as_dlpack(producer))

    busy_threads = [Worker(busy) for _ in range(2)]
    for t in busy_threads:
        t.start()
    try:
        for i in range(0, len(taken), THREADS):
            tids = [start_native(d, t) for t, d in taken[i:i + THREADS]]
            for tid in tids:
                join_native(tid)
    finally:
        stop.set()
        for t in busy_threads:
            t.join()
    settle()
    assert sys.getrefcount(producer) == before


class ChangingProducer(HostProducer):
    """A host producer whose one dict other threads keep rewriting: fresh
    but equal entries (the old ones freed at once) and an extra key added
    and removed (the dict resizes).  Every read must still see a whole,
    valid description."""

    def churn(self, i):
        base = self.array.__array_interface__
        self.iface["shape"] = tuple(int(n) for n in base["shape"])
        self.iface["data"] = (int(base["data"][0]), False)
        self.iface["typestr"] = "".join(base["typestr"])
        if i % 2:
            self.iface["extra%d" % (i % 7)] = [i]
        else:
            self.iface.pop("extra%d" % ((i - 1) % 7), None)


def test_shared_objects_on_8_threads():
    """8 threads share producers (one whose dict others rewrite), views,
    CAIViews and capsules: as_dlpack, to_dlpack, from_dlpack and __dlpack__
    on each, capsules made on one thread and released or taken on another,
    and one capsule contested by every thread (exactly one takes it).
    Without torch, so it runs on every interpreter, free-threaded 3.13t
    included.  Afterwards every reference taken is gone."""
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    host = HostProducer(base)
    changing = ChangingProducer(np.arange(6, dtype=np.int64))
    cai = CAIProducer(cai_of(base))
    view = caibridge.as_dlpack(host)
    cview = caibridge.from_dlpack(caibridge.as_dlpack(host))
    passed = queue.Queue()
    rounds = PER_THREAD // 6
    start = threading.Barrier(THREADS)
    contest = threading.Barrier(THREADS)
    contested = []
    wins = []

    def work(k):
        start.wait()
        for i in range(rounds):
            if k == 0:
                changing.churn(i)
            a = np.from_dlpack(caibridge.as_dlpack(host))
            assert a[2, 3] == 11.0
            assert np.from_dlpack(view)[1, 2] == 6.0
            assert int(np.from_dlpack(caibridge.as_dlpack(changing))[5]) == 5
            c = caibridge.to_dlpack(changing, max_version=(1, 3))
            assert caibridge.from_dlpack(c).__array_interface__["shape"] == \
                (6,)
            assert cview.__array_interface__["data"][0] == \
                host.iface["data"][0]
            assert np.from_dlpack(cview)[0, 1] == 1.0
            assert caibridge.from_dlpack(view).__array_interface__[
                "shape"] == (3, 4)
            d = caibridge.as_dlpack(cai, device=(2, 0)).__dlpack__(
                max_version=(1, 0))
            # Made here, released or taken on another thread.
            passed.put(view.__dlpack__(max_version=(1, 3)))
            passed.put(caibridge.to_dlpack(host))
            item = passed.get()
            if i % 3 == 0:
                caibridge.from_dlpack(item)
            elif i % 3 == 1:
                take = passed.get()
                tensor, deleter = take_tensor(take)
                join_native(start_native(deleter, tensor))
            del a, c, d, item
            if i % 50 == 0:
                # One capsule, every thread: one takes it, the rest are
                # told it was taken.
                if k == 0:
                    contested[:] = [caibridge.to_dlpack(
                        host, max_version=(1, 3))]
                contest.wait()
                try:
                    caibridge.from_dlpack(contested[0])
                    wins.append(i)
                except ValueError as e:
                    assert "already taken" in str(e)
                contest.wait()

    settle()
    before = [sys.getrefcount(o) for o in (host, changing, cai, view, cview)]
    contend(work)
    assert sorted(wins) == list(range(0, rounds, 50)), wins
    while not passed.empty():
        passed.get()
    del contested[:]
    settle()
    after = [sys.getrefcount(o) for o in (host, changing, cai, view, cview)]
    assert after == before


EXIT_SCRIPT = textwrap.dedent("""
    import atexit, ctypes, sys, threading
    import numpy as np
    import torch
    import caibridge

    sys.path.insert(0, sys.argv[1])
    from conftest import HostProducer, take_tensor, start_native

    producer = HostProducer(np.arange(12, dtype=np.float32))
    # Left alive at exit, each kind of owner.
    kept = [torch.from_dlpack(caibridge.as_dlpack(producer)),
            caibridge.to_dlpack(producer, max_version=(1, 3)),
            caibridge.to_dlpack(producer),
            caibridge.as_dlpack(producer),
            caibridge.from_dlpack(caibridge.as_dlpack(producer)),
            caibridge.from_dlpack(torch.arange(3)),
            np.from_dlpack(caibridge.as_dlpack(producer))]
    cycle = [producer, kept]
    cycle.append(cycle)

    # No torch on this thread: torch itself aborts when a daemon thread is
    # inside it at exit (std::terminate), with or without caibridge.
    def churn():
        while True:
            np.from_dlpack(caibridge.as_dlpack(producer))
            caibridge.from_dlpack(caibridge.to_dlpack(producer,
                                                      max_version=(1, 3)))
            caibridge.to_dlpack(producer)

    threading.Thread(target=churn, daemon=True).start()

    # Deleters on native threads that race the interpreter's exit: they
    # must either finish normally or see the runtime is going and leave
    # Python alone.
    taken = [take_tensor(caibridge.to_dlpack(producer, max_version=(1, 3)))
             for _ in range(8)]

    @atexit.register
    def race():
        for tensor, deleter in taken:
            start_native(deleter, tensor)

    print("exiting", flush=True)
""")


@pytest.mark.parametrize("run", range(3))
def test_tensors_alive_at_exit(run, torch):
    """Tensors alive at exit, a daemon thread mid-hand-over, and native
    deleters racing finalization: the process exits 0 without a fatal
    error."""
    here = os.path.dirname(os.path.abspath(__file__))
    result = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT, here], capture_output=True,
        text=True, timeout=300,
        env=dict(os.environ, PYTHONFAULTHANDLER="1"))
    assert result.returncode == 0, \
        f"exit {result.returncode}:\n{result.stderr[-3000:]}"
    assert "exiting" in result.stdout
    assert "Fatal Python error" not in result.stderr, result.stderr[-3000:]


AFTER_FINALIZE_SCRIPT = textwrap.dedent("""
    import ctypes, sys
    import numpy as np
    import caibridge

    sys.path.insert(0, sys.argv[1])
    from conftest import HostProducer, take_tensor

    # exit() runs __cxa_atexit handlers, last registered first, after
    # Py_FinalizeEx has returned: the interpreter is gone by then.
    libc = ctypes.CDLL(None)
    libc.__cxa_atexit.argtypes = [ctypes.c_void_p] * 3
    libc.strdup.restype = ctypes.c_void_p
    libc.strdup.argtypes = [ctypes.c_char_p]
    puts = ctypes.cast(libc.puts, ctypes.c_void_p).value
    # Runs after every deleter: its line proves they returned.
    libc.__cxa_atexit(puts, libc.strdup(b"after the deleters"), None)

    producer = HostProducer(np.arange(12, dtype=np.float32))
    for capsule in (caibridge.to_dlpack(producer, max_version=(1, 3)),
                    caibridge.to_dlpack(producer),
                    caibridge.as_dlpack(producer).__dlpack__(
                        max_version=(1, 3))):
        tensor, deleter = take_tensor(capsule)
        libc.__cxa_atexit(deleter, tensor, None)
    print("exiting", flush=True)
""")


def test_deleter_after_finalization():
    """Deleters called by exit() after the interpreter has been finalized
    must free their tensor and leave Python alone."""
    here = os.path.dirname(os.path.abspath(__file__))
    result = subprocess.run(
        [sys.executable, "-c", AFTER_FINALIZE_SCRIPT, here],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, \
        f"exit {result.returncode}:\n{result.stderr[-3000:]}"
    assert result.stdout.split() == ["exiting", "after", "the", "deleters"], \
        result.stdout + result.stderr[-3000:]
