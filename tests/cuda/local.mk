# CUDA tests.  Without a GPU, the runtime is either the real libcudart (which
# answers "no driver"), a path that does not exist, or a recording double
# built here and selected with CAIBRIDGE_CUDART.
CUDA_TESTS_CPPFLAGS = $(TESTS_CPPFLAGS) -I$(top_srcdir)/tests/cuda \
	$(CUDA_CPPFLAGS) \
	-DCUDART_DOUBLE_DIR='"$(abs_top_builddir)/tests/cuda"'

# The event pool is on, as users get it, except where a test says why not:
# the call-log checks below count an event made and destroyed per
# hand-over, and test_race_no_pool.py runs the races again without it.
# The C tests on the double turn it off in use_double() unless they set it.
AM_TESTS_ENVIRONMENT = case $$f in \
	*/test_stream_order.py | */test_cuda_bridge.py | \
	*/test_exchange_streams.py | */test_race_no_pool.py) \
	  CAIBRIDGE_EVENT_POOL=0; export CAIBRIDGE_EVENT_POOL;; \
	esac; \
	. $(srcdir)/tests/cuda/private-doubles.sh \
	  '$(abs_top_builddir)/tests/cuda/.libs';
EXTRA_DIST += tests/cuda/private-doubles.sh

# The runtime search and the binder make no circle (issue 42).
TESTS += tests/cuda/layering-t.sh
EXTRA_DIST += tests/cuda/layering-t.sh

# Correct whether or not CUDA support is built.
CUDA_ALWAYS_TESTS = \
	tests/cuda/missing-t \
	tests/cuda/no-driver-t
check_PROGRAMS += $(CUDA_ALWAYS_TESTS)
TESTS += $(CUDA_ALWAYS_TESTS)
tests_cuda_missing_t_SOURCES = tests/cuda/missing-t.c tests/cuda/cuda-test.h
tests_cuda_missing_t_CPPFLAGS = $(CUDA_TESTS_CPPFLAGS)
tests_cuda_no_driver_t_SOURCES = tests/cuda/no-driver-t.c
tests_cuda_no_driver_t_CPPFLAGS = $(CUDA_TESTS_CPPFLAGS)
VALGRIND_TESTS += $(CUDA_ALWAYS_TESTS)

if HAVE_CUDA
# The double needs the toolkit headers so its entry points have the real
# signatures.  -rpath makes libtool build it shared although nothing
# installs it.
check_LTLIBRARIES += tests/cuda/libcudart-double.la
tests_cuda_libcudart_double_la_SOURCES = tests/cuda/cudart-double.c \
	tests/cuda/cudart-double.h tests/cuda/double-internal.h \
	tests/cuda/timeline.c tests/cuda/double-graph.c \
	tests/cuda/double-copy.c
tests_cuda_libcudart_double_la_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_cuda_libcudart_double_la_LDFLAGS = -module -avoid-version -shared \
	-rpath /nowhere
# What test_runtime_search.py plants where no runtime may be loaded from.
check_LTLIBRARIES += tests/cuda/libplanted.la
tests_cuda_libplanted_la_SOURCES = tests/cuda/planted.c
tests_cuda_libplanted_la_LDFLAGS = -module -avoid-version -shared \
	-rpath /nowhere
# An NVTX tool that writes caibridge's marks to a file (test_nvtx.py).
if HAVE_NVTX
check_LTLIBRARIES += tests/cuda/libnvtx-record.la
tests_cuda_libnvtx_record_la_SOURCES = tests/cuda/nvtx-record.c
tests_cuda_libnvtx_record_la_CPPFLAGS = $(AM_CPPFLAGS) $(NVTX_CPPFLAGS)
tests_cuda_libnvtx_record_la_LDFLAGS = -module -avoid-version -shared \
	-rpath /nowhere
endif
# The same double without cuStreamGetCtx: a driver lacking an entry point.
check_LTLIBRARIES += tests/cuda/libcudart-partial.la
tests_cuda_libcudart_partial_la_SOURCES = $(tests_cuda_libcudart_double_la_SOURCES)
tests_cuda_libcudart_partial_la_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS) \
	-DDOUBLE_PARTIAL_DRIVER
tests_cuda_libcudart_partial_la_LDFLAGS = $(tests_cuda_libcudart_double_la_LDFLAGS)

CUDA_DOUBLE_TESTS = \
	tests/cuda/order-t \
	tests/cuda/locate-t \
	tests/cuda/once-t \
	tests/cuda/preloaded-t \
	tests/cuda/old-runtime-t \
	tests/cuda/wrong-library-t \
	tests/cuda/search-t \
	tests/cuda/fence-t \
	tests/cuda/messages-t \
	tests/cuda/race-t \
	tests/cuda/defects-t \
	tests/cuda/pool-t \
	tests/cuda/reset-t \
	tests/cuda/strict-t \
	tests/cuda/release-t \
	tests/cuda/promise-t \
	tests/cuda/fork-t
