# shoal — one Makefile for the library, the command line, the tests and the benchmarks.
#
#   make                  build/shoal, build/libshoal.a, build/libshoal.so
#   make test             build and run every test binary; ends with "all tests: N passed, N failed"
#   make test-san         the unit tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make test SAN=address (or thread, undefined): the same suite with one sanitizer
#   make MPI=1            add the MPI transport (Open MPI or MPICH, found through mpicc;
#                         MPICC=mpicc.mpich or mpicc.openmpi picks one)
#   make install PREFIX=/usr/local
#   make python           the Python module only: build/python/shoal (PYTHONPATH=build/python)
#   make BUILD=build-x    build somewhere else (each developer or helper may use its own)
#
# Sources are found by wildcard: a new src/<module>/**/*.c joins the library and a new
# tests/<module>/test_*.c becomes a test binary without editing this file.

CC      ?= cc
PREFIX  ?= /usr/local
SAN     ?=
MPI     ?= 0
MPICC   ?= mpicc
WERROR  ?= 0
OPT     ?= -O3 -march=native

ifeq ($(SAN),)
BUILD   ?= build
SANFLAGS :=
else
BUILD   ?= build/san-$(SAN)
ifeq ($(SAN),address)
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
else
SANFLAGS := -fsanitize=$(SAN) -fno-omit-frame-pointer
endif
OPT     := -O1 -g -march=native
endif

WARN    := -Wall -Wextra -Wshadow -Wundef -Wno-unused-parameter
ifeq ($(WERROR),1)
WARN    += -Werror
endif

CFLAGS_ALL := -std=c11 -D_GNU_SOURCE -fPIC -pthread $(OPT) -g $(WARN) $(SANFLAGS) \
              -Iinclude -Isrc $(CFLAGS)
LDLIBS_ALL := -pthread -lcrypto -ljpeg -lpng -lz -ldl -lm -lrt $(LDLIBS)

# MPI: found through mpicc's own flags; feature macros are always defined, 0 or 1.
ifeq ($(MPI),1)
MPICC_CFLAGS := $(shell $(MPICC) --showme:compile 2>/dev/null || $(MPICC) -show 2>/dev/null | awk '{for (i = 2; i <= NF; i++) if ($$i ~ /^-[ID]/) printf "%s ", $$i}')
MPICC_LIBS   := $(shell $(MPICC) --showme:link 2>/dev/null || $(MPICC) -show 2>/dev/null | awk '{for (i = 2; i <= NF; i++) if ($$i ~ /^-(l|L|Wl,)/) printf "%s ", $$i}')
ifeq ($(strip $(MPICC_LIBS)),)
$(error MPI=1 but $(MPICC) was not found; install libopenmpi-dev or libmpich-dev)
endif
CFLAGS_ALL += -DSHOAL_HAVE_MPI=1 $(MPICC_CFLAGS)
LDLIBS_ALL += $(MPICC_LIBS)
$(info MPI: $(MPICC))
else
CFLAGS_ALL += -DSHOAL_HAVE_MPI=0
endif

# Debian puts cblas.h for OpenBLAS under /usr/include/<triplet>/ (found by default) or
# /usr/include/openblas; the library itself is opened at run time (src/nn/gemm.c) so that
# its kernels can be chosen from the CPU before it initialises.
CFLAGS_ALL += $(shell test -d /usr/include/openblas && echo -I/usr/include/openblas)

