# C tests of the core: tests/NAME-t.c tests src/NAME.c.
LDADD = src/libcaibridge.la tests/tap/libtap.a
check_LIBRARIES = tests/tap/libtap.a
tests_tap_libtap_a_SOURCES = tests/tap/basic.c tests/tap/basic.h
tests_tap_libtap_a_CPPFLAGS = -I$(top_srcdir)/tests

TESTS_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests

C_CORE_TESTS = \
	tests/typestr-t \
	tests/layout-t \
	tests/desc-t \
	tests/dlpack-t \
	tests/error-t \
	tests/abi-t \
	tests/cxx-t

check_PROGRAMS += $(C_CORE_TESTS)
TESTS += $(C_CORE_TESTS)

tests_typestr_t_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_layout_t_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_desc_t_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_dlpack_t_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_error_t_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_abi_t_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_abi_t_SOURCES = tests/abi-t.c tests/abi.h tests/abi-list.h \
	tests/abi-table.h tests/abi-ours.c tests/abi-upstream.c tests/abi-guard.c
# The header from C++: compiled as C++11 (when the compiler knows it).
tests_cxx_t_SOURCES = tests/cxx-t.cc
tests_cxx_t_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_cxx_t_CXXFLAGS = $(CAI_CXX11_FLAG) $(CAI_WARN_CXXFLAGS)

# Only the CAI_API functions leave the shared library.
TESTS += tests/exports-t.sh
EXTRA_DIST += tests/exports-t.sh
