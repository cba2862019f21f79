"""The C sources, read from the Automake fragments so the Autotools build
and the pip build (setup.py) share one list: the core's from src/local.mk
(CAI_CORE_SOURCES), the extension's from python/local.mk
(CAI_PY_SOURCES)."""
import os
import re


def _make_list(root, fragment, variable):
    """The .c files that variable lists in the Automake fragment."""
    with open(os.path.join(root, fragment), encoding="utf-8") as f:
        text = f.read().replace("\\\n", " ")
    match = re.search(r"^%s\s*=(.*)$" % variable, text, re.MULTILINE)
    if match is None:
        raise RuntimeError("%s defines no %s" % (fragment, variable))
    sources = match.group(1).split()
    if not sources or not all(s.endswith(".c") for s in sources):
        raise RuntimeError("%s in %s should list only .c files, got %r"
                           % (variable, fragment, sources))
    return sources


def core_sources(root):
    """Paths, relative to root, of the core library's C sources."""
    return _make_list(root, os.path.join("src", "local.mk"),
                      "CAI_CORE_SOURCES")


def module_sources(root):
    """Paths, relative to root, of the extension module's C sources."""
    return _make_list(root, os.path.join("python", "local.mk"),
                      "CAI_PY_SOURCES")


if __name__ == "__main__":
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print("\n".join(core_sources(top) + module_sources(top)))
