"""python -m caibridge and caibridge.show_config(): what was built in and
what is found here, and a self-test; exit status 0 on a machine without a
GPU, which it says."""

import io
import re
import subprocess
import sys

import caibridge


def test_python_m_caibridge_reports_and_exits_0():
    out = subprocess.run([sys.executable, "-m", "caibridge"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert text.startswith("caibridge %s\n" % caibridge.__version__)
    assert re.search(r"DLPack ABI:\s+%d\.%d" % caibridge.DLPACK_VERSION, text)
    assert re.search(r"free-threaded:\s+(yes|no)", text)
    assert "host round trip:   ok (zero-copy" in text, text
    # Either a GPU's round trip, or the reason there is none.
    assert ("device round trip: skipped: no GPU here" in text or
            re.search(r"device 0 round trip: ok", text)), text


def test_build_section_names_the_cuda_headers():
    buf = io.StringIO()
    assert caibridge.show_config(buf) == 0
    text = buf.getvalue()
    if caibridge.cuda_built():
        assert re.search(r"CUDA support:\s+yes", text)
        assert re.search(r"CUDA headers:\s+1[1-9]\.\d+", text), text
    else:
        assert "CUDA support:    NO" in text


def test_runtime_section_matches_cuda_runtime_info():
    buf = io.StringIO()
    caibridge.show_config(buf)
    text = buf.getvalue()
    try:
        info = caibridge.cuda_runtime_info()
    except caibridge.CUDAError as e:
        assert "  none: %s" % e in text
    else:
        assert "  path:            %s\n" % info["path"] in text
        assert "  found:           %s\n" % info["how"] in text
        assert info["how"] in ("CAIBRIDGE_CUDART", "already loaded",
                               "pip wheel", "conda", "system")
