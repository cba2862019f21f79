#!/usr/bin/env python3
"""Hand-over cost on a real GPU, caibridge beside the peers, in one run.

    python bench/bench-gpu.py [--seconds S]

Each row is a cross-stream round trip a user makes: the producer's data
(work pending on its stream A) handed to torch on its current stream,
consumed (a tiny kernel) and released.  Rows are timed round-robin, in
repeats of about S seconds each, and the median microseconds per round
trip on the host is printed with its spread (IQR as % of the median); the
GPU is synchronized between repeats, never inside one.  caibridge's rows
go through as_dlpack (device looked up, or given); the peer rows are
CuPy's and torch's own __dlpack__ with the same streams, so the difference
is the bridge.  Without a GPU it prints why and exits 0.
"""
import argparse
import statistics
import sys
import time

N = 1 << 10          # small: the hand-over, not the kernel, is measured


class CAI:
    def __init__(self, base, ptr, stream):
        self.base = base
        self.__cuda_array_interface__ = {
            "data": (ptr, False), "shape": (N,), "typestr": "<f4",
            "version": 3, "stream": stream}


def rows(torch, cupy, caibridge, consumer):
    a = torch.cuda.Stream()
    x = torch.zeros(N, device="cuda:0")
    ca = cupy.cuda.Stream(non_blocking=True)
    with ca:
        y = cupy.zeros(N, dtype=cupy.float32)
    dev = (2, 0)

    def consume(obj):
        with torch.cuda.stream(consumer):
            t = torch.from_dlpack(obj)
            t.add_(0)                     # one tiny kernel on the data
        del t                             # the release

    def via_caibridge():
        consume(caibridge.as_dlpack(CAI(x, x.data_ptr(), a.cuda_stream)))

    def via_caibridge_device():
        consume(caibridge.as_dlpack(CAI(x, x.data_ptr(), a.cuda_stream),
                                    device=dev))

    def cupy_own():
        with ca:
            consume(y)

    def torch_own():
        with torch.cuda.stream(a):
            consume(x)
    return [("caibridge.as_dlpack(CAI producer on A)", via_caibridge),
            ("caibridge.as_dlpack(..., device=(2, 0))", via_caibridge_device),
            ("CuPy's own __dlpack__ (array on A)", cupy_own),
            ("torch's own __dlpack__ (tensor on A)", torch_own)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=0.02)
    ap.add_argument("--repeats", type=int, default=41)
    args = ap.parse_args()
    try:
        import cupy
        import torch
        import caibridge
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
    except Exception as e:  # noqa: BLE001 - the reason is the output
        print(f"no GPU run: {e}")
        return 0
    print(f"{torch.cuda.get_device_name(0)}; torch {torch.__version__}, "
          f"CuPy {cupy.__version__}, caibridge {caibridge.__version__}")
    for name, consumer in (("torch's default stream (stream=1)",
                            torch.cuda.default_stream()),
                           ("a torch side stream (a handle)",
                            torch.cuda.Stream())):
        cases = rows(torch, cupy, caibridge, consumer)
        times = {label: [] for label, _ in cases}
        for _, fn in cases:               # warm: kernels, pools, events
            for _ in range(50):
                fn()
        torch.cuda.synchronize()
        for _ in range(args.repeats):
            for label, fn in cases:
                n, start = 0, time.perf_counter()
                while time.perf_counter() - start < args.seconds:
                    fn()
                    n += 1
                times[label].append((time.perf_counter() - start) / n)
                torch.cuda.synchronize()
                caibridge._core._release_poll()
        print(f"\nconsumer on {name}: us per round trip (median, spread)")
        base = statistics.median(times[cases[0][0]])
        for label, _ in cases:
            t = sorted(times[label])
            med = statistics.median(t)
            q = statistics.quantiles(t, n=4)
            print(f"  {label:44s} {med * 1e6:7.2f} us  "
                  f"{(q[2] - q[0]) / med * 100:4.0f}%  "
                  f"{med / base:5.2f}x caibridge")
    pipeline_rows(torch)
    batch_rows(torch, caibridge)
    call_rows(caibridge)
    return 0


