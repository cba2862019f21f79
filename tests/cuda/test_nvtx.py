"""caibridge's NVTX marks, as a profiler sees them: tests/cuda/nvtx-record.c
is loaded as the NVTX tool (NVTX_INJECTION64_PATH, as nsys does) and writes
every mark and range of the "caibridge" domain to a file; each test holds
the exact sequence a hand-over, a batch, a release, a copy or a host wait
shows, on the timeline double."""
import gc
import os
import pathlib
import subprocess
import sys
import tempfile
import weakref

import pytest

from test_stream_order import double_path

# Before caibridge's first mark: the tool is found once, at that mark.
_TOOL = double_path().parent / "libnvtx-record.so"
_LOG = pathlib.Path(tempfile.mkdtemp(prefix="cai-nvtx-")) / "marks"
os.environ["NVTX_INJECTION64_PATH"] = str(_TOOL)
os.environ["CAI_NVTX_LOG"] = str(_LOG)

from test_race import LEGACY, NEW, double, tl  # noqa: E402,F401
from test_streams import release_capsule  # noqa: E402
from timeline_double import CAIArray, caibridge  # noqa: E402

pytestmark = [
    pytest.mark.skipif(not caibridge._core._build_info()["nvtx"],
                       reason="built without NVTX (no nvtx3/nvToolsExt.h "
                       "found by configure): the marks are compiled out"),
    pytest.mark.skipif(not _TOOL.exists(),
                       reason=f"the NVTX test tool is not built: {_TOOL}"),
]


@pytest.fixture
def marks(tl):
    """A function returning the marks since the test began; releases are
    let go at calls (the waiter held)."""
    caibridge._core._release_poll(True)
    caibridge._core._release_waiter(False)
    start = len(read())
    yield lambda: read()[start:]
    caibridge._core._release_waiter(True)


def read():
    return _LOG.read_text().splitlines() if _LOG.exists() else []


def hand_over(stream, consumer):
    return ["push hand-over %s -> %s" % (stream, consumer),
            "mark wait %s -> %s" % (stream, consumer), "pop"]


def test_hand_over_onto_stream_1(tl, marks):
    """Record on A; the hand-over's wait on 1; at release a record on 1,
    kept (the consumer's kernel held back), let go at a call once run."""
    gate = tl.gate()
    tl.fill(LEGACY, tl.buffer(), NEW, gate)
    a = tl.stream()
    view = caibridge.as_dlpack(CAIArray(tl.buffer(value=NEW), a))
    release_capsule(view.__dlpack__(stream=LEGACY, max_version=(1, 3)))
    del view
    assert marks() == (["mark record %#x" % a] + hand_over("%#x" % a, 1) +
                       ["mark record 1", "mark release deferred 1"])
    tl.open(gate)
    tl.drain()
    caibridge._core._release_poll()
    assert marks()[-1] == "mark release let go 1"
    assert len(marks()) == 7


def test_hand_over_onto_a_handle(tl, marks):
    a, b = tl.stream(), tl.stream()
    view = caibridge.as_dlpack(CAIArray(tl.buffer(value=NEW), a))
    release_capsule(view.__dlpack__(stream=b, max_version=(1, 3)))
    tl.drain()
    caibridge._core._release_poll()
    assert marks() == ["mark record %#x" % a] + hand_over("%#x" % a,
                                                          "%#x" % b)


def test_batch_of_100(tl, marks):
    """One record, one wait, 99 skips; 100 releases kept, then let go."""
    gate = tl.gate()
    tl.fill(LEGACY, tl.buffer(), NEW, gate)
    src, a = tl.buffer(value=NEW), tl.stream()
    views = caibridge.as_dlpack_all([CAIArray(src, a) for _ in range(100)])
    capsules = [v.__dlpack__(stream=LEGACY, max_version=(1, 3))
                for v in views]
    for capsule in capsules:
        release_capsule(capsule)
    del views, capsules
    tl.open(gate)
    tl.drain()
    caibridge._core._release_poll()
    s = "%#x" % a
    assert marks() == (["mark record " + s] + hand_over(s, 1) +
                       ["mark skip %s -> 1" % s] * 99 +
                       ["mark record 1", "mark release deferred 1"] * 100 +
                       ["mark release let go 1"] * 100)


def test_deferred_release_let_go_by_the_waiter(tl, marks):
    caibridge._core._release_waiter(True)
    caibridge._core._stats_reset()
    gate = tl.gate()
    tl.fill(LEGACY, tl.buffer(), NEW, gate)
    producer = CAIArray(tl.buffer(value=NEW), tl.stream())
    alive = weakref.ref(producer)
    view = caibridge.as_dlpack(producer)
    del producer
    release_capsule(view.__dlpack__(stream=LEGACY, max_version=(1, 3)))
    del view
    assert marks()[-1] == "mark release deferred 1"
    tl.open(gate)
    tl.drain()
    steps = 0
    while alive() is not None and steps < 100000:   # bytecodes, not time
        steps += 1
        if steps % 1000 == 0:
            gc.collect()
    assert alive() is None, "the producer waited for another call"
    assert caibridge.stats()["let_go_call"] == 0
    assert marks()[-1] == "mark release let go 1"
    assert len(marks()) == 7


def test_device_copy(tl, marks):
    a = tl.stream()
    view = caibridge.as_dlpack(CAIArray(tl.buffer(value=NEW), a))
    release_capsule(view.__dlpack__(stream=LEGACY, copy=True,
                                    max_version=(1, 3)))
    tl.drain()
    caibridge._core._release_poll()
    # The copy keeps its source until it has read it: an event recorded on
    # stream 1 after the copy, a deferred release let go once it has run.
    assert marks() == (["mark record %#x" % a] + hand_over("%#x" % a, 1) +
                       ["mark copy 1 64 bytes", "mark record 1",
                        "mark release deferred 1", "mark release let go 1"])


def test_blocking_release_is_a_host_wait(tl, marks):
    caibridge._core._set_release_blocking(True)
    try:
        a = tl.stream()
        view = caibridge.as_dlpack(CAIArray(tl.buffer(value=NEW), a))
        release_capsule(view.__dlpack__(stream=LEGACY, max_version=(1, 3)))
    finally:
        caibridge._core._set_release_blocking(False)
    assert marks() == (["mark record %#x" % a] + hand_over("%#x" % a, 1) +
                       ["mark record 1", "push host wait", "pop"])


def test_no_tool_no_mark(tmp_path):
    """Without NVTX_INJECTION64_PATH, the same hand-over makes no mark (the
    tool is never loaded, so its file is never written)."""
    log = tmp_path / "marks"
    env = dict(os.environ, CAI_NVTX_LOG=str(log))
    del env["NVTX_INJECTION64_PATH"]
    code = ("from timeline_double import Timeline, CAIArray, caibridge\n"
            "tl = Timeline(); tl.start()\n"
            "a = tl.stream()\n"
            "view = caibridge.as_dlpack(CAIArray(tl.buffer(), a))\n"
            "capsule = view.__dlpack__(stream=1, max_version=(1, 3))\n"
            "assert caibridge.stats()['waits'] == 1\n")
    here = pathlib.Path(__file__).resolve().parent
    env["PYTHONPATH"] = os.pathsep.join(
        [str(here)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                       if p])
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert not log.exists(), log.read_text()