LIB_SRC  := $(sort $(shell find src/base src/comm src/nn src/data src/train src/io -name '*.c'))
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/*/test_*.c))
TEST_LIB := $(sort $(wildcard tests/lib/*.c))

# ---- the Python module: python/_shoal*.c against Debian's python3 (python3-dev), linked
# with libshoal.a (its objects are -fPIC), beside the package's .py files in
# $(BUILD)/python/shoal; tests/python/ runs through $(BUILD)/tests/python/test_python.
# Not under a sanitizer (the interpreter is not built with one).
PYTHON  ?= /usr/bin/python3
ifeq ($(SAN),)
PY_INC  := $(shell $(PYTHON)-config --includes 2>/dev/null)
PY_EXT  := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))' 2>/dev/null)
endif
ifneq ($(and $(PY_INC),$(PY_EXT)),)
PY_SRC  := $(sort $(wildcard python/*.c))
PY_OBJ  := $(PY_SRC:%.c=$(BUILD)/obj/%.o)
PY_PKG  := $(patsubst python/%,$(BUILD)/python/%,$(sort $(wildcard python/shoal/*.py)))
PY_MOD  := $(BUILD)/python/shoal/_shoal$(PY_EXT)
PY_TEST := $(BUILD)/tests/python/test_python
PY_SITE ?= $(PREFIX)/lib/python3/dist-packages
else ifeq ($(SAN),)
$(info Python: $(PYTHON)-config not found, the Python module is not built; install python3-dev)
endif

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)

# Caffe's .caffemodel (src/nn/caffe/caffe_model.c): the messages of src/nn/caffe/caffe.proto
# compiled by protoc-c (protobuf-c-compiler) into $(BUILD)/gen at build time, never committed;
# linked with libprotobuf-c (libprotobuf-c-dev).
.DEFAULT_GOAL := all
GEN_DIR  := $(BUILD)/gen
CAFFE_PB := $(GEN_DIR)/nn/caffe/caffe.pb-c
LIB_OBJ  += $(BUILD)/obj/$(CAFFE_PB).o
CFLAGS_ALL += -I$(GEN_DIR)
LDLIBS_ALL += -lprotobuf-c
$(CAFFE_PB).c $(CAFFE_PB).h: src/nn/caffe/caffe.proto
	@command -v protoc-c >/dev/null || { echo "protoc-c not found: install protobuf-c-compiler and libprotobuf-c-dev (scripts/deps.sh)"; exit 1; }
	@mkdir -p $(GEN_DIR)
	protoc-c --proto_path=src --c_out=$(GEN_DIR) src/nn/caffe/caffe.proto
$(BUILD)/obj/$(CAFFE_PB).o: $(CAFFE_PB).c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -w -c $< -o $@
$(BUILD)/obj/src/nn/caffe/caffe_model.o: $(CAFFE_PB).h
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_LIB_OBJ := $(TEST_LIB:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

.PHONY: all test test-san tests bench install clean run mpi-bins python
all: $(BUILD)/shoal $(BUILD)/libshoal.a $(BUILD)/libshoal.so $(if $(PY_MOD),python)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

$(BUILD)/libshoal.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libshoal.so: $(LIB_OBJ)
	$(CC) -shared -o $@ $^ $(SANFLAGS) $(LDLIBS_ALL)

$(BUILD)/shoal: $(CLI_OBJ) $(BUILD)/libshoal.a
	$(CC) -o $@ $(CLI_OBJ) $(BUILD)/libshoal.a $(SANFLAGS) $(LDLIBS_ALL)

# tests/lib's headers too: some hold CHECKs as static functions (layout_checks.h), which no
# object of TEST_LIB_OBJ compiles, so a change to them must rebuild the tests.
$(BUILD)/tests/%: tests/%.c $(BUILD)/libshoal.a $(TEST_LIB_OBJ) tests/check.h $(wildcard tests/lib/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests -o $@ $< $(TEST_LIB_OBJ) $(BUILD)/libshoal.a $(LDLIBS_ALL)


# The Python module's rules (its variables are above `all`).
ifneq ($(PY_MOD),)
# shoal._shoal.train_run binds shoal_train_opts_set / _fini / shoal_train_report_json once train.h has them.
PY_TRAIN_API := $(if $(and $(shell grep -l shoal_train_opts_set include/shoal/train.h),$(shell grep -l shoal_train_opts_fini include/shoal/train.h),$(shell grep -l shoal_train_report_json include/shoal/train.h)),1,0)
$(PY_OBJ): CFLAGS_ALL += $(PY_INC) -DSH_PY_TRAIN_API=$(PY_TRAIN_API)

$(PY_MOD): $(PY_OBJ) $(BUILD)/libshoal.a
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@ $(PY_OBJ) $(BUILD)/libshoal.a $(LDLIBS_ALL)

$(BUILD)/python/shoal/%.py: python/shoal/%.py
	@mkdir -p $(dir $@)
	cp $< $@

python: $(PY_MOD) $(PY_PKG)

$(PY_TEST): tests/python/test_python.sh
	@mkdir -p $(dir $@)
	sed -e 's|@ROOT@|$(CURDIR)|g' -e 's|@BUILD@|$(abspath $(BUILD))|g' -e 's|@PYTHON@|$(PYTHON)|g' $< > $@
	chmod +x $@
endif

tests: $(TEST_BIN) $(BUILD)/shoal $(if $(PY_MOD),python $(PY_TEST))

# tests/fuzz/test_fuzz_<name>.c includes its target fuzz_<name>.c and the smoke driver
# driver.c (seed corpus + ~2 s of mutations, no clang); rebuild them when those change.
# The real fuzzing is scripts/fuzz.sh (clang, libFuzzer); see docs/fuzzing.md.
$(filter $(BUILD)/tests/fuzz/%,$(TEST_BIN)): $(wildcard tests/fuzz/*.c tests/fuzz/*.h)

# The MPI transport is proved with a shoal built against each MPI installed (Open MPI and
# MPICH from Debian), in its own build tree; tests/comm/test_mpi_transport.c runs them
# under mpirun and mpiexec and skips a flavour that is missing.
MPI_FLAVOURS := $(if $(shell command -v mpicc.openmpi),openmpi) $(if $(shell command -v mpicc.mpich),mpich)
mpi-bins:
	@for f in $(MPI_FLAVOURS); do \
	  $(MAKE) --no-print-directory -s MPI=1 MPICC=mpicc.$$f BUILD=$(BUILD)/mpi-$$f $(BUILD)/mpi-$$f/shoal || exit 1; done

# The suite: every test binary with its own deadline, then one total line.
test: tests mpi-bins
	@SHOAL_BIN=$(abspath $(BUILD)/shoal) SHOAL_MPI_BIN_DIR=$(abspath $(BUILD)) \
	  scripts/run-tests.sh $(BUILD)/tests

# Unit tests under ASan+UBSan in their own build tree (tests that fork many ranks or
# time things are skipped there by the tests themselves via SHOAL_TEST_SAN).
test-san:
	@$(MAKE) --no-print-directory SAN=address tests
	@SHOAL_TEST_SAN=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  SHOAL_BIN=$(abspath build/san-address/shoal) scripts/run-tests.sh build/san-address/tests

# The README's main job: LeNet on Fashion-MNIST, 5 epochs, data parallel over one rank per
# core (strong scaling: the cfg's batch of 64 is split across the ranks, so the result is
# the one-process result), test accuracy at every epoch.
NPROC ?= $(shell nproc 2>/dev/null || echo 1)
run: all
	$(BUILD)/shoal train examples/lenet.cfg --epochs 5 -n $(NPROC) --scaling strong

bench: all
	@echo "benchmarks live in bench/; see bench/README.md"

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include/shoal \
	           $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 755 $(BUILD)/shoal $(DESTDIR)$(PREFIX)/bin/shoal
	install -m 644 $(BUILD)/libshoal.a $(DESTDIR)$(PREFIX)/lib/libshoal.a
	install -m 755 $(BUILD)/libshoal.so $(DESTDIR)$(PREFIX)/lib/libshoal.so
	install -m 644 include/shoal/*.h $(DESTDIR)$(PREFIX)/include/shoal/
	sed -e 's|@PREFIX@|$(PREFIX)|g' scripts/shoal.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/shoal.pc
ifneq ($(PY_MOD),)
	install -d $(DESTDIR)$(PY_SITE)/shoal
	install -m 755 $(PY_MOD) $(DESTDIR)$(PY_SITE)/shoal/
	install -m 644 $(PY_PKG) $(DESTDIR)$(PY_SITE)/shoal/
endif

clean:
	rm -rf build build-*

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(PY_OBJ:.o=.d)
