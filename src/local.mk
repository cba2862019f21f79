# The core library.  The sources are listed once, here; python/ and
# pyproject.toml read this list (see python/sources.py).
CAI_CORE_SOURCES = \
	src/error.c \
	src/typestr.c \
	src/layout.c \
	src/desc.c \
	src/dlpack.c \
	src/stream.c \
	src/cuda-runtime.c \
	src/cuda-search.c \
	src/cuda-errors.c \
	src/cuda-context.c \
	src/cuda-locate.c \
	src/cuda-fence.c \
	src/cuda-pending.c \
	src/cuda-batch.c \
	src/cuda-events.c \
	src/cuda-copy.c \
	src/cuda-none.c \
	src/shutdown.c \
	src/stats.c \
	src/trace.c

noinst_LTLIBRARIES += src/libcaibridge-core.la
src_libcaibridge_core_la_SOURCES = $(CAI_CORE_SOURCES) \
	src/internal.h src/desc.h src/cuda-internal.h src/cuda-search.h \
	src/cuda-release.h src/cuda-copy.h src/trace.h
src_libcaibridge_core_la_CPPFLAGS = $(AM_CPPFLAGS) -DCAIBRIDGE_BUILDING \
	$(CUDA_CPPFLAGS) $(NVTX_CPPFLAGS)
src_libcaibridge_core_la_CFLAGS = $(AM_CFLAGS) $(CAI_VISIBILITY_CFLAGS)

# Libtool versioning, current:revision:age.  On a release: sources changed
# -> revision+1; interfaces added -> current+1, revision=0, age+1; interfaces
# removed or changed -> current+1, revision=0, age=0.
lib_LTLIBRARIES += src/libcaibridge.la
src_libcaibridge_la_SOURCES =
src_libcaibridge_la_LIBADD = src/libcaibridge-core.la
src_libcaibridge_la_LDFLAGS = -version-info 0:0:0 -no-undefined
# The exported functions and their symbol versions.
EXTRA_DIST += src/libcaibridge.map
if HAVE_LD_VERSION_SCRIPT
src_libcaibridge_la_LDFLAGS += \
	-Wl,--version-script=$(srcdir)/src/libcaibridge.map
EXTRA_src_libcaibridge_la_DEPENDENCIES = src/libcaibridge.map
endif

include_HEADERS += include/caibridge.h
caibridgeincludedir = $(includedir)/caibridge
caibridgeinclude_HEADERS = include/caibridge/dlpack.h

# make uninstall: the folders make install made for caibridge go too, when
# nothing else is left in them (rmdir removes only an empty folder).
uninstall-hook: uninstall-caibridge-dirs
uninstall-caibridge-dirs:
	@for d in '$(caibridgeincludedir)' '$(pkgconfigdir)' \
	    '$(caibridgedir)/__pycache__' '$(caibridgedir)'; do \
	  test -n "$$d" && test -d "$(DESTDIR)$$d" && \
	    rmdir "$(DESTDIR)$$d" 2>/dev/null; \
	done; :
.PHONY: uninstall-caibridge-dirs

# A static libcaibridge.a (configure --enable-static) keeps only the CAI_API
# functions global: its objects are merged into one (ld -r) whose hidden
# symbols, the library's internal cai_* functions and globals, are made
# local (objcopy --localize-hidden), so that none of them can clash with a
# program's own names.  tests/static-t.sh checks it.
all-local: src/libcaibridge-static.stamp
src/libcaibridge-static.stamp: src/libcaibridge.la
	@a=src/.libs/libcaibridge.a; \
	if test -f "$$a"; then \
	  if test -z '$(OBJCOPY)'; then \
	    echo "$$a: no objcopy: its internal symbols stay global" >&2; \
	  else \
	    tmp=$$a.localize; rm -rf "$$tmp" && mkdir "$$tmp" && \
	    (cd "$$tmp" && $(AR) x ../`basename $$a` && \
	     $(LD) -r -o caibridge.o *.o && \
	     $(OBJCOPY) --localize-hidden caibridge.o) && \
	    rm -f "$$a" && $(AR) cr "$$a" "$$tmp/caibridge.o" && \
	    $(RANLIB) "$$a" && rm -rf "$$tmp" || exit 1; \
	  fi; \
	fi; touch $@
CLEANFILES += src/libcaibridge-static.stamp
TESTS += tests/static-t.sh
EXTRA_DIST += tests/static-t.sh
