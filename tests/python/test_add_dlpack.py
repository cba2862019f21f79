"""caibridge.add_dlpack: a class with __array_interface__ (or
__cuda_array_interface__) becomes a DLPack producer itself, so NumPy,
PyTorch and JAX take its instances directly, zero-copy, with read-only
kept and the instance alive exactly as long as the consumer's tensor."""
import array
import ctypes
import inspect
import operator
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import pytest

import caibridge
from conftest import (DLManagedTensorVersioned, HostProducer,
                      PyCapsule_GetPointer, call_deleter, collect, consumer,
                      data_pointer, exchange_table, filled, held_by,
                      tensor_from_py)

torch, needs_torch = consumer("torch")
jax, needs_jax = consumer("jax", "dlpack")

P = ctypes.POINTER


@caibridge.add_dlpack
class Host(HostProducer):
    """A host array type patched with the decorator."""


class Called(HostProducer):
    """The same, patched by a call."""


def test_decorator_and_call_return_the_class():
    assert caibridge.add_dlpack(Called) is Called
    for cls in (Host, Called):
        assert "__dlpack__" in cls.__dict__
        assert "__dlpack_device__" in cls.__dict__


def test_patching_twice_is_harmless():
    class Twice(HostProducer):
        pass
    caibridge.add_dlpack(Twice)
    assert caibridge.add_dlpack(Twice) is Twice
    np.testing.assert_array_equal(np.from_dlpack(Twice(np.arange(3))),
                                  np.arange(3))


def test_methods_describe_themselves():
    method = Host.__dict__["__dlpack__"]
    assert "max_version" in method.__doc__
    assert Host.__dlpack__.__name__ == "__dlpack__"
    bound = Host(filled((2,), "int8")).__dlpack__
    assert callable(bound)
    assert "dltensor" in repr(bound())


class Sub(Host):
    """A subclass: the interpreter's call for the exact class does not
    apply, the methods' own does."""


def test_every_call_path_gives_the_same_export():
    # Repeated, so that CPython 3.11+ specializes the calls it can.
    x = filled((3, 4), "float32")
    calls = {
        "plain": lambda p: p.__dlpack__(),
        "keyword": lambda p: p.__dlpack__(max_version=(1, 3)),
        "through the class": lambda p: type(p).__dlpack__(
            p, max_version=(1, 3)),
        "bound, **kwargs": lambda p: p.__dlpack__(
            **{"max_version": (1, 3), "stream": None}),
        "from C": operator.methodcaller("__dlpack__", max_version=(1, 3)),
    }
    for cls in (Host, Sub):
        for _ in range(50):
            for name, call in calls.items():
                producer = cls(x)
                capsule = call(producer)
                assert ("dltensor_versioned" in repr(capsule)) == (
                    name != "plain"), name
                got = np.asarray(caibridge.from_dlpack(capsule))
                assert np.shares_memory(got, x), name
                assert producer.__dlpack_device__() == (1, 0)
                assert type(producer).__dlpack_device__(producer) == (1, 0)
            assert np.shares_memory(np.from_dlpack(cls(x)), x)
        for bad in (lambda p: type(p).__dlpack_device__(p, 1),
                    lambda p: type(p).__dlpack_device__(p, colour=1),
                    lambda p: type(p).__dlpack__(p, 1)):
            with pytest.raises(TypeError, match="argument"):
                bad(cls(x))


def test_methods_give_their_signatures():
    dlpack = inspect.signature(Host.__dict__["__dlpack__"])
    assert list(dlpack.parameters) == ["self", "stream", "max_version",
                                       "dl_device", "copy"]
    assert all(p.kind is p.KEYWORD_ONLY and p.default is None
               for p in list(dlpack.parameters.values())[1:])
    assert list(inspect.signature(Host.__dict__[
        "__dlpack_device__"]).parameters) == ["self"]
    assert list(inspect.signature(Host(filled((2,), "int8")).__dlpack__)
                .parameters) == ["stream", "max_version", "dl_device",
                                 "copy"]


