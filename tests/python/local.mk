# Python tests: one pytest file per TAP test, against the staged package in
# the build tree (python/stage, made by python/local.mk).  pytest keeps no
# cache and writes no bytecode, so a read-only srcdir (distcheck) is fine.
CAI_PYTHON_TESTS = \
	tests/python/test_as_dlpack.py \
	tests/python/test_lifetime.py \
	tests/python/test_from_dlpack.py \
	tests/python/test_descriptors.py \
	tests/python/test_exchange_api.py \
	$(empty)

# The C core against NumPy through ctypes (cai_typestr_parse, contiguity,
# cai_layout_extent).
CAI_PYTHON_TESTS += tests/python/test_core_oracle.py

# Hardening (issue 6, helper "harden"): hostile input, leak soak, threads.
CAI_PYTHON_TESTS += tests/python/test_hostile.py tests/python/test_soak.py \
	tests/python/test_threads.py

# The array interface read as NumPy reads it; NumPy as the oracle.
CAI_PYTHON_TESTS += tests/python/test_interface_semantics.py \
	tests/python/test_numpy_oracle.py

# Sub-interpreters, legacy and (3.12+) isolated; run-subinterp.sh runs them
# on another interpreter (make check-subinterp PYTHON312=...).
CAI_PYTHON_TESTS += tests/python/test_subinterpreters.py

EXTRA_DIST += $(CAI_PYTHON_TESTS) tests/python/conftest.py \
	tests/python/pip-install.sh tests/python/xconsumer.c \
	tests/python/run-subinterp.sh

if HAVE_PYTHON
TESTS += $(CAI_PYTHON_TESTS)
PY_LOG_COMPILER = env PYTHONDONTWRITEBYTECODE=1 \
	HYPOTHESIS_STORAGE_DIRECTORY='$(abs_builddir)/tests/python/hypothesis-db' \
	PYTHONPATH='$(abs_builddir)/python/stage'$${PYTHONPATH:+:$$PYTHONPATH} \
	$(PYTHON) -m pytest --tap-stream -p no:cacheprovider -q \
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
