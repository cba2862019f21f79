#!/bin/sh
# The pip path, checked end to end: install caibridge with pip into a fresh
# virtual environment (sharing the system's torch, JAX and NumPy), then run
# the Python tests against that install rather than the Autotools build.
#
#   sh tests/python/pip-install.sh [VENV]      (default VENV: /tmp/venv-ci)
#
# The build runs on a copy of the files an sdist carries (MANIFEST.in), so
# the source tree stays clean and a missing file shows up here.
set -eu

top=$(cd "$(dirname "$0")/../.." && pwd)
venv=${1:-/tmp/venv-ci}
python=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM

mkdir -p "$work/src"
for path in LICENSE README.md setup.py pyproject.toml MANIFEST.in src \
            include python; do
    cp -R "$top/$path" "$work/src/"
done
# Anything an earlier in-tree build left next to the sources stays behind.
rm -rf "$work/src/python/stage" "$work/src/python/caibridge/.libs" \
       "$work/src/python/caibridge/"*.so

rm -rf "$venv"
"$python" -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$work/src"

cd "$work"
"$venv/bin/python" -c 'import caibridge, sys; print("pip-install: caibridge",
    caibridge.__version__, "from", caibridge.__file__)'
PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider \
    --rootdir="$top/tests/python" "$top/tests/python"
