# pagoda — top-level entry points. The build itself lives in mk/build.mk;
# this wrapper first makes sure the system packages it needs are present.
.PHONY: all deps check check-asan run bench testdata install uninstall clean fuzz
BUILD ?= build
SUB = $(MAKE) --no-print-directory -f mk/build.mk BUILD=$(BUILD)

all: deps
	+@$(SUB) all

deps:
	@sh mk/deps.sh

check: deps
	+@$(SUB) check

check-asan: deps
	+@$(MAKE) --no-print-directory -f mk/build.mk BUILD=build-asan SAN=address,undefined check-unit
	+@$(MAKE) --no-print-directory -f mk/build.mk BUILD=build-asan SAN=address,undefined check-integration

fuzz: deps
	+@$(SUB) fuzz

run: deps
	+@$(SUB) run

bench: deps
	+@$(SUB) bench

testdata: deps
	+@$(SUB) testdata

install: deps
	+@$(SUB) install

uninstall:
	+@$(SUB) uninstall

clean:
	rm -rf build build-asan