# In the main interpreter, the first caibridge module gives CPython's own
# method descriptors, which 3.11 and later call without a generic call;
# a second instance of the module (as a sub-interpreter has) gives methods
# of its own type.  Both behave alike, before and after atexit has dropped
# the main module's reference.
TWO_MODULES = textwrap.dedent("""
    import atexit, importlib.util, inspect, sys
    import numpy as np
    import caibridge

    class Host:
        def __init__(self, array_):
            self.array = array_

        @property
        def __array_interface__(self):
            return self.array.__array_interface__

    def patched(module, name):
        return module.add_dlpack(type(name, (Host,), {}))

    def kinds(cls):
        return {type(cls.__dict__[n]).__name__
                for n in ("__dlpack__", "__dlpack_device__")}

    def check(cls):
        x = np.arange(6.0).reshape(2, 3)
        got = np.from_dlpack(cls(x))
        assert np.shares_memory(got, x) and (got == x).all()
        assert cls(x).__dlpack_device__() == (1, 0)
        assert "versioned" in repr(cls(x).__dlpack__(max_version=(1, 3)))
        try:
            cls(x).__dlpack__((1, 3))
        except TypeError as e:
            assert "positional" in str(e), e
        else:
            raise AssertionError("a positional argument was taken")
        # Through the class, any object with an interface is described,
        # as add_dlpack's methods always did; no object at all is refused.
        assert cls.__dlpack_device__(x) == (1, 0)
        assert "dltensor_versioned" in repr(
            cls.__dlpack__(x, max_version=(1, 3)))
        try:
            cls.__dlpack__()
        except TypeError as e:
            assert "needs an instance" in str(e), e
        else:
            raise AssertionError("a call without an instance was taken")
        return str(inspect.signature(cls.__dlpack__))

    spec = importlib.util.find_spec("caibridge._core")
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)
    assert other is not caibridge._core
    first = patched(caibridge, "First")
    second = patched(other, "Second")
    # 3.10 makes a bound object for a call with keywords: its own
    # descriptor's costs more than caibridge's method type's.
    fast = ("method_descriptor" if sys.version_info >= (3, 11)
            else "_BridgeMethod")
    assert kinds(first) == {fast}, kinds(first)
    assert kinds(second) == {"_BridgeMethod"}, kinds(second)
    assert check(first) == check(second)
    atexit._run_exitfuncs()
    third = patched(caibridge, "Third")
    assert kinds(third) == {fast}, kinds(third)
    for cls in (first, second, third):
        check(cls)
    print("ok")
""")


def test_main_module_and_another_instance_give_the_same_methods():
    proc = subprocess.run([sys.executable, "-c", TWO_MODULES],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.split() == ["ok"], (
        proc.stdout + proc.stderr)


@pytest.mark.parametrize("consumer", ["numpy", "torch", "jax"])
def test_consumer_takes_the_instance_zero_copy(consumer):
    if {"torch": torch, "jax": jax}.get(consumer, np) is None:
        pytest.skip(f"{consumer} is not installed for this Python")
    array_ = filled((3, 4), "float32")
    producer = Host(array_)
    alive = weakref.ref(producer)
    if consumer == "numpy":
        result = np.from_dlpack(producer)
        pointer = result.__array_interface__["data"][0]
        values = np.asarray(result)
    elif consumer == "torch":
        result = torch.from_dlpack(producer)
        pointer = result.data_ptr()
        values = result.numpy()
    else:
        result = jax.dlpack.from_dlpack(producer)
        pointer = result.unsafe_buffer_pointer()
        values = np.asarray(result)
    assert pointer == data_pointer(array_), "zero-copy"
    np.testing.assert_array_equal(values, array_)
    del producer
    collect()
    assert alive() is not None, "the tensor keeps the instance alive"
    del result, values
    collect()
    assert alive() is None, "and releases it with the tensor"


def test_strided_instance():
    base = filled((6, 8), "int16")
    strided = base[::2, ::-3]
    result = np.from_dlpack(Host(strided))
    assert result.strides == strided.strides
    assert result.__array_interface__["data"][0] == data_pointer(strided)
    np.testing.assert_array_equal(result, strided)


@needs_jax
def test_read_only_is_kept():
    array_ = filled((4,), "float64")
    array_.flags.writeable = False
    producer = Host(array_)
    result = np.from_dlpack(producer)
    assert not result.flags.writeable
    with pytest.raises(BufferError, match="read-only"):
        producer.__dlpack__()  # a legacy capsule cannot say so
    with pytest.raises(BufferError, match="read-only"):
        jax.dlpack.from_dlpack(producer)  # JAX asks for legacy only
    capsule = producer.__dlpack__(max_version=(1, 0))
    pointer = PyCapsule_GetPointer(capsule, b"dltensor_versioned")
    assert DLManagedTensorVersioned.from_address(pointer).flags & 1


def test_protocol_keywords():
    array_ = filled((5,), "int32")
    producer = Host(array_)
    assert producer.__dlpack_device__() == (1, 0)
    assert "\"dltensor\"" in repr(producer.__dlpack__())
    assert "dltensor_versioned" in repr(
        producer.__dlpack__(max_version=(1, 3)))
    assert "\"dltensor\"" in repr(producer.__dlpack__(max_version=(0, 8)))
    producer.__dlpack__(dl_device=(1, 0), copy=False, stream=None)
    with pytest.raises(BufferError, match="dl_device"):
        producer.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError, match="stream"):
        producer.__dlpack__(stream=5)
    with pytest.raises(TypeError, match="unexpected keyword"):
        producer.__dlpack__(colour="red")
    with pytest.raises(TypeError, match="positional"):
        producer.__dlpack__(None)


