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
	src/shutdown.c

noinst_LTLIBRARIES += src/libcaibridge-core.la
src_libcaibridge_core_la_SOURCES = $(CAI_CORE_SOURCES) \
	src/internal.h src/desc.h src/cuda-internal.h src/cuda-search.h \
	src/cuda-release.h src/cuda-copy.h
src_libcaibridge_core_la_CPPFLAGS = $(AM_CPPFLAGS) -DCAIBRIDGE_BUILDING \
	$(CUDA_CPPFLAGS)
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
