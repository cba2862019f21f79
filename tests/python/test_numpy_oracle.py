"""NumPy as the oracle: array-interface producers read by NumPy and by
caibridge must agree.

Hypothesis builds producers, valid and invalid, with every kind of `data`
(a (pointer, read-only) tuple; bytes, bytearray, memoryview slices with
steps and reversal, array.array, mmap, NumPy arrays and their views; None
or absent on an object that is its own buffer), offsets anywhere (inside,
at the end, past it, negative, near 2**63), shapes with zeros and strides
negative, zero, misaligned or out of range; CAI dicts too, with host
pointers and device=(1, 0).  The oracle is NumPy's own path to DLPack:
np.asarray(p) followed by that array's __dlpack__.  For every producer,
np.from_dlpack(caibridge.as_dlpack(p)) and the oracle both refuse (with an
exception of the documented kind), or both accept with the same shape,
type, address, writeability and, where the memory is known, the same
bytes.

NumPy never checks an array against its buffer's length, and would read
outside it; the oracle computes those cases from the buffer length and
never builds a NumPy array it would have to read there.  The differences
that are chosen, each listed in the README's table of chosen behaviours,
are the CHOSEN entries below; nothing else may differ.

CAIBRIDGE_ORACLE_EXAMPLES sets the number of producers (2,000 by default;
.ci/harden runs 50,000 on the module built with ASan and UBSan).
"""
import array
import mmap
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import caibridge
from conftest import (ArrayInterface, CAIProducer, InterfaceProducer,
                      OwnBuffer, OwnBytes)

EXAMPLES = int(os.environ.get("CAIBRIDGE_ORACLE_EXAMPLES", "2000"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))

MALFORMED = (TypeError, ValueError)
UNEXPORTABLE = (BufferError,)

# Where caibridge refuses what NumPy reads, on purpose: reason -> the
# exceptions caibridge raises.  The README's table lists each of them.
CHOSEN = {
    # NumPy reads (and would later read) outside the buffer.
    "outside the buffer": MALFORMED,
    # NumPy does not look at version; CAI and the array interface require it.
    "version absent or outside 0..3": MALFORMED,
    # NumPy ignores the mask; DLPack has no masked arrays.
    "mask": UNEXPORTABLE,
    # NumPy reads a typestr without its size as a one-letter type code ('<f'
    # is float32, '|b' int8); the protocol asks for the size.
    "typestr without its size": MALFORMED,
    # A pointer range that wraps around the address space, or an extent
    # that overflows 64 bits: no memory can hold it.
    "extent overflows": MALFORMED,
}

# Type strings: the protocol's forms (byte order optional), ones NumPy reads
# but DLPack cannot express, and malformed ones.
GOOD_TYPESTRS = [
    "|u1", "<u1", ">u1", "=u1", "u1", "|i1", "|b1", "b1", ">b1",
    "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "<f2", "<f4", "<f8",
    "<c8", "<c16", "f8", "i4", "=f4", "|f8", "c8",
]
OTHER_TYPESTRS = [
    ">f4", ">i8", "<f16", "<c32", "<M8[s]", "<m8[ns]", "|O", "|V8", "|S4",
    "<U2",
    "<f3", "<i3", "<q8", "x", "<u", "<f0", "<fé",
]


def itemsize_of(typestr):
    try:
        return np.dtype(typestr).itemsize or 1
    except Exception:
        return 1


def pattern(n, salt=0):
    """n distinct-looking bytes, so a wrong address shows as wrong values."""
    return bytes((i * 7 + 3 + salt) % 251 for i in range(n))


def byte_extent(shape, strides, itemsize):
    """(lo, hi) byte offsets an array reaches, hi exclusive; (0, 0) when it
    has no element; None when the arithmetic leaves 64 bits."""
    if any(n == 0 for n in shape):
        return 0, 0
    if strides is None:
        size = itemsize
        for n in shape:
            size *= n
        return (0, size) if size < 2**63 else None
    lo, hi = 0, itemsize
    for n, s in zip(shape, strides):
        span = s * (n - 1)
        if span < 0:
            lo += span
        else:
            hi += span
        if not -2**63 <= lo <= hi < 2**63:
            return None
    # No memory spans 2**63 bytes or more: the span too must fit.
    return (lo, hi) if hi - lo < 2**63 else None


