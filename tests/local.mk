# C tests of the core: tests/NAME-t.c tests src/NAME.c.
LDADD = src/libcaibridge.la tests/tap/libtap.a
check_LIBRARIES = tests/tap/libtap.a
tests_tap_libtap_a_SOURCES = tests/tap/basic.c tests/tap/basic.h
tests_tap_libtap_a_CPPFLAGS = -I$(top_srcdir)/tests

# For tests in subdirectories; the tests here find tap/basic.h and
# test-util.h beside their own sources.
TESTS_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests
# What the tests build alike (a dtype, a float32 descriptor).
EXTRA_DIST += tests/test-util.h

C_CORE_TESTS = \
	tests/typestr-t \
	tests/layout-t \
	tests/desc-t \
	tests/dlpack-t \
	tests/error-t \
	tests/abi-t \
	tests/cxx-t \
	tests/c99-t \
	tests/c89-t \
	tests/api-t

check_PROGRAMS += $(C_CORE_TESTS)
TESTS += $(C_CORE_TESTS)

tests_abi_t_SOURCES = tests/abi-t.c tests/abi.h tests/abi-list.h \
	tests/abi-table.h tests/abi-ours.c tests/abi-upstream.c tests/abi-guard.c
# The header from C++: compiled as C++11 (when the compiler knows it).
tests_cxx_t_SOURCES = tests/cxx-t.cc
tests_cxx_t_CXXFLAGS = $(CAI_CXX11_FLAG) $(CAI_WARN_CXXFLAGS)
# The header in strict C99.
tests_c99_t_CFLAGS = $(CAI_C99_FLAGS) $(AM_CFLAGS)
# And in strict C89 (its own TAP: tap/basic.h is C99).
tests_c89_t_CFLAGS = $(CAI_C89_FLAGS) $(AM_CFLAGS)
tests_c89_t_LDADD = src/libcaibridge.la

# Only the CAI_API functions leave the shared library.
TESTS += tests/exports-t.sh
EXTRA_DIST += tests/exports-t.sh

# The time limit every test runs under, tried on a test that hangs.
TESTS += tests/time-limit-t.sh
EXTRA_DIST += tests/time-limit-t.sh tests/time-limit.sh

# make check-valgrind: every C TAP test under valgrind (through libtool, so
# the real binary runs, not its wrapper script).  Fails on any memcheck
# error, any definite or indirect leak, any "not ok" and any missing plan.
# Other parts may add their C test programs to VALGRIND_TESTS.
VALGRIND_TESTS = $(C_CORE_TESTS)
VALGRIND_FLAGS = --error-exitcode=1 --leak-check=full \
	--errors-for-leak-kinds=definite,indirect --quiet
check-valgrind:
	@if test -z "$(VALGRIND)"; then \
	  echo "check-valgrind: configure found no valgrind" >&2; exit 1; \
	fi
	@$(MAKE) $(AM_MAKEFLAGS) $(check_LIBRARIES) $(check_LTLIBRARIES) \
	  $(VALGRIND_TESTS)
	@failed=0; \
	for t in $(VALGRIND_TESTS); do \
	  log=$$t.valgrind.log; \
	  if srcdir='$(srcdir)' $(LIBTOOL) --mode=execute $(VALGRIND) $(VALGRIND_FLAGS) \
	       ./$$t$(EXEEXT) >$$log 2>&1 && \
	     ! grep '^not ok' $$log >/dev/null && \
	     grep '^1\.\.' $$log >/dev/null; then \
	    echo "PASS: $$t (valgrind, `grep -c '^ok' $$log` assertions)"; \
	  else \
	    echo "FAIL: $$t (valgrind); $$log says:"; \
	    grep -v '^ok' $$log | sed 's/^/    /'; \
	    failed=1; \
	  fi; \
	done; \
	test $$failed = 0
.PHONY: check-valgrind
MOSTLYCLEANFILES += $(VALGRIND_TESTS:=.valgrind.log)

# make check-mutants: each one-line mutation of tests/mutants/list, applied
# to a copy of the tree and rebuilt, must make one of the tests it names
# fail (tests/mutants/run-mutants.py; MUTANTS='name ...' runs some only).
EXTRA_DIST += tests/mutants/list tests/mutants/run-mutants.py
check-mutants:
	py='$(PYTHON)'; case $$py in ''|:) py=python3 ;; esac; \
	$$py $(srcdir)/tests/mutants/run-mutants.py \
	  --list $(srcdir)/tests/mutants/list $(MUTANTS)
.PHONY: check-mutants

# The C example of docs/guide/c.rst, taken from the page (its first
# `.. code-block:: c`), compiled against the library and run, so the page
# cannot drift from the header.
check_PROGRAMS += tests/guide-c-example
nodist_tests_guide_c_example_SOURCES = tests/guide-c-example.c
tests/guide-c-example.c: $(top_srcdir)/docs/guide/c.rst
	$(AWK) 'inblock && /^[^ \t]/ { exit } \
	  inblock { sub(/^   /, ""); print } \
	  /^\.\. code-block:: c[ \t]*$$/ { inblock = 1 }' \
	  $(top_srcdir)/docs/guide/c.rst > $@.tmp && \
	  grep 'int main' $@.tmp >/dev/null && mv $@.tmp $@
CLEANFILES += tests/guide-c-example.c
TESTS += tests/guide-c-t.sh
EXTRA_DIST += tests/guide-c-t.sh

# The capsule example of docs/guide/c.rst (its third C block), compiled
# against Python.h as the extension module guide_capsule, which
# tests/python/test_guide_capsule.py loads and runs.
if HAVE_PYTHON
check_LTLIBRARIES += tests/libguide-capsule.la
tests_libguide_capsule_la_SOURCES = tests/guide-capsule.c
tests_libguide_capsule_la_CPPFLAGS = $(AM_CPPFLAGS) $(PYTHON_INCLUDES) \
	-I$(top_builddir)/tests
tests_libguide_capsule_la_LDFLAGS = -module -avoid-version -shared \
	-rpath /nowhere
BUILT_SOURCES += tests/guide-capsule-example.h
tests/guide-capsule-example.h: $(top_srcdir)/docs/guide/c.rst
	$(AWK) -v want=3 'inblock && /^[^ \t]/ { exit } \
	  inblock { sub(/^   /, ""); print } \
	  /^\.\. code-block:: c[ \t]*$$/ { if (++n == want) inblock = 1 }' \
	  $(top_srcdir)/docs/guide/c.rst > $@.tmp && \
	  grep 'dltensor_versioned' $@.tmp >/dev/null && mv $@.tmp $@
CLEANFILES += tests/guide-capsule-example.h
endif

# cai_shutdown on the CUDA double (tests/cuda/cuda-test.h).
if HAVE_CUDA
check_PROGRAMS += tests/cuda/shutdown-t
TESTS += tests/cuda/shutdown-t
VALGRIND_TESTS += tests/cuda/shutdown-t
tests_cuda_shutdown_t_CPPFLAGS = $(CUDA_TESTS_CPPFLAGS)
endif
