"""Hostile input: malformed CAI and array-interface dicts, hostile producers.

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
from conftest import CAIProducer

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


def expect_refusal(call, producer, expected, needle):
    """call(producer) raises expected (exactly that family, never a CUDA
    failure) with a message containing needle; nothing keeps a reference."""
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


# ---- hostile producers


class Boom(RuntimeError):
    pass


class RaisingCAI:
    @property
    def __cuda_array_interface__(self):
        raise Boom("the producer's property failed")


class RaisingAttrCAI:
    """AttributeError from the property reads as 'no such attribute'."""

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
    for name, call in calls(cls is RaisingCAI):
        with pytest.raises(Boom, match="property failed"):
            call(p)
    assert sys.getrefcount(p) == before


def test_attribute_error_property_means_absent():
    p = RaisingAttrCAI()
    with pytest.raises(TypeError, match="neither"):
        caibridge.as_dlpack(p, device=CUDA_DEVICE)


def test_interface_that_is_not_a_dict():
    for value in ([("shape", (4,))], None, 3, "shape", (("shape", (4,)),)):
        for cuda in (True, False):
            p = producer_for(value, cuda)
            for name, call in calls(cuda):
                with pytest.raises(TypeError, match="dict"):
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
        else:
            d["strides"] = (Clears(d), Tail())
            d["shape"] = (4, 4)
        p = P()
        setattr(P, "__cuda_array_interface__" if cuda
                else "__array_interface__", property(lambda self: d))
        try:
            caibridge.as_dlpack(p, device=(2, 0) if cuda else None)
            outcomes.add("accepted")
        except (TypeError, ValueError, BufferError) as e:
            assert str(e), "empty message"
            outcomes.add(type(e).__name__)
        delattr(P, "__cuda_array_interface__" if cuda
                else "__array_interface__")
    print(" ".join(sorted(outcomes)))
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
    assert result.stdout.strip(), result.stderr


# ---- hostile DLPack producers, for from_dlpack


class FakeProducer:
    def __init__(self, capsule=None, device=(1, 0), raises=None):
        self.capsule, self.device, self.raises = capsule, device, raises

    def __dlpack__(self, stream=None, max_version=None, dl_device=None,
                   copy=None):
        if self.raises is not None:
            raise self.raises("nope")
        return self.capsule

    def __dlpack_device__(self):
        return self.device


def fresh_capsule():
    return caibridge.to_dlpack(DictHost(valid_iface()),
                               max_version=(1, 3))


@pytest.mark.parametrize("case,expected,needle", [
    ("not a capsule", TypeError, "capsule"),
    ("foreign capsule", TypeError, "capsule"),
    ("used capsule", ValueError, "already"),
    ("device not a tuple", TypeError, "__dlpack_device__"),
    ("device type 0", ValueError, "device_type"),
    ("device id negative", ValueError, "device_id"),
    ("__dlpack__ raises", Boom, "nope"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_hostile_dlpack_producer(case, expected, needle):
    import ctypes
    if case == "not a capsule":
        p = FakeProducer(capsule=[1, 2])
    elif case == "foreign capsule":
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        p = FakeProducer(capsule=new(id(BACKING), b"something_else", None))
    elif case == "used capsule":
        c = fresh_capsule()
        caibridge.from_dlpack(c)
        p = FakeProducer(capsule=c)
    elif case == "device not a tuple":
        p = FakeProducer(capsule=fresh_capsule(), device=[1, 0])
    elif case == "device type 0":
        p = FakeProducer(capsule=fresh_capsule(), device=(0, 0))
    elif case == "device id negative":
        p = FakeProducer(capsule=fresh_capsule(), device=(1, -1))
    else:
        p = FakeProducer(raises=Boom)
    before = sys.getrefcount(p)
    with pytest.raises(expected) as info:
        caibridge.from_dlpack(p)
    assert needle.lower() in str(info.value).lower()
    del info
    assert sys.getrefcount(p) == before
