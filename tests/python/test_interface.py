"""Reading a producer's interface: __cuda_array_interface__ and
__array_interface__ dicts into a descriptor, malformed and hostile ones
included.

A table of malformed entries names the exact message of each rule, and
Hypothesis builds a valid descriptor, breaks it in one way, and hands it to
as_dlpack and to_dlpack through both interfaces.  Each break has its
documented exception: TypeError for a wrong type, ValueError for a value
that breaks a rule, BufferError for a well-formed descriptor DLPack cannot
express.  Every refusal must carry a message naming the field, and must
leave the reference counts of the producer and its dict as they were.
Cases that run Python code in the middle of parsing run in a subprocess,
so that a crash fails one test instead of ending the run.
"""
import gc
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import caibridge
from conftest import CAIProducer, HostProducer, cai_of, filled

# Modest and reproducible: the file runs in seconds, the same way each time.
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    database=None,
                    suppress_health_check=[HealthCheck.too_slow])

BACKING = np.zeros(64, np.float32)  # the memory every descriptor points at
POINTER = BACKING.ctypes.data
CUDA_DEVICE = (2, 0)  # given explicitly: no GPU is needed to describe


class DictHost:
    """A host producer whose __array_interface__ is the dict given."""

    def __init__(self, iface):
        self.iface = iface

    @property
    def __array_interface__(self):
        return self.iface


def valid_iface():
    return {"shape": (4, 4), "typestr": "<f4", "data": (POINTER, False),
            "strides": None, "version": 3}


def calls(cuda):
    """The entry points a descriptor goes through, as (name, function)."""
    device = CUDA_DEVICE if cuda else None
    return [
        ("as_dlpack", lambda p: caibridge.as_dlpack(p, device=device)),
        ("to_dlpack", lambda p: caibridge.to_dlpack(
            p, max_version=(1, 3), device=device, sync=False)),
    ]


def producer_for(iface, cuda):
    return CAIProducer(iface) if cuda else DictHost(iface)


def expect_refusal(call, producer, expected, needle, pattern=None):
    """call(producer) raises expected (exactly that family, never a CUDA
    failure) with a message containing needle (and matching the regular
    expression pattern, if given); nothing keeps a reference."""
    watched = [producer, producer.iface] + [
        v for v in producer.iface.values() if isinstance(v, tuple) and v]
    # A collection in the middle would drop references the call never had.
    gc.disable()
    try:
        before = [sys.getrefcount(o) for o in watched]
        try:
            call(producer)
        except BaseException as e:  # noqa: B902 - the type is what is tested
            kind, message = type(e), str(e)
        else:
            pytest.fail(f"no exception; expected {expected!r} "
                        f"mentioning {needle!r}")
        after = [sys.getrefcount(o) for o in watched]
    finally:
        gc.enable()
    assert issubclass(kind, expected), \
        f"{kind.__name__}: {message!r}; expected {expected!r}"
    assert not issubclass(kind, caibridge.CUDAError), \
        f"a malformed descriptor reached CUDA: {message!r}"
    assert message.strip(), f"{kind.__name__} with an empty message"
    assert needle.lower() in message.lower(), \
        f"message {message!r} does not name {needle!r}"
    if pattern is not None:
        assert re.search(pattern, message), \
            f"message {message!r} does not match {pattern!r}"
    assert after == before, f"reference counts {before} became {after}"


# ---- the breaks: each returns (mutated dict, exception, needle, CAI only)

KEYS = ["shape", "typestr", "data", "version"]

not_a_tuple = st.one_of(st.floats(allow_nan=True), st.text(max_size=4),
                        st.lists(st.integers(0, 5), max_size=3),
                        st.builds(object), st.sets(st.integers(0, 3),
                                                   max_size=2))


@st.composite
def missing_key(draw):
    key = draw(st.sampled_from(KEYS))
    d = valid_iface()
    del d[key]
    # An __array_interface__ without data means the object's own buffer
    # (NumPy's reading); a dict holder has none.
    return d, ValueError if key != "data" else (ValueError, TypeError), \
        key, False


