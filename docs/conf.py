"""Sphinx configuration for caibridge's documentation.

Built by `make docs` from the build tree, which puts the staged module
(python/stage, made by `make`) on PYTHONPATH so autodoc can import the C
extension.  By hand:

    make python/stage/caibridge/.stamp
    PYTHONPATH=python/stage python -m sphinx -W --keep-going -n docs docs/html
"""
import atexit
import os
import shutil
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "_ext"))

try:
    import caibridge
except ImportError as exc:
    raise RuntimeError(
        "the docs document the built module: run `make docs` from the build "
        "tree, or put a built caibridge on PYTHONPATH (%s)" % exc) from exc

project = "caibridge"
author = "the caibridge authors"
copyright = "the caibridge authors, Apache-2.0"
release = caibridge.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "cheader",
    "mdinclude",
    "pystubs",
]

# Links to Python, NumPy, PyTorch, CuPy and JAX from inventories written
# here (docs/_ext/inventories.py): the build never fetches one.
import inventories  # noqa: E402

_inventories = tempfile.mkdtemp(prefix="caibridge-inventories-")
atexit.register(shutil.rmtree, _inventories, True)
intersphinx_mapping = inventories.write(_inventories)
intersphinx_cache_limit = -1
intersphinx_timeout = 1

# Paths are from this directory.
cheader_root = ".."
pystubs_file = "../python/caibridge/__init__.pyi"
pystubs_package = "caibridge"

exclude_patterns = ["_build", "html", "requirements.txt"]
# A literal block is not Python unless it says so: only the blocks marked
# `.. code-block:: python` are examples, and tests/python/test_docs_examples.py
# runs every one of them.
highlight_language = "none"
primary_domain = "py"
default_role = "literal"

# Every cross-reference must resolve (-n); these name types the reference
# uses but does not document: the stub's CapsuleType, and C's own.
nitpicky = True
nitpick_ignore = [
    ("py:class", "CapsuleType"),
] + [("c:identifier", t) for t in (
    "size_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t",
    "uint64_t", "intptr_t", "uintptr_t")]

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
add_module_names = False

html_theme = "alabaster"
html_title = "caibridge %s" % release
html_theme_options = {
    "description": "zero-copy between the CUDA Array Interface and DLPack",
    "fixed_sidebar": True,
}
html_static_path = []
