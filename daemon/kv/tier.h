/* daemon/kv/tier.h — the level below the KV pool: blocks the pool lets go
 * of are kept in a preallocated file (on NVMe) and read back on a prefix
 * hit, over io_uring.
 *
 * The file is a header page and slots of one block each; a slot starts
 * with a header (block hash, token count, model fingerprint, CRC32C of the
 * header and of the bytes), checked on every read: a block that fails is
 * dropped and the engine recomputes it, so the tier may lose a block but
 * never serves a wrong one. A restart with the same fingerprint rebuilds
 * the index from the slot headers.
 *
 * The tier is one level of a chain (pool -> [host memory, for a pool on a
 * device] -> this file): it reaches a block's bytes only through the
 * pool's door (kv_block_copy_out/in), and the engine reaches it only
 * through these calls, which a host level would offer as well.
 *
 * I/O: kv_tier_save, kv_tier_clean and kv_tier_fetch only queue, and never
 * wait; kv_tier_submit sends what a step queued as one batch; kv_tier_reap
 * handles completions (and, with wait_ms, waits for one when the caller
 * has nothing else to do). With O_DIRECT and page-aligned blocks, a
 * block's bytes go to and from the disk where they lie in the pool (whose
 * memory is registered with the ring where RLIMIT_MEMLOCK allows); the
 * slot's header page alone goes through a staging buffer. Engine thread
 * only.
 */
#ifndef PAGODA_KV_TIER_H
#define PAGODA_KV_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/kv/kv.h"

struct kv_tier;

enum { KV_TIER_LOG_ERR = 3, KV_TIER_LOG_WARNING = 4, KV_TIER_LOG_INFO = 6 };

struct kv_tier_opts {
	const char *dir;      /* the file is DIR/pagoda-kv.tier */
	int64_t size;         /* bytes of the file, header page included */
	bool sqpoll;          /* a kernel thread polls the submission queue */
	uint64_t fingerprint; /* the model's: a different one starts empty */
	const char *fault;    /* fault injection (tests), see kv_tier_fault_help */
	/* Operator-visible events (fallbacks, warm start, the tier turning
	 * itself off); level as syslog's. May be NULL. */
	void (*log)(void *user, int level, const char *msg);
	void *log_user;
};

/* The file: a header page, then slots of slot_bytes (see the stats), each
 * a header page followed by the block's bytes (page-aligned, so that an
 * O_DIRECT read can put them straight into the pool). */
#define KV_TIER_FILE_HDR 4096
#define KV_TIER_SLOT_HDR 4096

#define KV_TIER_LAT_BUCKETS 16 /* read latency: bucket i counts [2^i, 2^(i+1)) us */

struct kv_tier_stats {
	bool enabled, direct, fixed_bufs, sqpoll;
	bool pool_bufs; /* the pool's memory is registered with the ring */
	bool disabled; /* turned off by ENOSPC or EIO on a write */
	int64_t slots_total, slots_used;
	size_t slot_bytes;
	uint64_t blocks_out, bytes_out;   /* writes completed */
	uint64_t blocks_in, bytes_in;     /* verified reads */
	uint64_t zero_copy_in;            /* of those, read straight into the pool */
	uint64_t zero_copy_out;           /* writes straight from the pool */
	uint64_t warm_blocks;             /* found at start */
	uint64_t dropped_writes;          /* a save with every buffer or slot in flight */
	uint64_t pool_unregistered;       /* 1: the kernel refused to register the pool */
	uint64_t drops;                   /* kv_tier_drop calls */
	uint64_t ring_cqes;               /* io_uring completions reaped (a direct
					   * I/O is one per span and the header) */
	uint64_t err_crc, err_short, err_io, err_nospc, err_header;
	uint64_t read_lat[KV_TIER_LAT_BUCKETS];
};

/* Creates or reopens the file. Errors (ENOSPC preallocating, a file in use
 * by another daemon, io_uring refused) are returned with a message. */
int kv_tier_open(struct kv_tier **out, const struct kv_tier_opts *o, const struct kv_pool *p, char *err,
		 size_t errlen);
/* Waits for the I/O in flight, then closes. */
void kv_tier_close(struct kv_tier *t);

/* Queues a copy of block b of p (published, complete), which the pool may
 * reuse on return: through a staging buffer. 0 queued, 1 the tier has it
 * already, -EBUSY not kept because every staging buffer or slot is in
 * flight (counted in dropped_writes; it never waits), -EIO tier off. */
int kv_tier_save(struct kv_tier *t, struct kv_pool *p, int32_t b);
/* Writes ahead of eviction: of the oldest cached blocks of p, those the
 * tier lacks are written straight from the pool (held meanwhile, put back
 * first in line for eviction), so that their eviction costs no copy and
 * no I/O. Only while fewer than `ahead` blocks are free, and never holding
 * blocks the next `ahead` a step may take. Returns the writes started. */
int kv_tier_clean(struct kv_tier *t, struct kv_pool *p, int ahead);
/* Forgets every block (DropPrefixCache): the index empties, I/O in flight
 * is discarded when it completes, and the file header's epoch moves on so
 * that a restart does not find the old slots. */
void kv_tier_drop(struct kv_tier *t, struct kv_pool *p);
/* Whether a block with hash h can be fetched (stored, or being read). */
bool kv_tier_has(const struct kv_tier *t, struct kv_hash h);
/* Starts reading h into a block taken from p; when it completes and
 * verifies, the block is published in p as a cached block. 0 started, 1 a
 * read is in flight already, <0 cannot (not here, tier off, pool full). */
int kv_tier_fetch(struct kv_tier *t, struct kv_pool *p, struct kv_hash h);
/* A read of h is queued or in flight. */
bool kv_tier_pending(const struct kv_tier *t, struct kv_hash h);
/* Submits everything queued since the last call, in one system call. */
int kv_tier_submit(struct kv_tier *t);
/* Handles the completions there are (waiting up to wait_ms for one when
 * wait_ms > 0 and I/O is in flight). Returns the number handled. */
int kv_tier_reap(struct kv_tier *t, struct kv_pool *p, int wait_ms);
/* I/Os queued or in flight. */
int kv_tier_inflight(const struct kv_tier *t);
/* Writes every published block of p the tier lacks and waits for it: a
 * shutdown's last act, so that a restart finds them. */
void kv_tier_flush(struct kv_tier *t, struct kv_pool *p);
void kv_tier_get_stats(const struct kv_tier *t, struct kv_tier_stats *s);

/* The fault spec: comma-separated OP:N:KIND, OP read or write, N the
 * 1-based ordinal of that OP's I/O or '*' for all, KIND eio, enospc, short
 * (the I/O asks for half a slot) or corrupt (a byte of the block flipped:
 * before a write reaches the disk, after a read). */
extern const char kv_tier_fault_help[];

#endif
