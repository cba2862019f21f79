#!/bin/sh
# The pip path, checked end to end: pip installs caibridge into a fresh
# virtual environment, then the Python tests run against that install
# rather than the Autotools build, printing TAP (tests/python/tapreport.py).
#
#   sh tests/python/pip-install.sh [--isolated] [--wheel FILE] [VENV]
#
# With --wheel, pip installs that built wheel (.ci/wheels) instead of
# building from the sources, and the tests run against it.
# PYTHON (default python3) makes the environment, in VENV (default: a new
# temporary directory, removed at the end).  By default it shares the
# interpreter's site packages (the machine's torch, JAX and NumPy).  With
# --isolated it does not: pip installs the test tools
# (python/requirements-test.txt) and each consumer of
# python/requirements-consumers.txt that has a wheel for this interpreter;
# the tests needing one that is absent skip, naming why.
#
# The build runs on a copy of the files an sdist carries (MANIFEST.in), so
# the source tree stays clean and a missing file shows up here.
set -eu

top=$(cd "$(dirname "$0")/../.." && pwd)
isolated=no
wheel=""
if [ "${1:-}" = --isolated ]; then
    isolated=yes
    shift
fi
if [ "${1:-}" = --wheel ]; then
    wheel=$2
    shift 2
fi
python=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/caibridge-pip.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
venv=${1:-$work/venv}

mkdir -p "$work/src"
for path in LICENSE README.md setup.py pyproject.toml MANIFEST.in src \
            include python; do
    cp -R "$top/$path" "$work/src/"
done
# Anything an earlier in-tree build left next to the sources stays behind.
rm -rf "$work/src/python/stage" "$work/src/python/caibridge/.libs" \
       "$work/src/python/caibridge/"*.so

rm -rf "$venv"
if [ $isolated = yes ]; then
    "$python" -m venv "$venv"
else
    "$python" -m venv --system-site-packages "$venv"
fi
py=$venv/bin/python
pip="$py -m pip install -q --disable-pip-version-check"
if [ -n "$wheel" ]; then
    $pip "$wheel"
else
    $pip "$work/src"
fi

if [ $isolated = yes ]; then
    $pip --only-binary=:all: -r "$top/python/requirements-test.txt"
    # Each consumer alone and from wheels only; one left out gets its
    # reason into the environment, where the tests' skip lines read it.
    sed -e '/^#/d' -e '/^[[:space:]]*$/d' \
        "$top/python/requirements-consumers.txt" >"$work/consumers"
    while IFS= read -r line; do
        requirement=$(echo "${line%%#*}" | sed 's/[[:space:]]*$//')
        name=${requirement%%[=<>;!~ ]*}
        case $name in
            apache-tvm-ffi) module=tvm_ffi ;;
            pydlpack) module=dlpack ;;
            *) module=$name ;;
        esac
        why=""
        if $pip --only-binary=:all: "$requirement" </dev/null \
                >"$work/pip.out" 2>&1; then
            case $line in
                *"#"*) why=$(echo "${line#*#}" | sed 's/^[[:space:]]*//') ;;
            esac
        else
            why="no wheel of ${requirement%%;*} for this interpreter"
        fi
        if ! "$py" -c "import $module" 2>/dev/null; then
            var=CAIBRIDGE_WHY_NO_$(echo "$module" | tr a-z A-Z)
            eval "$var=\${why:-not installed}"
            export "$var"
            echo "# $module: ${why:-not installed}"
        fi
    done <"$work/consumers"
fi

cd "$work"
"$py" -c 'import caibridge, sys; print("# pip-install: caibridge",
    caibridge.__version__, "from", caibridge.__file__, "on", sys.version,
    "cuda_built:", caibridge.cuda_built())'
# Every wheel and every pip build has CUDA support built in.
if [ "${CAIBRIDGE_CUDA:-}" != 0 ] &&
   ! "$py" -c 'import caibridge, sys; sys.exit(not caibridge.cuda_built())'; then
    echo "not ok - caibridge installed without CUDA support"
    exit 1
fi
# The diagnostic runs, and exits 0, with or without a GPU.
if ! "$py" -m caibridge >"$work/show-config.txt" 2>&1; then
    echo "not ok - python -m caibridge failed"
    sed 's/^/# /' "$work/show-config.txt"
    exit 1
fi
sed -n 's/^/# python -m caibridge: /;1,3p' "$work/show-config.txt"
PYTHONDONTWRITEBYTECODE=1 "$py" "$top/tests/python/tapreport.py" \
    -p no:cacheprovider --rootdir="$top/tests/python" "$top/tests/python"