class NoBuffer(ArrayInterface):
    """Data None on an object that exports no buffer."""


@st.composite
def layouts(draw, itemsize):
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.integers(0, 4)) for _ in range(ndim))
    mode = draw(st.sampled_from(["none", "none", "absent", "fit", "fit",
                                 "wild", "wrong length"]))
    if mode in ("none", "absent"):
        return shape, mode, None
    if mode == "wrong length":
        return shape, mode, tuple(itemsize for _ in range(ndim + 1))
    strides = []
    for _ in range(ndim):
        kind = draw(st.sampled_from(["multiple", "multiple", "zero",
                                     "misaligned", "huge"] if mode == "wild"
                                    else ["multiple", "multiple", "zero"]))
        if kind == "multiple":
            strides.append(itemsize * draw(st.integers(-6, 6)))
        elif kind == "zero":
            strides.append(0)
        elif kind == "misaligned":
            strides.append(itemsize * draw(st.integers(-3, 3)) + 1)
        else:
            strides.append(draw(st.sampled_from(
                [2**62, 2**63 - 1, -2**63, -2**62, 2**63 - 4, 2**40])))
    return shape, "tuple", tuple(strides)


def make_buffer(kind, nbytes, readonly, draw):
    """A buffer exporter of about nbytes bytes, and whether NumPy can get a
    simple (C-contiguous) buffer from it."""
    raw = pattern(max(nbytes, 0), draw(st.integers(0, 250)))
    if kind == "bytes":
        return bytes(raw)
    if kind == "bytearray":
        return bytearray(raw)
    if kind == "memoryview":
        step = draw(st.sampled_from([1, 1, 2, -1, -2, 3]))
        base = bytearray(pattern(max(nbytes, 0) * abs(step) + 4))
        view = memoryview(base)
        if readonly:
            view = view.toreadonly()
        if step > 0:
            return view[2:2 + max(nbytes, 0) * step:step]
        start = 1 + max(nbytes, 0) * -step
        return view[start:1:step]
    if kind == "array":
        return array.array("b", raw)
    if kind == "mmap":
        m = mmap.mmap(-1, max(nbytes, 1))
        m[:nbytes] = raw
        return m
    if kind == "ndarray":
        a = np.frombuffer(bytearray(raw), np.uint8).copy()
        a.flags.writeable = not readonly
        return a
    # ndarray views that are not C-contiguous (or are, when short enough)
    base = np.frombuffer(bytearray(pattern(2 * max(nbytes, 0) + 2)),
                         np.uint8).copy()
    view = draw(st.sampled_from(["step", "reverse", "2d"]))
    if view == "step":
        return base[: 2 * max(nbytes, 0): 2]
    if view == "reverse":
        return base[max(nbytes, 0) - 1:: -1] if nbytes > 0 else base[:0]
    n = max(nbytes, 0)
    return base[: 2 * n].reshape(2, n).T if n else base[:0]


