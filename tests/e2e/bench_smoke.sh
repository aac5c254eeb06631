#!/bin/sh
# pagoda-bench runs every mode end to end against a real daemon (no timing
# is asserted): see bench/smoke.sh.
exec sh bench/smoke.sh
