"""DLPack types that a CAI typestr cannot name (bfloat16, the float8
variants, lanes, packed float4) go through the DLPack side of a CAIView
unchanged; only the interface read refuses them, saying that DLPack can
still carry them.  Packed sub-byte elements need a C-contiguous layout."""

import ctypes
import re

import numpy as np
import pytest

import caibridge
from conftest import (Capsule, DLDataType, DLManagedTensor, FakeTensor,
                      PyCapsule_GetPointer, call_deleter, collect, consumer,
                      exchange_table, filled, managed, tensor_from_py)

torch, needs_torch = consumer("torch")
jax, needs_jax = consumer("jax", "dlpack")
ml_dtypes, needs_ml_dtypes = consumer("ml_dtypes")

# (DLPack code, bits, lanes, name in messages and repr) of include/caibridge/
# dlpack.h's types that have no typestr, each a whole number of bytes.
NO_TYPESTR = [
    (4, 16, 1, "bfloat16"),
    (7, 8, 1, "float8_e3m4"),
    (8, 8, 1, "float8_e4m3"),
    (9, 8, 1, "float8_e4m3b11fnuz"),
    (10, 8, 1, "float8_e4m3fn"),
    (11, 8, 1, "float8_e4m3fnuz"),
    (12, 8, 1, "float8_e5m2"),
    (13, 8, 1, "float8_e5m2fnuz"),
    (14, 8, 1, "float8_e8m0fnu"),
    (15, 8, 1, "float6_e2m3fn"),
    (16, 8, 1, "float6_e3m2fn"),
    (17, 4, 2, "float4_e2m1fnx2"),
    (2, 32, 4, "float32x4"),
    (3, 64, 1, "opaque handle64"),
]