@st.composite
def producers(draw):
    """(producer, how caibridge reaches it, facts the oracle needs)."""
    typestr = draw(st.sampled_from(OTHER_TYPESTRS) if draw(st.integers(0, 3))
                   == 0 else st.sampled_from(GOOD_TYPESTRS))
    itemsize = itemsize_of(typestr)
    shape, strides_mode, strides = draw(layouts(itemsize))
    kind = draw(st.sampled_from([
        "tuple", "tuple", "bytes", "bytearray", "memoryview", "array",
        "mmap", "ndarray", "ndarray view", "own none", "own absent",
        "own bytes", "no buffer", "cai", "cai", "bad data"]))
    iface = {"shape": shape, "typestr": typestr}
    version = draw(st.sampled_from([3, 3, 3, 3, 3, 3, 2, 0, 4, None]))
    if version is not None:
        iface["version"] = version
    if strides_mode != "absent":
        iface["strides"] = strides
    if draw(st.integers(0, 23)) == 0:
        iface["mask"] = draw(st.sampled_from([None, np.ones(shape, bool)]))
    extent = byte_extent(shape, strides if strides_mode == "tuple" else None,
                         itemsize)
    span = 0 if extent is None else extent[1] - extent[0]
    need = min(span, 4096)
    readonly = draw(st.booleans())
    facts = {"kind": kind, "extent": extent, "cai": kind == "cai"}

    if kind in ("tuple", "cai"):
        # Host memory big enough for the extent when it is small, else a
        # little; the pointer never wraps unless the extent makes it.
        backing = np.frombuffer(bytearray(pattern(need + 64)), np.uint8)
        base = backing.ctypes.data + 32 + (-extent[0] if extent and
                                           span <= 4096 else 0)
        flag = draw(st.sampled_from([readonly, int(readonly)]))
        iface["data"] = (base, flag)
        if kind == "tuple" and draw(st.booleans()):
            # Ignored by NumPy for a pointer: any value, valid or not.
            iface["offset"] = draw(st.sampled_from([0, 3, -5, 2**63 - 1]))
        wraps = extent is None or not (0 <= base + extent[0] and
                                       base + extent[1] <= 2**64)
        facts.update(backing=backing, pointer=base, wraps=wraps,
                     inside=not wraps and span <= 4096)
        if kind == "cai":
            if draw(st.integers(0, 4)) == 0:
                iface["stream"] = draw(st.sampled_from([None, 1, 2, 7]))
            return CAIProducer(iface, backing), facts
        return InterfaceProducer(iface, backing), facts

    if kind == "bad data":
        iface["data"] = draw(st.sampled_from(
            [[1, 2], (1,), (1, False, 2), ("x", False), 1.5]))
        return InterfaceProducer(iface), facts

    slack = draw(st.sampled_from([0, 0, 0, 0, 1, itemsize, -1, -itemsize,
                                  9]))
    offset = draw(st.sampled_from(["absent", "absent", "zero", "inside",
                                   "inside", "end", "past", "negative",
                                   "huge"]))
    if offset in ("inside", "end", "past"):
        slack = abs(slack) + 2
    nbytes = max(need + slack, 0)
    if offset == "absent":
        off = None
    elif offset == "zero":
        off = 0
    elif offset == "inside":
        off = draw(st.integers(0, 2))
        nbytes = need + off + max(slack - 2, 0)
    elif offset == "end":
        off = nbytes
    elif offset == "past":
        off = nbytes + draw(st.integers(1, 9))
    elif offset == "negative":
        off = -draw(st.integers(1, 9))
    else:
        off = draw(st.sampled_from([2**63 - 1, 2**63 - 8, 2**62, 2**63,
                                    2**64 + 1]))
    if off is not None:
        iface["offset"] = off

    if kind.startswith("own") or kind == "no buffer":
        raw = pattern(nbytes, draw(st.integers(0, 250)))
        producer = {"own none": OwnBuffer, "own absent": OwnBuffer,
                    "own bytes": OwnBytes, "no buffer": NoBuffer}[kind]
        obj = producer(raw) if producer is not NoBuffer else producer()
        if kind != "own absent":
            iface["data"] = None
        obj.iface = iface
        facts.update(buffer=obj if producer is not NoBuffer else None,
                     offset=off)
        return obj, facts

    buffer = make_buffer(kind if kind != "ndarray view" else "view",
                         nbytes, readonly, draw)
    iface["data"] = buffer
    facts.update(buffer=buffer, offset=off)
    return InterfaceProducer(iface, buffer), facts


