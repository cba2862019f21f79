"""Device copies (__dlpack__(copy=True) of CUDA memory) on the timeline
double: the copy is queued on the consumer's stream after the producer's
fence, so it reads what the producer wrote (and, unordered, the old
bytes); its memory is cudaMallocAsync's, freed with cudaFreeAsync at
release; failures are BufferErrors that leak nothing."""
import ctypes
import gc
import sys

import numpy as np
import pytest

from test_stream_order import PyCapsule_GetPointer
from timeline_double import CAIArray, PatchedArray, Timeline, caibridge

N = 64
OLD, NEW = 0, 7


@pytest.fixture(scope="module")
def double():
    return Timeline()


@pytest.fixture
def tl(double):
    double.start()
    # A failed cudaFreeAsync leaves its allocation live for good: counts
    # are taken against the start of each test.
    double.base = double.c.live_async_allocations()
    yield double
    assert double.stop() == "", "the double saw a CUDA rule broken"


def live(tl):
    return tl.c.live_async_allocations() - tl.base


def copy_as_dlpack(src, a, b, ordered):
    view = caibridge.as_dlpack(CAIArray(src, a), sync=ordered)
    return view.__dlpack__(stream=b, copy=True, max_version=(1, 3))


def copy_to_dlpack(src, a, b, ordered):
    return caibridge.to_dlpack(CAIArray(src, a), stream=b, sync=ordered,
                               copy=True, max_version=(1, 3))


def copy_add_dlpack(src, a, b, ordered):
    return PatchedArray(src, a).__dlpack__(stream=b, copy=True,
                                           max_version=(1, 3))


def copy_caiview(src, a, b, ordered):
    """A CAIView whose data is ready on A, re-exported to B as a copy."""
    capsule = caibridge.to_dlpack(CAIArray(src, None), max_version=(1, 3))
    view = caibridge.from_dlpack(capsule, stream=a)
    return view.__dlpack__(stream=b, copy=True, max_version=(1, 3))


PATHS = [copy_as_dlpack, copy_to_dlpack, copy_add_dlpack, copy_caiview]
# These have no sync=False; their stream=-1 copies on the producer's own
# stream (there is no consumer's), which is ordered by itself.
ORDERED_ONLY = {copy_add_dlpack, copy_caiview}


def data_of(capsule):
    view = caibridge.from_dlpack(capsule)
    cai = view.__cuda_array_interface__
    return view, cai["data"][0]


@pytest.mark.parametrize("path", PATHS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "race"])
def test_copy_is_ordered_after_the_producer(tl, path, ordered):
    if not ordered and path in ORDERED_ONLY:
        pytest.skip("no sync=False on this path: see test_no_consumer_stream")
    src = tl.buffer()
    a, b = tl.stream(), tl.stream()
    gate = tl.gate()
    tl.fill(a, src, NEW, gate)
    capsule = path(src, a, b, ordered)
    tl.open(gate)
    tl.drain()
    assert "cudaMallocAsync(64, 0x" in tl.c.log().decode()
    view, ptr = data_of(capsule)
    assert ptr != src.ctypes.data, "copy=True handed out the same memory"
    got = np.frombuffer(ctypes.string_at(ptr, N), dtype=np.uint8)
    if ordered:
        assert (got == NEW).all(), "the copy read before the producer"
    else:
        assert (got == OLD).all(), "the race was not seen unordered"
    assert live(tl) == 1
    del view, capsule
    gc.collect()
    tl.drain()
    assert live(tl) == 0, "the copy was not freed"


@pytest.mark.parametrize("strides,shape,expect", [
    ((8, 1), (4, 4), lambda a: a.reshape(8, 8)[:4, :4]),      # 2-D pitch
    ((-8, 1), (8, 8), lambda a: a.reshape(8, 8)[::-1]),       # reversed rows
    ((1, -8), (8, 8), lambda a: a.reshape(8, 8)[::-1].T),     # reversed cols
    ((0, 1), (3, 8), lambda a: np.broadcast_to(a[:8], (3, 8))),  # broadcast
    ((1, 1), (3, 8),                               # overlapping rows
     lambda a: np.lib.stride_tricks.as_strided(a, (3, 8), (1, 1))),
    ((16, 2, 1), (2, 2, 3),                                   # N-D
     lambda a: np.lib.stride_tricks.as_strided(a, (2, 2, 3), (16, 2, 1))),
    # x[:, :, :5] of a padded (2, 3, 8) array: a 2-D piece per outer index
    ((24, 8, 1), (2, 3, 5), lambda a: a[:48].reshape(2, 3, 8)[:, :, :5]),
])
def test_layouts_are_copied_contiguous(tl, strides, shape, expect):
    src = tl.buffer()
    src[:] = np.arange(N, dtype=np.uint8)
    start = 0
    if strides[0] < 0:
        start = -strides[0] * (shape[0] - 1)
    if len(strides) > 1 and strides[1] < 0:
        start += -strides[1] * (shape[1] - 1)

    class Strided:
        __cuda_array_interface__ = {
            "data": (src.ctypes.data + start, False), "shape": shape,
            "typestr": "|u1", "strides": strides, "version": 3,
            "stream": None}

    view = caibridge.as_dlpack(Strided())
    capsule = view.__dlpack__(stream=1, copy=True, max_version=(1, 3))
    tl.drain()
    back, ptr = data_of(capsule)
    assert back.__cuda_array_interface__["strides"] is None
    n = int(np.prod(shape))
    got = np.frombuffer(ctypes.string_at(ptr, n), dtype=np.uint8)
    want = np.ascontiguousarray(expect(src))
    assert (got.reshape(shape) == want).all()
    del back, capsule
    gc.collect()
    tl.drain()
    assert live(tl) == 0