def fake(code, bits, lanes, versioned=True, shape=(2, 3)):
    """A FakeTensor over bytes, retyped to the DLPack type given."""
    itemsize = bits * lanes // 8
    array = filled(shape + (itemsize,), "uint8")[..., 0] if itemsize == 1 \
        else filled(shape, "uint%d" % (8 * itemsize)) if itemsize <= 8 \
        else filled(shape + (itemsize // 8,), "uint64")[..., 0]
    t = FakeTensor(array, versioned=versioned)
    t.struct.dl_tensor.dtype = DLDataType(code, bits, lanes)
    if itemsize > 8:
        # Strides in elements of the new type: the array's are in uint64s.
        for i in range(array.ndim):
            t.strides[i] = array.strides[i] // itemsize
    return t


def same_tensor(a, b):
    """The fields a consumer reads, equal in two DLTensors."""
    assert a.data == b.data
    assert a.byte_offset == b.byte_offset
    assert (a.dtype.code, a.dtype.bits, a.dtype.lanes) == \
        (b.dtype.code, b.dtype.bits, b.dtype.lanes)
    assert a.ndim == b.ndim
    assert list(a.shape[:a.ndim]) == list(b.shape[:b.ndim])
    if b.strides:
        assert list(a.strides[:a.ndim]) == list(b.strides[:b.ndim])


@pytest.mark.parametrize("code,bits,lanes,name", NO_TYPESTR,
                         ids=[n for *_, n in NO_TYPESTR])
def test_dlpack_side_carries_the_type(code, bits, lanes, name):
    source = fake(code, bits, lanes)
    view = caibridge.from_dlpack(source.capsule())
    assert name in repr(view) and "shape=(2, 3)" in repr(view)
    assert "kDLCPU" in repr(view)
    out = managed(view.__dlpack__(max_version=(1, 3)))
    same_tensor(out.dl_tensor, source.struct.dl_tensor)
    legacy = view.__dlpack__()
    same_tensor(DLManagedTensor.from_address(
        PyCapsule_GetPointer(legacy, b"dltensor")).dl_tensor,
        source.struct.dl_tensor)
    table = tensor_from_py(exchange_table(caibridge.CAIView), view)
    same_tensor(table.contents.dl_tensor, source.struct.dl_tensor)
    call_deleter(table)
    with pytest.raises(BufferError, match=name + ".*DLPack can still carry"):
        view.__array_interface__
    with pytest.raises(AttributeError, match="host memory"):
        view.__cuda_array_interface__
    with pytest.raises(BufferError, match=name):
        np.asarray(view)
    del view, legacy, out
    collect()
    assert source.calls == 1, "the deleter ran once"


def test_legacy_import_and_byte_offset_kept():
    source = fake(4, 16, 1, versioned=False)
    source.struct.dl_tensor.byte_offset = 2
    source.shape[1] = 2
    view = caibridge.from_dlpack(source.capsule())
    out = managed(view.__dlpack__(max_version=(1, 0)))
    # The byte offset is folded into the pointer: the same first element.
    assert out.dl_tensor.data + out.dl_tensor.byte_offset == \
        source.struct.dl_tensor.data + 2
    assert out.flags & 1, "a legacy import is read-only"
    assert "legacy" in repr(view)


def packed_float4(shape=(2, 8), strides=None, flags=0, versioned=True):
    """A float4_e2m1fn tensor (DLPack's 4 bits, one lane), packed two to a
    byte as DLPack defines sub-byte types by default."""
    count = int(np.prod(shape))
    backing = filled(((count + 1) // 2,), "uint8")
    t = FakeTensor(backing, versioned=versioned, flags=flags)
    t.shape = (ctypes.c_int64 * len(shape))(*shape)
    if strides is None:
        strides = [int(np.prod(shape[i + 1:])) for i in range(len(shape))]
    t.strides = (ctypes.c_int64 * len(shape))(*strides)
    d = t.struct.dl_tensor
    d.ndim, d.shape, d.strides = len(shape), t.shape, t.strides
    d.dtype = DLDataType(17, 4, 1)
    return t


@pytest.mark.parametrize("shape", [(2, 8), (3, 3), (7,), (1, 5, 1)])
def test_packed_sub_byte_elements_are_carried(shape):
    """float4 with one lane: the DLPack side carries it unchanged (its
    strides are the C-contiguous ones, in elements); only the interface
    read refuses it; copy=True copies the packed bytes, the odd last half
    byte rounded up."""
    source = packed_float4(shape)
    view = caibridge.from_dlpack(source.capsule())
    assert "float4_e2m1fn" in repr(view)
    out = managed(view.__dlpack__(max_version=(1, 3)))
    same_tensor(out.dl_tensor, source.struct.dl_tensor)
    with pytest.raises(BufferError, match="float4_e2m1fn.*DLPack can still "
                       "carry"):
        view.__array_interface__
    copy = view.__dlpack__(max_version=(1, 3), copy=True)
    t = managed(copy).dl_tensor
    nbytes = (int(np.prod(shape)) + 1) // 2
    assert t.data != source.struct.dl_tensor.data
    assert ctypes.string_at(t.data, nbytes) == source.array.tobytes()
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (17, 4, 1)
    del view, out, copy, t
    collect()
    assert source.calls == 1, "the deleter ran once"


@pytest.mark.parametrize("strides,axis", [((1, 2), 1), ((16, 1), 0),
                                          ((8, 2), 1)])
def test_packed_sub_byte_elements_need_a_contiguous_layout(strides, axis):
    """Packed elements smaller than a byte have no byte stride: any other
    layout is refused at import, naming the stride, and deleted."""
    source = packed_float4((2, 8), strides)
    with pytest.raises(BufferError, match=r"strides\[%d\].*float4_e2m1fn"
                       ".*C-contiguous" % axis):
        caibridge.from_dlpack(source.capsule())
    assert source.calls == 1, "the refused tensor is deleted"


def test_padded_sub_byte_elements_are_refused():
    source = packed_float4(flags=1 << 2)    # IS_SUBBYTE_TYPE_PADDED
    with pytest.raises(BufferError, match="padded sub-byte"):
        caibridge.from_dlpack(source.capsule())
    assert source.calls == 1


def test_unknown_type_code_is_refused():
    source = fake(200, 8, 1)
    with pytest.raises(BufferError, match="code this library does not know"):
        caibridge.from_dlpack(source.capsule())


def test_numpy_refuses_the_same_type_on_import():
    """The oracle: NumPy refuses bfloat16 at np.from_dlpack (a RuntimeError,
    'Unsupported dtype in DLTensor'); caibridge takes it and refuses only
    the interface read, with a BufferError (where we differ: the type and
    the moment)."""
    source = fake(4, 16, 1)

    class Producer:
        def __dlpack__(self, **kwargs):
            return source.capsule()

        def __dlpack_device__(self):
            return (1, 0)

    from test_docs_claims import assert_numpy_takes_bfloat16_as_the_page_says
    assert_numpy_takes_bfloat16_as_the_page_says(Producer())
    view = caibridge.from_dlpack(Producer())
    with pytest.raises(BufferError, match="bfloat16"):
        np.asarray(view)


TORCH_TYPES = ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
               "float8_e5m2fnuz", "float8_e8m0fnu", "bool", "complex64",
               "float16"]


@needs_torch
@pytest.mark.parametrize("name", TORCH_TYPES)
def test_torch_round_trip(name):
    dtype = getattr(torch, name, None)
    if dtype is None:
        pytest.skip("torch %s has no %s" % (torch.__version__, name))
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4).to(dtype)
    t = t[:, ::2]
    try:
        view = caibridge.from_dlpack(t)
    except BufferError as exc:
        pytest.skip("torch does not export %s (%s)" % (name, exc))
    back = torch.from_dlpack(view)
    assert back.dtype == t.dtype
    assert back.data_ptr() == t.data_ptr()
    assert back.stride() == t.stride() and back.shape == t.shape
    assert torch.equal(back.view(torch.uint8) if back.element_size() == 1
                       and dtype != torch.bool else back,
                       t.view(torch.uint8) if t.element_size() == 1
                       and dtype != torch.bool else t)
    again = torch.from_dlpack(view.__dlpack__())
    assert again.data_ptr() == t.data_ptr()


@needs_torch
def test_torch_bfloat16_like_its_test_dlpack():
    """torch's test_dlpack bfloat16 cases on CPU: a tensor, a
    non-contiguous one and a 0-d one go through caibridge and come back
    sharing memory, and a write shows on both sides."""
    for t in [torch.randn(4, 5).to(torch.bfloat16),
              torch.randn(4, 6).to(torch.bfloat16)[:, 1::2],
              torch.tensor(1.5, dtype=torch.bfloat16)]:
        back = torch.from_dlpack(caibridge.from_dlpack(t))
        assert back.dtype == torch.bfloat16
        assert torch.equal(back, t)
        back.fill_(3.0)
        assert bool((t == 3.0).all()), "zero-copy"


JAX_TYPES = ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3b11fnuz",
             "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e3m4",
             "float8_e4m3", "float8_e8m0fnu", "float4_e2m1fn"]


@needs_jax
@pytest.mark.parametrize("name", JAX_TYPES)
def test_jax_round_trip(name):
    """JAX into caibridge and back.  JAX exports and asks for legacy
    capsules, which cannot say read-only: allow_readonly_legacy=True lets
    the view go back (JAX never writes into an imported buffer)."""
    import jax.numpy as jnp
    dtype = getattr(jnp, name, None)
    if dtype is None:
        pytest.skip("jax %s has no %s" % (jax.__version__, name))
    x = jnp.arange(6, dtype=jnp.float32).reshape(2, 3).astype(dtype)
    try:
        x.__dlpack__()
    except Exception as exc:  # JAX's own export refuses the type
        pytest.skip("jax %s does not export %s (%s)"
                    % (jax.__version__, name, exc))
    view = caibridge.from_dlpack(x, allow_readonly_legacy=True)
    assert name.replace("_", "") in repr(view).replace("_", "")
    out = managed(view.__dlpack__(max_version=(1, 0)))
    assert out.dl_tensor.data == x.unsafe_buffer_pointer()
    with pytest.raises(BufferError, match="DLPack can still carry"):
        view.__array_interface__
    try:
        jax.dlpack.from_dlpack(Capsule(x.__dlpack__()))
    except Exception as exc:
        # JAX cannot take its own export of this type back (float4 on the
        # CPU): through caibridge it fails the same way, not otherwise.
        with pytest.raises(type(exc), match=re.escape(str(exc))):
            jax.dlpack.from_dlpack(view)
        return
    back = jax.dlpack.from_dlpack(view)
    assert back.dtype == x.dtype
    # NaN where the type has no 0 (float8_e8m0fnu): equal as NaN.
    np.testing.assert_array_equal(np.asarray(back.astype(jnp.float32)),
                                  np.asarray(x.astype(jnp.float32)))


@needs_ml_dtypes
def test_ml_dtypes_array_has_no_typestr_numpy_can_read():
    """An ml_dtypes bfloat16 array describes itself as '<V2' in its array
    interface: NumPy's oracle for why no CAI typestr names bfloat16."""
    a = np.zeros(3, dtype=ml_dtypes.bfloat16)
    assert a.__array_interface__["typestr"] == "<V2"
