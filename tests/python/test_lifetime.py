"""Lifetime: every capsule keeps the producer alive until its deleter runs,
exactly once, whoever runs it and on whatever thread (many threads at once,
and the interpreter's exit, are in test_threads.py)."""
import ctypes
import sys
import weakref

import numpy as np
import pytest

import caibridge
from conftest import (HostProducer, Worker, collect, data_pointer, filled,
                      held_by, join_native, start_native, take_tensor)


def producer_and_ref(shape=(4, 5), dtype="float32"):
    producer = HostProducer(filled(shape, dtype))
    return producer, weakref.ref(producer)


@pytest.mark.parametrize("consumer", ["torch", "numpy", "jax"])
def test_consumer_outlives_dropped_producer(consumer, request):
    # Each optional consumer skips on its own.
    module = np if consumer == "numpy" else request.getfixturevalue(consumer)
    producer, alive = producer_and_ref()
    expected = producer.array.copy()
    pointer = data_pointer(producer.array)
    view = caibridge.as_dlpack(producer)
    if consumer == "jax":
        result = module.dlpack.from_dlpack(view)
    else:
        result = module.from_dlpack(view)
    del producer, view
    collect()
    assert alive() is not None, "the consumer keeps the producer alive"
    if consumer == "torch":
        assert result.data_ptr() == pointer
        np.testing.assert_array_equal((result * 2).numpy(), expected * 2)
    elif consumer == "numpy":
        np.testing.assert_array_equal(result * 2, expected * 2)
    else:
        np.testing.assert_array_equal(np.asarray(result * 2), expected * 2)
    del result
    collect()
    assert alive() is None, "the producer dies with its last consumer"


def test_producer_dies_with_last_of_several_consumers(torch):
    producer, alive = producer_and_ref()
    view = caibridge.as_dlpack(producer)
    first = torch.from_dlpack(view)
    second = np.from_dlpack(view)
    third = torch.from_dlpack(caibridge.to_dlpack(producer))
    del producer, view
    collect()
    assert alive() is not None
    del first
    collect()
    assert alive() is not None
    del third
    collect()
    assert alive() is not None
    del second
    collect()
    assert alive() is None


@pytest.mark.parametrize("max_version", [None, (1, 3)])
def test_unconsumed_capsule_releases_producer(max_version):
    # The capsule holds the producer; dropped unconsumed, it releases it.
    held_by(lambda: HostProducer(filled((4, 5), "float32")),
            lambda p: caibridge.as_dlpack(p).__dlpack__(
                max_version=max_version))


@pytest.mark.parametrize("max_version", [None, (1, 3)])
def test_capsule_dying_under_an_exception_leaves_it(max_version):
    """A capsule freed while an exception is set (a list dropped by C code
    on its error path) releases its producer, whose finalizer runs Python
    code, and the exception reaches the caller as it was."""
    finalized = []

    class Logged(HostProducer):
        def __del__(self):
            try:
                raise KeyError("the finalizer's own")
            except KeyError:
                finalized.append(self.array.shape)

    def capsules():
        yield caibridge.to_dlpack(Logged(filled((2, 3), "int8")),
                                  max_version=max_version)
        raise ValueError("the caller's")

    with pytest.raises(ValueError, match="the caller's"):
        list(capsules())
    collect()
    assert finalized == [(2, 3)]


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_unconsumed_to_dlpack_capsule_releases_producer(max_version):
    def take(producer):
        capsule = caibridge.to_dlpack(producer, max_version=max_version)
        expected = "dltensor_versioned" if max_version else "dltensor"
        assert expected in repr(capsule)
        return capsule

    held_by(lambda: HostProducer(filled((4, 5), "float32")), take)


