"""The C core against NumPy, an implementation it shares no code with.

The core's functions are called through ctypes on the shared library of the
build tree (src/.libs/libcaibridge.so), with inputs Hypothesis draws:

- cai_typestr_parse and cai_typestr_format against np.dtype: a typestr
  NumPy refuses is refused; one the core accepts means the same kind and
  size to NumPy, in native order, and formats back as NumPy's dtype.str;
  every native canonical typestr of a type DLPack has is accepted.
- cai_is_c_contiguous against ndarray.flags.c_contiguous, over real views
  (slices with steps, reversals, transposes, broadcasts, zero-size axes).
- cai_layout_extent against np.lib.array_utils.byte_bounds over the same
  views, against the length of the buffer they view, and against exact
  integer arithmetic for layouts and offsets near 2**63.
"""
import ctypes
import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import caibridge

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
SETTINGS = settings(max_examples=400, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
EINVAL, EUNSUPPORTED = -1, -2

try:
    byte_bounds = np.lib.array_utils.byte_bounds
except AttributeError:  # NumPy 1.x
    byte_bounds = np.byte_bounds


def core_library():
    """The build tree's libcaibridge.so; the module is staged in the same
    build tree (python/stage/caibridge), so it is found from there."""
    stage = os.path.dirname(os.path.dirname(os.path.abspath(
        caibridge.__file__)))
    top = os.path.dirname(os.path.dirname(stage))
    path = os.path.join(top, "src", ".libs", "libcaibridge.so")
    if os.path.basename(stage) != "stage":
        pytest.skip(f"caibridge is not staged in a build tree "
                    f"({caibridge.__file__}): no core library to load",
                    allow_module_level=True)
    if not sys.platform.startswith("linux"):
        pytest.skip("the core is loaded as libcaibridge.so (Linux only)",
                    allow_module_level=True)
    return ctypes.CDLL(path)


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class Error(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("field", ctypes.c_char * 32),
                ("message", ctypes.c_char * 224)]


lib = core_library()
I64P = ctypes.POINTER(ctypes.c_int64)
lib.cai_typestr_parse.argtypes = [ctypes.c_char_p, ctypes.c_size_t,
                                  ctypes.POINTER(DLDataType),
                                  ctypes.POINTER(Error)]
lib.cai_typestr_format.argtypes = [DLDataType, ctypes.c_char_p,
                                   ctypes.POINTER(Error)]
lib.cai_is_c_contiguous.argtypes = [ctypes.c_int, I64P, I64P, ctypes.c_int64]
lib.cai_layout_extent.argtypes = [ctypes.c_int, I64P, I64P, ctypes.c_int64,
                                  ctypes.c_int64, I64P, I64P,
                                  ctypes.POINTER(Error)]

# DLPack type codes (DLDataTypeCode) for NumPy's kinds.
KIND_CODE = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
NATIVE = "<" if sys.byteorder == "little" else ">"


def parse(s):
    raw = s.encode("latin-1")
    out, err = DLDataType(), Error()
    rc = lib.cai_typestr_parse(raw, len(raw), ctypes.byref(out),
                               ctypes.byref(err))
    return rc, out, err


def fmt(dtype):
    buf = ctypes.create_string_buffer(8)
    rc = lib.cai_typestr_format(dtype, buf, None)
    return rc, buf.value.decode()


def numpy_dtype(s):
    try:
        return np.dtype(s)
    except (TypeError, ValueError, SyntaxError):
        return None


def expressible(dt):
    """A NumPy dtype that has a DLPack type of the same bytes."""
    sizes = {"b": (1,), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8),
             "f": (2, 4, 8), "c": (8, 16)}
    return (dt.kind in sizes and dt.itemsize in sizes[dt.kind]
            and dt.fields is None and dt.subdtype is None)


typestrs = st.one_of(
    st.builds(lambda o, k, n: f"{o}{k}{n}",
              st.sampled_from(["<", ">", "|", "=", "", "!"]),
              st.sampled_from(list("biufcVOUSMmax?")),
              st.sampled_from(["1", "2", "3", "4", "8", "16", "32", "0",
                               "04", "", "8[s]", "8[ns]"])),
    st.text(alphabet="<>|=biufcVOUSMm0123456789[]", max_size=6),
    st.sampled_from([np.dtype(t).str for t in
                     "?bBhHiIlLqQefdgFDGOUSVMm"] + ["<M8[s]", "<m8[ns]"]),
)


@SETTINGS
@given(typestrs)
def test_typestr_against_numpy(s):
    rc, out, err = parse(s)
    dt = numpy_dtype(s)
    if rc == 0:
        assert dt is not None, f"{s!r}: the core accepts what NumPy refuses"
        assert dt.isnative, f"{s!r}: accepted, but not native to NumPy"
        assert KIND_CODE.get(dt.kind) == out.code, (s, dt, out.code)
        assert out.bits == dt.itemsize * 8 and out.lanes == 1, (s, dt)
        frc, back = fmt(out)
        assert frc == 0 and back == dt.str, (s, back, dt.str)
        return
    assert rc in (EINVAL, EUNSUPPORTED), (s, rc)
    assert err.status == rc and err.field == b"typestr" and err.message
    if dt is None:
        return
    canonical = (len(s) >= 3 and s[0] in "<>|=" and s[1] in "biufc"
                 and s[2:].isdigit() and s[2] != "0")
    if canonical and dt.isnative and expressible(dt):
        pytest.fail(f"{s!r}: NumPy reads {dt}, which DLPack has, but the "
                    f"core refuses it: {err.message.decode()}")
    # NumPy accepts it, DLPack cannot hold it: well-formed, so unsupported.
    if canonical and (not dt.isnative or not expressible(dt)):
        assert rc == EUNSUPPORTED, (s, dt, err.message)


