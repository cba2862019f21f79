# `make docs`: the Sphinx documentation, built from the build tree into
# docs/html.  Warnings are errors (-W, reported all at once with
# --keep-going) and every cross-reference must resolve (-n).  autodoc
# imports the staged module (python/stage), so the reference documents
# the module this tree built.
CAI_DOCS_SOURCES = \
	docs/conf.py \
	docs/_ext/cheader.py \
	docs/_ext/plaintext.py \
	docs/_ext/pystubs.py \
	docs/_ext/mdinclude.py \
	docs/_ext/inventories.py \
	docs/check_html.py \
	docs/index.rst \
	docs/install.rst \
	docs/guide/python.rst \
	docs/guide/bridge.rst \
	docs/guide/c.rst \
	docs/behaviour.rst \
	docs/cuda.rst \
	docs/peers.rst \
	docs/development.rst \
	docs/troubleshooting.rst \
	docs/ordering.rst \
	docs/environment.rst \
	docs/compatibility.rst \
	docs/changelog.rst \
	docs/reference/python.rst \
	docs/reference/c.rst

EXTRA_DIST += $(CAI_DOCS_SOURCES) docs/requirements.txt \
	tests/gpu/doc_examples.py

# -E: the extensions in docs/_ext change the output, which Sphinx does not
# track; a fresh read takes seconds.
SPHINXOPTS = -E -W --keep-going -n -q

if HAVE_PYTHON
docs: python/stage/caibridge/.stamp
	@$(PYTHON) -c 'import sphinx' 2>/dev/null || { \
	  echo "docs: Sphinx is not installed for $(PYTHON):" \
	    "$(PYTHON) -m pip install -r $(srcdir)/docs/requirements.txt"; \
	  exit 1; }
	PYTHONPATH='$(abs_builddir)/python/stage'$${PYTHONPATH:+:$$PYTHONPATH} \
	  PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -m sphinx $(SPHINXOPTS) \
	  -d docs/.doctrees -b html $(srcdir)/docs docs/html
	$(PYTHON) $(srcdir)/docs/check_html.py docs/html
	@echo "docs: docs/html/index.html"
else
docs:
	@echo "docs: the Python module is not built (configure found no Python)"; \
	  exit 1
endif

clean-local: clean-docs
clean-docs:
	-rm -rf docs/html docs/.doctrees
.PHONY: docs clean-docs
