/* daemon/server/policy.h — who may connect.
 *
 * A peer (SO_PEERCRED uid/gid, SO_PEERGROUPS supplementary groups) is
 * admitted when any of these holds:
 *   - allow-any = true;
 *   - its uid is 0 (root) or the daemon's own effective uid (the owner);
 *   - its uid is in allow-users (comma-separated user names or uids);
 *   - its primary gid or one of its supplementary groups is allow-group
 *     (a group name or gid).
 * Everyone else is refused at the handshake with PG_E_PERM.
 */
#ifndef PAGODA_SERVER_POLICY_H
#define PAGODA_SERVER_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define POLICY_MAX_USERS 64

struct policy {
	uid_t owner;
	bool allow_any;
	bool has_group;
	gid_t group;
	int n_users;
	uid_t users[POLICY_MAX_USERS];
};

/* group/users may be NULL or empty. 0, or -1 with a message. */
int policy_init(struct policy *p, const char *group, const char *users, bool any, char *err, size_t errlen);
bool policy_allows(const struct policy *p, uid_t uid, gid_t gid, const gid_t *groups, int ngroups);

#endif
