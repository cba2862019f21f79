"""What the docs say, checked against what the code does, claim by claim:
each test names the page and the sentence it holds true."""
import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import caibridge
from conftest import managed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


class Described:
    """Host memory described through __cuda_array_interface__; with the
    device given, caibridge asks CUDA nothing about it."""

    def __init__(self):
        self.array = np.arange(4, dtype=np.float32)
        self.__cuda_array_interface__ = {
            "shape": (4,), "typestr": "<f4", "version": 3, "stream": None,
            "data": (self.array.ctypes.data, False)}


def test_stream_0_host_is_buffer_error_cuda_is_value_error():
    """behaviour.rst: stream=0 is ValueError for CUDA data, and host data
    takes no stream but None (BufferError)."""
    text = read("docs/behaviour.rst")
    assert "consumer `stream=0`" in text
    with pytest.raises(BufferError, match="stream = 0"):
        caibridge.as_dlpack(np.zeros(2)).__dlpack__(stream=0)
    for device in [(2, 0), (3, 0), (13, 0)]:
        view = caibridge.as_dlpack(Described(), device=device, sync=False)
        with pytest.raises(ValueError, match="stream = 0 is disallowed"):
            view.__dlpack__(stream=0)


IS_COPIED = 1 << 1


def test_copy_true_copies_host_data_only():
    """guide/python.rst: copy=True copies host (kDLCPU) data; pinned and
    managed memory is copied only when dl_device=(kDLCPU, 0) asks for the
    host's view of it; device memory never."""
    text = " ".join(read("docs/guide/python.rst").split())
    assert "dl_device=(1, 0)" in text and "copy=True" in text
    data = np.arange(3.0)
    capsule = caibridge.as_dlpack(data).__dlpack__(copy=True,
                                                   max_version=(1, 3))
    assert managed(capsule).flags & IS_COPIED
    for device in [(3, 0), (13, 0)]:
        view = caibridge.as_dlpack(Described(), device=device, sync=False)
        with pytest.raises(BufferError, match="copy=True"):
            view.__dlpack__(copy=True)
        capsule = view.__dlpack__(copy=True, dl_device=(1, 0),
                                  max_version=(1, 3))
        assert managed(capsule).flags & IS_COPIED
    view = caibridge.as_dlpack(Described(), device=(2, 0), sync=False)
    with pytest.raises(BufferError):
        view.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        view.__dlpack__(copy=True, dl_device=(1, 0))


def test_python_guide_names_its_functions():
    """guide/python.rst's opening counts and lists the functions."""
    text = read("docs/guide/python.rst")
    intro = text.split(".. contents::")[0]
    listed = re.findall(r":func:`~caibridge\.(\w+)`", intro)
    words = {4: "Four", 5: "Five", 6: "Six"}
    assert intro.count(words[len(listed)] + " functions") == 1, listed
    assert sorted(listed) == sorted(
        ["as_dlpack", "as_dlpack_all", "to_dlpack", "from_dlpack",
         "add_dlpack", "add_array_interface"])


def test_readme_job_count_matches_makefile():
    """README: make check runs one job per CPU, at most N, N as in
    Makefile.am's CAI_CHECK_JOBS."""
    cap = re.search(r'-gt (\d+) && n=(\d+)', read("Makefile.am"))
    assert cap and cap.group(1) == cap.group(2)
    readme = " ".join(read("README.md").split())
    assert "one job per CPU, at most %s" % cap.group(1) in readme


def test_c_guide_has_every_fence_function():
    """guide/c.rst names every cai_fence_* function of the header."""
    header = set(re.findall(r"CAI_API[^(]*\b(cai_fence_\w+)\(",
                            read("include/caibridge.h")))
    assert header >= {"cai_fence_record", "cai_fence_destroy"}
    page = read("docs/guide/c.rst")
    assert [f for f in sorted(header) if f not in page] == []


