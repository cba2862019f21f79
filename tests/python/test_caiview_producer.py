"""CAIView, what caibridge.from_dlpack returns, is a DLPack producer too:
its tensor goes on to any DLPack consumer zero-copy, with its flags, and
the view lives as long as the consumer's tensor."""
import numpy as np
import pytest

import caibridge
from conftest import (DLManagedTensor, FakeTensor, PyCapsule_GetPointer,
                      call_deleter, collect, consumer, data_pointer,
                      exchange_table, filled, held_by, managed,
                      tensor_from_py)

torch, needs_torch = consumer("torch")
jax, needs_jax = consumer("jax", "dlpack")



@needs_torch
def test_torch_through_caibridge_into_numpy():
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    result = np.from_dlpack(caibridge.from_dlpack(t))
    assert result.__array_interface__["data"][0] == t.data_ptr()
    np.testing.assert_array_equal(result, t.numpy())
    result[1, 1] = -1
    assert t[1, 1] == -1, "zero-copy both ways"


@needs_torch
def test_torch_through_caibridge_into_torch():
    t = torch.arange(10, dtype=torch.int64)[::2]
    back = torch.from_dlpack(caibridge.from_dlpack(t))
    assert back.data_ptr() == t.data_ptr()
    assert back.stride() == t.stride()
    back[0] = 100
    assert t[0] == 100


@needs_torch
def test_view_lives_as_long_as_the_tensor():
    t = torch.arange(6, dtype=torch.float64)
    held_by(lambda: caibridge.from_dlpack(t), torch.from_dlpack)


def test_numpy_round_trip_keeps_read_only():
    a = filled((4,), "int32")
    a.flags.writeable = False
    view = caibridge.from_dlpack(a)  # versioned, READ_ONLY
    assert view.__array_interface__["data"][1] is True
    result = np.from_dlpack(view)
    assert not result.flags.writeable
    assert result.__array_interface__["data"][0] == data_pointer(a)
    assert managed(view.__dlpack__(max_version=(1, 3))).flags & 1
    with pytest.raises(BufferError, match="read-only"):
        view.__dlpack__()  # a legacy capsule cannot say read-only


def test_copied_flag_is_kept():
    fake = FakeTensor(filled((3,), "float32"), flags=2)  # IS_COPIED
    view = caibridge.from_dlpack(fake.capsule())
    capsule = view.__dlpack__(max_version=(1, 0))
    m = managed(capsule)
    assert m.flags & 2
    assert m.dl_tensor.data == data_pointer(fake.array)
    del view, capsule, m
    collect()
    assert fake.calls == 1, "the source tensor's deleter ran once, at the end"


@needs_torch
@needs_jax
def test_legacy_request_of_a_writable_view_into_jax():
    t = torch.from_numpy(filled((8,), "float32"))
    view = caibridge.from_dlpack(t)
    result = jax.dlpack.from_dlpack(view)  # JAX asks for legacy capsules
    np.testing.assert_array_equal(np.asarray(result), t.numpy())


@needs_torch
def test_protocol_keywords():
    t = torch.arange(4, dtype=torch.int16)
    view = caibridge.from_dlpack(t)
    assert view.__dlpack_device__() == (1, 0)
    with pytest.raises(BufferError, match="dl_device"):
        view.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError, match="stream"):
        view.__dlpack__(stream=3)
    view.__dlpack__(dl_device=(1, 0), copy=False)
    copied = view.__dlpack__(max_version=(1, 0), copy=True)
    assert managed(copied).flags & 2
    assert managed(copied).dl_tensor.data != t.data_ptr()
    np.testing.assert_array_equal(torch.from_dlpack(copied).numpy(),
                                  t.numpy())


@needs_torch
def test_exchange_api_is_published():
    capsule = caibridge.CAIView.__dict__["__dlpack_c_exchange_api__"]
    assert "dlpack_exchange_api" in repr(capsule)
    t = torch.arange(3.0)
    before = caibridge._core._foreign_table_imports()
    again = caibridge.from_dlpack(caibridge.from_dlpack(t))
    assert caibridge._core._foreign_table_imports() >= before + 1
    assert again.__array_interface__["data"][0] == t.data_ptr()


