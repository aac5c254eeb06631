# mk/build.mk — the build proper (called by the top-level Makefile).
BUILD ?= build
.DEFAULT_GOAL := all
CC ?= cc
OPT ?= -O2
PREFIX ?= /usr/local
DESTDIR ?=
PKG_LIBS := libpcre2-8 libxxhash liburing libsystemd
CPPFLAGS += -I. -D_GNU_SOURCE $(shell pkg-config --cflags $(PKG_LIBS))
CFLAGS ?= $(OPT) -g
CFLAGS += -std=gnu17 -fPIC -pthread -Wall -Wextra -Wshadow -Wno-unused-parameter -fno-strict-aliasing
ifeq ($(WERROR),1)
CFLAGS += -Werror
endif
ifneq ($(SAN),)
CFLAGS += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SAN)
endif
LDLIBS += $(shell pkg-config --libs $(PKG_LIBS)) -lm -pthread -ldl

# Per-ISA translation units: the only places compiled for a wider ISA.
# Dispatch picks them at run time, so the binary runs on any x86-64.
AVX2_FLAGS := -mavx2 -mfma -mf16c
AVX512_FLAGS := $(AVX2_FLAGS) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16

KERN_SRCS := $(wildcard kernels/*.c kernels/cpu/*.c)
ENGINE_SRCS := $(wildcard daemon/model/*.c daemon/kv/*.c daemon/engine/*.c daemon/template/*.c daemon/chat/*.c \
	daemon/grammar/*.c)
CLIENT_SRCS := $(wildcard libclient/*.c)
DAEMON_SRCS := $(wildcard daemon/server/*.c)
SERVER_SRCS := $(filter-out daemon/server/main.c,$(DAEMON_SRCS))
TOOLS := $(notdir $(patsubst %/,%,$(wildcard tools/*/)))
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
INTEG_SRCS := $(wildcard tests/integration/test_*.c)
# bench/peer_*.c link llama.cpp's ggml: bench-peer builds them against the peer.
BENCH_SRCS := $(filter-out bench/peer_%,$(wildcard bench/*.c))
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
HELPER_SRCS := $(wildcard tests/helpers/*.c)

# ---- pagoda-trace: a CO-RE BPF program, its bpftool skeleton, a libbpf loader.
# vmlinux.h comes from the running kernel's BTF at build time; without BTF
# `all` leaves pagoda-trace out and says so, and building it names the cause.
VMLINUX_BTF ?= /sys/kernel/btf/vmlinux
BPFTOOL ?= $(or $(shell command -v bpftool),/usr/sbin/bpftool)
BPF_CC ?= clang
BPF_ARCH := $(shell uname -m | sed 's/x86_64/x86/; s/aarch64/arm64/')
BPF_CFLAGS := -g -O2 -target bpf -D__TARGET_ARCH_$(BPF_ARCH) -Wall $(if $(filter 1,$(WERROR)),-Werror) \
	-I. -I$(BUILD)/bpf -I/usr/include/$(shell $(CC) -dumpmachine)
TRACE_SRCS := $(filter-out %.bpf.c,$(wildcard bpf/*.c))
TRACE_SKEL := $(BUILD)/bpf/pagoda_trace.skel.h
ifneq ($(wildcard $(VMLINUX_BTF)),)
TRACE_BIN := $(BUILD)/pagoda-trace
else
$(warning pagoda-trace left out: no kernel BTF at $(VMLINUX_BTF) (CONFIG_DEBUG_INFO_BTF))
endif

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
ENGINE_LIB := $(BUILD)/libpagoda-engine.a
SERVER_LIB := $(if $(SERVER_SRCS),$(BUILD)/libpagoda-server.a)
CLIENT_A := $(BUILD)/libpagoda.a
CLIENT_SO := $(BUILD)/libpagoda.so
UNIT_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRCS))
INTEG_BINS := $(patsubst tests/integration/%.c,$(BUILD)/tests/integration/%,$(INTEG_SRCS))
BENCH_BINS := $(patsubst bench/%.c,$(BUILD)/bench/bin/%,$(BENCH_SRCS))
TOOL_BINS := $(addprefix $(BUILD)/,$(TOOLS))
HELPER_BINS := $(patsubst tests/helpers/%.c,$(BUILD)/tests/helpers/%,$(HELPER_SRCS))
DAEMON_BIN := $(if $(DAEMON_SRCS),$(BUILD)/pagodad)

# ---- the CUDA backend: only where nvcc is found ------------------------------
# A fat binary (sm_80 and sm_90 code, compute_90 PTX for newer cards) that
# pagodad dlopens; cudart is linked statically, so the library needs only
# the driver's libcuda at run time. NVCC= (empty) skips it.
NVCC ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
CUDA_SRCS := $(wildcard kernels/cuda/*.cu)
CUDA_LIB := $(if $(NVCC),$(if $(CUDA_SRCS),$(BUILD)/libpagoda-cuda.so))
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
	-gencode arch=compute_90,code=compute_90
NVCCFLAGS ?= -O3
NVCCFLAGS += -std=c++17 $(CUDA_ARCH) -I. -D_GNU_SOURCE -Xcompiler -fPIC,-Wall,-Wextra,-Wno-unused-parameter,-Wno-unknown-pragmas
GPU_TEST_BINS := $(patsubst tests/gpu/%.c,$(BUILD)/tests/gpu/%,$(wildcard tests/gpu/test_*.c))
CUDA_HOST_CHECK := $(if $(CUDA_LIB),$(BUILD)/tests/gpu/host_check)

$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@
$(BUILD)/libpagoda-cuda.so: $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(CUDA_SRCS)) $(BUILD)/obj/kernels/types.o \
		kernels/cuda/exports.map
	$(NVCC) -shared $(CUDA_ARCH) -Xlinker --version-script=kernels/cuda/exports.map -o $@ $(filter %.o,$^)

# The device's block readers compiled for the host: checked without a GPU.
$(BUILD)/tests/gpu/host_check: tests/gpu/host_check.cu kernels/cuda/common.cuh $(ENGINE_LIB)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -o $@ $< $(ENGINE_LIB) $(filter-out -pthread,$(LDLIBS)) -lpthread

.PHONY: all check check-unit check-integration check-e2e check-gpu fuzz run bench testdata install uninstall
all: $(ENGINE_LIB) $(if $(CLIENT_SRCS),$(CLIENT_A) $(CLIENT_SO)) $(TOOL_BINS) $(DAEMON_BIN) $(UNIT_BINS) \
	$(INTEG_BINS) $(BENCH_BINS) $(CUDA_LIB) $(CUDA_HOST_CHECK) $(GPU_TEST_BINS) \
	$(HELPER_BINS) $(TRACE_BIN)

$(BUILD)/obj/%_avx2.o: %_avx2.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(AVX2_FLAGS) -MMD -MP -c $< -o $@
$(BUILD)/obj/%_avx512.o: %_avx512.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(AVX512_FLAGS) -MMD -MP -c $< -o $@
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(ENGINE_LIB): $(call obj,$(KERN_SRCS) $(ENGINE_SRCS))
	@rm -f $@
	ar rcs $@ $^

$(CLIENT_A): $(call obj,$(CLIENT_SRCS))
	@rm -f $@
	ar rcs $@ $^
$(CLIENT_SO): $(call obj,$(CLIENT_SRCS))
	$(CC) -shared -Wl,-soname,libpagoda.so.1 $(LDFLAGS) -o $@ $^ -pthread

# The daemon less its main: pagodad and the tests link it.
$(SERVER_LIB): $(call obj,$(SERVER_SRCS))
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/pagodad: $(call obj,daemon/server/main.c) $(SERVER_LIB) $(ENGINE_LIB) $(wildcard $(CLIENT_A))
	$(CC) $(LDFLAGS) -o $@ $(call obj,daemon/server/main.c) $(SERVER_LIB) $(ENGINE_LIB) $(LDLIBS)

# ---- pagoda-trace: vmlinux.h, the BPF object, its skeleton, the loader.
$(BUILD)/bpf/vmlinux.h: $(wildcard $(VMLINUX_BTF))
	@mkdir -p $(@D)
	@test -r "$(VMLINUX_BTF)" || { echo "pagoda-trace: no kernel BTF at $(VMLINUX_BTF): vmlinux.h is made from it" \
		"(a kernel built with CONFIG_DEBUG_INFO_BTF=y has it; VMLINUX_BTF=FILE names another)" >&2; exit 1; }
	$(BPFTOOL) btf dump file $(VMLINUX_BTF) format c > $@.tmp
	@mv $@.tmp $@
$(BUILD)/bpf/pagoda_trace.bpf.o: bpf/pagoda_trace.bpf.c bpf/trace_maps.h $(BUILD)/bpf/vmlinux.h
	$(BPF_CC) $(BPF_CFLAGS) -c $< -o $@
$(TRACE_SKEL): $(BUILD)/bpf/pagoda_trace.bpf.o
	$(BPFTOOL) gen skeleton $< name pagoda_trace_bpf > $@.tmp
	@mv $@.tmp $@
$(call obj,$(TRACE_SRCS)): CPPFLAGS += -I$(BUILD)/bpf
$(call obj,bpf/trace_attach.c): $(TRACE_SKEL)
$(BUILD)/pagoda-trace: $(call obj,$(TRACE_SRCS))
	$(CC) $(LDFLAGS) -o $@ $^ -lbpf -lelf -lz -lm

CLIENT_DEP := $(if $(CLIENT_SRCS),$(CLIENT_A))
# Libraries one tool alone needs: `pagoda chat` edits lines with libedit.
TOOL_LIBS_pagoda = $(shell pkg-config --libs libedit)
$(BUILD)/obj/tools/pagoda/%.o: CPPFLAGS += $(shell pkg-config --cflags libedit)
# pagoda-gateway serves HTTP with libmicrohttpd and speaks JSON with jansson.
GATEWAY_PKGS := libmicrohttpd jansson
TOOL_LIBS_pagoda-bench = $(shell pkg-config --libs jansson)
TOOL_LIBS_pagoda-gateway = $(shell pkg-config --libs $(GATEWAY_PKGS))
$(BUILD)/obj/tools/pagoda-gateway/%.o: CPPFLAGS += $(shell pkg-config --cflags $(GATEWAY_PKGS))
define tool_rule
$(BUILD)/$(1): $(call obj,$(wildcard tools/$(1)/*.c)) $(ENGINE_LIB) $(CLIENT_DEP)
	$$(CC) $$(LDFLAGS) -o $$@ $$(filter %.o,$$^) $(ENGINE_LIB) $(CLIENT_DEP) $$(LDLIBS) $$(TOOL_LIBS_$(1))
endef
$(foreach t,$(TOOLS),$(eval $(call tool_rule,$(t))))

# A test of a tool's insides links that tool's object (never its main.o).
$(BUILD)/tests/test_mkmodel: $(call obj,tools/pagoda-mkmodel/mkmodel.c)
$(BUILD)/tests/test_gateway: $(call obj,tools/pagoda-gateway/req.c tools/pagoda-gateway/reply.c tools/pagoda-gateway/auth.c)
$(BUILD)/tests/test_gateway: LDLIBS += $(shell pkg-config --libs jansson)
$(BUILD)/obj/tests/unit/test_gateway.o: CPPFLAGS += $(shell pkg-config --cflags jansson)

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(SERVER_LIB) $(ENGINE_LIB) $(if $(CLIENT_SRCS),$(CLIENT_A))
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(SERVER_LIB) $(ENGINE_LIB) $(if $(CLIENT_SRCS),$(CLIENT_A)) $(shell pkg-config --libs check) $(LDLIBS)

# The GPU tests build everywhere (they dlopen the CUDA library) and skip
# without a device; tests/gpu/run.sh runs them where one is.
$(BUILD)/tests/gpu/%: $(BUILD)/obj/tests/gpu/%.o $(ENGINE_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(ENGINE_LIB) $(LDLIBS)

$(BUILD)/tests/integration/%: $(BUILD)/obj/tests/integration/%.o $(BUILD)/obj/tests/integration/harness.o $(SERVER_LIB) $(ENGINE_LIB) $(if $(CLIENT_SRCS),$(CLIENT_A))
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(SERVER_LIB) $(ENGINE_LIB) $(if $(CLIENT_SRCS),$(CLIENT_A)) $(shell pkg-config --libs check) $(LDLIBS)

# The bench programs, built with the project's warnings so that CI compiles
# them; bench/run.sh builds its own -march=native copies to measure with.
$(BUILD)/obj/bench/x86_pipes.o: CFLAGS += $(AVX512_FLAGS)
$(BUILD)/bench/bin/%: $(BUILD)/obj/bench/%.o $(ENGINE_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(ENGINE_LIB) $(LDLIBS)

# bench/peer_*.c against the peer's ggml: run `sh mk/peer.sh` first (not part of all).
PEER_SRC = $(firstword $(wildcard $(BUILD)/peer/llama_cpp_python-*/vendor/llama.cpp))
PEER_LIBS = $(addprefix $(BUILD)/peer/build/ggml/src/,libggml.a libggml-cpu.a libggml-base.a)
PEER_BENCH_BINS := $(patsubst bench/%.c,$(BUILD)/bench/bin/%,$(wildcard bench/peer_*.c))
$(BUILD)/bench/bin/peer_%: bench/peer_%.c $(ENGINE_LIB)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -I$(PEER_SRC)/ggml/include $(CFLAGS) -o $@ $< $(ENGINE_LIB) $(PEER_LIBS) \
		-fopenmp -lstdc++ $(LDLIBS)