@pytest.mark.parametrize("host", [False, True])
def test_4d_layout_of_75_pieces_is_copied(tl, host):
    """x[:, :15, :2, :3] of a (5, 16, 3, 4) array: no two dimensions merge,
    so the copy is 75 pieces on one stream.  Copy pieces are device work:
    the double's "the host would block" bound counts host functions only,
    and a device or host copy of this view passes (issue 44)."""
    full = tl.buffer(n=5 * 16 * 3 * 4)
    full[:] = np.arange(full.size) % 251
    shape, strides = (5, 15, 2, 3), (192, 12, 4, 1)

    class Strided:
        __cuda_array_interface__ = {
            "data": (full.ctypes.data, False), "shape": shape,
            "typestr": "|u1", "strides": strides, "version": 3,
            "stream": None}

    want = np.ascontiguousarray(full.reshape(5, 16, 3, 4)[:, :15, :2, :3])
    view = caibridge.as_dlpack(Strided())
    if host:
        got = np.from_dlpack(Host(view.__dlpack__(
            dl_device=(1, 0), copy=True, max_version=(1, 3))))
        assert (got == want).all()
        del got
    else:
        capsule = view.__dlpack__(stream=1, copy=True, max_version=(1, 3))
        tl.drain()
        back, ptr = data_of(capsule)
        got = np.frombuffer(ctypes.string_at(ptr, want.size), dtype=np.uint8)
        assert (got.reshape(shape) == want).all()
        del back, capsule
    gc.collect()
    tl.drain()
    assert tl.violations() == ""


@pytest.mark.parametrize("call", ["cudaMallocAsync", "cudaMemcpyAsync"])
def test_failures_are_buffer_errors_and_leak_nothing(tl, call):
    src = tl.buffer()
    producer = CAIArray(src, tl.stream())
    view = caibridge.as_dlpack(producer)
    before = sys.getrefcount(producer)
    tl.c.fail(call.encode(), 2)
    with pytest.raises(BufferError, match=call):
        view.__dlpack__(stream=1, copy=True, max_version=(1, 3))
    tl.drain()
    assert live(tl) == 0
    assert sys.getrefcount(producer) == before


def test_failed_free_is_counted_not_raised(tl):
    src = tl.buffer()
    capsule = caibridge.to_dlpack(CAIArray(src, None), stream=1, copy=True,
                                  max_version=(1, 3))
    tl.c.fail(b"cudaFreeAsync", 1)
    view, _ = data_of(capsule)
    del view, capsule
    gc.collect()          # the deleter cannot raise: nothing escapes


HOST_PATHS = {
    "as_dlpack": lambda src, a, **kw: caibridge.as_dlpack(
        CAIArray(src, a)).__dlpack__(**kw),
    "to_dlpack": lambda src, a, **kw: caibridge.to_dlpack(
        CAIArray(src, a), **kw),
    "add_dlpack": lambda src, a, **kw: PatchedArray(src, a).__dlpack__(**kw),
}


