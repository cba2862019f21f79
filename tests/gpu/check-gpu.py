#!/usr/bin/env python3
"""caibridge on a real GPU, in TAP.

    python tests/gpu/check-gpu.py [TAPFILE] [--jobs N] [--case NAME...]

Run after `pip install .` or through `make check-gpu`.  The TAP goes to
stdout and to TAPFILE (default: $OUT/check-gpu.tap when $OUT is set).
Without a usable GPU it prints one skip line naming the reason and exits 0.

Each case (tests/gpu/gpu_cases.py) runs in a child process of its own with
a timeout, so a crash or a hang (a host wait that holds the GIL while a
host function needs it, say) loses that case only.  Children run a few at
a time; the whole script stays within BUDGET seconds on one GPU, and a case
not started by then is reported as not run.  A case whose library is
missing is a TAP skip naming it.

The cases prove the rules rather than call them: real producers and
consumers both ways; a race test for every path of tests/cuda/test_race.py
(a long kernel on stream A, the consumer at once on stream B or on the
host; right in every repeat when ordered, the race seen without ordering);
pool memory located on a fresh thread; a Python host function queued
before the fence; the reverse edge; pinned memory through add_dlpack and
to_dlpack read by NumPy; no context made on a fresh thread; contexts,
devices, graph capture and stream objects.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

CASE_TIMEOUT = 90    # seconds for one case, imports included
BUDGET = 270         # seconds for the whole script
RESULT = "CHECK-GPU-RESULT "


def why_no_gpu():
    """(None, None) when caibridge reaches a CUDA device; else (the reason
    there is none, None) for a skip, or (None, the failure) when the probe
    itself went wrong in a way no missing GPU explains.  Every exception
    ends as one of them, so the TAP is never lost to a traceback."""
    import traceback
    if os.environ.get("CAIBRIDGE_CUDART"):
        return (f"CAIBRIDGE_CUDART={os.environ['CAIBRIDGE_CUDART']} is set; "
                "unset it to test the real runtime"), None
    try:
        import caibridge
    except ImportError as e:
        return f"caibridge cannot be imported: {e}", None
    except Exception:  # noqa: BLE001 - a broken install is a failure
        return None, "importing caibridge raised:\n" + traceback.format_exc()

    class ZeroSizeProbe:
        """Locating a zero-size CAI array asks CUDA for a device."""
        __cuda_array_interface__ = {"data": (0, False), "shape": (0,),
                                    "typestr": "<f4", "version": 3}
    try:
        caibridge.as_dlpack(ZeroSizeProbe())
    except caibridge.CUDAError as e:
        return str(e), None
    except Exception:  # noqa: BLE001 - reported, never a lost TAP
        return None, "the first probe raised:\n" + traceback.format_exc()
    return None, None


def device_count():
    import ctypes
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuInit(0)
        count = ctypes.c_int()
        if lib.cuDeviceGetCount(ctypes.byref(count)) == 0:
            return count.value
    except Exception:  # noqa: BLE001 - one device is the safe guess
        pass
    return 1


# ---- the child: one case ----

def run_one(name):
    """Runs the named case here; prints its diagnostics, then one result
    line for the parent."""
    import traceback
    import gpu_cases
    found = [c for c in gpu_cases.CASES if c[0] == name]
    if not found:
        result = {"status": "fail", "detail": f"no case {name}"}
    else:
        _, _, fn, device = found[0]
        try:
            passed, detail = fn(gpu_cases.Libs(), device)
            result = {"status": "ok" if passed else "fail",
                      "detail": None if passed else detail}
        except gpu_cases.Skip as e:
            result = {"status": "skip", "detail": str(e)}
        except Exception:  # noqa: BLE001 - every failure is reported
            result = {"status": "fail", "detail": traceback.format_exc()}
    sys.stdout.flush()
    print(RESULT + json.dumps(result))
    sys.stdout.flush()
    return 0


# ---- the parent: every case in a child ----

def child(name, deadline):
    """(status, detail, diagnostics) of one case run in a child process."""
    left = deadline - time.monotonic()
    if left <= 5:
        return "fail", f"not run: the {BUDGET} s budget was spent", []
    timeout = min(CASE_TIMEOUT, left)
    # Bytes, decoded here: a stray byte from a library's output must not
    # cost the case its result line.
    try:
        out = subprocess.run([sys.executable, os.path.abspath(__file__),
                              "--case", name], capture_output=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired as e:
        tail = (e.stdout or b"").decode(errors="replace")
        return "fail", f"timed out after {timeout:.0f} s (a hang: a host " \
            f"wait holding the GIL?)\n{tail[-2000:]}", []
    stdout = out.stdout.decode(errors="replace")
    stderr = out.stderr.decode(errors="replace")
    diagnostics = [line for line in stdout.splitlines()
                   if line.startswith("# ")]
    results = [line for line in stdout.splitlines()
               if line.startswith(RESULT)]
    if not results:
        return "fail", f"the child died (exit status {out.returncode})\n" \
            f"{stderr[-3000:]}", diagnostics
    try:
        result = json.loads(results[-1][len(RESULT):])
    except ValueError:
        return "fail", f"unreadable result line: {results[-1][:200]!r}", \
            diagnostics
    return result["status"], result["detail"], diagnostics


class Tap:
    def __init__(self, path):
        self.lines = []
        self.count = 0
        self.failed = 0
        self.path = path

    def line(self, text):
        print(text)
        sys.stdout.flush()
        self.lines.append(text)

    def report(self, description, status, detail, diagnostics):
        self.count += 1
        for text in diagnostics:
            self.line(text)
        if status == "skip":
            self.line(f"ok {self.count} - {description} # SKIP {detail}")
            return
        if status != "ok":
            self.failed += 1
        self.line(f"{'ok' if status == 'ok' else 'not ok'} {self.count} - "
                  f"{description}")
        if status != "ok" and detail:
            for text in str(detail).splitlines():
                self.line(f"#   {text}")

    def finish(self):
        self.line(f"1..{self.count}")
        self.write()
        return 1 if self.failed else 0

    def write(self):
        if self.path:
            with open(self.path, "w", encoding="utf-8") as f:
                f.write("\n".join(self.lines) + "\n")


def tap_path(argument):
    if argument:
        return argument
    if os.environ.get("OUT"):
        return os.path.join(os.environ["OUT"], "check-gpu.tap")
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tapfile", nargs="?",
                        help="also write the TAP here (default "
                        "$OUT/check-gpu.tap when $OUT is set)")
    parser.add_argument("--case", action="append",
                        help="run only these cases (names as --list shows)")
    parser.add_argument("--jobs", type=int, default=3,
                        help="cases run at once (default 3)")
    parser.add_argument("--list", action="store_true",
                        help="list the cases and exit")
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    # A child: one case, its result on stdout.
    if args.case and len(args.case) == 1 and os.environ.get(
            "CHECK_GPU_CHILD") == "1":
        return run_one(args.case[0])
    import gpu_cases
    cases = [c for c in gpu_cases.CASES
             if not args.case or c[0] in args.case]
    if args.list:
        for name, description, _, _ in cases:
            print(f"{name}: {description}")
        return 0
    tap = Tap(tap_path(args.tapfile))
    started = time.monotonic()
    reason, failure = why_no_gpu()
    if failure is not None:
        tap.report("the first probe: caibridge locates a zero-size CUDA "
                   "array or says why it cannot", "fail", failure, [])
        return tap.finish()
    if reason is not None:
        tap.line(f"1..0 # SKIP no CUDA device: {reason}")
        tap.write()
        return 0
    devices = device_count()
    if devices < 2:
        tap.line("# one CUDA device: the cuda:1 cases are skipped")
    os.environ["CHECK_GPU_CHILD"] = "1"
    # Children share the GPU: JAX must not take most of its memory.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    deadline = started + BUDGET

    def run(entry):
        name, _, _, device = entry
        if device >= devices:
            return "skip", f"one CUDA device (needs cuda:{device})", []
        return child(name, deadline)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for entry, result in zip(cases, pool.map(run, cases)):
            tap.report(entry[1], *result)
    tap.line(f"# {len(cases)} cases in {time.monotonic() - started:.0f} s")
    return tap.finish()


if __name__ == "__main__":
    sys.exit(main())