.PHONY: bench-peer
bench-peer: $(PEER_BENCH_BINS)

# Programs the e2e tests drive, each one file on its own.
$(BUILD)/tests/helpers/%: $(BUILD)/obj/tests/helpers/%.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(LDLIBS)

# ---- tests -----------------------------------------------------------------
export PAGODA_BUILD := $(abspath $(BUILD))
# The conformance data: ../shared/testdata where it exists, else what
# `make testdata` made in $(BUILD)/testdata. The environment wins.
PAGODA_TESTDATA ?= $(abspath $(firstword $(wildcard ../shared/testdata $(BUILD)/testdata)))
export PAGODA_TESTDATA
export PAGODA_SKIPLOG := $(abspath $(BUILD))/check-skips.log
# One after another: the integration and e2e tests run daemons and must not
# race the build. The last line counts what was skipped, and why.
check: all
	@: >$(PAGODA_SKIPLOG)
	@$(MAKE) --no-print-directory -f mk/build.mk check-unit; u=$$?; \
	$(MAKE) --no-print-directory -f mk/build.mk check-integration; i=$$?; \
	$(MAKE) --no-print-directory -f mk/build.mk check-e2e; e=$$?; \
	$(MAKE) --no-print-directory -f mk/build.mk fuzz; f=$$?; \
	sh tests/skips.sh $(PAGODA_SKIPLOG); \
	[ $$u -eq 0 ] && [ $$i -eq 0 ] && [ $$e -eq 0 ] && [ $$f -eq 0 ]

