"""caibridge in sub-interpreters: every hand-over (as_dlpack, to_dlpack,
from_dlpack, the C exchange API) in a legacy sub-interpreter (shared GIL,
as mod_wsgi runs them) and, on CPython 3.12 and later, in an isolated one
(its own GIL).  Views and capsules die there, and tensors are deleted on a
thread without a thread state and from another interpreter: the owner is
released in the interpreter that made it (README, "Sub-interpreters").

Each case runs in a child process with a timeout, so a deadlock fails the
test instead of hanging it.  The C consumer (xconsumer.c) is compiled here
with the interpreter's own compiler settings."""
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import build_extension

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 120

# Runs in the interpreter under test: stdlib producers only (NumPy does not
# load in isolated sub-interpreters).  Each producer logs, when it dies,
# its tag and the interpreter that ran its finalizer.
BODY = r'''
import array, gc, sys, weakref
import caibridge, xconsumer

LOG = {log!r}
VALUES = [1.5, 2.5, 3.5]
HOME = xconsumer.interp_id()

class Host:
    def __init__(self, tag):
        self.tag = tag
        self.buf = array.array("d", VALUES)

    @property
    def __array_interface__(self):
        return {{"shape": (3,), "typestr": "<f8", "data": self.buf,
                 "version": 3}}

    def __del__(self):
        with open(LOG, "a") as f:
            f.write("%s %d\n" % (self.tag, xconsumer.interp_id()))

class Device:
    """CAI over host memory, with the device given (no CUDA needed)."""
    def __init__(self, host, ptr):
        self.host, self.ptr = host, ptr

    @property
    def __cuda_array_interface__(self):
        return {{"shape": (3,), "typestr": "<f8", "data": (self.ptr, False),
                 "version": 3}}

@caibridge.add_dlpack
class Patched:
    """add_dlpack's methods: CPython's own method descriptors in the main
    interpreter (3.11 on), caibridge's own type in a sub-interpreter."""
    def __init__(self):
        self.buf = array.array("d", VALUES)

    @property
    def __array_interface__(self):
        return {{"shape": (3,), "typestr": "<f8", "data": self.buf,
                 "version": 3}}

KIND = ("method_descriptor" if HOME == 0 and sys.version_info >= (3, 11)
        else "_BridgeMethod")
assert type(Patched.__dict__["__dlpack__"]).__name__ == KIND, KIND

class Producer:
    """A DLPack producer of its own (the Python protocol)."""
    def __init__(self, view):
        self.view = view

    def __dlpack__(self, **kw):
        return self.view.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.view.__dlpack_device__()

def taken(capsule):
    addr = xconsumer.take(capsule)
    assert xconsumer.values(addr) == VALUES
    return addr

def round_trips(tag):
    h = Host(tag)
    v = caibridge.as_dlpack(h)
    xconsumer.delete(taken(v.__dlpack__(max_version=(1, 3))))
    xconsumer.delete(taken(caibridge.to_dlpack(h, max_version=(1, 3))))
    views = [caibridge.from_dlpack(v.__dlpack__(max_version=(1, 3))),
             caibridge.from_dlpack(v.__dlpack__()),
             caibridge.from_dlpack(v),
             caibridge.from_dlpack(Producer(v)),
             caibridge.from_dlpack(caibridge.to_dlpack(h))]
    values, cv = xconsumer.exchange(v)
    assert values == VALUES
    views.append(cv)
    ptr = views[0].__array_interface__["data"][0]
    assert all(x.__array_interface__["data"][0] == ptr for x in views)
    d = Device(h, ptr)
    xconsumer.delete(taken(caibridge.to_dlpack(d, device=(2, 0),
                                               max_version=(1, 3))))
    xconsumer.delete(taken(caibridge.as_dlpack(d, device=(2, 0)).__dlpack__(
        max_version=(1, 3), stream=-1)))
    p = Patched()
    xconsumer.delete(taken(p.__dlpack__(max_version=(1, 3))))
    assert p.__dlpack_device__() == (1, 0)
    pv = caibridge.from_dlpack(p)  # through the class's exchange table
    assert pv.__array_interface__["data"][0] == p.buf.buffer_info()[0]
    del pv
    patched_alive = weakref.ref(p)
    del p
    cai = caibridge.from_dlpack(caibridge.as_dlpack(d, device=(2, 0)))
    assert cai.__cuda_array_interface__["data"][0] == ptr
    # Unused capsules die too, and a tensor is deleted on a thread that
    # has no thread state.
    v.__dlpack__()
    caibridge.to_dlpack(h, max_version=(1, 3))
    t = Host(tag + "-thread")
    addr = taken(caibridge.to_dlpack(t, max_version=(1, 3)))
    del t
    xconsumer.delete_on_thread(addr)
    alive = weakref.ref(h)
    del h, v, views, cv, d, cai
    gc.collect()
    assert alive() is None, "an owner was not released"
    assert patched_alive() is None, "an add_dlpack owner was not released"
'''