@st.composite
def wrong_type(draw):
    key = draw(st.sampled_from(["shape", "typestr", "data", "version",
                                "strides"]))
    value = draw(not_a_tuple.filter(
        lambda v: not (key == "typestr" and isinstance(v, str))))
    d = valid_iface()
    d[key] = value
    return d, TypeError, key, False


@st.composite
def bad_shape(draw):
    d = valid_iface()
    how = draw(st.sampled_from(["negative", "too big", "overflow",
                                "too many dims", "not an int"]))
    if how == "negative":
        dims = draw(st.lists(st.integers(0, 5), min_size=1, max_size=4))
        dims[draw(st.integers(0, len(dims) - 1))] = draw(
            st.integers(-2**63, -1))
        d["shape"] = tuple(dims)
        return d, ValueError, "shape", False
    if how == "too big":
        d["shape"] = (draw(st.integers(2**63, 2**80)), 1)
        return d, ValueError, "shape", False
    if how == "overflow":
        # No zero axis, and the element count or byte size passes 2**63.
        n = draw(st.integers(2, 6))
        d["shape"] = tuple(draw(st.integers(2**16, 2**40)) for _ in range(n))
        if np.prod([float(x) for x in d["shape"]]) * 4 < 2**63:
            d["shape"] = (2**62, 3)
        return d, ValueError, "overflow", False
    if how == "too many dims":
        d["shape"] = (1,) * draw(st.integers(65, 200))
        return d, ValueError, "shape", False
    d["shape"] = (4, draw(st.one_of(st.floats(), st.text(max_size=2),
                                    st.none())))
    return d, TypeError, "shape", False


