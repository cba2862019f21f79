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
	tests/error-t

check_PROGRAMS += $(C_CORE_TESTS)
TESTS += $(C_CORE_TESTS)

tests_typestr_t_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_layout_t_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_desc_t_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_dlpack_t_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_error_t_CPPFLAGS = $(TESTS_CPPFLAGS)
