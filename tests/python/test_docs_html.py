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
    ("<p>copy are <code>__dlpack__</code>‘s: where</p>",
     "an opening quote as an apostrophe"),
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


def test_possessive_after_code_is_an_apostrophe():
    rest = plaintext.to_rest("dl_device and copy are __dlpack__'s: here")
    assert rest == ["``dl_device`` and copy are ``__dlpack__``\\ \u2019s: "
                    "here"], rest


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
    pytest.importorskip("docutils", reason="docutils (docs/requirements.txt) "
                        "is not installed: the C header reader needs it")
    pytest.importorskip("sphinx", reason="Sphinx (docs/requirements.txt) "
                        "is not installed: the C header reader is a Sphinx "
                        "extension")
    import cheader
    header = cheader.Header(
        "/* file */\n#define CAI_A 1\n\n/* Says B. */\n#define CAI_B 2\n"
        "#define CAI_C 3 /* c */\n", "x.h")
    rest = header.rest()
    text = "\n".join(rest)
    assert ".. c:macro:: CAI_B\n             CAI_C\n\n   Says B.\n" in text
    assert "   - ``CAI_C`` = ``3``: c" in rest
    # Nothing unindented between the directives but the directives.
    loose = [line for line in rest
             if line and not line.startswith((" ", ".. c:macro"))]
    assert loose == [], loose


def test_built_html_is_clean():
    html = os.path.join(os.getcwd(), "docs", "html")
    index = os.path.join(html, "index.html")
    if not os.path.isfile(index):
        pytest.skip("docs/html not built here (make docs)")
    sources = [os.path.join(ROOT, "docs", "check_html.py")] + [
        os.path.join(ROOT, "docs", "_ext", f)
        for f in os.listdir(os.path.join(ROOT, "docs", "_ext"))]
    if any(os.path.getmtime(f) > os.path.getmtime(index) for f in sources):
        pytest.skip("docs/html is older than the checker or the docs "
                    "extensions (make docs checks it afresh)")
    assert check_html.check_tree(html) == []


def _stub_functions():
    import ast
    path = os.path.join(ROOT, "python", "caibridge", "__init__.pyi")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and \
                        item.name.startswith("__dlpack"):
                    yield "%s.%s" % (node.name, item.name), item


def _fields(doc):
    import re
    params = re.findall(r"^\s*:param (\w+):", doc, re.M)
    return params, ":returns:" in doc


@pytest.mark.parametrize("name", [n for n, _ in _stub_functions()
                                  if n not in ("cuda_runtime_info",
                                               "show_config")])
def test_stub_function_has_field_lists(name):
    """Each C function's stub carries Parameters and Returns (the reference
    shows them; so do editors), one :param: per parameter."""
    import ast
    node = dict(_stub_functions())[name]
    doc = ast.get_docstring(node) or ""
    args = node.args
    expected = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs
                if a.arg != "self"]
    params, returns = _fields(doc)
    assert params == expected, (name, params)
    assert returns, name


@pytest.mark.parametrize("name", ["cuda_runtime_info", "show_config"])
def test_python_function_has_field_lists(name):
    import inspect
    function = getattr(caibridge, name)
    params, returns = _fields(function.__doc__)
    assert params == list(inspect.signature(function).parameters), params
    assert returns and ":raises" in function.__doc__


def test_inventories_are_local_and_readable(tmp_path):
    """intersphinx reads inventories written at build time, never the
    network: each mapping names a local file Sphinx can load."""
    pytest.importorskip("sphinx", reason="Sphinx (docs/requirements.txt) "
                        "is not installed")
    import inventories
    from sphinx.util.inventory import InventoryFile
    mapping = inventories.write(str(tmp_path))
    assert set(mapping) >= {"python", "numpy", "torch", "cupy"}
    for project, (site, path) in mapping.items():
        assert site.startswith("https://") and os.path.isfile(path)
        with open(path, "rb") as f:
            inventory = InventoryFile.load(f, site, os.path.join)
        names = {name for kind in inventory.values() for name in kind} \
            if isinstance(inventory, dict) else set(inventory)
        assert names, project
