"""Intersphinx inventories for the few objects of Python, NumPy, PyTorch,
CuPy and JAX that these pages name, written at build time from the table
below: `make docs` needs no network, and fetches nothing.  Each entry is
the object's page on its project's site, as that site's own inventory
gives it; a new cross-reference to one of these projects adds a row here
(-n makes an unknown one an error).
"""
import os
import zlib

# project: (site, [(name, domain:role, page relative to the site)]);
# "$" in a page stands for the name.
TABLE = {
    "python": ("https://docs.python.org/3/", [
        (e, "py:exception", "library/exceptions.html#$") for e in (
            "BufferError", "TypeError", "ValueError", "AttributeError",
            "RuntimeError", "RuntimeWarning", "OSError", "ImportError",
            "BaseException", "Exception")
    ] + [
        ("int", "py:class", "library/functions.html#$"),
        ("bool", "py:class", "library/functions.html#$"),
        ("object", "py:class", "library/functions.html#$"),
        ("type", "py:class", "library/functions.html#$"),
        ("str", "py:class", "library/stdtypes.html#$"),
        ("tuple", "py:class", "library/stdtypes.html#$"),
        ("dict", "py:class", "library/stdtypes.html#$"),
        ("memoryview", "py:class", "library/stdtypes.html#$"),
        ("bytes", "py:class", "library/stdtypes.html#$"),
        ("bytearray", "py:class", "library/stdtypes.html#$"),
        ("None", "py:data", "library/constants.html#$"),
        ("typing.Any", "py:data", "library/typing.html#$"),
        ("typing.Tuple", "py:data", "library/typing.html#$"),
        ("typing.Union", "py:data", "library/typing.html#$"),
        ("enum.IntEnum", "py:class", "library/enum.html#$"),
        ("array.array", "py:class", "library/array.html#$"),
        ("ctypes", "py:module", "library/ctypes.html#module-$"),
    ]),
    "numpy": ("https://numpy.org/doc/stable/", [
        ("numpy.from_dlpack", "py:function",
         "reference/generated/numpy.from_dlpack.html#$"),
        ("numpy.asarray", "py:function",
         "reference/generated/numpy.asarray.html#$"),
        ("numpy.ndarray", "py:class",
         "reference/generated/numpy.ndarray.html#$"),
        ("numpy.shares_memory", "py:function",
         "reference/generated/numpy.shares_memory.html#$"),
    ]),
    "torch": ("https://docs.pytorch.org/docs/stable/", [
        ("torch.from_dlpack", "py:function", "generated/$.html#$"),
        ("torch.Tensor", "py:class", "tensors.html#$"),
        ("torch.utils.dlpack.from_dlpack", "py:function", "dlpack.html#$"),
    ]),
    "cupy": ("https://docs.cupy.dev/en/stable/", [
        ("cupy.from_dlpack", "py:function", "reference/generated/$.html#$"),
        ("cupy.ndarray", "py:class", "reference/generated/$.html#$"),
    ]),
    "jax": ("https://docs.jax.dev/en/latest/", [
        ("jax.dlpack.from_dlpack", "py:function",
         "_autosummary/$.html#$"),
    ]),
}


def write(folder):
    """Writes <project>.inv into folder for each project; returns the
    intersphinx_mapping that reads them."""
    mapping = {}
    for project, (site, entries) in TABLE.items():
        body = "".join("%s %s 1 %s -\n" % (name, role, page)
                       for name, role, page in entries)
        path = os.path.join(folder, project + ".inv")
        with open(path, "wb") as f:
            f.write(("# Sphinx inventory version 2\n"
                     "# Project: %s\n# Version: \n"
                     "# The remainder of this file is compressed using "
                     "zlib.\n" % project).encode())
            f.write(zlib.compress(body.encode()))
        mapping[project] = (site, path)
    return mapping