@pytest.mark.parametrize("t", ["?", "b", "B", "h", "H", "i", "I", "q", "Q",
                               "e", "f", "d", "F", "D"])
def test_every_numpy_type_with_a_dlpack_type(t):
    dt = np.dtype(t)
    rc, out, err = parse(dt.str)
    assert rc == 0, err.message
    assert fmt(out) == (0, dt.str)


# ---- Layouts: real NumPy views of a real buffer.

DTYPES = ["?", "i1", "u2", "i4", "f4", "f8", "c16"]


@st.composite
def views(draw):
    """A view of a fresh base array, and the base (the buffer)."""
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=ndim,
                                max_size=ndim)))
    base = np.zeros(shape, dtype)
    view = base
    if ndim:
        slices = []
        for n in shape:
            step = draw(st.sampled_from([1, 1, 2, 3, -1, -2]))
            start = draw(st.integers(0, max(n - 1, 0)))
            stop = draw(st.one_of(st.none(), st.integers(0, n)))
            slices.append(slice(start if step > 0 else None, stop, step)
                          if draw(st.booleans()) else slice(None, None, step))
        view = view[tuple(slices)]
        view = view.transpose(draw(st.permutations(range(ndim))))
        if view.ndim < 4 and draw(st.booleans()):
            # A broadcast (stride 0) axis in front.
            view = np.broadcast_to(view[np.newaxis],
                                   (draw(st.integers(0, 3)),) + view.shape)
    return view, base


def arrays_of(values):
    values = [int(v) for v in values]
    return (ctypes.c_int64 * max(len(values), 1))(*values)


def extent(shape, strides, itemsize, offset):
    lo, hi, err = ctypes.c_int64(-7), ctypes.c_int64(-7), Error()
    rc = lib.cai_layout_extent(
        len(shape), arrays_of(shape),
        None if strides is None else arrays_of(strides), itemsize, offset,
        ctypes.byref(lo), ctypes.byref(hi), ctypes.byref(err))
    return rc, lo.value, hi.value, err


@SETTINGS
@given(views())
def test_contiguity_against_numpy(vb):
    view, _ = vb
    got = lib.cai_is_c_contiguous(view.ndim, arrays_of(view.shape),
                                  arrays_of(view.strides), view.itemsize)
    assert bool(got) == view.flags.c_contiguous, (view.shape, view.strides)


@SETTINGS
@given(views())
def test_extent_against_numpy(vb):
    view, base = vb
    start = base.__array_interface__["data"][0]
    offset = view.__array_interface__["data"][0] - start
    rc, lo, hi, err = extent(view.shape, view.strides, view.itemsize, offset)
    assert rc == 0, err.message
    if view.size == 0:
        # NumPy's byte_bounds is not meant for arrays with no element: the
        # core gives the empty range at the offset.
        assert (lo, hi) == (offset, offset)
    else:
        low, high = byte_bounds(view)
        assert (lo, hi) == (low - start, high - start), (view.shape,
                                                          view.strides)
    # A view of the buffer lies inside it: the bounds check the module makes.
    assert 0 <= lo <= hi <= base.nbytes


big = st.one_of(st.integers(-2**63, 2**63 - 1),
                st.sampled_from([2**62, 2**63 - 1, -2**63, -2**62, 2**63 - 8,
                                 -(2**63 - 8)]),
                st.integers(-64, 64))


@SETTINGS
@given(st.lists(st.integers(0, 2**62), min_size=0, max_size=4).flatmap(
    lambda shape: st.tuples(st.just(shape),
                            st.one_of(st.none(),
                                      st.lists(big, min_size=len(shape),
                                               max_size=len(shape))),
                            st.sampled_from([1, 2, 4, 8, 16]), big)))
def test_extent_against_exact_arithmetic(args):
    shape, strides, itemsize, offset = args
    rc, lo, hi, err = extent(shape, strides, itemsize, offset)
    count = 1
    for n in shape:
        count *= n
    fits = count <= INT64_MAX
    below = above = 0
    if fits and count:
        if strides is None:
            above = count * itemsize
        else:
            for n, s in zip(shape, strides):
                if n > 1:
                    if s < 0:
                        below += s * (n - 1)
                    else:
                        above += s * (n - 1)
            above += itemsize
    fits = fits and INT64_MIN <= below and above <= INT64_MAX
    fits = fits and INT64_MIN <= below + offset and above + offset <= INT64_MAX
    if not fits:
        assert rc == EINVAL and (lo, hi) == (0, 0), (args, rc, lo, hi)
        assert err.field in (b"shape", b"strides", b"offset") or \
            err.field.startswith(b"strides["), err.field
        return
    assert rc == 0, (args, err.message)
    assert (lo, hi) == (below + offset, above + offset), args
