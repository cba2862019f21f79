#!/usr/bin/env python3
"""Mutation testing: each listed one-line mutation must make a test fail.

Usage: run-mutants.py [--list FILE] [--work DIR] [--keep] [NAME ...]

The sources (the files git knows, from the top of this tree) are copied to a
work directory and built there once, out of tree.  Then, for each mutant of
tests/mutants/list: its line is changed in the copy, the library (and the
module, when Python tests are named) is rebuilt, the mutant's tests run, and
the file is put back.  A mutant is KILLED when a named test fails, errors or
runs past MUTANT_TIMEOUT seconds (default 300); it SURVIVES when they all
pass.  A Python test file stops at its first failure (pytest -x).  A
mutant whose line is not found exactly once, or that does not build, is a
broken entry.  Before any mutant, the unmutated copy must pass
every test the list names.  Exit status 0 only when every mutant was killed.

NAME arguments run only those mutants.  MUTANT_JOBS sets make -j (default 2).
"""
import argparse
import functools
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

print = functools.partial(print, flush=True)  # progress as it happens
HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
# A mutant of the library or the module needs no test program relinked:
# libtool's wrappers run them on the library of the build tree, and 'make
# all' rebuilds the module.  '-o' keeps make from relinking them anyway.
LIBRARY_DIRS = ("src/", "python/")
KEEP_PROGRAMS = ["-o", "src/libcaibridge.la", "-o", "src/libcaibridge-core.la"]
STAGE = "python/stage/caibridge/.stamp"
FIELDS = ("name", "file", "after", "from", "to", "tests", "why")


def parse(path):
    """Stanzas of 'key: value' lines separated by blank lines; '#' comments."""
    mutants, cur = [], {}
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for no, line in enumerate(lines + [""], 1):
        if line.startswith("#"):
            continue
        if not line.strip():
            if cur:
                mutants.append(cur)
                cur = {}
            continue
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep or key not in FIELDS:
            sys.exit(f"{path}:{no}: expected one of {', '.join(FIELDS)}: "
                     f"{line!r}")
        if key in cur:
            sys.exit(f"{path}:{no}: {key} given twice")
        cur[key] = value.strip()
        cur.setdefault("line", no)
    names = set()
    for m in mutants:
        for key in ("name", "file", "from", "to", "tests", "why"):
            if key not in m:
                sys.exit(f"{path}:{m['line']}: mutant without {key}")
        if m["name"] in names:
            sys.exit(f"{path}:{m['line']}: mutant {m['name']} listed twice")
        if m["from"] == m["to"]:
            sys.exit(f"{path}:{m['line']}: {m['name']} changes nothing")
        names.add(m["name"])
        m["tests"] = m["tests"].split()
    return mutants