class Host:
    """A DLPack producer of a host capsule, for NumPy."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, **kwargs):
        return self.capsule


@pytest.mark.parametrize("path", sorted(HOST_PATHS))
@pytest.mark.parametrize("copy", [True, None])
def test_host_consumer_gets_a_host_copy_after_the_producer(tl, path, copy):
    src = tl.buffer()
    a = tl.stream()
    gate = tl.gate(on_host_wait=True)
    tl.fill(a, src, NEW, gate)
    capsule = HOST_PATHS[path](src, a, dl_device=(1, 0), copy=copy,
                               max_version=(1, 3))
    got = np.from_dlpack(Host(capsule))
    assert (got == NEW).all(), "the host copy did not wait for the producer"
    src[:] = OLD
    assert (got == NEW).all(), "the host copy is a view, not a copy"
    assert live(tl) == 0


@pytest.mark.parametrize("path", sorted(HOST_PATHS))
def test_copy_false_to_host_names_both_devices(tl, path):
    src = tl.buffer()
    with pytest.raises(BufferError, match=r"copy=False.*kDLCUDA.*kDLCPU"):
        HOST_PATHS[path](src, None, dl_device=(1, 0), copy=False)


def test_failed_2d_copy_frees_and_raises(tl):
    src = tl.buffer()

    class Strided:
        __cuda_array_interface__ = {
            "data": (src.ctypes.data, False), "shape": (4, 4),
            "typestr": "|u1", "strides": (8, 1), "version": 3,
            "stream": None}

    producer = Strided()
    before = sys.getrefcount(producer)
    tl.c.fail(b"cudaMemcpy2DAsync", 1)
    with pytest.raises(BufferError, match="cudaMemcpy2DAsync"):
        caibridge.to_dlpack(producer, stream=1, copy=True)
    tl.drain()
    assert live(tl) == 0
    assert sys.getrefcount(producer) == before


@pytest.mark.parametrize("path", ["add_dlpack", "caiview"])
def test_no_consumer_stream_copies_on_the_producers(tl, path):
    """stream=-1 (no ordering asked): there is no consumer's stream, so the
    copy is queued on the producer's own, after its work."""
    src = tl.buffer()
    a = tl.stream()
    gate = tl.gate()
    tl.fill(a, src, NEW, gate)
    if path == "add_dlpack":
        capsule = PatchedArray(src, a).__dlpack__(stream=-1, copy=True)
    else:
        inner = caibridge.to_dlpack(CAIArray(src, None), max_version=(1, 3))
        capsule = caibridge.from_dlpack(inner, stream=a).__dlpack__(
            stream=-1, copy=True)
    assert f"cudaMallocAsync(64, 0x{a:x})" in tl.c.log().decode()
    tl.open(gate)
    tl.drain()
    view, ptr = data_of(capsule)
    assert (np.frombuffer(ctypes.string_at(ptr, N), np.uint8) == NEW).all()
    del view, capsule
    gc.collect()
    tl.drain()
    assert live(tl) == 0


def test_per_thread_copy_is_freed_on_the_legacy_stream(tl):
    """Stream 2 names the calling thread's stream, and a deleter may run
    on any thread: the free goes on the legacy stream, which waits for
    every blocking stream, the per-thread ones included."""
    src = tl.buffer()
    capsule = caibridge.to_dlpack(CAIArray(src, None), stream=2, copy=True)
    assert "cudaMallocAsync(64, cudaStreamPerThread)" in tl.c.log().decode()
    del capsule
    gc.collect()
    tl.drain()
    log = tl.c.log().decode()
    assert "cudaFreeAsync(cudaStreamLegacy)" in log, log
    assert live(tl) == 0


def test_free_on_the_legacy_stream_waits_for_the_per_thread_copy(tl):
    """The copy on stream 2 is held behind the producer; its free on the
    legacy stream must not run before it (CUDA orders the two; the
    double keeps that order, so freeing early would be seen)."""
    src = tl.buffer()
    a = tl.stream()
    gate = tl.gate()
    tl.fill(a, src, NEW, gate)
    capsule = caibridge.to_dlpack(CAIArray(src, a), stream=2, copy=True)
    del capsule
    gc.collect()
    assert live(tl) == 1, "the free ran before the copy it frees"
    tl.open(gate)
    tl.drain()
    assert live(tl) == 0


@pytest.mark.parametrize("to_host", [False, True], ids=["device", "host"])
@pytest.mark.parametrize("shape,strides", [
    ((3, 0), None), ((0,), None), ((0, 4), None),
    # Strides are moot when an extent is 0: the other extents may be any
    # size, and nothing is multiplied out of them.
    ((2**62, 16, 0), None), ((2**62, 16, 0), (64, 4, 4))])
