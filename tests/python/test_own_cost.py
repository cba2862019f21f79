"""caibridge's own cost against the floor, in instructions.

The floor (bench/xbench.c) is the least any bridge from an
__array_interface__ dict to a DLPack capsule does: one attribute read, the
entries by look-up, one malloc, one capsule, no validation.  Each path's own
cost is its instructions less the producer's property, counted by callgrind
in one child process for caibridge and the floor alike, so the ratio does
not depend on the machine.  A change that makes a path dearer than its limit
fails here; counts, not times, so the test is repeatable.

Run as a script (--child) it is that child: each case is a loop that
_xbench.count_loop or a C loop hands to callgrind under its name.
"""
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile

N = 2000  # calls per case: counts are exact, so few are needed

# (path, its case and the property it excludes, the floor's pair, limit):
# the limits leave about 5% over the targets (1.10x, and 1.40x for the view,
# which makes one more object and one more call than the floor).
LIMITS = [
    ("to_dlpack(o)", ("capsule", "prop"), ("floor", "prop"), 1.15),
    ("add_dlpack class o.__dlpack__()", ("patched", "patched_prop"),
     ("floor", "prop"), 1.15),
    # Device memory: its consumer works on a stream (the legacy one when it
    # names none), so the owner is wrapped in the reverse edge, one
    # allocation the floor, which keeps no producer for the consumer's
    # work, does not make (1.01x before the edge, 1.19x with it).
    ("CAI to_dlpack(o, device=(2, 0))", ("cai_capsule", "cai_prop"),
     ("floor_cai", "cai_prop"), 1.25),
    ("add_dlpack class through its C exchange table",
     ("c_exchange", "c_patched_prop"), ("floor", "prop"), 1.15),
    ("as_dlpack(o).__dlpack__()", ("view", "prop"), ("floor", "prop"), 1.46),
]


def build_dir():
    """The build tree: PYTHONPATH names its python/stage."""
    for p in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if p.rstrip("/").endswith(os.path.join("python", "stage")):
            return os.path.dirname(os.path.dirname(p.rstrip("/")))
    return os.getcwd()


def child(xbench_dir):
    sys.path.insert(0, xbench_dir)
    import _xbench as xb
    import caibridge

    storage = (ctypes.c_float * 1024)()
    ptr = ctypes.addressof(storage)

    def interface(self):
        return {"shape": (32, 32), "typestr": "<f4", "data": (ptr, False),
                "version": 3, "strides": None}

    # Producers that build their dict per read, as most do.
    Host = type("Host", (), {"__array_interface__": property(interface)})
    Cai = type("Cai", (), {"__cuda_array_interface__": property(interface)})
    Patched = caibridge.add_dlpack(
        type("Patched", (), {"__array_interface__": property(interface)}))
    h, c, p = Host(), Cai(), Patched()
    to_dlpack, as_dlpack, dev = caibridge.to_dlpack, caibridge.as_dlpack, \
        (2, 0)
    cases = [
        ("prop", lambda: h.__array_interface__),
        ("floor", lambda: xb.floor(h)),
        ("capsule", lambda: to_dlpack(h)),
        ("view", lambda: as_dlpack(h).__dlpack__()),
        ("patched_prop", lambda: p.__array_interface__),
        ("patched", lambda: p.__dlpack__()),
        ("cai_prop", lambda: c.__cuda_array_interface__),
        ("floor_cai", lambda: xb.floor_cai(c)),
        ("cai_capsule", lambda: to_dlpack(c, device=dev)),
    ]
    for name, f in cases:
        f()
        xb.count_loop(f, N, name)
    xb.exchange_loop(p, 1)
    xb.exchange_loop(p, N, "c_exchange")
    xb.prop_loop(p, "__array_interface__", N, "c_patched_prop")


def counts(valgrind, xbench_dir):
    """{case: instructions per call} from one callgrind run of the child."""
    tmp = tempfile.mkdtemp(prefix="cai-owncost-")
    try:
        out = os.path.join(tmp, "cg.out")
        env = dict(os.environ, PYTHONHASHSEED="0")
        subprocess.run([valgrind, "--tool=callgrind", "--instr-atstart=no",
                        f"--callgrind-out-file={out}", sys.executable,
                        os.path.abspath(__file__), "--child", xbench_dir],
                       check=True, capture_output=True, timeout=300, env=env)
        ir = {}
        for name in os.listdir(tmp):
            label = total = None
            with open(os.path.join(tmp, name)) as f:
                for line in f:
                    if line.startswith("desc: Trigger: Client Request: "):
                        label = line.split(": ", 3)[-1].strip()
                    elif line.startswith(("summary:", "totals:")):
                        total = int(line.split()[1])
            if label is not None and total is not None:
                ir[label] = total / N
        return ir
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_own_cost_within_margin_of_the_floor():
    import pytest

    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("AddressSanitizer is preloaded: valgrind cannot run "
                    "such a process, and its counts would not be caibridge's")
    if os.path.realpath(sys.base_prefix).startswith("/usr"):
        # Seen: Debian's 3.11.2 runs the floor in 1,236 instructions where
        # pyenv's 3.11.7 takes 1,440, and the view path a little less so.
        pytest.skip("the limits are set on the CPython builds CI measures "
                    "(pyenv's, built from source); a distribution's "
                    "interpreter (%s) is compiled otherwise, so its ratios "
                    "differ by a few percent" % sys.base_prefix)
    valgrind = os.environ.get("VALGRIND") or shutil.which("valgrind")
    if not valgrind:
        pytest.skip("valgrind is not installed: instruction counts need "
                    "callgrind")
    xbench_dir = os.path.join(build_dir(), "bench", ".libs")
    if not any(n.startswith("_xbench") for n in
               (os.listdir(xbench_dir) if os.path.isdir(xbench_dir) else [])):
        pytest.skip(f"bench/_xbench is not built in {xbench_dir}")
    ir = counts(valgrind, xbench_dir)
    if not ir:
        pytest.skip("_xbench was built without valgrind/callgrind.h: "
                    "nothing was counted")
    report, over = [], []
    for name, (case, prop), (floor, fprop), limit in LIMITS:
        own = ir[case] - ir[prop]
        base = ir[floor] - ir[fprop]
        assert base > 0, f"the floor's own cost is {base} instructions"
        ratio = own / base
        report.append(f"{name}: {own:.0f} / {base:.0f} = {ratio:.2f}x "
                      f"(limit {limit}x)")
        if ratio > limit:
            over.append(report[-1])
    print("\n".join(report))
    assert not over, "own cost above its limit: " + "; ".join(over)


if __name__ == "__main__" and sys.argv[1:2] == ["--child"]:
    child(sys.argv[2])
