/* tools/pagoda-gateway/auth.c — API keys (--api-key-file): one key a line.
 * A presented key is compared with every key, each over the same fixed
 * length, so the time taken says nothing about how much of a key matched
 * nor which one did. */
#include "tools/pagoda-gateway/gw.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define KEY_MAX 256
#define KEYS_MAX 1024

static char (*keys)[KEY_MAX];
static size_t key_len[KEYS_MAX];
static int n_keys;

int gw_auth_load(const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "api-key-file %s: %s", path, strerror(errno));
		return -1;
	}
	keys = calloc(KEYS_MAX, KEY_MAX);
	if (!keys) {
		fclose(f);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	char line[1024];
	int lineno = 0;
	while (fgets(line, sizeof line, f)) {
		lineno++;
		size_t l = strcspn(line, "\r\n");
		line[l] = 0;
		char *s = line;
		while (*s == ' ' || *s == '\t')
			s++;
		l = strlen(s);
		while (l && (s[l - 1] == ' ' || s[l - 1] == '\t'))
			s[--l] = 0;
		if (!l || *s == '#')
			continue;
		if (l >= KEY_MAX || n_keys == KEYS_MAX) {
			fclose(f);
			snprintf(err, errlen, "api-key-file %s:%d: keys are at most %d bytes, at most %d keys", path,
				 lineno, KEY_MAX - 1, KEYS_MAX);
			return -1;
		}
		memcpy(keys[n_keys], s, l);
		key_len[n_keys++] = l;
	}
	fclose(f);
	if (!n_keys) {
		snprintf(err, errlen, "api-key-file %s holds no key", path);
		return -1;
	}
	return 0;
}

bool gw_auth_enabled(void) { return n_keys > 0; }

int gw_auth_check(const char *h)
{
	if (!n_keys)
		return 0;
	if (!h || strncasecmp(h, "Bearer ", 7))
		return -1;
	h += 7;
	size_t l = strnlen(h, KEY_MAX);
	if (l == 0 || l >= KEY_MAX)
		return -1;
	char given[KEY_MAX] = { 0 };
	memcpy(given, h, l);
	volatile int which = -1;
	for (int k = 0; k < n_keys; k++) {
		unsigned diff = (unsigned)(l ^ key_len[k]);
		for (size_t i = 0; i < KEY_MAX; i++)
			diff |= (unsigned char)(given[i] ^ keys[k][i]);
		/* no branch on the comparison: mask is all ones when it matched */
		int mask = -(int)(diff == 0);
		which = (which & ~mask) | (k & mask);
	}
	return which < 0 ? -1 : which + 1;
}
