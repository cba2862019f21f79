"""The capsule example of docs/guide/c.rst, run: tests/guide-capsule.c
builds it (taken from the page) as the extension module guide_capsule,
whose drop() wraps a tensor with the page's tensor_capsule and drops the
capsule while a KeyError is in flight.  The destructor must leave that
exception as it found it, fresh capsule or consumed, and run the deleter
only for a capsule nobody consumed, with no exception set."""
import importlib.machinery
import importlib.util
import os
import sys

import pytest

import caibridge


def load_example():
    stage = os.path.dirname(os.path.dirname(os.path.abspath(
        caibridge.__file__)))
    top = os.path.dirname(os.path.dirname(stage))
    path = os.path.join(top, "tests", ".libs", "libguide-capsule.so")
    if os.path.basename(stage) != "stage" or not sys.platform.startswith(
            "linux"):
        pytest.skip("no build tree with tests/.libs/libguide-capsule.so "
                    "(Linux, caibridge staged by make)",
                    allow_module_level=True)
    loader = importlib.machinery.ExtensionFileLoader("guide_capsule", path)
    spec = importlib.util.spec_from_loader("guide_capsule", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


example = load_example()


@pytest.mark.parametrize("consumed", [False, True])
def test_exception_in_flight_survives(consumed):
    deleted, raised_in_deleter, in_flight = example.drop(consumed)
    assert isinstance(in_flight, KeyError)
    assert in_flight.args == ("in flight",)
    assert deleted == (0 if consumed else 1)
    assert not raised_in_deleter
