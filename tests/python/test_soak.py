"""Leak soak: many hand-overs of each kind, then nothing may be left over.

Each kind runs a warm-up (so that allocator pools, consumer caches and
lazily built tables exist before the first measurement), then N hand-overs
with a full collection every 10000: JAX leaves reference cycles behind
(NumPy's own capsules into JAX grow RSS by ~70 MB per 150000 without one).
After them: resident memory has grown by less than 1 MiB, the producer's
reference count is back to its start, no GC-tracked type has more live
objects than before, and the interpreter holds no more allocated blocks
than before (give or take a few for caches; a leak of one object per
hand-over would be N).

N is CAIBRIDGE_SOAK_N: 50000 under make check (a few seconds), and
1000000 under `make soak`, which CI runs from .ci/harden.  A JAX hand-over
costs about 60 us on the CI machine (the others 1-6 us), so JAX's count is
CAIBRIDGE_SOAK_JAX_N: N / 10 by default, 300000 under `make soak` to keep
CI's hardening script within its time; `make soak SOAK_JAX_N=1000000` runs
the full million (measured clean: RSS -54 MB, blocks +46).
"""
import collections
import gc
import os
import sys

import numpy as np
import pytest

import caibridge
from conftest import HostProducer, consumer

torch, needs_torch = consumer("torch")
jax, needs_jax = consumer("jax", "dlpack")

N = int(os.environ.get("CAIBRIDGE_SOAK_N", "50000"))
JAX_N = int(os.environ.get("CAIBRIDGE_SOAK_JAX_N", str(max(N // 10, 1000))))
RSS_LIMIT = 1 << 20
# Blocks the interpreter may keep for caches no matter how long the loop
# ran; a per-hand-over leak would show up as about N.
BLOCK_SLACK = 200


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def live_types():
    return collections.Counter(type(o).__qualname__ for o in gc.get_objects())


def settle():
    for _ in range(3):
        gc.collect()


def soak(name, step, n, producer, warmup=10000):
    """Runs step() n times after a warm-up and checks what is left."""
    for _ in range(max(n // 10, warmup)):
        step()
    settle()
    refs0 = sys.getrefcount(producer)
    types0 = live_types()
    blocks0 = sys.getallocatedblocks()
    rss0 = rss_bytes()
    for i in range(n):
        step()
        if i % 10000 == 9999:
            # Consumers may leave their side in reference cycles (JAX
            # does), freed only by a full collection; without one, their
            # pending garbage would pass for a leak.
            gc.collect()
    settle()
    rss1 = rss_bytes()
    blocks1 = sys.getallocatedblocks()
    types1 = live_types()
    refs1 = sys.getrefcount(producer)
    grown = {t: types1[t] - types0[t] for t in types1
             if types1[t] > types0[t]}
    print(f"soak {name}: {n} hand-overs, RSS {rss1 - rss0:+d} bytes, "
          f"allocated blocks {blocks1 - blocks0:+d}, "
          f"producer refcount {refs0} -> {refs1}, grown types {grown}")
    assert refs1 == refs0, f"{name}: producer refcount {refs0} -> {refs1}"
    assert rss1 - rss0 < RSS_LIMIT, \
        f"{name}: RSS grew by {rss1 - rss0} bytes over {n} hand-overs"
    # A leak keeps at least one block per hand-over; the consumer's own
    # runtime (JAX on a free-threaded build) may hold a few hundred.
    assert blocks1 - blocks0 < max(BLOCK_SLACK, n // 2), \
        f"{name}: {blocks1 - blocks0} more allocated blocks after {n}"
    # Types grown by a handful are caches; a leak grows with n.
    leaking = {t: g for t, g in grown.items() if g >= 50}
    assert not leaking, f"{name}: live objects grew: {leaking}"


@pytest.fixture(scope="module")
def host():
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    return HostProducer(array)


@needs_torch
def test_as_dlpack_into_torch(host):
    def step():
        t = torch.from_dlpack(caibridge.as_dlpack(host))
        assert t.shape == (3, 4)
    soak("as_dlpack -> torch", step, N, host)


def test_as_dlpack_into_numpy(host):
    def step():
        a = np.from_dlpack(caibridge.as_dlpack(host))
        assert a.shape == (3, 4)
    soak("as_dlpack -> numpy", step, N, host)


@needs_jax
def test_as_dlpack_into_jax(host):
    # XLA copies host buffers that are not 64-byte aligned; either way the
    # hand-over path and its deleters run, which is what is measured.
    def step():
        x = jax.dlpack.from_dlpack(caibridge.as_dlpack(host))
        assert x.shape == (3, 4)
    # JAX's own runtime grows for its first ~20000 imports (NumPy's own
    # capsules show the same), then stays flat: warm up past that.
    soak("as_dlpack -> jax", step, JAX_N, host, warmup=30000)


@needs_torch
def test_from_dlpack_back_from_torch():
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)

    def step():
        view = caibridge.from_dlpack(t)
        assert view.__array_interface__["shape"] == (3, 4)
    soak("torch -> from_dlpack", step, N, t)


def test_from_dlpack_back_from_numpy():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)

    def step():
        b = np.asarray(caibridge.from_dlpack(a))
        assert b.shape == (3, 4)
    soak("numpy -> from_dlpack -> numpy", step, N, a)


@needs_torch
def test_round_trip_through_torch(host):
    def step():
        t = torch.from_dlpack(caibridge.as_dlpack(host))
        assert caibridge.from_dlpack(t).__array_interface__["data"][0] == \
            host.iface["data"][0]
    soak("as_dlpack -> torch -> from_dlpack", step, N, host)


def test_unconsumed_capsules(host):
    def step():
        caibridge.to_dlpack(host, max_version=(1, 3))
        caibridge.to_dlpack(host)
        caibridge.as_dlpack(host).__dlpack__(max_version=(1, 0))
    soak("unconsumed capsules", step, N, host)


def test_failed_conversions(host):
    bad = HostProducer(host.array, version=7)
    readonly = HostProducer(host.array, data=(host.iface["data"][0], True))
    used = caibridge.to_dlpack(host, max_version=(1, 3))
    caibridge.from_dlpack(used)

    def step():
        for call, exc in (
                (lambda: caibridge.as_dlpack(bad), ValueError),
                (lambda: caibridge.to_dlpack(readonly), BufferError),
                (lambda: caibridge.from_dlpack(used), ValueError),
                (lambda: caibridge.as_dlpack(host, device=(2, -1)),
                 ValueError)):
            try:
                call()
            except exc:
                pass
            else:
                raise AssertionError("the conversion did not fail")
    soak("failed conversions", step, N, host)
