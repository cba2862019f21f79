"""Every Python example of the docs and the README runs.

tests/gpu/doc_examples.py finds the blocks (``.. code-block:: python`` in
docs/**/*.rst, ```python in README.md); here each CPU example is one test,
run in a fresh namespace.  An example needing torch or JAX skips, naming
the missing package.  The GPU-only ones (Numba, PyCUDA, CuPy) run in
`make check-gpu`; here every example, GPU ones included, is checked for
names it reads but never defines.  The package's own docstring examples
(``>>>``) run too.
"""
import doctest
import os
import sys

import pytest

import caibridge

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "gpu"))
import doc_examples  # noqa: E402

from conftest import consumer  # noqa: E402

EXAMPLES = doc_examples.examples()
CPU = [e for e in EXAMPLES if not e.gpu]
GPU = [e for e in EXAMPLES if e.gpu]

# The consumers an example may import, with the skip mark that names them.
_OPTIONAL = {"torch": consumer("torch")[1],
             "jax": consumer("jax", "dlpack")[1]}


def _param(example):
    marks = [_OPTIONAL[m] for m in example.imports if m in _OPTIONAL]
    return pytest.param(example, id=example.name, marks=marks)


def test_examples_are_found():
    """The finder sees the pages: the README's NumPy and torch examples,
    the guide's, and GPU examples for check-gpu."""
    readme = [e for e in EXAMPLES if e.path == "README.md"]
    assert len(readme) >= 2, readme
    assert any("torch" in e.imports for e in readme)
    assert any(e.imports == ["caibridge", "numpy"] for e in readme)
    assert any(e.path.startswith("docs/guide/") for e in CPU)
    assert {m for e in GPU for m in e.imports} >= {"numba", "pycuda", "cupy"}
    # The README leads with what only caibridge does on a GPU: a CAI-only
    # producer (Numba) into torch, and back.
    first = [e for e in readme if e in GPU][0]
    assert {"numba", "torch"} <= set(first.imports), first.imports


def test_finder_reads_both_formats(tmp_path):
    """A block is found in reST and Markdown, options skipped, indentation
    removed; other languages are not examples."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "x\n```python\nimport numpy\nvalue = 1\n```\n```sh\nmake\n```\n")
    (tmp_path / "docs" / "p.rst").write_text(
        "T\n=\n\n.. code-block:: python\n   :caption: c\n\n   a = 1\n\n"
        "   b = a\n\nText.\n\n.. code-block:: c\n\n   int x;\n")
    found = doc_examples.examples(str(tmp_path))
    assert [e.code for e in found] == ["import numpy\nvalue = 1\n",
                                       "a = 1\n\nb = a\n"]
    assert found[0].line == 3 and found[1].line == 7


def test_undefined_names_are_caught():
    """The check that guards the GPU examples finds a name never defined,
    in a branch that does not run, and accepts one defined anywhere."""
    bad = doc_examples.Example("x.rst", 1, "import numpy\nif False:\n"
                               "    numpy.asarray(producer)\n")
    good = doc_examples.Example("x.rst", 1, "def f(a):\n    return a + b\n"
                                "b = [c for c in range(3)]\n")
    assert bad.undefined_names() == ["producer"]
    assert good.undefined_names() == []


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_no_undefined_names(example):
    assert example.undefined_names() == [], (
        "%s reads names it never defines" % example.name)


def test_caibridge_mistakes_are_caught():
    """The check that guards the GPU examples finds a misspelt function, an
    unknown keyword and a bad from-import, and passes correct code."""
    bad = doc_examples.Example("x.rst", 1, (
        "import caibridge as cb\nfrom caibridge import nothing_here\n"
        "if False:\n    caibridge.add_dlpak(object, bogus=1)\n"
        "    cb.as_dlpack(b'', devise=(1, 0))\n"))
    assert bad.caibridge_mistakes(caibridge) == [
        "caibridge.add_dlpak", "caibridge.as_dlpack(devise=...)",
        "from caibridge import nothing_here"]
    good = doc_examples.Example("x.rst", 1, (
        "import caibridge\nv = caibridge.as_dlpack(b'ab', device=(1, 0),"
        " sync=False)\nk = caibridge.kDLCUDA\n"))
    assert good.caibridge_mistakes(caibridge) == []


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_caibridge_names_exist(example):
    """Every caibridge attribute and keyword an example uses exists, GPU
    examples included (they run only in make check-gpu)."""
    assert example.caibridge_mistakes(caibridge) == []


@pytest.mark.parametrize("example", [_param(e) for e in CPU])
def test_example_runs(example):
    example.run()


def _docstrings():
    seen = [caibridge]
    for name in caibridge.__all__:
        obj = getattr(caibridge, name)
        seen.append(obj)
        seen += [v for v in vars(obj).values() if callable(v)] \
            if isinstance(obj, type) else []
    return [(o, o.__doc__) for o in seen
            if isinstance(getattr(o, "__doc__", None), str)]


def test_docstring_examples_run():
    """The ``>>>`` examples of the module's docstrings (which the reference
    renders) pass as doctests; the module's own docstring has some."""
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    count = 0
    for obj, doc in _docstrings():
        name = getattr(obj, "__qualname__", getattr(obj, "__name__", "?"))
        test = parser.get_doctest(doc, {}, name, None, 0)
        count += len(test.examples)
        runner.run(test)
    assert count >= 2
    assert runner.failures == 0, "%d docstring examples failed" % (
        runner.failures)