def _tree_files():
    for folder in ("src", "python", "tests", ".ci", "bench", "include"):
        for top, dirs, files in os.walk(os.path.join(ROOT, folder)):
            dirs[:] = [d for d in dirs if not d.startswith((".", "_"))
                       and d != "stage"]
            for name in files:
                if name.endswith((".c", ".h", ".py", ".sh", ".mk", ".pyi")) \
                        or "." not in name:
                    yield os.path.join(top, name)
    yield os.path.join(ROOT, "setup.py")
    yield os.path.join(ROOT, "configure.ac")


def test_environment_page_lists_every_variable():
    """environment.rst documents every CAIBRIDGE_* variable named in the
    tree: the sources, the build, the tests, CI and the benchmark (C
    macros, such as include guards and CAIBRIDGE_VERSION_*, aside)."""
    names, macros = set(), set()
    for path in _tree_files():
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        # Not a symbol version (CAIBRIDGE_0.1 of src/libcaibridge.map).
        names |= set(re.findall(r"\b(CAIBRIDGE_[A-Z0-9_]+)\b(?!\.\d)", text))
        macros |= set(re.findall(
            r'(?:#\s*define|#\s*ifndef|defined\(|-D|\[\(")\s*'
            r'(CAIBRIDGE_[A-Z0-9_]+)', text))
    # A test's own marker variable is not one users set.
    names.discard("CAIBRIDGE_REPORT_MARK")
    # A prefix that code completes into a macro (CAIBRIDGE_VERSION_ ...).
    variables = {n for n in names - macros
                 if not (n.endswith("_") and
                         any(m.startswith(n) for m in macros))}
    assert {"CAIBRIDGE_CUDART", "CAIBRIDGE_SYNC", "CAIBRIDGE_EVENT_POOL",
            "CAIBRIDGE_CUDA"} <= variables, variables
    page = read("docs/environment.rst")
    assert sorted(v for v in variables if v not in page) == []


def _cudart_refusal(tmp_path, prepare):
    # A short path: the message keeps its end (the owner and the mode).
    import pathlib
    import tempfile
    folder = pathlib.Path(tempfile.mkdtemp(prefix="cb", dir="/tmp")) / "lib"
    folder.mkdir()
    library = folder / "libcudart.so.13"
    library.write_bytes(b"\x7fELF not really")
    os.chmod(library, 0o644)
    prepare(folder, library)
    code = textwrap.dedent("""
        import caibridge
        try:
            caibridge.cuda_runtime_info()
        except caibridge.CUDAError as e:
            print(e)
    """)
    env = dict(os.environ, CAIBRIDGE_CUDART=str(library))
    try:
        out = subprocess.run([sys.executable, "-c", code], env=env,
                             capture_output=True, text=True, timeout=60)
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)
    return out.stdout


def test_cudart_folder_writable_by_others(tmp_path):
    """cuda.rst: a folder others may write (not sticky) is refused, and
    the message says so."""
    text = _cudart_refusal(tmp_path,
                           lambda folder, lib: os.chmod(folder, 0o777))
    assert re.search(r"its folder \S+ may be written by others "
                     r"\(mode 0777\)", text), text
    assert "owned by uid" not in text, text


def test_cudart_folder_of_another_user(tmp_path):
    """cuda.rst: the folder must also be yours or root's; the message says
    it is owned by another user (it said "may be written by others")."""
    if os.geteuid() != 0:
        pytest.skip("only root can give a folder to another user here")
    text = _cudart_refusal(tmp_path,
                           lambda folder, lib: os.chown(folder, 54321, 54321))
    assert re.search(r"its folder \S+ is owned by uid 54321, neither this "
                     r"user \(uid 0\) nor root", text), text
    assert "written by others" not in text, text