def numpy_reading(producer, facts):
    """The oracle: ('accept', array, values_known) or ('refuse', types)."""
    iface = dict(producer.__cuda_array_interface__ if facts["cai"]
                 else producer.__array_interface__)
    reasons = []
    if facts["cai"]:
        iface.pop("stream", None)
        iface.pop("offset", None)
        stream = producer.__cuda_array_interface__.get("stream")
        if stream is not None and stream <= 0:
            reasons.append(MALFORMED)
    if facts["kind"].startswith("own") or facts["kind"] == "no buffer":
        # The object's own buffer, as NumPy's reading defines it.
        if facts["buffer"] is None:
            return "refuse", MALFORMED
        iface["data"] = facts["buffer"]
    typestr = iface.get("typestr")
    try:
        has_object = np.dtype(typestr).hasobject
    except Exception:
        has_object = False
    if has_object:
        # Never build an object array over raw bytes: read a type of the
        # same size instead (NumPy reads the layout the same way).
        iface["typestr"] = "|V%d" % np.dtype(typestr).itemsize

    inside = True
    strided = False
    if "buffer" in facts and facts["kind"] != "bad data":
        try:
            view = memoryview(facts["buffer"])
        except TypeError:
            view = None
        # NumPy passes on the exporter's own exception for a buffer that is
        # not C-contiguous (BufferError or ValueError); caibridge says
        # BufferError for every one.
        strided = view is not None and not view.c_contiguous
        if view is not None and view.c_contiguous:
            nbytes = view.nbytes
            off = facts["offset"] or 0
            extent = facts["extent"]
            if extent is None:
                inside = False
            elif extent == (0, 0):
                inside = 0 <= off <= nbytes
            else:
                inside = (0 <= off + extent[0] and off + extent[1] <= nbytes
                          and 0 <= off)
    elif facts["kind"] in ("tuple", "cai"):
        inside = not facts["wraps"]

    try:
        a = np.asarray(InterfaceProducer(iface))
    except Exception as e:  # NumPy's reading refused
        if isinstance(e, BufferError) or strided:
            return "refuse", MALFORMED + UNEXPORTABLE
        return "refuse", MALFORMED
    if a.dtype == object and not has_object:
        return "refuse", MALFORMED  # NumPy ignored the interface

    if isinstance(typestr, str) and len(typestr.lstrip("<>|=")) == 1:
        reasons.append(CHOSEN["typestr without its size"])
    version = iface.get("version")
    if version is None or not 0 <= version <= 3:
        reasons.append(CHOSEN["version absent or outside 0..3"])
    if iface.get("mask") is not None:
        reasons.append(CHOSEN["mask"])
    if not inside:
        if facts["kind"] in ("tuple", "cai"):
            reasons.append(CHOSEN["extent overflows"])
        else:
            reasons.append(CHOSEN["outside the buffer"])
    if has_object:
        reasons.append(UNEXPORTABLE)
    else:
        try:
            a.__dlpack__(max_version=(1, 0))
        except BufferError:
            reasons.append(UNEXPORTABLE)
    if reasons:
        return "refuse", tuple(t for r in reasons for t in r)
    known = inside and facts["extent"] is not None and (
        facts["kind"] not in ("tuple", "cai") or facts["inside"])
    return "accept", a, known


def caibridge_reading(producer, facts):
    device = (1, 0) if facts["cai"] else None
    return np.from_dlpack(caibridge.as_dlpack(producer, device=device))


def address(a):
    return a.__array_interface__["data"][0]


def agree(producer, facts):
    expected = numpy_reading(producer, facts)
    if expected[0] == "refuse":
        with pytest.raises(expected[1]):
            caibridge_reading(producer, facts)
        return
    _, want, known = expected
    got = caibridge_reading(producer, facts)
    assert got.shape == want.shape
    assert got.dtype == want.dtype
    assert got.flags.writeable == want.flags.writeable
    if want.size > 0:
        assert address(got) == address(want)
        for n, s, t in zip(want.shape, want.strides, got.strides):
            if n > 1:
                assert s == t
        if known:
            assert got.tobytes() == want.tobytes()


@SETTINGS
@given(producers())
def test_numpy_and_caibridge_agree(case):
    producer, facts = case
    agree(producer, facts)


def test_the_generator_reaches_every_kind_of_case():
    """The producers cover what they claim: acceptances and each kind of
    refusal, for every kind of data (a check on the test itself)."""
    seen = set()

    @settings(max_examples=1000, deadline=None, database=None,
              derandomize=True, suppress_health_check=list(HealthCheck))
    @given(producers())
    def collect(case):
        producer, facts = case
        verdict = numpy_reading(producer, facts)
        seen.add((facts["kind"], verdict[0]))
        if verdict[0] == "refuse":
            seen.add(verdict[1])

    collect()
    missing = [(kind, verdict)
               for kind in ("tuple", "bytes", "bytearray", "memoryview",
                            "array", "mmap", "ndarray", "own none",
                            "own absent", "own bytes", "cai")
               for verdict in ("accept", "refuse")
               if (kind, verdict) not in seen]
    assert not missing
    assert MALFORMED in seen and UNEXPORTABLE in seen
