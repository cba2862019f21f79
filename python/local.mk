# The CPython module caibridge._core and the package around it.
#
# A libtool module named with the interpreter's extension suffix, linked
# with the core's convenience library (so it needs no libcaibridge.so at run
# time) and not with libpython (the interpreter provides those symbols).
# Everything goes into one package directory under pyexecdir, so the .py
# files and the extension are always found together.

# The extension's C sources, listed once: setup.py reads this list too
# (python/sources.py).
CAI_PY_SOURCES = \
	python/caibridge/module.c \
	python/caibridge/interface.c \
	python/caibridge/args.c \
	python/caibridge/streams.c \
	python/caibridge/waiter.c \
	python/caibridge/dlpackview.c \
	python/caibridge/caiview.c \
	python/caibridge/fromdlpack.c \
	python/caibridge/capsule.c \
	python/caibridge/exchange.c \
	python/caibridge/errors.c \
	python/caibridge/buffer.c \
	python/caibridge/bridge.c \
	python/caibridge/config.c
CAI_PY_PRIVATE_H = python/caibridge/caibridge_module.h

CAI_PY_MODULE_FILES = \
	python/caibridge/__init__.py \
	python/caibridge/__main__.py \
	python/caibridge/_config.py
CAI_PY_TYPING_FILES = \
	python/caibridge/__init__.pyi \
	python/caibridge/py.typed

EXTRA_DIST += $(CAI_PY_MODULE_FILES) $(CAI_PY_TYPING_FILES) \
	$(CAI_PY_SOURCES) $(CAI_PY_PRIVATE_H) python/sources.py python/requirements-test.txt \
	setup.py pyproject.toml MANIFEST.in examples/quickstart.py \
	python/caibridge/_core.map

if HAVE_PYTHON
caibridgedir = $(pyexecdir)/caibridge
caibridge_LTLIBRARIES = python/caibridge/_core.la
caibridge_PYTHON = $(CAI_PY_MODULE_FILES)
caibridge_DATA = $(CAI_PY_TYPING_FILES)

python_caibridge__core_la_SOURCES = $(CAI_PY_SOURCES) $(CAI_PY_PRIVATE_H)
# src/ for the core's private header desc.h, as in setup.py.
python_caibridge__core_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/src \
	$(PYTHON_INCLUDES)
python_caibridge__core_la_CFLAGS = $(AM_CFLAGS) $(CAI_VISIBILITY_CFLAGS) \
	-Wno-cast-function-type
python_caibridge__core_la_LIBADD = src/libcaibridge-core.la
python_caibridge__core_la_LDFLAGS = -module -avoid-version -shared \
	-shrext $(PYTHON_EXT_SUFFIX) -export-symbols-regex '^PyInit__core$$'

# An importable copy of the package in the build tree, for the tests and
# the demo: python/stage/caibridge/.
CAI_PY_STAGE = python/stage/caibridge
$(CAI_PY_STAGE)/.stamp: python/caibridge/_core.la $(CAI_PY_MODULE_FILES) \
		$(CAI_PY_TYPING_FILES)
	@$(MKDIR_P) $(CAI_PY_STAGE)
	@for f in $(CAI_PY_MODULE_FILES) $(CAI_PY_TYPING_FILES); do \
	  cp $(srcdir)/$$f $(CAI_PY_STAGE)/ || exit 1; \
	done
	@chmod u+w $(CAI_PY_STAGE)/*
	$(AM_V_GEN)cp python/caibridge/.libs/_core$(PYTHON_EXT_SUFFIX) \
	  $(CAI_PY_STAGE)/_core.new && \
	  mv -f $(CAI_PY_STAGE)/_core.new \
	  $(CAI_PY_STAGE)/_core$(PYTHON_EXT_SUFFIX)
	@touch $@

check_SCRIPTS += $(CAI_PY_STAGE)/.stamp

# libtool installs a _core.la next to the module, which Python never reads;
# without it, `libtool --mode=uninstall` no longer knows the module's name.
install-data-hook: install-python-drop-la
install-python-drop-la:
	rm -f "$(DESTDIR)$(caibridgedir)/_core.la"
uninstall-local: uninstall-python-module
uninstall-python-module:
	rm -f "$(DESTDIR)$(caibridgedir)/_core$(PYTHON_EXT_SUFFIX)"

CLEANFILES += $(CAI_PY_STAGE)/* $(CAI_PY_STAGE)/.stamp

# Runs the quick start against the in-tree build.
demo: $(CAI_PY_STAGE)/.stamp
	PYTHONPATH='$(abs_builddir)/python/stage'$${PYTHONPATH:+:$$PYTHONPATH} \
	  PYTHONDONTWRITEBYTECODE=1 $(PYTHON) $(srcdir)/examples/quickstart.py
else
demo:
	@echo "demo: the Python module is not built (configure found no Python)"
endif

.PHONY: demo install-python-drop-la uninstall-python-module

EXTRA_DIST += python/requirements-consumers.txt