check-unit: $(UNIT_BINS)
	@sh tests/run-unit.sh $(UNIT_BINS)

check-integration: $(INTEG_BINS) $(DAEMON_BIN)
	@SUITE=integration sh tests/run-unit.sh $(INTEG_BINS)

check-e2e: all
	@sh tests/run-e2e.sh

check-gpu: all
	@sh tests/gpu/run.sh

# ---- fuzzing (clang libFuzzer) ----------------------------------------------
FUZZ_TIME ?= 10
FUZZ_CC := clang
FUZZ_FLAGS := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. -D_GNU_SOURCE
FUZZ_BINS := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(FUZZ_SRCS))
# Each fuzz target lists the sources it needs on a line "// fuzz-sources: a.c b.c".
fuzz_deps = $(shell sed -n 's@^// fuzz-sources: @@p' $(1))
# Libraries a target needs beyond the project's own.
FUZZ_LIBS_fuzz_gateway_req = $(shell pkg-config --libs jansson)
.SECONDEXPANSION:
$(BUILD)/fuzz/%: tests/fuzz/%.c $$(call fuzz_deps,tests/fuzz/$$*.c)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $^ $(LDLIBS) $(FUZZ_LIBS_$*)

fuzz: $(FUZZ_BINS)
	@sh tests/run-fuzz.sh $(FUZZ_TIME) $(FUZZ_BINS)

# ---- demo and benchmarks ----------------------------------------------------
run: all
	@MODEL="$(MODEL)" PROMPT="$(PROMPT)" sh tools/run-demo.sh

bench: all
	@sh bench/run.sh

# Conformance data from the peer (llama.cpp, mk/peer.sh) into $(BUILD)/testdata:
# long, optional, never part of check.
testdata: all
	@sh tests/make-testdata.sh

# ---- install ---------------------------------------------------------------
install: all
	@sh mk/install.sh install "$(DESTDIR)" "$(PREFIX)" "$(BUILD)"
uninstall:
	@sh mk/install.sh uninstall "$(DESTDIR)" "$(PREFIX)" "$(BUILD)"

# Keep test objects: they are intermediate files of the test binaries.
.SECONDARY:

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
