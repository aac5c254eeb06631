# tests/e2e/lib.sh — shared by the end-to-end scripts (sourced).
# PAGODA_BUILD: the build folder; PAGODA_TESTDATA: ../shared/testdata.
B=${PAGODA_BUILD:-build}
T=${PAGODA_TESTDATA:-}
fails=0
checks=0

# need_testdata FILE...: skip (77) unless PAGODA_REQUIRE_TESTDATA=1 (fail).
need_testdata() {
	for _td in "$@"; do
		if [ -z "$T" ] || [ ! -e "$T/$_td" ]; then
			if [ "${PAGODA_REQUIRE_TESTDATA:-0}" = 1 ]; then
				echo "FAIL: test data $_td missing (PAGODA_TESTDATA=$T)" >&2
				exit 1
			fi
			echo "SKIP: test data $_td not found (set PAGODA_TESTDATA)" >&2
			exit 77
		fi
	done
}

ok() { checks=$((checks + 1)); }
bad() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL: $*" >&2; }

finish() {
	echo "$(basename "$0"): $((checks - fails)) passed, $fails failed" >&2
	[ "$fails" -eq 0 ]
	exit $?
}
