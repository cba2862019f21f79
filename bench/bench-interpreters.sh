#!/bin/sh
# The speed targets in callgrind instructions, one column per CPython.
#
#   bench/bench-interpreters.sh [VERSION|PYTHON]...
#
# For each interpreter (pyenv's 3.10.13, 3.11.7, 3.12.1, 3.13.0 and a
# free-threaded 3.13t by default; a version names
# ~/.pyenv/versions/VERSION/bin/python3, or python3.13t for a VERSION ending
# in t, there or where .ci/python3.13t caches it; anything else is taken as
# a path), pip-builds a copy of this tree into a virtual
# environment with NumPy, builds the C consumer bench/xbench.c beside it,
# counts instructions with bench.py --ratios, and prints the ratios side by
# side with their targets.  Instruction counts only: no timing runs.
#
# The environments are kept in $CAIBRIDGE_BENCH_CACHE (default
# ~/.cache/caibridge-bench) so only the first run downloads NumPy.
# Environment: VALGRIND (default valgrind), CC (default cc).
set -eu

srcdir=$(cd "$(dirname "$0")/.." && pwd)
cache=${CAIBRIDGE_BENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/caibridge-bench}
pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}
valgrind=${VALGRIND:-valgrind}
cc=${CC:-cc}

[ $# -gt 0 ] || set -- 3.10.13 3.11.7 3.12.1 3.13.0 3.13.0t
command -v "$valgrind" >/dev/null 2>&1 ||
    { echo "$0: $valgrind not found (instruction counts need it)" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cai-interp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
mkdir -p "$cache"

# The tree as pip would get it from a checkout, outside the source dir so
# the build leaves nothing behind there.
mkdir "$tmp/tree"
(cd "$srcdir" && cp -R setup.py pyproject.toml MANIFEST.in LICENSE \
    README.md src include python "$tmp/tree/")
rm -rf "$tmp/tree/python/stage"

jsons=
last=
for want in "$@"; do
    case $want in
    */*) py=$want ;;
    *t) py=$pyenv_root/versions/$want/bin/python${want%.*t}t
        # Else the one .ci/python3.13t built and cached (never built here).
        [ -x "$py" ] || py=${CAIBRIDGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/caibridge}/python${want%.*t}t/bin/python${want%.*t}t ;;
    *) py=$pyenv_root/versions/$want/bin/python3 ;;
    esac
    if [ ! -x "$py" ]; then
        echo "== $want: skipped: $py is not built here" >&2
        continue
    fi
    tag=$("$py" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
    venv=$cache/venv-$tag
    if [ ! -x "$venv/bin/python" ]; then
        echo "== $tag: making $venv (numpy, setuptools)"
        "$py" -m venv "$venv"
        "$venv/bin/python" -m pip install -q numpy 'setuptools>=77' ||
            { rm -rf "$venv"; exit 1; }
    fi
    echo "== $tag: building caibridge and bench/xbench.c"
    rm -rf "$tmp/tree/build"
    (cd "$tmp/tree" && "$venv/bin/python" -m pip install -q --no-deps \
        --no-build-isolation --force-reinstall . ) >"$tmp/pip-$tag.log" 2>&1 ||
        { cat "$tmp/pip-$tag.log" >&2; exit 1; }
    mkdir -p "$tmp/xb-$tag"
    inc=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    suffix=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
    "$cc" -O2 -shared -fPIC -I"$inc" -I"$srcdir/include" \
        "$srcdir/bench/xbench.c" -o "$tmp/xb-$tag/_xbench$suffix"
    (cd "$tmp" && env -u PYTHONPATH "$venv/bin/python" \
        "$srcdir/bench/bench.py" --ratios "$tmp/$tag.json" \
        --xbench "$tmp/xb-$tag" --valgrind "$valgrind")
    jsons="$jsons $tmp/$tag.json"
    last=$venv/bin/python
done

[ -n "$jsons" ] || { echo "$0: no interpreter measured" >&2; exit 1; }
# shellcheck disable=SC2086
"$last" "$srcdir/bench/bench.py" --ratios-table $jsons
