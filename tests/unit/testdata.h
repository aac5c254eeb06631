/* tests/unit/testdata.h — where the shared reference data is.
 *
 * Tests read the test data through PAGODA_TESTDATA (make check points it at
 * ../shared/testdata, else build/testdata from make testdata). When it is
 * unset or a file is missing the test is skipped, saying so on a "SKIP:"
 * line that make check counts, unless PAGODA_REQUIRE_TESTDATA=1 (CI), where
 * a missing file fails.
 */
#ifndef PAGODA_TEST_TESTDATA_H
#define PAGODA_TEST_TESTDATA_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes the full path of rel into buf; returns 0 if the file exists.
 * Returns -1 (test should return early) when absent and not required;
 * fails the test when absent and required. */
static inline int testdata_path(char *buf, size_t len, const char *rel)
{
	const char *root = getenv("PAGODA_TESTDATA");
	const char *req = getenv("PAGODA_REQUIRE_TESTDATA");
	int required = req && strcmp(req, "1") == 0;
	snprintf(buf, len, "%s/%s", root ? root : "", rel);
	if (root && access(buf, R_OK) == 0)
		return 0;
	if (required)
		ck_abort_msg("test data missing: %s (PAGODA_TESTDATA=%s)", buf, root ? root : "(unset)");
	fprintf(stderr, "SKIP: test data %s not found (set PAGODA_TESTDATA)\n", rel);
	return -1;
}

#endif
