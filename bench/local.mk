# make bench: the C core timed alone, then every hand-over side by side in
# one Python run (bench/bench.py), which writes bench/bench.csv and
# bench/bench.png in the build dir.  Built only for check/bench, never
# installed.
check_PROGRAMS += bench/bench-core
bench_bench_core_SOURCES = bench/bench-core.c
bench_bench_core_LDADD = src/libcaibridge-core.la

BENCH_BUILT = bench/bench-core$(EXEEXT)

if HAVE_PYTHON
# A C consumer of the exchange API, loaded by bench.py from bench/.libs.
# -rpath makes libtool build it shared although it is never installed.
check_LTLIBRARIES += bench/_xbench.la
bench__xbench_la_SOURCES = bench/xbench.c
bench__xbench_la_CPPFLAGS = $(AM_CPPFLAGS) $(PYTHON_INCLUDES)
bench__xbench_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere
BENCH_BUILT += bench/_xbench.la $(CAI_PY_STAGE)/.stamp
BENCH_RUN = PYTHONPATH="$(BENCH_PYTHONPATH)$${PYTHONPATH:+:$$PYTHONPATH}" \
	MPLBACKEND=Agg $(PYTHON) $(srcdir)/bench/bench.py \
	--core ./bench/bench-core$(EXEEXT) --xbench bench/.libs --out bench \
	$(BENCH_CUDART) $(BENCH_VALGRIND)
else
BENCH_RUN = ./bench/bench-core$(EXEEXT)
endif

# CUDA paths cannot be timed here; their runtime calls are counted with the
# recording double of tests/cuda.
if HAVE_CUDA
BENCH_BUILT += tests/cuda/libcudart-double.la
BENCH_CUDART = --cudart tests/cuda/.libs/libcudart-double.so
endif

# Instruction counts need valgrind; without it they are left out.
BENCH_VALGRIND = $(VALGRIND:%=--valgrind %)

# The in-tree module's staged package (see python/local.mk).
BENCH_PYTHONPATH = $(abs_builddir)/python/stage

bench:
	@$(MAKE) $(AM_MAKEFLAGS) all $(BENCH_BUILT)
	@$(MKDIR_P) bench
	$(BENCH_RUN)

.PHONY: bench
EXTRA_DIST += bench/bench.py
# On a GPU only: hand-over time beside CuPy's and torch's own __dlpack__
# (python bench/bench-gpu.py after pip install .).
EXTRA_DIST += bench/bench-gpu.py bench/cuda-calls.c
CLEANFILES += bench/bench.csv bench/bench.png bench/callgrind.out.*

# The speed targets in instructions on each of pyenv's CPythons (3.11.7,
# 3.12.1, 3.13.0; BENCH_PYTHONS overrides), each built by pip into a cached
# virtual environment: bench/bench-interpreters.sh.
bench-interpreters:
	VALGRIND="$(VALGRIND)" CC="$(CC)" \
	  $(SHELL) $(srcdir)/bench/bench-interpreters.sh $(BENCH_PYTHONS)

.PHONY: bench-interpreters
EXTRA_DIST += bench/bench-interpreters.sh

# caibridge's own cost against the floor's, in instructions (callgrind;
# skipped without valgrind): fails when a path grows past its margin.
if HAVE_PYTHON
TESTS += tests/python/test_own_cost.py
endif
EXTRA_DIST += tests/python/test_own_cost.py
