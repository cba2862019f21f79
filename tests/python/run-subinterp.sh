#!/bin/sh
# The sub-interpreter tests on another CPython (3.12 or later for the
# isolated case): caibridge is installed with pip into a temporary virtual
# environment of that interpreter, with pytest and NumPy (the test suite's
# conftest needs it), and test_subinterpreters.py runs against it.
#
#   sh tests/python/run-subinterp.sh /path/to/python3.12
set -eu

top=$(cd "$(dirname "$0")/../.." && pwd)
python=${1:?usage: run-subinterp.sh PYTHON}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM

# Built from a copy of the sources, so this tree stays clean.
mkdir "$work/src"
(cd "$top" && tar cf - --exclude=stage --exclude=.libs --exclude='*.so' \
    --exclude='*.o' --exclude='*.lo' LICENSE README.md setup.py \
    pyproject.toml MANIFEST.in src include python) | (cd "$work/src" && tar xf -)

"$python" -m venv "$work/venv"
pip="$work/venv/bin/python -m pip -q --disable-pip-version-check"
$pip install pytest numpy
$pip install "$work/src"

cd "$work"
PYTHONDONTWRITEBYTECODE=1 "$work/venv/bin/python" -m pytest -v \
    -p no:cacheprovider --rootdir="$top/tests/python" \
    "$top/tests/python/test_subinterpreters.py"