check_PROGRAMS += $(CUDA_DOUBLE_TESTS)
TESTS += $(CUDA_DOUBLE_TESTS)
VALGRIND_TESTS += $(CUDA_DOUBLE_TESTS)
tests_cuda_order_t_CPPFLAGS = $(CUDA_TESTS_CPPFLAGS)
tests_cuda_locate_t_CPPFLAGS = $(CUDA_TESTS_CPPFLAGS)
tests_cuda_once_t_CPPFLAGS = $(CUDA_TESTS_CPPFLAGS)
tests_cuda_preloaded_t_CPPFLAGS = $(CUDA_TESTS_CPPFLAGS)
tests_cuda_old_runtime_t_CPPFLAGS = $(CUDA_TESTS_CPPFLAGS)
tests_cuda_wrong_library_t_CPPFLAGS = $(CUDA_TESTS_CPPFLAGS)
tests_cuda_search_t_CPPFLAGS = $(CUDA_TESTS_CPPFLAGS) -I$(top_srcdir)/src
# The search functions are private: linked from the core, not the .so.
tests_cuda_search_t_LDADD = src/libcaibridge-core.la tests/tap/libtap.a
tests_cuda_fence_t_CPPFLAGS = $(CUDA_TESTS_CPPFLAGS)
tests_cuda_messages_t_CPPFLAGS = $(CUDA_TESTS_CPPFLAGS)
tests_cuda_race_t_CPPFLAGS = $(CUDA_TESTS_CPPFLAGS)
tests_cuda_defects_t_CPPFLAGS = $(CUDA_TESTS_CPPFLAGS)
tests_cuda_pool_t_CPPFLAGS = $(CUDA_TESTS_CPPFLAGS)
# The pool setting's parser is private: linked from the core.
tests_cuda_release_t_CPPFLAGS = $(CUDA_TESTS_CPPFLAGS) -I$(top_srcdir)/src
tests_cuda_release_t_LDADD = src/libcaibridge-core.la tests/tap/libtap.a
tests_cuda_reset_t_CPPFLAGS = $(CUDA_TESTS_CPPFLAGS)
# cai_release_poll and the pending count are private: linked from the core.
tests_cuda_promise_t_CPPFLAGS = $(CUDA_TESTS_CPPFLAGS) -I$(top_srcdir)/src
tests_cuda_promise_t_LDADD = src/libcaibridge-core.la tests/tap/libtap.a
tests_cuda_strict_t_CPPFLAGS = $(CUDA_TESTS_CPPFLAGS)
tests_cuda_fork_t_CPPFLAGS = $(CUDA_TESTS_CPPFLAGS)
# The CUDA export example of docs/guide/c.rst (the page's second
# `.. code-block:: c`), taken from the page and run on the double.
check_PROGRAMS += tests/cuda/guide-gpu-t
TESTS += tests/cuda/guide-gpu-t
VALGRIND_TESTS += tests/cuda/guide-gpu-t
tests_cuda_guide_gpu_t_CPPFLAGS = $(CUDA_TESTS_CPPFLAGS) \
	-I$(top_builddir)/tests/cuda
BUILT_SOURCES += tests/cuda/guide-gpu-example.h
tests/cuda/guide-gpu-example.h: $(top_srcdir)/docs/guide/c.rst
	@$(MKDIR_P) tests/cuda
	$(AWK) -v want=2 'inblock && /^[^ \t]/ { exit } \
	  inblock { sub(/^   /, ""); print } \
	  /^\.\. code-block:: c[ \t]*$$/ { if (++n == want) inblock = 1 }' \
	  $(top_srcdir)/docs/guide/c.rst > $@.tmp && \
	  grep 'export_cuda' $@.tmp >/dev/null && mv $@.tmp $@
CLEANFILES += tests/cuda/guide-gpu-example.h
# Runs itself as a child through /proc/PID/exe: not under valgrind.
check_PROGRAMS += tests/cuda/soname-t
TESTS += tests/cuda/soname-t
tests_cuda_soname_t_CPPFLAGS = $(CUDA_TESTS_CPPFLAGS)
endif

# The Python layer with no usable CUDA, and on the double (as_dlpack
# locating, __dlpack__ ordering, from_dlpack reporting streams).  Run like
# tests/python's files.
CAI_CUDA_PYTHON_TESTS = tests/cuda/test_stream_order.py \
	tests/cuda/test_cuda_bridge.py tests/cuda/test_exchange_streams.py \
	tests/cuda/test_streams.py tests/cuda/test_runtime_search.py \
	tests/cuda/test_race.py tests/cuda/test_race_no_pool.py \
	tests/cuda/test_copy.py tests/cuda/test_copy_promise.py \
	tests/cuda/test_stats.py tests/cuda/test_nvtx.py \
	tests/cuda/test_reset.py tests/cuda/test_gil.py \
	tests/cuda/test_release.py tests/cuda/test_release_cost.py \
	tests/cuda/test_batch.py tests/cuda/test_promise.py \
	tests/cuda/test_calls.py \
	tests/cuda/test_gpu_script.py
EXTRA_DIST += $(CAI_CUDA_PYTHON_TESTS) tests/cuda/test_no_cuda.py \
	tests/cuda/timeline_double.py
if HAVE_PYTHON
TESTS += tests/cuda/test_no_cuda.py
if HAVE_CUDA
TESTS += $(CAI_CUDA_PYTHON_TESTS)
endif
endif

# `make check-gpu`: real CAI producers through caibridge into PyTorch and
# JAX on a machine with a GPU; one TAP skip line with the reason without.
# It imports the package staged by python/local.mk (python/stage).
EXTRA_DIST += tests/gpu/check-gpu.py tests/gpu/gpu_cases.py \
	tests/gpu/release_cases.py tests/gpu/gpu_copy_cases.py \
	tests/gpu/gpu_dtype_cases.py \
	tests/gpu/README
if HAVE_PYTHON
check-gpu: python/stage/caibridge/.stamp
	PYTHONDONTWRITEBYTECODE=1 \
	  PYTHONPATH='$(abs_builddir)/python/stage'$${PYTHONPATH:+:$$PYTHONPATH} \
	  $(PYTHON) $(srcdir)/tests/gpu/check-gpu.py
else
check-gpu:
	@echo "1..0 # SKIP no CUDA device check: the Python module is not built"
endif
.PHONY: check-gpu
