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

# alive PID: the process runs (a zombie, exited but not yet reaped, does not).
alive() {
	[ -r "/proc/$1/stat" ] || return 1
	[ "$(sed 's/.*) //' "/proc/$1/stat" | cut -c1)" != Z ]
}

# wait_match FILE REGEX SECS: 0 once a line of FILE matches, 1 after SECS.
wait_match() {
	_n=0
	until grep -q "$2" "$1" 2>/dev/null; do
		[ $_n -ge $(($3 * 10)) ] && return 1
		sleep 0.1
		_n=$((_n + 1))
	done
}

# stop_bg PID SIG SECS: send SIG to a background job and reap it, returning
# its exit status. A job still running SECS later gets SIGKILL: a signal
# can be lost (a shell starts background jobs with SIGINT ignored, and a
# job that has not yet set its handler drops it), and a test must fail,
# never hang on a wait.
stop_bg() {
	kill -"$2" "$1" 2>/dev/null
	_n=0
	while alive "$1" && [ $_n -lt $(($3 * 10)) ]; do sleep 0.1; _n=$((_n + 1)); done
	if alive "$1"; then
		echo "pid $1 still running $3 s after SIG$2: killed" >&2
		kill -KILL "$1" 2>/dev/null
	fi
	wait "$1"
}

# start_pagodad SOCKET LOG ARGS...: pagodad in the background on SOCKET
# (its pid in DP), returning once it answers a ping; 1 (log shown) if it
# exits or does not answer within 30 s.
start_pagodad() {
	_sock=$1 _log=$2
	shift 2
	"$B/pagodad" --socket "$_sock" "$@" 2>"$_log" &
	DP=$!
	_n=0
	while ! "$B/pagoda" ping --socket "$_sock" >/dev/null 2>&1; do
		_n=$((_n + 1))
		if [ $_n -gt 600 ] || ! alive $DP; then
			echo "pagodad did not start" >&2
			cat "$_log" >&2
			return 1
		fi
		sleep 0.05
	done
}

# private_session_bus DIR: a dbus-daemon of its own as the session bus
# (DBUS_SESSION_BUS_ADDRESS exported, its pid in BP, for the caller's
# cleanup to kill); exits 77 when none can start.
private_session_bus() {
	dbus-daemon --session --fork --nopidfile --print-address=3 --print-pid=4 3>"$1/addr" 4>"$1/bpid" \
		2>/dev/null || { echo "SKIP: cannot start a private dbus-daemon" >&2; exit 77; }
	BP=$(cat "$1/bpid")
	DBUS_SESSION_BUS_ADDRESS=$(head -1 "$1/addr")
	export DBUS_SESSION_BUS_ADDRESS
}

# gateway_python: the openai SDK and prometheus_client on PYTHONPATH,
# installed from PyPI once into $B/py-gateway; exits 77 when pip cannot.
gateway_python() {
	PY=$B/py-gateway
	export PYTHONPATH="$PY${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1
	python3 -c 'import openai, prometheus_client' 2>/dev/null && return 0
	python3 -m pip install -q --disable-pip-version-check --target "$PY" 'openai==1.109.1' \
		'prometheus_client==0.23.1' >"$B/py-gateway.log" 2>&1 ||
		{ echo "SKIP: pip could not install openai, prometheus_client (PyPI unreachable?)" >&2; exit 77; }
}