@st.composite
def bad_strides(draw):
    d = valid_iface()
    how = draw(st.sampled_from(["length", "not a multiple", "extent",
                                "not an int"]))
    if how == "length":
        n = draw(st.integers(0, 5).filter(lambda n: n != 2))
        d["strides"] = (4,) * n
        return d, ValueError, "strides", False
    if how == "not a multiple":
        d["strides"] = (draw(st.integers(-1000, 1000).filter(
            lambda s: s % 4 != 0)), 4)
        # NumPy reads it; DLPack cannot hold it (as NumPy's own export).
        return d, BufferError, "strides", False
    if how == "extent":
        d["strides"] = (draw(st.integers(2**62, 2**63 - 1)) // 4 * 4, 4)
        return d, ValueError, "strides", False
    d["strides"] = (16, draw(st.one_of(st.floats(), st.text(max_size=2))))
    return d, TypeError, "strides", False


BAD_TYPESTRS = [
    # (typestr, exception): malformed -> ValueError, inexpressible ->
    # BufferError (well-formed, but DLPack has no such type).
    ("", ValueError), ("<", ValueError), ("<f", ValueError),
    ("<f44444", ValueError), ("<f0", ValueError),
    ("<fx", ValueError), ("?f4", ValueError), ("<z4", ValueError),
    ("<f-4", ValueError), ("<f\x004", ValueError), ("<f\u00e94", ValueError),
    (">f4", BufferError), ("<V8", BufferError), ("|O8", BufferError),
    ("<U4", BufferError), ("|S1", BufferError), ("<M8", BufferError),
    ("<f16", BufferError),
    # Not NumPy types at all: malformed.
    ("<f3", ValueError), ("<i3", ValueError), ("|b2", ValueError),
    ("<c4", ValueError),
]


@st.composite
def bad_typestr(draw):
    d = valid_iface()
    if draw(st.booleans()):
        d["typestr"], exc = draw(st.sampled_from(BAD_TYPESTRS))
    else:
        # Any text that is not a typestr NumPy would write.
        d["typestr"] = draw(st.text(max_size=6).filter(
            lambda s: not _valid_typestr(s)))
        exc = (ValueError, BufferError)
    return d, exc, "typestr", False


def _valid_typestr(s):
    """A typestr of a DLPack type as NumPy reads it: byte order optional,
    the size spelled out."""
    try:
        dt = np.dtype(s)
    except (TypeError, ValueError, SyntaxError):
        return False
    m = re.fullmatch(r"[<>|=]?([biufc])([0-9]+)", s)
    return (m is not None and dt.kind == m.group(1) and
            dt.itemsize == int(m.group(2)))


@st.composite
def bad_data(draw):
    d = valid_iface()
    how = draw(st.sampled_from(["length", "pointer type", "pointer range",
                                "readonly type", "null"]))
    if how == "length":
        d["data"] = draw(st.sampled_from([(), (POINTER,),
                                          (POINTER, False, 0)]))
        return d, ValueError, "data", False
    if how == "pointer type":
        d["data"] = (draw(st.one_of(st.floats(), st.text(max_size=3),
                                    st.none())), False)
        return d, TypeError, "data[0]", False
    if how == "pointer range":
        d["data"] = (draw(st.one_of(st.integers(max_value=-1),
                                    st.integers(min_value=2**64))), False)
        return d, ValueError, "data[0]", False
    if how == "readonly type":
        d["data"] = (POINTER, draw(st.one_of(st.text(max_size=3), st.none(),
                                             st.floats())))
        return d, TypeError, "data[1]", False
    d["data"] = (0, False)
    return d, ValueError, "data", False


@st.composite
def bad_version(draw):
    d = valid_iface()
    d["version"] = draw(st.one_of(st.integers(max_value=-1),
                                  st.integers(min_value=4)))
    return d, ValueError, "version", False


@st.composite
def with_mask(draw):
    d = valid_iface()
    d["mask"] = draw(st.one_of(st.integers(), st.text(max_size=3),
                               st.just(valid_iface()), st.builds(object)))
    return d, BufferError, "mask", False


@st.composite
def bad_stream(draw):
    d = valid_iface()
    how = draw(st.sampled_from(["zero", "type", "range"]))
    if how == "zero":
        d["stream"] = 0
        return d, ValueError, "stream", True
    if how == "type":
        d["stream"] = draw(st.one_of(st.floats(), st.text(max_size=3)))
        return d, TypeError, "stream", True
    d["stream"] = draw(st.one_of(st.integers(min_value=2**63),
                                 st.integers(max_value=-2**63 - 1)))
    return d, ValueError, "stream", True


BREAKS = {
    "missing key": missing_key(), "wrong type": wrong_type(),
    "bad shape": bad_shape(), "bad strides": bad_strides(),
    "bad typestr": bad_typestr(), "bad data": bad_data(),
    "bad version": bad_version(), "mask": with_mask(),
    "bad stream": bad_stream(),
}


@pytest.mark.parametrize("cuda", [True, False], ids=["CAI", "array-iface"])
def test_valid_descriptor_is_accepted(cuda):
    """The base every break starts from converts, so a refusal is the
    break's doing."""
    for name, call in calls(cuda):
        assert call(producer_for(valid_iface(), cuda)) is not None, name


@pytest.mark.parametrize("cuda", [True, False], ids=["CAI", "array-iface"])
@pytest.mark.parametrize("kind", list(BREAKS))
def test_broken_descriptor_is_refused(kind, cuda):
    @SETTINGS
    @given(BREAKS[kind])
    def run(case):
        d, expected, needle, cuda_only = case
        if cuda_only and not cuda:
            # The array interface has no stream: the entry is ignored.
            for _, call in calls(cuda):
                assert call(producer_for(d, cuda)) is not None
            return
        for _, call in calls(cuda):
            expect_refusal(call, producer_for(dict(d), cuda), expected,
                           needle)
    run()


# ---- one malformed entry at a time, with the exact message of its rule

GOOD = {"shape": (4, 3), "typestr": "<f4", "data": (4096, False),
        "version": 3}
MISSING = object()


def with_entry(key, value):
    iface = dict(GOOD)
    if value is MISSING:
        del iface[key]
    else:
        iface[key] = value
    return iface


CASES = [
    # (key, value, exception, pattern naming the field)
    ("shape", MISSING, ValueError, "'shape'"),
    ("shape", [4, 3], TypeError, "shape must be a tuple"),
    ("shape", (4, "3"), TypeError, r"shape\[1\] must be an int"),
    ("shape", (4.0, 3), TypeError, r"shape\[0\] must be an int"),
    ("shape", (True, 3), TypeError, r"shape\[0\] must be an int"),
    ("shape", (-1, 3), ValueError, r"shape\[0\]"),
    ("shape", (2**70, 3), ValueError, r"shape\[0\] does not fit"),
    ("shape", (1,) * 65, ValueError, "at most 64"),
    ("shape", (2**40, 2**40), ValueError, "shape"),
    ("typestr", MISSING, ValueError, "'typestr'"),
    ("typestr", 4, TypeError, "typestr must be a str"),
    ("typestr", "<f", ValueError, "typestr"),
    ("typestr", "f4x", ValueError, "typestr"),
    ("typestr", "<f3", ValueError, "typestr"),  # no such NumPy type
    ("typestr", ">f4" if sys.byteorder == "little" else "<f4", BufferError,
     "native byte order"),
    ("typestr", "<V8", BufferError, "typestr"),
    ("typestr", "<M8", BufferError, "typestr"),
    ("typestr", "|O8", BufferError, "typestr"),
    ("data", MISSING, ValueError, "'data'"),
    ("data", [4096, False], TypeError, "data must be a"),
    ("data", (4096,), ValueError, "data must be a"),
    ("data", ("4096", False), TypeError, r"data\[0\]"),
    ("data", (-8, False), ValueError, r"data\[0\]"),
    ("data", (2**64, False), ValueError, r"data\[0\]"),
    ("data", (4096, "no"), TypeError, r"data\[1\]"),
    ("data", (0, False), ValueError, "data"),
    ("version", MISSING, ValueError, "'version'"),
    ("version", 4, ValueError, "version"),
    ("version", -1, ValueError, "version"),
    ("version", "3", TypeError, "version must be an int"),
    ("strides", (12,), ValueError, "strides has 1 entries"),
    ("strides", (12, "4"), TypeError, r"strides\[1\]"),
    ("strides", [12, 4], TypeError, "strides must be a tuple"),
    # NumPy reads it; DLPack counts strides in elements (BufferError, as
    # NumPy's own export).
    ("strides", (12, 3), BufferError, r"strides\[1\]"),
    ("strides", (2**62, 4), ValueError, "strides"),
    ("mask", CAIProducer(GOOD), BufferError, "mask"),
    ("stream", 0, ValueError, "stream"),
    ("stream", -1, ValueError, "stream"),
    ("stream", "1", TypeError, "stream must be an int"),
]


@pytest.mark.parametrize("key, value, error, pattern", CASES,
                         ids=[f"{c[0]}={c[1]!r:.30}" for c in CASES])
def test_malformed_cai(key, value, error, pattern):
    for _, call in calls(True):
        expect_refusal(call, CAIProducer(with_entry(key, value)), error, "",
                       pattern)


def test_well_formed_entries_accepted():
    # descr is ignored; mask/stream/strides None mean "absent".
    iface = dict(GOOD, descr=[("", "<f4")], mask=None, stream=None,
                 strides=None)
    view = caibridge.as_dlpack(CAIProducer(iface), device=(2, 0))
    assert view.__dlpack_device__() == (2, 0)
    for version in (0, 1, 2, 3):
        caibridge.as_dlpack(CAIProducer(dict(GOOD, version=version)),
                            device=(2, 0))
    zero = dict(GOOD, shape=(0, 3), data=(0, False))
    caibridge.as_dlpack(CAIProducer(zero), device=(2, 0))


def test_host_offset():
    # The offset applies to a buffer (NumPy ignores it for a pointer).
    array = filled((8,), "int32")
    view = caibridge.as_dlpack(HostProducer(array, data=array, shape=(6,),
                                            offset=8))
    assert np.from_dlpack(view).tolist() == array[2:].tolist()
    with pytest.raises(ValueError, match="offset"):
        caibridge.as_dlpack(HostProducer(array, data=array, offset=-4))
    with pytest.raises(TypeError, match="offset must be an int"):
        caibridge.as_dlpack(HostProducer(array, data=array, offset="4"))
    view = caibridge.as_dlpack(HostProducer(array, offset=8))
    assert np.from_dlpack(view).tolist() == array.tolist()


@pytest.mark.parametrize("flag, readonly", [
    (False, False), (True, True), (0, False), (1, True), (2, True)])
@pytest.mark.parametrize("cuda", [True, False], ids=["CAI", "array-iface"])
def test_readonly_flag_of_data(cuda, flag, readonly):
    """data[1] is read as a truth value: an int 1 is read-only like True."""
    iface = dict(valid_iface(), data=(POINTER, flag))
    view = caibridge.as_dlpack(producer_for(iface, cuda),
                               device=CUDA_DEVICE if cuda else None)
    back = caibridge.from_dlpack(view.__dlpack__(max_version=(1, 3)))
    got = back.__cuda_array_interface__ if cuda else back.__array_interface__
    assert got["data"] == (POINTER, readonly)


def test_buffer_reached_before_its_start():
    """Negative strides from the start of a buffer object reach before it:
    refused, as reaching past its end is."""
    raw = bytearray(range(8))
    base = {"shape": (4,), "typestr": "|u1", "data": raw, "version": 3,
            "strides": (-1,)}
    with pytest.raises(ValueError, match="reaches bytes -3 to 1 of a buffer "
                                         "of 8 bytes"):
        caibridge.as_dlpack(DictHost(dict(base)))
    with pytest.raises(ValueError, match="reaches bytes -2 to 2 of"):
        caibridge.as_dlpack(DictHost(dict(base, offset=1)))
    view = caibridge.as_dlpack(DictHost(dict(base, offset=3)))
    assert np.from_dlpack(view).tolist() == [3, 2, 1, 0]
    view = caibridge.as_dlpack(DictHost(dict(base, offset=7)))
    assert np.from_dlpack(view).tolist() == [7, 6, 5, 4]
    with pytest.raises(ValueError, match="reaches bytes 5 to 9 of"):
        caibridge.as_dlpack(DictHost(dict(base, offset=8)))


def test_host_data_of_wrong_type():
    with pytest.raises(TypeError, match="data must be"):
        caibridge.as_dlpack(HostProducer(np.zeros(2), data=3.5))


# ---- hostile producers


class Boom(RuntimeError):
    pass


class RaisingCAI:
    @property
    def __cuda_array_interface__(self):
        raise Boom("the producer's property failed")


class RaisingAttrCAI:
    """AttributeError from the property: no such attribute, unless nothing
    else describes the object (then the error is reported)."""

    @property
    def __cuda_array_interface__(self):
        raise AttributeError("not today")


class RaisingHost:
    @property
    def __array_interface__(self):
        raise Boom("the producer's property failed")


@pytest.mark.parametrize("cls", [RaisingCAI, RaisingHost])
def test_raising_property_propagates(cls):
    p = cls()
    before = sys.getrefcount(p)
    for _name, call in calls(cls is RaisingCAI):
        with pytest.raises(Boom, match="property failed"):
            call(p)
    assert sys.getrefcount(p) == before


def test_attribute_error_property_is_reported():
    p = RaisingAttrCAI()
    with pytest.raises(TypeError, match="__cuda_array_interface__ raised "
                                        "AttributeError") as info:
        caibridge.as_dlpack(p, device=CUDA_DEVICE)
    assert str(info.value.__cause__) == "not today"
    for plain in (object(), valid_iface()):  # a bare dict is no producer
        with pytest.raises(TypeError, match="neither"):
            caibridge.as_dlpack(plain)


def test_interface_that_is_not_a_dict():
    for value in ([("shape", (4,))], None, 3, "shape", (("shape", (4,)),)):
        for cuda in (True, False):
            p = producer_for(value, cuda)
            name = ("__cuda_array_interface__" if cuda
                    else "__array_interface__")
            for _, call in calls(cuda):
                with pytest.raises(TypeError, match=f"{name} must be a dict"):
                    call(p)


class LyingDict(dict):
    """A dict subclass whose Python-level lookups lie; the stored entries
    are the truth a C reader sees."""

    def __getitem__(self, key):
        raise KeyError(key)

    def get(self, key, default=None):
        return "garbage"

    def keys(self):
        return []


@pytest.mark.parametrize("cuda", [True, False], ids=["CAI", "array-iface"])
def test_dict_subclass_reads_stored_entries(cuda):
    d = LyingDict(valid_iface())
    p = producer_for(d, cuda)
    before = sys.getrefcount(d)
    view = caibridge.as_dlpack(p, device=CUDA_DEVICE if cuda else None)
    back = caibridge.from_dlpack(view)
    iface = (back.__cuda_array_interface__ if cuda
             else back.__array_interface__)
    assert iface["shape"] == (4, 4) and iface["typestr"] == "<f4"
    assert iface["data"][0] == POINTER
    del view, back, iface
    assert sys.getrefcount(d) == before


@pytest.mark.parametrize("cuda", [True, False], ids=["CAI", "array-iface"])
def test_dict_subclass_with_bad_entries_is_refused(cuda):
    d = LyingDict(valid_iface(), version=9)
    for _, call in calls(cuda):
        expect_refusal(call, producer_for(d, cuda), ValueError, "version")


class Shifting:
    """Returns a new dict, of a new shape, at every read."""

    def __init__(self, cuda):
        self.reads = 0
        self.cuda = cuda

    def _next(self):
        self.reads += 1
        d = valid_iface()
        d["shape"] = (self.reads,)
        return d

    @property
    def __cuda_array_interface__(self):
        if not self.cuda:
            raise AttributeError("__cuda_array_interface__")
        return self._next()

    @property
    def __array_interface__(self):
        return self._next()


@pytest.mark.parametrize("cuda", [True, False], ids=["CAI", "array-iface"])
def test_shifting_interface_is_read_once(cuda):
    """One read per conversion, and the tensor is what that read said: a
    second read could see another layout than the one validated."""
    p = Shifting(cuda)
    device = CUDA_DEVICE if cuda else None
    view = caibridge.as_dlpack(p, device=device)
    assert p.reads == 1
    for expected in (1, 1):  # every export of the view says the same
        back = caibridge.from_dlpack(view)
        iface = (back.__cuda_array_interface__ if cuda
                 else back.__array_interface__)
        assert iface["shape"] == (expected,)
    assert p.reads == 1, "__dlpack__ read the producer's interface again"
    capsule = caibridge.to_dlpack(p, max_version=(1, 3), device=device,
                                  sync=False)
    assert p.reads == 2
    back = caibridge.from_dlpack(capsule)
    iface = (back.__cuda_array_interface__ if cuda
             else back.__array_interface__)
    assert iface["shape"] == (2,)


def test_same_dict_changed_between_reads():
    """A producer that returns one dict and changes it in place: every read
    sees the dict as it is now (caibridge remembers the last dict read)."""
    a = filled((4, 6), "float32")
    b = filled((6, 4), "int16")
    p = HostProducer(a)
    iface = p.iface
    assert np.from_dlpack(caibridge.as_dlpack(p)).tolist() == a.tolist()
    iface["data"] = (b.ctypes.data, False)
    iface["typestr"] = b.dtype.str
    iface["shape"] = b.shape
    assert np.from_dlpack(caibridge.as_dlpack(p)).tolist() == b.tolist()
    iface["strides"] = (2, 8)  # b transposed
    iface["shape"] = (4, 6)
    assert (np.from_dlpack(caibridge.as_dlpack(p)).tolist() ==
            b.T.tolist())
    iface["shape"] = (4, -6)
    with pytest.raises(ValueError, match=r"shape\[1\]"):
        caibridge.to_dlpack(p)
    with pytest.raises(ValueError, match=r"shape\[1\]"):
        caibridge.to_dlpack(p)
    iface["shape"] = (4, 6)
    iface["mask"] = True
    with pytest.raises(BufferError, match="mask"):
        caibridge.to_dlpack(p)
    del iface["mask"]
    cai = CAIProducer(dict(cai_of(a)))
    assert caibridge.to_dlpack(cai, device=(2, 0)) is not None
    cai.iface["stream"] = 0
    with pytest.raises(ValueError, match="stream"):
        caibridge.to_dlpack(cai, device=(2, 0))


# ---- producers that run Python code while their dict is parsed

MUTATING_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import caibridge

    backing = np.zeros(64, np.float32)
    field, cuda = sys.argv[1], sys.argv[2] == "cuda"

    class Clears:
        '''An index that empties the dict being parsed, freeing the tuple
        that holds it unless the reader owns a reference.'''
        def __init__(self, d):
            self.d = d
        def __index__(self):
            self.d.clear()
            return 4

    class Tail:
        def __index__(self):
            return 4

    class P:
        pass

    outcomes = set()
    for _ in range(300):
        d = {"shape": (4, 4), "typestr": "<f4", "version": 3,
             "data": (backing.ctypes.data, False), "strides": None}
        if field == "shape":
            d["shape"] = (Clears(d), Tail(), Tail())
            expected_shape, expected_strides = (4, 4, 4), None
        else:
            d["strides"] = (Clears(d), Tail())
            d["shape"] = (4, 4)
            expected_shape, expected_strides = (4, 4), (4, 4)
        p = P()
        setattr(P, "__cuda_array_interface__" if cuda
                else "__array_interface__", property(lambda self: d))
        try:
            view = caibridge.as_dlpack(p, device=(2, 0) if cuda else None)
        except (TypeError, ValueError, BufferError) as e:
            # A refusal names the field whose entry vanished.
            outcomes.add(f"refused naming {field}" if field in str(e)
                         else f"refused: {e!r}")
            continue
        finally:
            delattr(P, "__cuda_array_interface__" if cuda
                    else "__array_interface__")
        # Accepted: the descriptor is the one the dict held when read.
        back = caibridge.from_dlpack(view)
        got = (back.__cuda_array_interface__ if cuda
               else back.__array_interface__)
        same = (got["shape"] == expected_shape and
                got["strides"] == expected_strides and
                got["typestr"] == "<f4" and
                got["data"] == (backing.ctypes.data, False))
        outcomes.add("accepted, consistent" if same
                     else f"accepted, inconsistent: {got!r}")
    print("\\n".join(sorted(outcomes)))
""")


@pytest.mark.parametrize("cuda", [True, False], ids=["CAI", "array-iface"])
@pytest.mark.parametrize("field", ["shape", "strides"])
def test_dict_emptied_while_parsed(field, cuda):
    """An __index__ that clears the dict mid-parse must not free what the
    reader is still walking: an error or a consistent descriptor, never a
    crash."""
    result = subprocess.run(
        [sys.executable, "-c", MUTATING_SCRIPT, field,
         "cuda" if cuda else "host"],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONFAULTHANDLER="1"))
    assert result.returncode == 0, (
        f"exit {result.returncode}: the reader used a freed tuple\n"
        f"{result.stderr[-2000:]}")
    outcomes = set(result.stdout.splitlines())
    assert outcomes, result.stderr
    assert outcomes <= {"accepted, consistent", f"refused naming {field}"}, \
        outcomes


# ---- An AttributeError raised inside an interface property ---------------

class TypoCAI:
    """A CAI producer whose property reads an attribute it never set."""

    @property
    def __cuda_array_interface__(self):
        return {"data": (self.ptr, False), "shape": (1,), "typestr": "<f4",
                "version": 3}


class TypoAI:
    @property
    def __array_interface__(self):
        return self.array.__array_interface__


class NoInterface:
    def __getattr__(self, name):  # every attribute absent, as documented
        raise AttributeError(name)


@pytest.mark.parametrize("convert", [caibridge.as_dlpack, caibridge.to_dlpack],
                         ids=["as_dlpack", "to_dlpack"])
@pytest.mark.parametrize("cls, name", [
    (TypoCAI, "__cuda_array_interface__"), (TypoAI, "__array_interface__")])
def test_attribute_error_inside_property_is_reported(convert, cls, name):
    with pytest.raises(TypeError) as info:
        convert(cls())
    assert str(info.value).startswith(
        "%s.%s raised AttributeError inside the property" % (cls.__name__,
                                                             name))
    cause = info.value.__cause__
    assert isinstance(cause, AttributeError), "chained to the real error"
    assert "has no attribute" in str(cause) and \
        ("'ptr'" in str(cause) or "'array'" in str(cause))


def test_absent_interfaces_still_named():
    with pytest.raises(TypeError, match="has neither __cuda_array_interface__"
                                        " nor __array_interface__") as info:
        caibridge.as_dlpack(NoInterface())
    assert info.value.__cause__ is None