def test_each_dlpack_call_is_independent(torch):
    producer, alive = producer_and_ref()
    view = caibridge.as_dlpack(producer)
    capsules = [view.__dlpack__(), view.__dlpack__(max_version=(1, 0)),
                view.__dlpack__()]
    assert len({id(c) for c in capsules}) == 3
    results = [torch.from_dlpack(c) for c in capsules[:2]]
    del view, producer
    results[0][0, 0] = 42
    assert results[1][0, 0].item() == 42, "both views see one memory"
    del results[0], capsules[0]
    collect()
    assert alive() is not None
    del results, capsules
    collect()
    assert alive() is None


def test_release_is_exact_refcount(torch):
    # Exactly one release per capsule: the producer's reference count comes
    # back to where it started (a double release would go below it).
    producer = HostProducer(filled((3,), "int64"))
    before = sys.getrefcount(producer)
    for _ in range(20):
        view = caibridge.as_dlpack(producer)
        np.from_dlpack(view)
        torch.from_dlpack(view)
        view.__dlpack__()
        view.__dlpack__(max_version=(1, 2))
        caibridge.to_dlpack(producer)
        caibridge.from_dlpack(view)
        del view
    collect()
    assert sys.getrefcount(producer) == before


def _call_deleter_gil_released(deleter, tensor):
    # CFUNCTYPE calls release the GIL, as a deleter on a foreign thread sees.
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(deleter)(tensor)


@pytest.mark.parametrize("where", ["gil-released", "python-thread",
                                   "native-thread"])
@pytest.mark.parametrize("versioned", [False, True],
                         ids=["legacy", "versioned"])
def test_deleter_releases_owner_exactly_once(versioned, where):
    """A consumer's deleter, run by this thread with the GIL released, by
    another Python thread, or by a native thread with no Python thread
    state, takes the GIL itself and drops the owner's reference once."""
    producer, alive = producer_and_ref()
    collect()
    before = sys.getrefcount(producer)
    capsule = caibridge.to_dlpack(producer,
                                  max_version=(1, 3) if versioned else None)
    assert sys.getrefcount(producer) == before + 1
    tensor, deleter = take_tensor(capsule)
    del capsule  # renamed used: its destructor leaves the tensor alone
    assert sys.getrefcount(producer) == before + 1
    if where == "gil-released":
        _call_deleter_gil_released(deleter, tensor)
    elif where == "python-thread":
        worker = Worker(_call_deleter_gil_released, deleter, tensor)
        worker.start()
        worker.join()
    else:
        join_native(start_native(deleter, tensor))
    assert sys.getrefcount(producer) == before
    del producer
    collect()
    assert alive() is None, "the deleter released the producer"


# ---- A producer that keeps the view of its own hand-over -----------------

def collected_of(keep, rounds=200):
    """How many of rounds producers are collected once each keeps
    keep(producer) in an attribute (a cycle through caibridge)."""
    refs = []
    for _ in range(rounds):
        producer = HostProducer(filled((4,), "int32"))
        producer.kept = keep(producer)
        refs.append(weakref.ref(producer))
        del producer
    collect()
    return sum(ref() is None for ref in refs)


@pytest.mark.parametrize("keep", [
    lambda p: caibridge.from_dlpack(caibridge.as_dlpack(p)),
    lambda p: caibridge.from_dlpack(
        caibridge.to_dlpack(p, max_version=(1, 0))),
    lambda p: caibridge.from_dlpack(caibridge.from_dlpack(
        caibridge.as_dlpack(p))),
], ids=["as_dlpack", "to_dlpack", "re-exported"])
def test_view_of_own_hand_over_is_collected(keep):
    # The CAIView shows the collector the producer its tensor holds.
    assert collected_of(keep) == 200


def test_capsule_of_own_hand_over_is_not_collected():
    # A capsule cannot show the collector what its tensor holds (PyCapsule
    # has no traverse): this cycle stays until the attribute is dropped.
    producer = HostProducer(filled((4,), "int32"))
    producer.kept = caibridge.to_dlpack(producer, max_version=(1, 0))
    alive = weakref.ref(producer)
    del producer
    collect()
    assert alive() is not None, "documented: a capsule's cycle stays"
    del alive().kept
    collect()
    assert alive() is None