PRELUDE = r'''
import os, sys
sys.path.insert(0, {consumer_dir!r})
'''


def consumer(tmp_path_factory):
    """Builds xconsumer for this interpreter; its directory."""
    return build_extension(tmp_path_factory, "xconsumer")


@pytest.fixture(scope="module")
def consumer_dir(tmp_path_factory):
    return consumer(tmp_path_factory)


def run_child(script):
    """Runs script in a fresh interpreter process; a hang fails."""
    try:
        proc = subprocess.run([sys.executable, "-c", script],
                              capture_output=True, text=True,
                              timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc = None
    if proc is None:
        pytest.fail(f"the child did not end within {TIMEOUT} s (deadlock?)")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def read_log(path):
    with open(path) as f:
        return sorted(tuple(line.split()) for line in f)


def test_legacy_subinterpreter(consumer_dir, tmp_path):
    """A legacy sub-interpreter (shared GIL): the round trips, views and
    capsules dying there, a main-interpreter tensor deleted there, and
    after it ended a tensor it made deleted in the main interpreter (its
    owner is then left alone: that interpreter is gone)."""
    pytest.importorskip("_testcapi", reason="CPython's _testcapi is needed")
    log = str(tmp_path / "log")
    body = BODY.format(log=log)
    sub = PRELUDE.format(consumer_dir=consumer_dir) + body + textwrap.dedent(
        '''
        round_trips("sub")
        xconsumer.delete(MAIN_TENSOR)   # made in the main interpreter
        kept = taken(caibridge.to_dlpack(Host("sub-kept"), max_version=(1, 3)))
        with open(LOG + ".addr", "w") as f:
            f.write(str(kept))
    ''')
    prelude = PRELUDE.format(consumer_dir=consumer_dir)
    script = prelude + body + textwrap.dedent(
        f'''
        import _testcapi
        main_tensor = taken(caibridge.to_dlpack(Host("main-in-sub"),
                                                max_version=(1, 3)))
        sub = {sub!r}.replace("MAIN_TENSOR", str(main_tensor))
        rc = _testcapi.run_in_subinterp(sub)
        assert rc == 0, "the sub-interpreter's code failed (see stderr)"
        with open(LOG + ".addr") as f:
            xconsumer.delete(int(f.read()))
        round_trips("main")
        print("main", HOME)
        ''')
    out = run_child(script)
    main_id = out.split()[-1]
    got = read_log(log)
    subs = {i for tag, i in got if tag.startswith("sub")}
    assert len(subs) == 1 and main_id not in subs, got
    sub_id = subs.pop()
    assert got == sorted([("main", main_id), ("main-in-sub", main_id),
                          ("main-thread", main_id), ("sub", sub_id),
                          ("sub-thread", sub_id)]), got


ISOLATED = sys.version_info >= (3, 12)


@pytest.mark.skipif(not ISOLATED, reason="isolated sub-interpreters (own "
                    "GIL) need CPython 3.12 or later; this is %d.%d"
                    % sys.version_info[:2])
def test_isolated_subinterpreter(consumer_dir, tmp_path):
    """An isolated sub-interpreter (own GIL): the round trips there,
    including a deleter on a thread without a thread state; a tensor made
    in the main interpreter deleted in it, and one it made deleted in the
    main interpreter while it lives: each owner is released in its own
    interpreter."""
    log = str(tmp_path / "log")
    body = BODY.format(log=log)
    sub = PRELUDE.format(consumer_dir=consumer_dir) + body + textwrap.dedent(
        '''
        round_trips("sub")
        xconsumer.delete(MAIN_TENSOR)
        kept = taken(caibridge.to_dlpack(Host("sub-kept"), max_version=(1, 3)))
        with open(LOG + ".addr", "w") as f:
            f.write("%d %d" % (kept, HOME))
        ''')
    prelude = PRELUDE.format(consumer_dir=consumer_dir)
    script = prelude + body + textwrap.dedent(
        f'''
        try:
            import _interpreters as interpreters      # 3.13
            run = interpreters.exec
        except ImportError:
            import _xxsubinterpreters as interpreters  # 3.12
            run = interpreters.run_string
        interp = interpreters.create()
        main_tensor = taken(caibridge.to_dlpack(Host("main-in-sub"),
                                                max_version=(1, 3)))
        sub = {sub!r}.replace("MAIN_TENSOR", str(main_tensor))
        err = run(interp, sub)
        assert err is None, err
        with open(LOG + ".addr") as f:
            kept, sub_id = map(int, f.read().split())
        xconsumer.delete(kept)     # made there, deleted here
        interpreters.destroy(interp)
        round_trips("main")
        print("ids", HOME, sub_id)
        ''')
    out = run_child(script)
    main_id, sub_id = out.split()[-2:]
    assert main_id != sub_id
    assert read_log(log) == sorted([
        ("main", main_id), ("main-in-sub", main_id), ("main-thread", main_id),
        ("sub", sub_id), ("sub-kept", sub_id), ("sub-thread", sub_id)])
