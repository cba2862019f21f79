"""Lifetime: every capsule keeps the producer alive until its deleter runs,
exactly once, whoever runs it and on whatever thread."""
import ctypes
import subprocess
import sys
import threading
import weakref

import numpy as np
import pytest

import caibridge
from conftest import HostProducer, collect, consumer, data_pointer, filled

torch, needs_torch = consumer("torch")
jax, needs_jax = consumer("jax", "dlpack")

PyCapsule_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
PyCapsule_GetPointer.restype = ctypes.c_void_p
PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
PyCapsule_SetName = ctypes.pythonapi.PyCapsule_SetName
PyCapsule_SetName.restype = ctypes.c_int
PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]


def producer_and_ref(shape=(4, 5), dtype="float32"):
    producer = HostProducer(filled(shape, dtype))
    return producer, weakref.ref(producer)


@pytest.mark.parametrize("consumer", [
    pytest.param("torch", marks=needs_torch), "numpy",
    pytest.param("jax", marks=needs_jax)])
def test_consumer_outlives_dropped_producer(consumer):
    producer, alive = producer_and_ref()
    expected = producer.array.copy()
    pointer = data_pointer(producer.array)
    view = caibridge.as_dlpack(producer)
    if consumer == "torch":
        result = torch.from_dlpack(view)
    elif consumer == "numpy":
        result = np.from_dlpack(view)
    else:
        result = jax.dlpack.from_dlpack(view)
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


@needs_torch
def test_producer_dies_with_last_of_several_consumers():
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
    producer, alive = producer_and_ref()
    capsule = caibridge.as_dlpack(producer).__dlpack__(max_version=max_version)
    del producer
    collect()
    assert alive() is not None, "the capsule holds the producer"
    del capsule
    collect()
    assert alive() is None, "an unconsumed capsule releases it"


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_unconsumed_to_dlpack_capsule_releases_producer(max_version):
    producer, alive = producer_and_ref()
    capsule = caibridge.to_dlpack(producer, max_version=max_version)
    expected = "dltensor_versioned" if max_version else "dltensor"
    assert expected in repr(capsule)
    del producer
    collect()
    assert alive() is not None
    del capsule
    collect()
    assert alive() is None


@needs_torch
def test_each_dlpack_call_is_independent():
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


@needs_torch
def test_release_is_exact_refcount():
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


def _take_tensor(capsule, name):
    pointer = PyCapsule_GetPointer(capsule, name)
    assert PyCapsule_SetName(capsule, b"used_" + name) == 0
    return pointer


def _call_deleter_without_gil(pointer, versioned):
    # The deleter field: after dl_tensor (48 bytes) and manager_ctx in the
    # legacy struct; after version and manager_ctx in the versioned one.
    offset = 16 if versioned else 56
    address = ctypes.c_void_p.from_address(pointer + offset).value
    # CFUNCTYPE calls release the GIL, as a deleter on a foreign thread sees.
    deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)
    deleter(pointer)


@pytest.mark.parametrize("versioned", [False, True])
def test_deleter_takes_the_gil_itself(versioned):
    producer, alive = producer_and_ref()
    capsule = caibridge.to_dlpack(producer,
                                  max_version=(1, 3) if versioned else None)
    name = b"dltensor_versioned" if versioned else b"dltensor"
    pointer = _take_tensor(capsule, name)
    del producer
    collect()
    assert alive() is not None
    _call_deleter_without_gil(pointer, versioned)
    collect()
    assert alive() is None, "the deleter released the producer"
    del capsule  # renamed: its destructor must not run the deleter again


def test_deleter_on_another_thread():
    producer, alive = producer_and_ref()
    capsule = caibridge.to_dlpack(producer, max_version=(1, 3))
    pointer = _take_tensor(capsule, b"dltensor_versioned")
    del producer
    worker = threading.Thread(target=_call_deleter_without_gil,
                              args=(pointer, True))
    worker.start()
    worker.join()
    collect()
    assert alive() is None


@needs_torch
def test_consumer_freed_on_another_thread():
    producer, alive = producer_and_ref()
    box = [torch.from_dlpack(caibridge.as_dlpack(producer))]
    del producer

    def drop():
        box.pop()
    worker = threading.Thread(target=drop)
    worker.start()
    worker.join()
    collect()
    assert alive() is None


@needs_torch
def test_interpreter_exit_with_live_capsules(tmp_path):
    # Capsules, views and consumer tensors still alive at exit: the deleters
    # run during finalization or not at all, and nothing crashes.
    script = tmp_path / "exit.py"
    script.write_text(
        "import numpy as np, torch, caibridge\n"
        "a = np.arange(6.0)\n"
        "keep = [caibridge.to_dlpack(a), caibridge.as_dlpack(a),\n"
        "        torch.from_dlpack(caibridge.as_dlpack(a)),\n"
        "        caibridge.from_dlpack(torch.arange(3))]\n"
        "keep.append(keep)\n"
        "print('done')\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "done"