def batch_rows(torch, caibridge, n=1000):
    """n small tensors from one CAI producer stream into torch on a side
    stream: one by one (as_dlpack each), as a batch (as_dlpack_all), and by
    hand (B.wait_stream(A) once, torch.as_tensor each); us per tensor, best
    of 5, each tensor taken and released."""
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    xs = [torch.ones(256, device="cuda:0") for _ in range(n)]
    cais = [CAI(x, x.data_ptr(), a.cuda_stream) for x in xs]
    for c in cais:
        c.__cuda_array_interface__["shape"] = (256,)
    torch.cuda.synchronize()

    def one_by_one():
        with torch.cuda.stream(b):
            for c in cais:
                torch.from_dlpack(caibridge.as_dlpack(c))

    def batch():
        views = caibridge.as_dlpack_all(cais)
        with torch.cuda.stream(b):
            for v in views:
                torch.from_dlpack(v)

    def by_hand():
        b.wait_stream(a)
        with torch.cuda.stream(b):
            for x in xs:
                torch.as_tensor(x)
    print(f"\n{n} tensors of 256 floats into torch on a side stream: us per "
          "tensor, best of 5")
    for label, fn in (("caibridge.as_dlpack, one by one", one_by_one),
                      ("caibridge.as_dlpack_all", batch),
                      ("B.wait_stream(A) + torch.as_tensor", by_hand)):
        fn()
        best = None
        for _ in range(5):
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            took = (time.perf_counter() - start) / n
            best = took if best is None else min(best, took)
        print(f"  {label:44s} {best * 1e6:8.2f} us")
    torch.cuda.synchronize()
    caibridge._core._release_poll()


def call_rows(caibridge):
    """Each CUDA call a hand-over may make, timed in a C loop
    (bench/cuda-calls.c, compiled here with cc) on the runtime caibridge
    uses: median ns per call."""
    import os
    import subprocess
    import tempfile
    here = os.path.dirname(os.path.abspath(__file__))
    runtime = caibridge._core._runtime_info()["path"]
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "cuda-calls")
        built = subprocess.run(["cc", "-O2", "-o", exe,
                                os.path.join(here, "cuda-calls.c"), "-ldl"],
                               capture_output=True, text=True)
        if built.returncode != 0:
            print(f"\nno per-call table: cc failed: {built.stderr[:200]}")
            return
        out = subprocess.run([exe, runtime], capture_output=True, text=True,
                             timeout=300)
    print(f"\nper CUDA call, C loop, median ns (runtime {runtime})")
    for line in out.stdout.splitlines():
        name, _, ns = line.rpartition(" ")
        print(f"  {name:44s} {ns:>8s}")


def pipeline_rows(torch):
    """The GPU time of a 60-step pipeline onto torch's default stream (a
    1 ms producer kernel on A, a 1 ms consumer kernel), through caibridge
    and ordered by hand (B.wait_stream(A) + torch.as_tensor): the cases
    of tests/gpu/release_cases.py, best of 5 each."""
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "tests", "gpu"))
    from release_cases import by_caibridge, by_hand, cycles_for, pipeline
    b = torch.cuda.default_stream()
    cycles = cycles_for(torch, b, 0.001)
    got = {}
    for label, how in (("caibridge.as_dlpack -> torch.from_dlpack",
                        by_caibridge),
                       ("B.wait_stream(A) + torch.as_tensor", by_hand)):
        pipeline(torch, how, 3, cycles)
        got[label] = min(pipeline(torch, how, 60, cycles) for _ in range(5))
    print("\n60-step pipeline onto torch's default stream (1 ms + 1 ms "
          "kernels): GPU ms, best of 5")
    base = got["B.wait_stream(A) + torch.as_tensor"]
    for label, t in got.items():
        print(f"  {label:44s} {t * 1e3:8.2f} ms  {t / base:5.3f}x by hand")


if __name__ == "__main__":
    sys.exit(main())
