# Python tests: one pytest file per TAP test, against the staged package in
# the build tree (python/stage, made by python/local.mk).  pytest keeps no
# cache and writes no bytecode, so a read-only srcdir (distcheck) is fine.
# tapreport.py prints the TAP, or one skip line per file naming the test
# tools this Python lacks and how to install them.
CAI_PYTHON_TESTS = \
	tests/python/test_as_dlpack.py \
	tests/python/test_lifetime.py \
	tests/python/test_from_dlpack.py \
	tests/python/test_arguments.py \
	tests/python/test_exchange_api.py \
	tests/python/test_add_dlpack.py \
	tests/python/test_add_array_interface.py \
	tests/python/test_caiview_producer.py \
	tests/python/test_dtypes.py \
	tests/python/test_torch_copy.py \
	tests/python/test_buffer_producers.py \
	tests/python/test_api_gaps.py \
	$(empty)

# The C core against NumPy through ctypes (cai_typestr_parse, contiguity,
# cai_layout_extent).
CAI_PYTHON_TESTS += tests/python/test_core_oracle.py

# Hardening (issue 6, helper "harden"): hostile input, leak soak, threads.
CAI_PYTHON_TESTS += tests/python/test_interface.py tests/python/test_soak.py \
	tests/python/test_threads.py tests/python/test_exit_race.py

# The array interface read as NumPy reads it; NumPy as the oracle.
CAI_PYTHON_TESTS += tests/python/test_interface_semantics.py \
	tests/python/test_numpy_oracle.py

# Sub-interpreters, legacy and (3.12+) isolated; run-subinterp.sh runs them
# on another interpreter (make check-subinterp PYTHON312=...).
CAI_PYTHON_TESTS += tests/python/test_subinterpreters.py

# The type stubs against the module, and the GIL on free-threaded builds.
# python -m caibridge, show_config.
CAI_PYTHON_TESTS += tests/python/test_show_config.py \
	tests/python/test_build_config.py

CAI_PYTHON_TESTS += tests/python/test_stubs.py \
	tests/python/test_free_threading.py

EXTRA_DIST += $(CAI_PYTHON_TESTS) tests/python/conftest.py \
	tests/python/shared.py \
	tests/python/pip-install.sh tests/python/xconsumer.c \
	tests/python/xexporter.c \
	tests/python/run-subinterp.sh tests/python/tapreport.py

if HAVE_PYTHON
TESTS += $(CAI_PYTHON_TESTS)
PY_LOG_COMPILER = $(CAI_TEST_LIMIT) $(CAI_PY_RUN)
# How a Python test file runs (make soak uses it with no time limit).
CAI_PY_RUN = env PYTHONDONTWRITEBYTECODE=1 \
	HYPOTHESIS_STORAGE_DIRECTORY='$(abs_builddir)/tests/python/hypothesis-db' \
	PYTHONPATH='$(abs_builddir)/python/stage'$${PYTHONPATH:+:$$PYTHONPATH} \
	$(PYTHON) $(srcdir)/tests/python/tapreport.py -p no:cacheprovider \
	--rootdir=$(abs_srcdir)/tests/python
endif

check-subinterp:
	@test -n "$(PYTHON312)" || { \
	  echo "check-subinterp: give PYTHON312=/path/to/python3.12"; exit 2; }
	sh $(srcdir)/tests/python/run-subinterp.sh $(PYTHON312)
.PHONY: check-subinterp

# Hypothesis keeps its example database in the build tree, not in the
# directory the tests run from.
clean-local: clean-python-tests
clean-python-tests:
	-rm -rf tests/python/hypothesis-db
.PHONY: clean-python-tests

# Every Python example of docs/ and README.md runs (tests/gpu/doc_examples.py
# finds them; the GPU-only ones run in make check-gpu).
CAI_PYTHON_TESTS += tests/python/test_docs_examples.py
CAI_PYTHON_TESTS += tests/python/test_docs_html.py
CAI_PYTHON_TESTS += tests/python/test_device_id.py
CAI_PYTHON_TESTS += tests/python/test_docs_claims.py
# The capsule example of docs/guide/c.rst, run (tests/guide-capsule.c).
CAI_PYTHON_TESTS += tests/python/test_guide_capsule.py
