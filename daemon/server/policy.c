/* daemon/server/policy.c — the admission policy (see policy.h). */
#include "daemon/server/policy.h"

#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool parse_num(const char *s, unsigned long *out)
{
	char *end;
	if (!*s || s[0] < '0' || s[0] > '9')
		return false;
	*out = strtoul(s, &end, 10);
	return *end == 0 && *out < 0xffffffffUL;
}

int policy_init(struct policy *p, const char *group, const char *users, bool any, char *err, size_t errlen)
{
	memset(p, 0, sizeof *p);
	p->owner = geteuid();
	p->allow_any = any;
	unsigned long n;
	if (group && *group) {
		struct group *g;
		if (parse_num(group, &n))
			p->group = (gid_t)n;
		else if ((g = getgrnam(group)))
			p->group = g->gr_gid;
		else {
			snprintf(err, errlen, "allow-group: unknown group '%s'", group);
			return -1;
		}
		p->has_group = true;
	}
	if (users && *users) {
		char *dup = strdup(users), *save = NULL;
		if (!dup) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		for (char *t = strtok_r(dup, ", \t", &save); t; t = strtok_r(NULL, ", \t", &save)) {
			struct passwd *pw;
			uid_t u;
			if (parse_num(t, &n))
				u = (uid_t)n;
			else if ((pw = getpwnam(t)))
				u = pw->pw_uid;
			else {
				snprintf(err, errlen, "allow-users: unknown user '%s'", t);
				free(dup);
				return -1;
			}
			if (p->n_users == POLICY_MAX_USERS) {
				snprintf(err, errlen, "allow-users: more than %d users", POLICY_MAX_USERS);
				free(dup);
				return -1;
			}
			p->users[p->n_users++] = u;
		}
		free(dup);
	}
	return 0;
}

bool policy_allows(const struct policy *p, uid_t uid, gid_t gid, const gid_t *groups, int ngroups)
{
	if (p->allow_any || uid == 0 || uid == p->owner)
		return true;
	for (int i = 0; i < p->n_users; i++)
		if (p->users[i] == uid)
			return true;
	if (p->has_group) {
		if (gid == p->group)
			return true;
		for (int i = 0; i < ngroups; i++)
			if (groups[i] == p->group)
				return true;
	}
	return false;
}
