"""Hand-overs across a device reset, with the event pool on (the default):
cudaDeviceReset ends the primary context, and every event kept for it with
it.  A hand-over after the reset must order the consumer as before and
never name a dead event (the double records any use of one as a
violation, which the tl fixture fails on)."""
import ctypes

from test_race import NEW, double, tl  # noqa: F401  (fixtures)
from timeline_double import CAIArray, caibridge


def reset_device(tl):
    tl.lib.cudaDeviceReset.restype = ctypes.c_int
    assert tl.lib.cudaDeviceReset() == 0


def hand_over(tl, src, out, value):
    """One ordered hand-over from A to B, on streams made now."""
    a, b = tl.stream(), tl.stream()
    gate = tl.gate()
    tl.fill(a, src, value, gate)
    view = caibridge.as_dlpack(CAIArray(src, a))
    capsule = view.__dlpack__(stream=b, max_version=(1, 3))
    tl.copy(b, out, src)
    tl.open(gate)
    tl.drain()
    del capsule, view
    return bool((out == value).all())


def test_hand_over_after_a_device_reset(tl):
    src, out = tl.buffer(), tl.buffer()
    assert hand_over(tl, src, out, NEW)
    assert hand_over(tl, src, out, NEW + 1)         # the pool is warm
    reset_device(tl)
    assert hand_over(tl, src, out, NEW + 2), "not ordered after the reset"
    assert tl.violations() == "", "a dead event was used after the reset"


def test_hand_over_after_a_primary_context_reset(tl):
    src, out = tl.buffer(), tl.buffer()
    assert hand_over(tl, src, out, NEW)
    reset = tl.lib.cuDevicePrimaryCtxReset_v2
    reset.restype = ctypes.c_int
    assert reset(0) == 0
    assert hand_over(tl, src, out, NEW + 1), "not ordered after the reset"
    assert tl.violations() == "", "a dead event was used after the reset"