def run(cmd, cwd, log, timeout=None, env=None):
    """Runs cmd in its own process group; (returncode or 'timeout', secs)."""
    start = time.monotonic()
    with open(log, "w") as out:
        p = subprocess.Popen(cmd, cwd=cwd, stdout=out, env=env,
                             stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = "timeout"
    return rc, time.monotonic() - start


def locate(src, m):
    """(path, text, start) of the mutant's line in the copy, or an error."""
    paths = sorted(glob.glob(os.path.join(src, m["file"])))
    if not paths:
        return None, f"no file matches {m['file']}"
    found = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if "after" in m:
            n = text.count(m["after"])
            if n == 0:
                continue
            if n > 1:
                return None, (f"'after' line found {n} times in "
                              f"{os.path.relpath(path, src)}")
            at = text.find(m["from"], text.index(m["after"]) +
                           len(m["after"]))
            if at >= 0:
                found.append((path, text, at))
        else:
            at = text.find(m["from"])
            while at >= 0:
                found.append((path, text, at))
                at = text.find(m["from"], at + 1)
    if len(found) != 1:
        return None, (f"'from' found {len(found)} times in {m['file']}"
                      + (" after the 'after' line" if "after" in m else ""))
    return found[0], None


def first_failure_line(build, base):
    """The first failed check of a test's log ('not ok ...'), shortened."""
    try:
        with open(os.path.join(build, base + ".log"), errors="replace") as f:
            for line in f:
                if line.startswith("not ok"):
                    return line.strip()[:160]
    except OSError:
        pass
    return None


def tests_make_args(tests):
    """Programs to build for the tests (scripts and .py need none)."""
    return [t for t in tests if not t.endswith((".py", ".sh"))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list", default=os.path.join(HERE, "list"))
    ap.add_argument("--work", help="work directory (kept); default: a "
                    "temporary one, removed")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    # A stopped run still removes its temporary tree (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("mutants: stopped"))

    mutants = parse(args.list)
    if args.names:
        unknown = set(args.names) - {m["name"] for m in mutants}
        if unknown:
            sys.exit(f"no such mutant: {', '.join(sorted(unknown))}")
        mutants = [m for m in mutants if m["name"] in args.names]
    jobs = os.environ.get("MUTANT_JOBS", "2")
    timeout = int(os.environ.get("MUTANT_TIMEOUT", "300"))
    need_python = any(t.endswith(".py") for m in mutants for t in m["tests"])
    # One failure kills a mutant: each Python test file stops at its first
    # (a mutant that leaves many tests stuck on the double's 10 s limit
    # would otherwise pay it per test).
    first_failure = dict(os.environ, PYTEST_ADDOPTS=(
        os.environ.get("PYTEST_ADDOPTS", "") + " -x").strip())

    work = args.work or tempfile.mkdtemp(prefix="caibridge-mutants.")
    os.makedirs(work, exist_ok=True)
    src, build = os.path.join(work, "src"), os.path.join(work, "build")
    t0 = time.monotonic()
    try:
        # Always a fresh copy and build: objects left by an interrupted run
        # may hold a mutant.
        for d in (src, build):
            if os.path.exists(d):
                shutil.rmtree(d)
        listed = subprocess.run(
            ["git", "-C", TOP, "ls-files", "-z", "--cached", "--others",
             "--exclude-standard"], capture_output=True)
        if listed.returncode == 0:
            files = listed.stdout.decode().split("\0")
        else:  # a release tarball: every file is a source
            files = [os.path.relpath(os.path.join(d, f), TOP)
                     for d, _, fs in os.walk(TOP) for f in fs]
        for rel in filter(None, files):
            if os.path.isfile(os.path.join(TOP, rel)):
                os.makedirs(os.path.join(src, os.path.dirname(rel)),
                            exist_ok=True)
                shutil.copy2(os.path.join(TOP, rel), os.path.join(src, rel))
        os.makedirs(build, exist_ok=True)
        log = os.path.join(work, "setup.log")
        configure = [os.path.join(src, "configure"), "-q", "CFLAGS=-g -O1"]
        if not need_python:
            configure.append("--disable-python")
        for cmd, cwd in ((["autoreconf", "-fi"], src), (configure, build),
                         (["make", f"-j{jobs}"], build)):
            rc, _ = run(cmd, cwd, log)
            if rc != 0:
                sys.exit(f"mutants: setup step {' '.join(cmd)} failed; "
                         f"see {log}" + ("" if args.work else
                                         " (use --work to keep it)"))
        every = sorted({t for m in mutants for t in m["tests"]})
        rc, secs = run(["make", f"-j{jobs}", "check", "TESTS=" +
                        " ".join(every)], build, os.path.join(work,
                                                              "baseline.log"))
        if rc != 0:
            print(open(os.path.join(work, "baseline.log")).read()[-4000:])
            sys.exit("mutants: the unmutated tree fails the listed tests")
        print(f"mutants: setup and baseline ({len(every)} tests) "
              f"{time.monotonic() - t0:.0f} s")

        results = {"KILLED": [], "SURVIVED": [], "BROKEN": []}
        for i, m in enumerate(mutants, 1):
            where, error = locate(src, m)
            name = m["name"]
            if error:
                results["BROKEN"].append(name)
                print(f"BROKEN {i}/{len(mutants)} {name}: {error}")
                continue
            path, text, at = where
            mutated = text[:at] + m["to"] + text[at + len(m["from"]):]
            mlog = os.path.join(work, f"mutant-{name}.log")
            start = time.monotonic()
            try:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(mutated)
                # Two runs: one make building 'all' and a program that
                # needs the library would build the library twice at once.
                rc, _ = run(["make", f"-j{jobs}", "all"], build, mlog)
                if rc == 0 and any(t.endswith(".py") for t in m["tests"]):
                    # The Python tests import the staged module, which
                    # check-TESTS alone does not refresh.
                    rc, _ = run(["make", STAGE], build, mlog + ".stage")
                if rc == 0 and not m["file"].startswith(LIBRARY_DIRS):
                    rc, _ = run(["make", f"-j{jobs}"] +
                                tests_make_args(m["tests"]), build,
                                mlog + ".programs")
                if rc != 0:
                    results["BROKEN"].append(name)
                    print(f"BROKEN {i}/{len(mutants)} {name}: does not "
                          f"build; see {mlog}")
                    continue
                rc, _ = run(["make", f"-j{jobs}", "check-TESTS",
                             "TESTS=" + " ".join(m["tests"])] + KEEP_PROGRAMS,
                            build, mlog + ".check", timeout, first_failure)
            finally:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
            secs = time.monotonic() - start
            if rc == 0:
                results["SURVIVED"].append(name)
                print(f"SURVIVED {i}/{len(mutants)} {name} ({secs:.0f} s): "
                      f"{' '.join(m['tests'])} all pass\n    {m['why']}")
                continue
            killers, first = [], []
            for t in m["tests"]:
                base = t.rsplit(".", 1)[0] if t.endswith((".py", ".sh")) \
                    else t
                trs = os.path.join(build, base + ".trs")
                if os.path.exists(trs):
                    with open(trs) as f:
                        body = f.read()
                    if ":test-result: FAIL" in body or \
                            ":test-result: ERROR" in body:
                        killers.append(t)
                        first.append(first_failure_line(build, base))
            how = "timeout" if rc == "timeout" else \
                ", ".join(killers) or "make check-TESTS failed"
            results["KILLED"].append(name)
            print(f"KILLED {i}/{len(mutants)} {name} ({secs:.0f} s) by {how}")
            # Which check failed: a data, violation or behaviour check, or
            # only a call log (the closing notes list those).
            for line in filter(None, first):
                print(f"    {line}")
        # Rebuild the unmutated library so a kept work tree is consistent.
        run(["make", f"-j{jobs}", "all"], build,
            os.path.join(work, "final.log"))
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)

    total = time.monotonic() - t0
    print(f"mutants: {len(results['KILLED'])} killed, "
          f"{len(results['SURVIVED'])} survived, "
          f"{len(results['BROKEN'])} broken, of {len(mutants)}, "
          f"in {total:.0f} s")
    return 0 if not results["SURVIVED"] and not results["BROKEN"] else 1


if __name__ == "__main__":
    sys.exit(main())
