"""The rendered docs show no reST as text and no quotes paired the wrong
way round: docs/check_html.py (run by `make docs`) is shown to catch each
fault, and the docs extensions are shown not to make them.  When the build
tree has docs/html (`make docs` ran), its pages are checked too."""
import os
import sys

import pytest

import caibridge

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "docs"))
sys.path.insert(0, os.path.join(ROOT, "docs", "_ext"))
import check_html  # noqa: E402
import plaintext  # noqa: E402


def page(body):
    return "<html><head><title>t</title></head><body>%s</body></html>" % body


@pytest.mark.parametrize("body, why", [
    ("<p>A base for :func:`add_dlpack`.</p>", "a reST role shown as text"),
    ("<p>see :c:func:`cai_fence_record`</p>", "a reST role shown as text"),
    ("<p>passes ``mypy --strict``</p>", "double backticks shown as text"),
    ("<p>text\n.. code-block:: python</p>",
     "a reST directive shown as text"),
    ("<p>passes mypy::</p>", "a literal block's '::' shown as text"),
    ("<p>a capsule (’<code>dltensor_versioned</code>‘) when</p>",
     "a closing quote opens a word"),
    ("<p>its version, “<code>x</code>“, a string</p>",
     "an opening quote closes a word"),
])
def test_each_fault_is_caught(body, why):
    faults = check_html.check_page(page(body))
    assert why in [w for w, _ in faults], faults


@pytest.mark.parametrize("body", [
    "<p>A base for <code class='xref'><span class='pre'>add_dlpack()"
    "</span></code>, the library’s own, ‘<code>x</code>’ and “y”.</p>",
    "<pre>``literal`` :func:`x` .. note:: inside code is code</pre>",
    "<p>the value <code><span class='pre'>``x``</span></code></p>",
    "<div class='highlight'><pre>a::</pre></div><p>fine</p>",
])
def test_good_pages_pass(body):
    assert check_html.check_page(page(body)) == []


def test_quoted_code_words_keep_their_quotes_inside():
    """Smart quotes pair a quote beside a literal the wrong way round, so a
    quoted code word of a plain-text docstring takes its quotes inside."""
    rest = plaintext.to_rest("Returns 'dltensor_versioned' when max_version "
                             "asks, else \"MAJOR.MINOR\".")
    assert rest == ["Returns ``'dltensor_versioned'`` when ``max_version`` "
                    "asks, else ``\"MAJOR.MINOR\"``\\ ."], rest


def test_python_classes_keep_their_rest():
    """DLPackProducer (a Python class, __slots__ = ()) is written in reST:
    the docstring converter must leave it alone; C types are plain text."""
    pytest.importorskip("sphinx", reason="Sphinx (docs/requirements.txt) "
                        "is not installed")
    import pystubs
    assert not pystubs._is_c_object(caibridge.DLPackProducer)
    assert not pystubs._is_c_object(caibridge.DeviceType)
    assert pystubs._is_c_object(caibridge.CAIView)
    assert pystubs._is_c_object(caibridge.DLPackView)
    assert pystubs._is_c_object(caibridge.as_dlpack)


def test_macro_comment_belongs_to_its_entry():
    """A comment above #define lines is the text of their one entry, not
    a paragraph before it (read as the previous entry's)."""
    import cheader
    header = cheader.Header(
        "/* file */\n#define CAI_A 1\n\n/* Says B. */\n#define CAI_B 2\n"
        "#define CAI_C 3 /* c */\n", "x.h")
    rest = header.rest()
    text = "\n".join(rest)
    assert ".. c:macro:: CAI_B\n             CAI_C\n\n   Says B.\n" in text
    assert "   - ``CAI_C`` = ``3``: c" in rest
    # Nothing unindented between the directives but the directives.
    loose = [l for l in rest if l and not l.startswith((" ", ".. c:macro"))]
    assert loose == [], loose


def test_built_html_is_clean():
    html = os.path.join(os.getcwd(), "docs", "html")
    if not os.path.isfile(os.path.join(html, "index.html")):
        pytest.skip("docs/html not built here (make docs)")
    assert check_html.check_tree(html) == []
