"""The core's C sources, read from src/local.mk (CAI_CORE_SOURCES), so the
Autotools build and the pip build (setup.py) share one list."""
import os
import re


def core_sources(root):
    """Paths, relative to root, of the core library's C sources."""
    with open(os.path.join(root, "src", "local.mk"), encoding="utf-8") as f:
        text = f.read().replace("\\\n", " ")
    match = re.search(r"^CAI_CORE_SOURCES\s*=(.*)$", text, re.MULTILINE)
    if match is None:
        raise RuntimeError("src/local.mk defines no CAI_CORE_SOURCES")
    sources = match.group(1).split()
    if not sources or not all(s.endswith(".c") for s in sources):
        raise RuntimeError("CAI_CORE_SOURCES in src/local.mk should list "
                           "only .c files, got %r" % sources)
    return sources


if __name__ == "__main__":
    print("\n".join(core_sources(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))))
