/* daemon/server/config.h — pagodad's settings.
 *
 * Every key of the config file (key = value lines, '#' comments) is also a
 * command-line flag (--key value or --key=value; a bool flag alone means
 * true). Flags win over the file, also across a SIGHUP reload. */
#ifndef PAGODA_SERVER_CONFIG_H
#define PAGODA_SERVER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct srv_config {
	char model[4096];
	char chat_template[4096]; /* a .jinja file instead of the model's template */
	char socket[108];
	char config[4096];
	int threads, ctx, max_seqs, max_batch_tokens, prefill_chunk, block_size;
	int64_t kv_blocks, kv_mem;
	char cache_type_k[16], cache_type_v[16]; /* "": f16 */
	bool no_prefix_cache;
	char offload_dir[4096];
	int64_t offload_size;
	bool offload_sqpoll;
	char allow_group[64];
	char allow_users[512];
	bool allow_any;
	int socket_mode;
	int max_clients;          /* connections at once, handshake done or not */
	int max_clients_per_uid;
	int max_inflight;         /* per connection */
	int max_inflight_per_uid;
	int hello_timeout_ms;
	int sqes_per_turn;
	int64_t queued_budget;    /* completions queued for slow readers, bytes */
	int64_t arena_size;
	int log_level;
	char bus[16]; /* auto, system, session, none */
	char backend[16]; /* cpu, cuda, auto */
	char prefix_cache_scope[16]; /* user, group, global */

	uint64_t set_by_flag; /* bit per key */
	char speculative[16]; /* off, ngram, draft; empty: the engine's default */
	char draft_model[4096];
	int draft_max;
};

void config_defaults(struct srv_config *c);
/* Parses argv (flags), then the file named by --config if any, under the
 * flags. 0 ok, 1 --help printed, -1 error in err. */
int config_load(struct srv_config *c, int argc, char **argv, char *err, size_t errlen);
/* Re-reads c->config into a copy of *c keeping the flag-set keys. 0 or -1. */
int config_reload(const struct srv_config *old, struct srv_config *out, char *err, size_t errlen);
void config_usage(FILE *f);
/* Names the keys whose values differ between a and b that only take effect at
 * restart (into buf, comma-separated; empty when none). */
void config_restart_diff(const struct srv_config *a, const struct srv_config *b, char *buf, size_t len);

#endif