def test_cudart_file_of_another_user(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user here")
    text = _cudart_refusal(tmp_path,
                           lambda folder, lib: os.chown(lib, 54321, 54321))
    assert re.search(r"libcudart\.so\.13 is owned by uid 54321, neither "
                     r"this user \(uid 0\) nor root", text), text
    assert "written by others" not in text, text


def test_extras_documented_and_declared():
    """install.rst documents each user-facing extra of pyproject.toml
    (caibridge[cuda13]), and pyproject.toml has the project's links."""
    pyproject = read("pyproject.toml")
    section = pyproject.split("[project.optional-dependencies]")[1]
    section = section.split("\n[")[0]
    extras = re.findall(r"^([a-z0-9-]+)\s*=", section, re.M)
    assert "cuda13" in extras
    page = read("docs/install.rst")
    for extra in extras:
        if extra != "test":
            assert "caibridge[%s]" % extra in page, extra
    urls = pyproject.split("[project.urls]")[1].split("\n[")[0]
    assert re.search(r"^Documentation\s*=\s*\"https://", urls, re.M)
    assert re.search(r"^Changelog\s*=\s*\"https://", urls, re.M)


def test_readme_links_are_absolute():
    """The README is the package index's page, where a relative link to
    docs/*.rst breaks: every link is absolute."""
    readme = read("README.md")
    links = re.findall(r"\]\(([^)]+)\)", readme)
    assert links, "the README links to the docs"
    assert [link for link in links
            if not link.startswith(("https://", "#"))] == []


def test_development_page_counts_the_mutants():
    """development.rst: "(... N now)": the number of mutants in
    tests/mutants/list, which grows with each issue."""
    listed = len(re.findall(r"^name:", read("tests/mutants/list"), re.M))
    said = re.search(r"(\d+) now\)", read("docs/development.rst"))
    assert said is not None, "development.rst no longer counts the mutants"
    assert int(said.group(1)) == listed, (said.group(0), listed)


def test_readme_holds_the_two_commands_ci_runs():
    """README: a newcomer's two commands, and .ci/run runs the same ones in
    a fresh copy (so the README's cannot go stale unseen)."""
    readme = read("README.md")
    assert "\nbash .ci/setup " in readme and "\nmake check " in readme
    ci = read(".ci/run")
    assert "bash .ci/setup" in ci and re.search(r"make -C \S+ -j2 check", ci)


# ---- The claims a review of e888243 found the code to contradict ----

def test_claim_sphinx_pin_is_one_that_builds():
    """requirements.txt allows only a Sphinx that builds the pages with -W
    (7.4 to 8.2 did not), and CI builds on the oldest it allows."""
    pin = re.search(r"^sphinx>=(\d+)\.(\d+)", read("docs/requirements.txt"),
                    re.M)
    assert pin and (int(pin.group(1)), int(pin.group(2))) >= (9, 0)
    assert "oldest_sphinx" in read(".ci/run")


def test_claim_from_dlpack_streams_on_host_data():
    """behaviour.rst: from_dlpack(x, stream=0) is a ValueError whatever x
    holds; any other stream for host data is accepted and unused, while
    __dlpack__ of host data takes None only (BufferError)."""
    text = read("docs/behaviour.rst")
    assert "`from_dlpack(x, stream=0)` is a `ValueError` whatever" in text
    a = np.arange(3.0)
    with pytest.raises(ValueError):
        caibridge.from_dlpack(a, stream=0)
    for s in (1, 2, -1):
        view = caibridge.from_dlpack(a, stream=s)
        assert "stream" not in view.__array_interface__
    for s in (0, 1, -1):
        with pytest.raises(BufferError):
            caibridge.as_dlpack(a).__dlpack__(stream=s)


def test_claim_stream_minus_1_is_not_a_buffer_error():
    """troubleshooting.rst lists from_dlpack(x, stream=-1) of CUDA data as
    the ValueError it is, not under "BufferError on streams" as one."""
    text = read("docs/troubleshooting.rst")
    section = text[text.index("``BufferError`` on streams"):]
    section = section[:section.index("\n*Fix:*")]
    minus = section.index("``from_dlpack(x, stream=-1)``")
    assert "``ValueError``" in section[section.index("Not a ``BufferError``"):
                                       minus + 60]


def test_claim_host_waits_are_said():
    """cuda.rst no longer says the host never blocks: it names the one
    stream-consumer case where the host waits."""
    text = read("docs/cuda.rst")
    assert "the host never blocks" not in text
    assert "the one case\nwhere a stream consumer makes the host wait" in text


def test_claim_jax_gets_a_handle():
    """cuda.rst: JAX 0.10 passes its stream for external events (a handle),
    which takes no reverse edge; not "as torch on its default stream"."""
    text = read("docs/cuda.rst")
    row = text[text.index("   * - JAX"):]
    row = row[:row.index("   * - NumPy")]
    assert "a handle takes no reverse edge" in row
    assert "as torch on its default stream" not in row


def test_claim_add_dlpack_is_not_for_cupy():
    """peers.rst: add_dlpack refuses classes with __dlpack__ (CuPy's), so
    the page does not offer it for CuPy arrays."""
    text = read("docs/peers.rst")
    assert "their arrays DLPack producers with :func:`caibridge.add_dlpack`" \
        not in text

    class HasOwn:
        def __dlpack__(self, **kw):
            raise AssertionError

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(TypeError):
        caibridge.add_dlpack(HasOwn)


def test_claim_readme_does_not_promise_life_for_every_consumer():
    """README: the producer is not kept for every consumer (a side stream's
    handle takes no reverse edge); the README says which keep it."""
    text = " ".join(read("README.md").split())
    assert "the producer stays alive while it" not in text
    # The consumers that take no reverse edge, each named (test_promise.py
    # and test_release.py check each case on the double).
    assert ("stream 2 released on another thread than the one that took it"
            in text)
    assert "(a stream handle, which may be gone by then), and `stream=-1`" \
        in text
    assert "`sync=False` or `CAIBRIDGE_SYNC=0`: no ordering and no reverse " \
        "edge" in text
    assert "whether or not the producer named a stream" in text


def test_claim_warnings_as_errors_is_said():
    """install.rst: "never a traceback" has its one exception said, an
    import under -W error with a setting not understood; and it happens."""
    assert "``python -W error``" in read("docs/install.rst")
    env = dict(os.environ, CAIBRIDGE_SYNC="maybe")
    out = subprocess.run([sys.executable, "-W", "error", "-c",
                          "import caibridge"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "RuntimeWarning" in out.stderr


def test_claim_environment_page_lists_what_is_read():
    """environment.rst: CUDA_HOME and CUDA_PATH (read by setup.py), that
    CAIBRIDGE_RELEASE is case-sensitive and that an empty CAIBRIDGE_CUDART
    is unset."""
    text = read("docs/environment.rst")
    assert "CUDA_HOME, CUDA_PATH\n" in text
    assert "case-sensitive" in text
    assert "Unset, or set to the\nempty string" in text
    assert all(n in read("python/sources.py") for n in ("CUDA_HOME",
                                                        "CUDA_PATH"))


def test_claim_ci_steps_are_listed():
    """development.rst lists the CI steps .ci/run runs, lint and the
    aarch64 wheels under qemu among them; compatibility.rst says the
    aarch64 wheels run, not only that auditwheel checks them."""
    dev, run = read("docs/development.rst"), read(".ci/run")
    for step, said in (("lint", "`make lint`"),
                       ("aarch64", "`.ci/aarch64`")):
        assert step in run and said in dev
    assert "run under qemu-user" in read("docs/compatibility.rst")


def test_troubleshooting_answers_the_questions_users_ask():
    """troubleshooting.rst answers the six questions of the peers'
    trackers, each with the message seen, the cause and the fix."""
    text = read("docs/troubleshooting.rst")
    for heading in ('"Unsupported device_type: 13"',
                    '"per-thread default stream is not supported"',
                    "bfloat16 from a CAI producer",
                    "Data on cuda:1, consumer on cuda:0",
                    "Python 3.14, or a platform without a wheel",
                    '"is already a DLPack producer"'):
        at = text.index(heading)
        section = text[at:text.index("\n*Fix:*", at)]
        assert "*Cause:*" in section, heading


def test_as_dlpack_of_a_dlpack_producer_says_so():
    """A DLPack producer whose array-interface property fails (a CPU torch
    tensor) is told to go to DLPack consumers directly."""
    class Producer:
        @property
        def __cuda_array_interface__(self):
            raise AttributeError("not on CUDA")

        def __dlpack__(self, **kwargs):
            raise AssertionError

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(TypeError, match="already a DLPack producer"):
        caibridge.as_dlpack(Producer())


def test_compatibility_says_torch_as_tensor_ignores_the_stream():
    """compatibility.rst says torch.as_tensor ignores a CAI producer's
    stream, with the GPU case that shows it."""
    text = read("docs/compatibility.rst")
    assert "``torch.as_tensor(obj)`` of a CAI v3 producer ignores" in text
    assert "torch_as_tensor_ignores_the_stream" in read(
        "tests/gpu/release_cases.py")


def test_claim_device_memory_is_copied_and_pinned_is_named():
    """guide/python.rst no longer says device memory is never copied (it is
    copied on the device since the device copies, tests/cuda/test_copy.py),
    and the refusal of copy=True for pinned or managed memory names it as
    such, not as device memory."""
    text = " ".join(read("docs/guide/python.rst").split())
    assert "which is never copied" not in text
    assert "Otherwise nothing is ever copied" not in text
    assert "of device (``kDLCUDA``) memory on the device" in text
    for device, kind in (((3, 0), "pinned host"), ((13, 0), "managed")):
        view = caibridge.as_dlpack(Described(), device=device, sync=False)
        with pytest.raises(BufferError) as refused:
            view.__dlpack__(copy=True)
        assert "device memory" not in str(refused.value)
        assert "%s memory (device type %d)" % (kind, device[0]) \
            in str(refused.value)


def test_claim_pinned_and_managed_as_kdlcpu_are_copied_with_copy_true():
    """cuda.rst: pinned and managed memory asked for as kDLCPU are copied
    with copy=True (not "still not copied"), and handed over without."""
    text = " ".join(read("docs/cuda.rst").split())
    assert "Pinned and managed memory are still not copied" not in text
    assert "with it they are copied on the host after that wait" in text
    for device in [(3, 0), (13, 0)]:
        described = Described()
        view = caibridge.as_dlpack(described, device=device, sync=False)
        copied = managed(view.__dlpack__(copy=True, dl_device=(1, 0),
                                         max_version=(1, 3)))
        assert copied.flags & IS_COPIED
        assert copied.dl_tensor.data != described.array.ctypes.data
        shared = managed(view.__dlpack__(dl_device=(1, 0),
                                         max_version=(1, 3)))
        assert not shared.flags & IS_COPIED
        assert shared.dl_tensor.data == described.array.ctypes.data


def _bfloat16_producer():
    """A DLPack producer of a bfloat16 tensor, made here (no torch, JAX)."""
    from conftest import DLDataType, FakeTensor

    fake = FakeTensor(np.zeros(3, dtype=np.uint16))
    fake.struct.dl_tensor.dtype = DLDataType(4, 16, 1)  # kDLBfloat

    class Producer:
        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kwargs):
            return fake.capsule()

    return Producer(), fake


def assert_numpy_takes_bfloat16_as_the_page_says(producer):
    """NumPy's answer to a bfloat16 tensor, as behaviour.rst gives it: an
    array of ml_dtypes' bfloat16 on NumPy 2.5+ once ml_dtypes is imported,
    else a refusal (RuntimeError before 2.5, BufferError since)."""
    major_minor = tuple(int(x) for x in np.__version__.split(".")[:2])
    registered = "ml_dtypes" in sys.modules
    if major_minor >= (2, 5) and registered:
        assert np.from_dlpack(producer).dtype.name == "bfloat16"
        return
    kind = BufferError if major_minor >= (2, 5) else RuntimeError
    with pytest.raises(kind, match="Unsupported dtype in DLTensor"):
        np.from_dlpack(producer)


def test_claim_numpy_refuses_bfloat16_as_the_page_says():
    """behaviour.rst: np.from_dlpack refuses bfloat16 at import with the
    exception the page names (RuntimeError, not BufferError)."""
    text = " ".join(read("docs/behaviour.rst").split())
    assert "refuses it at import (a ``BufferError``)" not in text
    assert ("NumPy 2.4 raises ``RuntimeError``, 2.5 ``BufferError``, "
            "\"Unsupported dtype in DLTensor\"") in text
    producer, fake = _bfloat16_producer()
    assert_numpy_takes_bfloat16_as_the_page_says(producer)
    view = caibridge.from_dlpack(producer)       # caibridge takes it
    with pytest.raises(BufferError, match="bfloat16"):
        view.__array_interface__


def test_claim_add_dlpack_takes_a_python_array_class_like_numbas():
    """peers.rst no longer says add_dlpack refuses Numba's array type:
    numba's DeviceNDArray is a Python class with __cuda_array_interface__
    and no __dlpack__, which add_dlpack takes (guide/bridge.rst does)."""
    text = " ".join(read("docs/peers.rst").split())
    assert "which CuPy's and Numba's array types are" not in text
    assert "``DeviceNDArray`` (numba 0.68) is a Python class" in text
    assert "caibridge.add_dlpack(DeviceNDArray)" in read(
        "docs/guide/bridge.rst")

    class DeviceNDArray:        # its shape: CAI, no DLPack of its own
        def __init__(self):
            self.array = np.arange(4, dtype=np.float32)

        @property
        def __cuda_array_interface__(self):
            return {"shape": (4,), "typestr": "<f4", "version": 3,
                    "stream": None,
                    "data": (self.array.ctypes.data, False)}

    assert caibridge.add_dlpack(DeviceNDArray) is DeviceNDArray
    assert hasattr(DeviceNDArray, "__dlpack__")


def test_claim_readme_jax_reads_cai():
    """README: JAX does read CAI (jnp.asarray), so the README no longer
    says it reads none; the installed JAX's source is what says so."""
    text = " ".join(read("README.md").split())
    assert "JAX reads no CAI at all" not in text
    assert "`jnp.asarray` read CAI" in text
    jax = pytest.importorskip("jax", reason="JAX is not installed here")
    import inspect
    from jax._src.numpy import array_constructors
    source = inspect.getsource(array_constructors.array)
    assert "__cuda_array_interface__" in source, jax.__version__


def test_readme_pair_table_cites_each_row():
    """README's "Which pairs need caibridge": every row of both tables
    cites a source line or a test, and every citation is defined; the
    H200 costs give their date and hardware; a reader with no GPU is sent
    to the NumPy section."""
    readme = read("README.md")
    section = readme[readme.index("## Which pairs need caibridge"):]
    section = section[:section.index("\n## ")]
    rows = [line for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| route")
            and not line.startswith("| producer")]
    assert len(rows) >= 14, rows
    defined = set(re.findall(r"^\[([A-Z]\d)\]: https://", section, re.M))
    for row in rows:
        if row.startswith("| H: NumPy"):
            continue                   # NumPy takes no CUDA data at all
        cited = re.findall(r"\[([A-Z]\d)\]", row)
        assert cited, row
        assert set(cited) <= defined, (row, defined)
    assert "one H200 (2026-11-28" in section
    assert "No GPU? Start at [Five minutes, with NumPy only]" \
        "(#five-minutes-with-numpy-only)" in readme
    assert "## Five minutes, with NumPy only" in readme


def test_readme_answers_the_questions_users_ask():
    """README's Questions: each question of issue 42 has an answer, and
    the checkable ones hold (views do not pickle; the checklist exists)."""
    readme = read("README.md")
    section = readme[readme.index("## Questions"):]
    section = section[:section.index("\n## ")]
    for question in ("keep the producer alive myself", "JAX on a GPU",
                     "`torch.cuda.graph()`", "Several GPUs",
                     "Threads?", "Which versions", "C or C++ extension"):
        assert question in section, question
    assert "What you must still do yourself" in read("docs/cuda.rst")
    import pickle
    for view in (caibridge.as_dlpack(np.zeros(2)),
                 caibridge.from_dlpack(np.zeros(2))):
        with pytest.raises(TypeError):
            pickle.dumps(view)


def test_index_says_ordering():
    """index.rst: the site's first page says the ordering, the README's
    main argument, not only "without copying it"."""
    text = " ".join(read("docs/index.rst").split())
    assert "without copying it" not in text
    assert "in the right order" in text and "must-do-yourself" in text