@needs_torch
def test_copy_true_copies():
    array_ = filled((2, 3), "float32")[:, ::2]
    producer = Host(array_)
    alive = weakref.ref(producer)
    capsule = producer.__dlpack__(max_version=(1, 0), copy=True)
    pointer = PyCapsule_GetPointer(capsule, b"dltensor_versioned")
    managed = DLManagedTensorVersioned.from_address(pointer)
    assert managed.flags & 2, "IS_COPIED"
    assert managed.dl_tensor.data != data_pointer(array_)
    del producer
    collect()
    assert alive() is None, "a copy holds nothing of the producer"
    result = torch.from_dlpack(capsule)
    np.testing.assert_array_equal(result.numpy(), array_)


def test_bad_interface_errors_name_the_field():
    producer = Host(filled((3,), "int8"), typestr="<x9")
    with pytest.raises((TypeError, ValueError, BufferError),
                       match="typestr"):
        producer.__dlpack__()


@needs_torch
def test_subclass_inherits():
    class Sub(Host):
        pass
    result = torch.from_dlpack(Sub(filled((2, 2), "int64")))
    assert result.shape == (2, 2)


@needs_torch
def test_slots_class():
    @caibridge.add_dlpack
    class Slotted:
        __slots__ = ("array", "__weakref__")

        def __init__(self, a):
            self.array = a

        @property
        def __array_interface__(self):
            return self.array.__array_interface__

    a = filled((3,), "uint16")
    assert torch.from_dlpack(Slotted(a)).data_ptr() == data_pointer(a)


def test_exchange_api_is_published():
    capsule = Host.__dict__["__dlpack_c_exchange_api__"]
    assert "dlpack_exchange_api" in repr(capsule)
    a = filled((2, 5), "float64")
    producer = Host(a)
    before = caibridge._core._foreign_table_imports()
    view = caibridge.from_dlpack(producer)
    assert caibridge._core._foreign_table_imports() == before + 1, \
        "from_dlpack took the class's exchange API"
    assert view.__array_interface__["data"][0] == data_pointer(a)


# ---- types that cannot take the methods ----

@pytest.mark.parametrize("cls", [int, array.array, np.ndarray, memoryview])
def test_static_types_are_refused(cls):
    with pytest.raises(TypeError, match="as_dlpack"):
        caibridge.add_dlpack(cls)


def test_not_a_class_is_refused():
    with pytest.raises(TypeError, match="class"):
        caibridge.add_dlpack(Host(filled((1,), "int8")))


def test_own_dlpack_is_not_overwritten():
    class Own(HostProducer):
        def __dlpack__(self, **kwargs):
            raise AssertionError("not ours")

    with pytest.raises(TypeError, match="already"):
        caibridge.add_dlpack(Own)


def test_exchange_table_from_c():
    """The patched class's table driven as a C consumer drives it."""
    api = exchange_table(Host)
    assert (api.header.major, api.header.minor) == (1, 3)
    a = filled((4,), "int32")

    def take(producer):
        out = tensor_from_py(api, producer)
        assert out.contents.dl_tensor.data == data_pointer(a)
        assert out.contents.flags == 0
        return out

    # The tensor holds the instance until its deleter runs.
    held_by(lambda: Host(a), take, release=call_deleter)
    with pytest.raises(TypeError, match="add_dlpack"):
        tensor_from_py(api, HostProducer(a))
