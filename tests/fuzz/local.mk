# Hardening targets (issue 6): the libFuzzer target and the leak soak.
#
# libFuzzer target for the core conversions.  libFuzzer needs
# clang, so the target is built by its own rule rather than by Automake's
# compiler: it compiles the core sources directly (CAI_CORE_SOURCES, from
# src/local.mk) with the fuzzer and sanitizers instrumenting all of them.
#
#   make fuzz              build tests/fuzz/fuzz-convert
#   make fuzz-short        run it FUZZ_SECONDS (60) from the seed corpus
#   make fuzz-corpus       rewrite the seed corpus (tests/fuzz/make-corpus.py)
#   make soak              tests/python/test_soak.py with 10^6 hand-overs
#                          of each kind, JAX 3 * 10^5 (SOAK_JAX_N; JAX
#                          costs ~60 us each); make check runs fewer

FUZZ_SECONDS = 60
FUZZ_FLAGS =
FUZZ_SANITIZE = -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZ_TARGET = tests/fuzz/fuzz-convert
FUZZ_SEEDS = \
	tests/fuzz/corpus/desc-c-contiguous-f4 \
	tests/fuzz/corpus/desc-transposed-i8 \
	tests/fuzz/corpus/desc-negative-stride \
	tests/fuzz/corpus/desc-zero-size-null-data \
	tests/fuzz/corpus/desc-scalar \
	tests/fuzz/corpus/desc-readonly-legacy \
	tests/fuzz/corpus/desc-odd-stride-length-one \
	tests/fuzz/corpus/desc-stream-zero \
	tests/fuzz/corpus/desc-mask \
	tests/fuzz/corpus/desc-huge-shape \
	tests/fuzz/corpus/tensor-versioned-strided \
	tests/fuzz/corpus/tensor-legacy-null-strides \
	tests/fuzz/corpus/tensor-byte-offset \
	tests/fuzz/corpus/tensor-byte-offset-wraps \
	tests/fuzz/corpus/tensor-future-major \
	tests/fuzz/corpus/tensor-subbyte-padded \
	tests/fuzz/corpus/desc-offset-near-2-63 \
	tests/fuzz/corpus/desc-stride-2-62 \
	tests/fuzz/corpus/desc-stride-int64-min \
	tests/fuzz/corpus/desc-reversed-bytes \
	tests/fuzz/corpus/desc-reversed-below-zero \
	tests/fuzz/corpus/desc-end-wraps-to-zero \
	tests/fuzz/corpus/tensor-byte-offset-2-63

EXTRA_DIST += .ci/harden tests/fuzz/fuzz-convert.c tests/fuzz/make-corpus.py \
	$(FUZZ_SEEDS)

# configure's CLANG is empty when no clang was found: say so and fail.
$(FUZZ_TARGET): $(srcdir)/tests/fuzz/fuzz-convert.c \
		$(addprefix $(srcdir)/,$(CAI_CORE_SOURCES)) \
		$(srcdir)/src/internal.h $(srcdir)/src/desc.h \
		$(srcdir)/include/caibridge.h $(srcdir)/include/caibridge/dlpack.h
	@if test -z "$(CLANG)"; then \
	  echo "fuzz: configure found no clang; libFuzzer needs it" >&2; \
	  exit 1; fi
	@$(MKDIR_P) tests/fuzz
	$(AM_V_CC)$(CLANG) -g -O1 $(FUZZ_SANITIZE) $(DEFS) \
	  -DCAIBRIDGE_BUILDING -I$(top_builddir) -I$(top_srcdir)/include \
	  -I$(top_srcdir)/src $(CUDA_CPPFLAGS) $(NVTX_CPPFLAGS) \
	  -o $@ $(srcdir)/tests/fuzz/fuzz-convert.c \
	  $(addprefix $(srcdir)/,$(CAI_CORE_SOURCES)) $(LIBS)

fuzz: $(FUZZ_TARGET)

# The target's body over the seed corpus, with any C compiler, in make check.
check_PROGRAMS += tests/fuzz/replay-t
TESTS += tests/fuzz/replay-t
VALGRIND_TESTS += tests/fuzz/replay-t
tests_fuzz_replay_t_SOURCES = tests/fuzz/replay-t.c tests/fuzz/fuzz-convert.c
tests_fuzz_replay_t_CPPFLAGS = $(TESTS_CPPFLAGS)

# The seeds are copied so that libFuzzer writes what it finds into the build
# tree, never into the sources.  Any crash fails the target and keeps
# tests/fuzz/run, with the crashing input, for a look.
fuzz-short: $(FUZZ_TARGET)
	@rm -rf tests/fuzz/run && $(MKDIR_P) tests/fuzz/run/corpus
	@cp $(addprefix $(srcdir)/,$(FUZZ_SEEDS)) tests/fuzz/run/corpus/
	@echo "fuzz: running $(FUZZ_TARGET) for $(FUZZ_SECONDS) s"
	cd tests/fuzz/run && ../fuzz-convert -max_total_time=$(FUZZ_SECONDS) \
	  -print_final_stats=1 -artifact_prefix=./ $(FUZZ_FLAGS) corpus
	@rm -rf tests/fuzz/run

fuzz-corpus:
	py='$(PYTHON)'; $${py:-python3} $(srcdir)/tests/fuzz/make-corpus.py \
	  $(srcdir)/tests/fuzz/corpus

CLEANFILES += $(FUZZ_TARGET)

SOAK_N = 1000000
SOAK_JAX_N = 300000
if HAVE_PYTHON
soak: $(CAI_PY_STAGE)/.stamp
	CAIBRIDGE_SOAK_N=$(SOAK_N) CAIBRIDGE_SOAK_JAX_N=$(SOAK_JAX_N) \
	  $(CAI_PY_RUN) -s $(srcdir)/tests/python/test_soak.py
else
soak:
	@echo "soak: configure found no Python; the soak needs the module" >&2
	@exit 1
endif

.PHONY: fuzz fuzz-short fuzz-corpus soak

# The structured fuzzer of the Python face (atheris; run by .ci/harden).
EXTRA_DIST += tests/fuzz/fuzz_python.py