def test_empty_array_with_no_data_is_copied(tl, to_host, shape, strides):
    """An empty array's pointer may be 0: nothing is copied from it, and
    no arithmetic is done on it."""
    class Empty:
        __cuda_array_interface__ = {
            "data": (0, False), "shape": shape, "typestr": "<f4",
            "strides": strides, "version": 3, "stream": None}

    kw = {"dl_device": (1, 0)} if to_host else {"stream": 1}
    capsule = caibridge.as_dlpack(Empty()).__dlpack__(
        copy=True, max_version=(1, 3), **kw)
    if to_host:
        t = versioned_tensor(capsule)
        dims = ctypes.c_void_p.from_address(t + 24).value
        assert ctypes.c_int32.from_address(t + 8).value == 1   # kDLCPU
        assert tuple(ctypes.c_int64.from_address(dims + 8 * i).value
                     for i in range(len(shape))) == shape
        if max(shape) < 2**40:
            got = np.from_dlpack(Host(capsule))
            assert got.shape == shape and got.dtype == np.float32
    else:
        view = caibridge.from_dlpack(capsule)
        assert view.__cuda_array_interface__["shape"] == shape
        del view
    assert "cudaMemcpy" not in tl.c.log().decode()
    del capsule
    gc.collect()
    tl.drain()
    assert live(tl) == 0


def reversed_columns(src):
    """8 rows read backwards by column: one 1-D copy per element."""
    class Strided:
        __cuda_array_interface__ = {
            "data": (src.ctypes.data + 7, False), "shape": (8, 8),
            "typestr": "|u1", "strides": (8, -1), "version": 3,
            "stream": None}
    return Strided()


def test_host_copy_failing_midway_waits_before_freeing(tl):
    """Pieces already queued still write into the host block: a failure
    after them waits for the stream before the block is freed."""
    src = tl.buffer()
    tl.c.fail_after(b"cudaMemcpyAsync", 2, 3)
    with pytest.raises(BufferError, match="cudaMemcpyAsync"):
        caibridge.as_dlpack(reversed_columns(src)).__dlpack__(
            dl_device=(1, 0), copy=True)
    log = tl.c.log().decode()
    failed = log.index("cudaMemcpyAsync")
    assert "cudaStreamSynchronize" in log[failed:], log


def test_host_copy_whose_wait_fails_is_not_freed_under_its_pieces(tl):
    src = tl.buffer()
    tl.c.fail_after(b"cudaMemcpyAsync", 2, 3)
    tl.c.fail(b"cudaStreamSynchronize", 1)
    with pytest.raises(BufferError, match="cudaMemcpyAsync"):
        caibridge.as_dlpack(reversed_columns(src)).__dlpack__(
            dl_device=(1, 0), copy=True)
    tl.drain()   # the queued pieces run into memory still allocated


def versioned_tensor(capsule):
    """(data, dtype bytes, shape pointer) fields of a versioned capsule's
    DLTensor, which starts after version, manager_ctx, deleter, flags."""
    return PyCapsule_GetPointer(capsule, b"dltensor_versioned") + 32


def test_packed_float4_is_copied_as_its_bytes(tl):
    """A CAIView of packed float4 (128 elements in 64 bytes of CUDA
    memory): copy=True copies the 64 packed bytes, in one piece."""
    src = tl.buffer()
    src[:] = np.arange(N, dtype=np.uint8)
    capsule = caibridge.to_dlpack(CAIArray(src, None), max_version=(1, 3))
    t = versioned_tensor(capsule)
    ctypes.memmove(t + 20, bytes([17, 4, 1, 0]), 4)   # float4_e2m1fn
    shape = ctypes.c_void_p.from_address(t + 24).value
    ctypes.c_int64.from_address(shape).value = 2 * N
    view = caibridge.from_dlpack(capsule)
    assert "float4_e2m1fn shape=(128,)" in repr(view)
    copy = view.__dlpack__(stream=1, copy=True, max_version=(1, 3))
    tl.drain()
    log = tl.c.log().decode()
    assert "cudaMallocAsync(64, " in log and "cudaMemcpyAsync(64, " in log
    data = ctypes.c_void_p.from_address(versioned_tensor(copy)).value
    assert data != src.ctypes.data
    assert ctypes.string_at(data, N) == src.tobytes()
    del view, copy
    gc.collect()
    tl.drain()
    assert live(tl) == 0


def test_host_copy_allocates_nothing_before_cuda_can_copy(tl):
    """A host copy CUDA refuses at its first call takes no host memory:
    2**62 bytes are not asked for (nor ASan's shadow touched) to learn
    that there is no driver."""
    src = tl.buffer()

    class Huge:
        __cuda_array_interface__ = {
            "data": (src.ctypes.data, False), "shape": (2**60,),
            "typestr": "<f4", "strides": (0,), "version": 3,
            "stream": None}

    tl.c.fail(b"cuCtxGetCurrent", 1)
    with pytest.raises(BufferError, match="cuCtxGetCurrent") as info:
        caibridge.as_dlpack(Huge()).__dlpack__(dl_device=(1, 0), copy=True)
    assert "no host memory" not in str(info.value)