def test_exchange_table_from_c():
    """CAIView's table driven as a C consumer drives it: the tensor keeps
    READ_ONLY and holds the view until its deleter runs."""
    api = exchange_table(caibridge.CAIView)
    assert not api.dltensor_from_py, "no borrowed DLTensor is offered"
    a = filled((3, 2), "float32")
    a.flags.writeable = False

    def take(view):
        out = tensor_from_py(api, view)
        assert out.contents.flags & 1, "READ_ONLY kept"
        assert out.contents.dl_tensor.data == data_pointer(a)
        return out

    held_by(lambda: caibridge.from_dlpack(a), take, release=call_deleter)
    with pytest.raises(TypeError, match="CAIView"):
        tensor_from_py(api, a)


def test_legacy_import_stays_read_only_when_re_exported():
    """A legacy capsule cannot say its memory may be written: the view is
    read-only, and so is what it hands on (NumPy's rule)."""
    fake = FakeTensor(filled((3,), "int16"), versioned=False)
    view = caibridge.from_dlpack(fake.capsule())
    assert view.__array_interface__["data"][1] is True
    assert managed(view.__dlpack__(max_version=(1, 0))).flags & 1
    with pytest.raises(BufferError, match="read-only"):
        view.__dlpack__()
    other = FakeTensor(filled((3,), "int16"), versioned=False)
    writable = caibridge.from_dlpack(other.capsule(), legacy_writable=True)
    assert not managed(writable.__dlpack__(max_version=(1, 0))).flags & 1


def read_only_array():
    a = filled((6,), "float32")
    a.flags.writeable = False
    return a


def legacy(capsule):
    """The DLManagedTensor a legacy capsule holds."""
    return DLManagedTensor.from_address(
        PyCapsule_GetPointer(capsule, b"dltensor"))


# Each way into from_dlpack: a producer's __dlpack__, a legacy capsule (the
# view is read-only), our own DLPackView.
READ_ONLY_SOURCES = {
    "producer": lambda a: a,
    "legacy capsule": lambda a: FakeTensor(a, versioned=False).capsule(),
    "DLPackView": lambda a: caibridge.as_dlpack(a),
}


@pytest.mark.parametrize("source", READ_ONLY_SOURCES)
def test_allow_readonly_legacy_lets_read_only_data_out_as_legacy(source):
    """JAX's call: __dlpack__(stream=None), no max_version.  The view keeps
    the opt-in; the data stays read-only wherever it can be said."""
    a = read_only_array()
    x = READ_ONLY_SOURCES[source](a)
    view = caibridge.from_dlpack(x, allow_readonly_legacy=True)
    assert view.__array_interface__["data"] == (data_pointer(a), True)
    capsule = view.__dlpack__(stream=None)
    assert legacy(capsule).dl_tensor.data == data_pointer(a)
    assert managed(view.__dlpack__(max_version=(1, 0))).flags & 1
    np.testing.assert_array_equal(np.asarray(view), a)
    refused = caibridge.from_dlpack(READ_ONLY_SOURCES[source](
        read_only_array()))
    with pytest.raises(BufferError, match="allow_readonly_legacy=True"):
        refused.__dlpack__(stream=None)


def test_allow_readonly_legacy_capsule_holds_the_view():
    a = read_only_array()
    held_by(lambda: caibridge.from_dlpack(a, allow_readonly_legacy=True),
            lambda view: view.__dlpack__(stream=None))


def test_allow_readonly_legacy_must_be_a_bool():
    with pytest.raises(TypeError, match="allow_readonly_legacy"):
        caibridge.from_dlpack(filled((2,), "int8"),
                              allow_readonly_legacy="yes")


@needs_jax
def test_jax_read_only_array_back_into_jax():
    """JAX arrays are read-only and JAX asks for legacy capsules: the
    opt-in is what takes a JAX array through a CAIView and back."""
    x = jax.numpy.arange(16, dtype=jax.numpy.float32) * 2
    with pytest.raises(BufferError, match="read-only"):
        jax.dlpack.from_dlpack(caibridge.from_dlpack(x))
    view = caibridge.from_dlpack(x, allow_readonly_legacy=True)
    assert view.__array_interface__["data"][1] is True
    back = jax.dlpack.from_dlpack(view)
    assert back.unsafe_buffer_pointer() == x.unsafe_buffer_pointer()
    np.testing.assert_array_equal(np.asarray(back), np.asarray(x))
