# mk/build.mk — the build proper (called by the top-level Makefile).
BUILD ?= build
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
ENGINE_SRCS := $(wildcard daemon/model/*.c daemon/kv/*.c daemon/engine/*.c daemon/util/*.c)
CLIENT_SRCS := $(wildcard libclient/*.c)
DAEMON_SRCS := $(wildcard daemon/server/*.c)
TOOLS := $(notdir $(patsubst %/,%,$(wildcard tools/*/)))
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
ENGINE_LIB := $(BUILD)/libpagoda-engine.a
CLIENT_A := $(BUILD)/libpagoda.a
CLIENT_SO := $(BUILD)/libpagoda.so
UNIT_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRCS))
TOOL_BINS := $(addprefix $(BUILD)/,$(TOOLS))
DAEMON_BIN := $(if $(DAEMON_SRCS),$(BUILD)/pagodad)

.PHONY: all check check-unit check-e2e fuzz run bench install uninstall
all: $(ENGINE_LIB) $(if $(CLIENT_SRCS),$(CLIENT_A) $(CLIENT_SO)) $(TOOL_BINS) $(DAEMON_BIN) $(UNIT_BINS)

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
	$(CC) -shared -Wl,-soname,libpagoda.so.0 $(LDFLAGS) -o $@ $^ -pthread

$(BUILD)/pagodad: $(call obj,$(DAEMON_SRCS)) $(ENGINE_LIB) $(wildcard $(CLIENT_A))
	$(CC) $(LDFLAGS) -o $@ $(call obj,$(DAEMON_SRCS)) $(ENGINE_LIB) $(LDLIBS)

CLIENT_DEP := $(if $(CLIENT_SRCS),$(CLIENT_A))
define tool_rule
$(BUILD)/$(1): $(call obj,$(wildcard tools/$(1)/*.c)) $(ENGINE_LIB) $(CLIENT_DEP)
	$$(CC) $$(LDFLAGS) -o $$@ $$(filter %.o,$$^) $(ENGINE_LIB) $(CLIENT_DEP) $$(LDLIBS)
endef
$(foreach t,$(TOOLS),$(eval $(call tool_rule,$(t))))

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(ENGINE_LIB) $(if $(CLIENT_SRCS),$(CLIENT_A))
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(ENGINE_LIB) $(if $(CLIENT_SRCS),$(CLIENT_A)) $(shell pkg-config --libs check) $(LDLIBS)

# ---- tests -----------------------------------------------------------------
export PAGODA_BUILD := $(abspath $(BUILD))
# One after another: the e2e tests run daemons and must not race the build.
check: all
	@$(MAKE) --no-print-directory -f mk/build.mk check-unit
	@$(MAKE) --no-print-directory -f mk/build.mk check-e2e
	@$(MAKE) --no-print-directory -f mk/build.mk fuzz

check-unit: $(UNIT_BINS) $(DAEMON_BIN)
	@sh tests/run-unit.sh $(UNIT_BINS)

check-e2e: all
	@sh tests/run-e2e.sh

# ---- fuzzing (clang libFuzzer) ----------------------------------------------
FUZZ_TIME ?= 10
FUZZ_CC := clang
FUZZ_FLAGS := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. -D_GNU_SOURCE
FUZZ_BINS := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(FUZZ_SRCS))
# Each fuzz target lists the sources it needs on a line "// fuzz-sources: a.c b.c".
fuzz_deps = $(shell sed -n 's@^// fuzz-sources: @@p' $(1))
.SECONDEXPANSION:
$(BUILD)/fuzz/%: tests/fuzz/%.c $$(call fuzz_deps,tests/fuzz/$$*.c)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $^ $(LDLIBS)

fuzz: $(FUZZ_BINS)
	@sh tests/run-fuzz.sh $(FUZZ_TIME) $(FUZZ_BINS)

# ---- demo and benchmarks ----------------------------------------------------
run: all
	@MODEL="$(MODEL)" PROMPT="$(PROMPT)" sh tools/run-demo.sh

bench: all
	@sh bench/run.sh

# ---- install ---------------------------------------------------------------
install: all
	@sh mk/install.sh install "$(DESTDIR)" "$(PREFIX)" "$(BUILD)"
uninstall:
	@sh mk/install.sh uninstall "$(DESTDIR)" "$(PREFIX)" "$(BUILD)"

# Keep test objects: they are intermediate files of the test binaries.
.SECONDARY:

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
