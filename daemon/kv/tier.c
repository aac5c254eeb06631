/* daemon/kv/tier.c — the NVMe level: file, slots, index, LRU, io_uring. */
#include "daemon/kv/tier.h"
#include "daemon/kv/crc32c.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define PAGE ((unsigned)KV_TIER_FILE_HDR)
#define SLOT_HDR ((unsigned)KV_TIER_SLOT_HDR)
#define SLOT_MAGIC 0x564b4750u /* "PGKV" */
#define FILE_MAGIC "PAGODAKV"
#define FORMAT_VERSION 3u
#define STAGING_BYTES (32u << 20)
#define REG_MAX (1u << 30)  /* the kernel's limit on one registered buffer */
#define MAX_REGIONS 1024    /* of the pool, registered: 1 TiB of KV */

struct file_hdr {
	char magic[8];
	uint32_t version, hdr_crc;
	uint64_t fingerprint, slot_bytes, n_slots, block_bytes;
	uint32_t block_size;
	uint32_t epoch; /* slots of another epoch were dropped (DropPrefixCache) */
};

struct slot_hdr {
	uint32_t magic, hdr_crc; /* crc32c of this header with hdr_crc 0 */
	uint64_t fingerprint;
	uint64_t hash_lo, hash_hi;
	uint64_t seqno; /* write order: the LRU order a restart rebuilds */
	uint32_t n_tokens, data_bytes, data_crc, epoch;
};
_Static_assert(sizeof(struct slot_hdr) <= SLOT_HDR, "slot header too big");

enum slot_state { S_FREE, S_WRITING, S_VALID, S_READING };

struct slot {
	struct kv_hash hash;
	uint64_t seqno;
	int32_t next;               /* bucket chain */
	int32_t lru_prev, lru_next; /* valid slots, oldest first */
	uint8_t state;
};

enum op_kind { OP_NONE, OP_READ, OP_WRITE, OP_META };
enum fault_kind { F_NONE, F_EIO, F_ENOSPC, F_SHORT, F_CORRUPT };

#define MAX_SPANS 4

struct op {
	uint8_t kind, fault;
	bool held;  /* a write straight from the pool: the block is held */
	bool stale; /* the tier was dropped while it ran */
	int32_t slot, block;
	uint64_t t0;
	unsigned len;                     /* bytes the I/O should move */
	int parts;                        /* completions still to come */
	int res;                          /* bytes moved so far, or the first error */
	int n_iov;                        /* an I/O straight to or from the pool: */
	struct iovec iov[1 + MAX_SPANS];  /* header page, then the block's spans */
};

struct fault {
	uint8_t op, kind;
	uint64_t nth; /* 0: every one */
};

struct backlog {
	int32_t slot, block;
};

struct kv_tier {
	struct io_uring ring;
	bool ring_ok;
	int fd;
	char path[4096];
	uint64_t fingerprint;
	size_t block_bytes, slot_bytes;
	int block_size;
	int64_t n_slots;
	struct slot *slots;
	int32_t *buckets;
	uint64_t bucket_mask;
	int32_t *free_slots;
	int64_t n_free;
	int32_t lru_head, lru_tail;
	uint64_t seqno;
	uint32_t epoch;
	bool hdr_dirty;      /* the file header's new epoch is still to be written */
	bool warm;           /* the file's slots are kept: scan them */
	/* the pool's memory, registered after the staging buffers (st.pool_bufs) */
	struct iovec *regions;
	int n_regions;
	int n_cleaning;      /* writes straight from the pool in flight */
	/* staging buffers, one per I/O in flight */
	uint8_t *staging;
	int n_staging;
	struct op *ops;
	int32_t *free_ops;
	int n_free_ops;
	struct backlog *backlog; /* reads waiting for a staging buffer, FIFO */
	int64_t bl_head, bl_len;
	int unsubmitted;
	bool off;
	struct fault faults[16];
	int n_faults;
	uint64_t n_reads, n_writes;
	struct kv_tier_stats st;
	void (*log)(void *user, int level, const char *msg);
	void *log_user;
};

const char kv_tier_fault_help[] =
	"OP:N:KIND[,...]: OP read|write, N the OP's 1-based ordinal or *, KIND eio|enospc|short|corrupt";

static void tlog(struct kv_tier *t, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void tlog(struct kv_tier *t, int level, const char *fmt, ...)
{
	if (!t->log)
		return;
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	t->log(t->log_user, level, msg);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static bool hash_eq(struct kv_hash a, struct kv_hash b)
{
	return a.lo == b.lo && a.hi == b.hi;
}

static uint8_t *stage(const struct kv_tier *t, int i)
{
	return t->staging + (size_t)i * t->slot_bytes;
}

static off_t slot_off(const struct kv_tier *t, int32_t s)
{
	return (off_t)PAGE + (off_t)s * (off_t)t->slot_bytes;
}

/* ---- index and LRU ------------------------------------------------------------ */

static int32_t find(const struct kv_tier *t, struct kv_hash h)
{
	for (int32_t s = t->buckets[h.lo & t->bucket_mask]; s >= 0; s = t->slots[s].next)
		if (hash_eq(t->slots[s].hash, h))
			return s;
	return -1;
}

static void index_add(struct kv_tier *t, int32_t s)
{
	int32_t *head = &t->buckets[t->slots[s].hash.lo & t->bucket_mask];
	t->slots[s].next = *head;
	*head = s;
}

static void index_del(struct kv_tier *t, int32_t s)
{
	for (int32_t *pp = &t->buckets[t->slots[s].hash.lo & t->bucket_mask]; *pp >= 0; pp = &t->slots[*pp].next)
		if (*pp == s) {
			*pp = t->slots[s].next;
			break;
		}
	t->slots[s].next = -1;
}

static void lru_unlink(struct kv_tier *t, int32_t s)
{
	struct slot *m = &t->slots[s];
	if (m->lru_prev >= 0)
		t->slots[m->lru_prev].lru_next = m->lru_next;
	else
		t->lru_head = m->lru_next;
	if (m->lru_next >= 0)
		t->slots[m->lru_next].lru_prev = m->lru_prev;
	else
		t->lru_tail = m->lru_prev;
	m->lru_prev = m->lru_next = -1;
}

static void lru_push(struct kv_tier *t, int32_t s)
{
	struct slot *m = &t->slots[s];
	m->lru_prev = t->lru_tail;
	m->lru_next = -1;
	if (t->lru_tail >= 0)
		t->slots[t->lru_tail].lru_next = s;
	else
		t->lru_head = s;
	t->lru_tail = s;
}

static void slot_drop(struct kv_tier *t, int32_t s)
{
	if (t->slots[s].state == S_VALID)
		lru_unlink(t, s);
	index_del(t, s);
	t->slots[s].state = S_FREE;
	t->free_slots[t->n_free++] = s;
	t->st.slots_used--;
}

/* A free slot, else the least recently used valid one. */
static int32_t slot_take(struct kv_tier *t)
{
	if (!t->n_free && t->lru_head >= 0)
		slot_drop(t, t->lru_head);
	if (!t->n_free)
		return -1;
	t->st.slots_used++;
	return t->free_slots[--t->n_free];
}

/* ---- faults ------------------------------------------------------------------- */

static int parse_faults(struct kv_tier *t, const char *spec, char *err, size_t errlen)
{
	const char *p = spec;
	while (p && *p) {
		char op[8], nth[24], kind[16];
		int used = 0;
		if (t->n_faults == (int)(sizeof t->faults / sizeof t->faults[0]) ||
		    sscanf(p, "%7[a-z]:%23[0-9*]:%15[a-z]%n", op, nth, kind, &used) != 3)
			goto bad;
		struct fault *f = &t->faults[t->n_faults++];
		f->op = !strcmp(op, "read") ? OP_READ : !strcmp(op, "write") ? OP_WRITE : OP_NONE;
		f->kind = !strcmp(kind, "eio") ? F_EIO : !strcmp(kind, "enospc") ? F_ENOSPC
			: !strcmp(kind, "short") ? F_SHORT : !strcmp(kind, "corrupt") ? F_CORRUPT : F_NONE;
		f->nth = nth[0] == '*' ? 0 : strtoull(nth, NULL, 10);
		if (f->op == OP_NONE || f->kind == F_NONE || (nth[0] != '*' && !f->nth))
			goto bad;
		p += used;
		if (*p == ',')
			p++;
		else if (*p)
			goto bad;
	}
	return 0;
bad:
	snprintf(err, errlen, "offload fault spec '%s': expected %s", spec, kv_tier_fault_help);
	return -EINVAL;
}

static uint8_t fault_for(const struct kv_tier *t, uint8_t op, uint64_t nth)
{
	for (int i = 0; i < t->n_faults; i++)
		if (t->faults[i].op == op && (!t->faults[i].nth || t->faults[i].nth == nth))
			return t->faults[i].kind;
	return F_NONE;
}

/* ---- I/O ---------------------------------------------------------------------- */

/* The registered buffer that holds [base, base + len): a region of the
 * pool (after the staging buffers), or -1. */
static int region_of(const struct kv_tier *t, const void *base, size_t len)
{
	uintptr_t a = (uintptr_t)base;
	for (int r = 0; r < t->n_regions; r++) {
		uintptr_t lo = (uintptr_t)t->regions[r].iov_base;
		if (a >= lo && a + len <= lo + t->regions[r].iov_len)
			return t->n_staging + r;
	}
	return -1;
}

static void sqe_fixed(struct kv_tier *t, int i, bool rd, void *buf, unsigned len, off_t off, int idx)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);
	/* The queue has 1 + MAX_SPANS entries per staging buffer: never NULL. */
	if (idx >= 0 && rd)
		io_uring_prep_read_fixed(sqe, 0, buf, len, off, idx);
	else if (idx >= 0)
		io_uring_prep_write_fixed(sqe, 0, buf, len, off, idx);
	else if (rd)
		io_uring_prep_read(sqe, 0, buf, len, off);
	else
		io_uring_prep_write(sqe, 0, buf, len, off);
	sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data64(sqe, (uint64_t)i);
	t->ops[i].parts++;
	t->unsubmitted++;
}

static void prep(struct kv_tier *t, int i)
{
	struct op *o = &t->ops[i];
	bool rd = o->kind == OP_READ;
	int stage_idx = t->st.fixed_bufs ? i : -1;
	off_t off = o->kind == OP_META ? 0 : slot_off(t, o->slot);
	o->parts = 0;
	o->res = 0;
	o->t0 = now_ns();
	if (o->kind == OP_META) {
		sqe_fixed(t, i, false, stage(t, i), PAGE, 0, stage_idx);
	} else if (o->n_iov) {
		/* the header page, then the block's spans where they lie; a
		 * short fault moves the header page alone */
		int n = o->fault == F_SHORT ? 1 : o->n_iov;
		if (t->st.pool_bufs) {
			for (int k = 0; k < n; k++) {
				int idx = k ? region_of(t, o->iov[k].iov_base, o->iov[k].iov_len) : stage_idx;
				sqe_fixed(t, i, rd, o->iov[k].iov_base, (unsigned)o->iov[k].iov_len, off, idx);
				off += (off_t)o->iov[k].iov_len;
			}
		} else {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);
			if (rd)
				io_uring_prep_readv(sqe, 0, o->iov, (unsigned)n, off);
			else
				io_uring_prep_writev(sqe, 0, o->iov, (unsigned)n, off);
			sqe->flags |= IOSQE_FIXED_FILE;
			io_uring_sqe_set_data64(sqe, (uint64_t)i);
			o->parts++;
			t->unsubmitted++;
		}
	} else {
		unsigned len = o->fault == F_SHORT ? (unsigned)t->slot_bytes / 2 : (unsigned)t->slot_bytes;
		sqe_fixed(t, i, rd, stage(t, i), len, off, stage_idx);
	}
}

static int op_get(struct kv_tier *t)
{
	return t->n_free_ops ? t->free_ops[--t->n_free_ops] : -1;
}

static void op_put(struct kv_tier *t, int i)
{
	t->ops[i].kind = OP_NONE;
	t->free_ops[t->n_free_ops++] = i;
}

/* With O_DIRECT, a block whose spans are page-aligned goes to and from the
 * disk where it lies in the pool: the slot's header page through a
 * staging buffer, the bytes straight from or into the block. */
static int direct_spans(const struct kv_tier *t, const struct kv_pool *p, int32_t block, struct iovec *iov)
{
	int n = MAX_SPANS;
	if (!t->st.direct || kv_block_span(p, block, iov, &n) < 0)
		return 0;
	size_t sum = 0;
	for (int k = 0; k < n; k++) {
		if ((uintptr_t)iov[k].iov_base % PAGE || iov[k].iov_len % PAGE)
			return 0;
		sum += iov[k].iov_len;
	}
	return sum == t->block_bytes ? n : 0;
}

static void start_read(struct kv_tier *t, const struct kv_pool *p, int i, int32_t slot, int32_t block)
{
	struct op *o = &t->ops[i];
	*o = (struct op){ .kind = OP_READ, .slot = slot, .block = block, .len = (unsigned)t->slot_bytes };
	o->fault = fault_for(t, OP_READ, ++t->n_reads);
	int n = direct_spans(t, p, block, o->iov + 1);
	if (n) {
		o->iov[0] = (struct iovec){ stage(t, i), SLOT_HDR };
		o->n_iov = 1 + n;
		o->len = (unsigned)(SLOT_HDR + t->block_bytes);
	}
	prep(t, i);
}

static void disable(struct kv_tier *t, const char *why)
{
	if (t->off)
		return;
	t->off = true;
	t->st.disabled = true;
	tlog(t, KV_TIER_LOG_ERR, "offload tier %s: %s on a write; the tier is off, serving goes on without it",
	     t->path, why);
}

static void hdr_fill(const struct kv_tier *t, struct slot_hdr *h, struct kv_hash hash, uint64_t seqno,
		     const struct iovec *data, int n_data)
{
	memset(h, 0, sizeof *h);
	h->magic = SLOT_MAGIC;
	h->fingerprint = t->fingerprint;
	h->hash_lo = hash.lo;
	h->hash_hi = hash.hi;
	h->seqno = seqno;
	h->n_tokens = (uint32_t)t->block_size;
	h->data_bytes = (uint32_t)t->block_bytes;
	h->epoch = t->epoch;
	for (int k = 0; k < n_data; k++)
		h->data_crc = crc32c(h->data_crc, data[k].iov_base, data[k].iov_len);
	h->hdr_crc = crc32c(0, h, sizeof *h);
}

/* Header checks that need no data: magic, own CRC, model, shape, epoch. */
static bool hdr_ok(const struct kv_tier *t, const struct slot_hdr *h)
{
	struct slot_hdr c = *h;
	c.hdr_crc = 0;
	return h->magic == SLOT_MAGIC && crc32c(0, &c, sizeof c) == h->hdr_crc && h->fingerprint == t->fingerprint &&
	       h->n_tokens == (uint32_t)t->block_size && h->data_bytes == t->block_bytes && h->epoch == t->epoch;
}

static void lat_add(struct kv_tier *t, uint64_t ns)
{
	uint64_t us = ns / 1000;
	int b = 0;
	while (us > 1 && b < KV_TIER_LAT_BUCKETS - 1) {
		us >>= 1;
		b++;
	}
	t->st.read_lat[b]++;
}

/* A slot whose I/O is over goes back to the free list: it was dropped
 * from the index already (a drop of the tier) or is dropped now. */
static void slot_release(struct kv_tier *t, int32_t s, bool indexed)
{
	if (indexed) {
		t->slots[s].state = S_VALID; /* for slot_drop's bookkeeping */
		lru_push(t, s);
		slot_drop(t, s);
		return;
	}
	t->slots[s].state = S_FREE;
	t->free_slots[t->n_free++] = s;
	t->st.slots_used--;
}

static void slot_valid(struct kv_tier *t, int32_t s)
{
	t->slots[s].state = S_VALID;
	lru_push(t, s);
}

static void read_done(struct kv_tier *t, struct kv_pool *p, struct op *o, uint8_t *buf, int res)
{
	if (o->stale) {
		slot_release(t, o->slot, false);
		kv_block_put(p, o->block);
		return;
	}
	struct slot_hdr h;
	memcpy(&h, buf, sizeof h);
	/* the block's bytes: in the pool (zero-copy) or after the header */
	struct iovec staged = { buf + SLOT_HDR, t->block_bytes };
	const struct iovec *data = o->n_iov ? o->iov + 1 : &staged;
	int n_data = o->n_iov ? o->n_iov - 1 : 1;
	if (o->fault == F_EIO)
		res = -EIO;
	else if (o->fault == F_ENOSPC)
		res = -ENOSPC;
	else if (o->fault == F_CORRUPT && res > (int)SLOT_HDR)
		((uint8_t *)data[0].iov_base)[o->t0 % data[0].iov_len] ^= 0x40;
	bool good = false;
	uint32_t crc = 0;
	if (res < 0)
		t->st.err_io++;
	else if ((unsigned)res != o->len)
		t->st.err_short++;
	else if (!hdr_ok(t, &h) || !hash_eq((struct kv_hash){ h.hash_lo, h.hash_hi }, t->slots[o->slot].hash))
		t->st.err_header++;
	else {
		for (int k = 0; k < n_data; k++)
			crc = crc32c(crc, data[k].iov_base, data[k].iov_len);
		good = crc == h.data_crc;
		t->st.err_crc += !good;
	}
	if (good && o->n_iov) {
		t->st.zero_copy_in++;
	} else if (good && kv_block_copy_in(p, o->block, buf + SLOT_HDR) < 0) {
		good = false; /* the backend refused the bytes */
		t->st.err_io++;
	}
	if (good) {
		kv_block_publish(p, o->block, t->slots[o->slot].hash);
		slot_valid(t, o->slot);
		t->st.blocks_in++;
		t->st.bytes_in += t->block_bytes;
		lat_add(t, now_ns() - o->t0);
	} else {
		slot_release(t, o->slot, true);
	}
	kv_block_put(p, o->block);
}

static void write_done(struct kv_tier *t, struct kv_pool *p, struct op *o, int res)
{
	if (o->held) {
		t->n_cleaning--;
		/* a block the cache dropped meanwhile is freed, not cached again */
		if (o->stale && p->meta[o->block].refcnt == 1)
			kv_block_unpublish(p, o->block);
		kv_block_put_first(p, o->block);
	}
	if (o->stale) {
		slot_release(t, o->slot, false);
		return;
	}
	if (o->fault == F_EIO)
		res = -EIO;
	else if (o->fault == F_ENOSPC)
		res = -ENOSPC;
	if (res >= 0 && (unsigned)res == o->len) {
		slot_valid(t, o->slot);
		t->st.blocks_out++;
		t->st.bytes_out += t->block_bytes;
		t->st.zero_copy_out += o->held;
		return;
	}
	slot_release(t, o->slot, true);
	if (res == -ENOSPC || res == -EDQUOT) {
		t->st.err_nospc++;
		disable(t, "no space left");
	} else if (res < 0) {
		t->st.err_io++;
		disable(t, strerror(-res));
	} else {
		t->st.err_short++;
	}
}

static void meta_done(struct kv_tier *t, int res)
{
	if (res == (int)PAGE)
		return;
	t->st.err_io++;
	disable(t, res < 0 ? strerror(-res) : "a short write of the file header");
}

/* The file header's page, as it is now (epoch included). */
static void file_hdr_fill(const struct kv_tier *t, uint8_t *page)
{
	struct file_hdr h;
	memset(&h, 0, sizeof h);
	memcpy(h.magic, FILE_MAGIC, 8);
	h.version = FORMAT_VERSION;
	h.fingerprint = t->fingerprint;
	h.slot_bytes = t->slot_bytes;
	h.n_slots = (uint64_t)t->n_slots;
	h.block_bytes = t->block_bytes;
	h.block_size = (uint32_t)t->block_size;
	h.epoch = t->epoch;
	h.hdr_crc = crc32c(0, &h, sizeof h);
	memset(page, 0, PAGE);
	memcpy(page, &h, sizeof h);
}

/* Queues the file header's write once a staging buffer is free. */
static void meta_flush(struct kv_tier *t)
{
	int i;
	if (!t->hdr_dirty || t->off || (i = op_get(t)) < 0)
		return;
	t->hdr_dirty = false;
	file_hdr_fill(t, stage(t, i));
	t->ops[i] = (struct op){ .kind = OP_META, .slot = -1, .block = -1, .len = PAGE };
	prep(t, i);
}

static void drain_backlog(struct kv_tier *t, struct kv_pool *p)
{
	while (t->bl_len) {
		struct backlog b = t->backlog[t->bl_head];
		if (t->off) {
			slot_valid(t, b.slot);
			kv_block_put(p, b.block);
		} else {
			int i = op_get(t);
			if (i < 0)
				return;
			start_read(t, p, i, b.slot, b.block);
		}
		t->bl_head = (t->bl_head + 1) % t->n_slots;
		t->bl_len--;
	}
}

/* A write of block b: straight from the pool when direct allows it (the
 * block is held until the write completes, so it cannot be reused),
 * else copied into a staging buffer (the pool may reuse it at once).
 * 0 queued, 1 the tier has it, -EBUSY every staging buffer or slot is in
 * flight, -EIO the tier is off or the bytes could not be had. */
static int write_block(struct kv_tier *t, struct kv_pool *p, int32_t b, bool direct)
{
	if (t->off)
		return -EIO;
	struct kv_hash h = p->meta[b].hash;
	int32_t s = find(t, h);
	if (s >= 0) {
		if (t->slots[s].state == S_VALID) {
			lru_unlink(t, s);
			lru_push(t, s);
		}
		return 1;
	}
	int i = op_get(t);
	if (i < 0)
		return -EBUSY;
	if ((s = slot_take(t)) < 0) {
		op_put(t, i);
		return -EBUSY;
	}
	struct op *o = &t->ops[i];
	*o = (struct op){ .kind = OP_WRITE, .slot = s, .block = -1, .len = (unsigned)t->slot_bytes };
	uint8_t *buf = stage(t, i);
	int n = direct ? direct_spans(t, p, b, o->iov + 1) : 0;
	if (!n && kv_block_copy_out(p, b, buf + SLOT_HDR) < 0) {
		op_put(t, i);
		slot_release(t, s, false);
		return -EIO;
	}
	struct iovec staged = { buf + SLOT_HDR, t->block_bytes };
	struct slot_hdr hdr;
	hdr_fill(t, &hdr, h, ++t->seqno, n ? o->iov + 1 : &staged, n ? n : 1);
	o->fault = fault_for(t, OP_WRITE, ++t->n_writes);
	if (n) {
		/* the pool's bytes are live: a corrupt fault spoils the
		 * checksum instead, which a read catches all the same */
		if (o->fault == F_CORRUPT) {
			hdr.data_crc ^= 0x40;
			hdr.hdr_crc = 0;
			hdr.hdr_crc = crc32c(0, &hdr, sizeof hdr);
		}
		memset(buf, 0, SLOT_HDR);
		o->iov[0] = (struct iovec){ buf, SLOT_HDR };
		o->n_iov = 1 + n;
		o->len = (unsigned)(SLOT_HDR + t->block_bytes);
		o->held = true;
		o->block = b;
		kv_block_hold(p, b);
		t->n_cleaning++;
	} else if (o->fault == F_CORRUPT) {
		buf[SLOT_HDR + t->n_writes % t->block_bytes] ^= 0x40;
	}
	memcpy(buf, &hdr, sizeof hdr);
	t->slots[s] = (struct slot){ .hash = h, .seqno = t->seqno, .next = -1, .lru_prev = -1, .lru_next = -1,
				     .state = S_WRITING };
	index_add(t, s);
	prep(t, i);
	return 0;
}

/* ---- the door ------------------------------------------------------------------ */

int kv_tier_save(struct kv_tier *t, struct kv_pool *p, int32_t b)
{
	/* The pool reuses b as soon as this returns: through a staging
	 * buffer, and when none is free the block is not kept (the engine
	 * never waits on the disk here). */
	int r = write_block(t, p, b, false);
	t->st.dropped_writes += r == -EBUSY;
	return r;
}

int kv_tier_clean(struct kv_tier *t, struct kv_pool *p, int ahead)
{
	if (t->off || !t->st.direct || p->n_free >= ahead)
		return 0;
	/* never hold what the next step may need */
	int64_t window = kv_available(p) - ahead;
	window = window < ahead ? window : ahead;
	window -= t->n_cleaning;
	int started = 0;
	for (int32_t b = kv_cached_next(p, -1), next; b >= 0 && window > 0; b = next, window--) {
		next = kv_cached_next(p, b);
		struct iovec iov[MAX_SPANS];
		if (find(t, p->meta[b].hash) >= 0)
			continue;
		if (!direct_spans(t, p, b, iov))
			break;
		int r = write_block(t, p, b, true);
		if (r < 0)
			break;
		started += r == 0;
	}
	return started;
}

void kv_tier_drop(struct kv_tier *t, struct kv_pool *p)
{
	for (int i = 0; i < t->n_staging; i++)
		if (t->ops[i].kind == OP_READ || t->ops[i].kind == OP_WRITE)
			t->ops[i].stale = true;
	for (; t->bl_len; t->bl_len--, t->bl_head = (t->bl_head + 1) % t->n_slots) {
		struct backlog b = t->backlog[t->bl_head];
		t->slots[b.slot].state = S_FREE;
		kv_block_put(p, b.block);
	}
	for (uint64_t i = 0; i <= t->bucket_mask; i++)
		t->buckets[i] = -1;
	t->lru_head = t->lru_tail = -1;
	t->n_free = 0;
	t->st.slots_used = 0;
	for (int32_t s = (int32_t)t->n_slots - 1; s >= 0; s--) {
		struct slot *m = &t->slots[s];
		m->next = m->lru_prev = m->lru_next = -1;
		if (m->state == S_VALID || m->state == S_FREE) {
			m->state = S_FREE;
			t->free_slots[t->n_free++] = s;
		} else {
			t->st.slots_used++; /* freed when its I/O completes */
		}
	}
	/* A restart takes only the slots of the file header's epoch. */
	t->epoch++;
	t->hdr_dirty = true;
	t->st.drops++;
	meta_flush(t);
	tlog(t, KV_TIER_LOG_INFO, "offload tier %s: dropped (epoch %u): every block it held is forgotten", t->path,
	     t->epoch);
}

bool kv_tier_has(const struct kv_tier *t, struct kv_hash h)
{
	if (t->off)
		return false;
	int32_t s = find(t, h);
	return s >= 0 && (t->slots[s].state == S_VALID || t->slots[s].state == S_READING);
}

bool kv_tier_pending(const struct kv_tier *t, struct kv_hash h)
{
	int32_t s = find(t, h);
	return s >= 0 && t->slots[s].state == S_READING;
}

int kv_tier_fetch(struct kv_tier *t, struct kv_pool *p, struct kv_hash h)
{
	if (t->off)
		return -EIO;
	int32_t s = find(t, h);
	if (s < 0)
		return -ENOENT;
	if (t->slots[s].state == S_READING)
		return 1;
	if (t->slots[s].state != S_VALID)
		return -EAGAIN;
	/* Out of the LRU first: taking a pool block may evict one into the
	 * tier, which must not reuse this slot. */
	lru_unlink(t, s);
	t->slots[s].state = S_READING;
	int32_t b = kv_block_take(p);
	if (b < 0) {
		slot_valid(t, s);
		return -ENOSPC;
	}
	int i = op_get(t);
	if (i >= 0 && !t->bl_len) {
		start_read(t, p, i, s, b);
	} else {
		if (i >= 0)
			op_put(t, i);
		t->backlog[(t->bl_head + t->bl_len++) % t->n_slots] = (struct backlog){ s, b };
	}
	return 0;
}

int kv_tier_submit(struct kv_tier *t)
{
	if (!t->unsubmitted)
		return 0;
	int r = io_uring_submit(&t->ring);
	if (r > 0)
		t->unsubmitted -= r < t->unsubmitted ? r : t->unsubmitted;
	return r;
}

int kv_tier_inflight(const struct kv_tier *t)
{
	return (t->n_staging - t->n_free_ops) + (int)t->bl_len;
}

/* One completion of op i's parts: true when it was the last. */
static bool part_done(struct kv_tier *t, int i, int res)
{
	struct op *o = &t->ops[i];
	if (res < 0 && o->res >= 0)
		o->res = res;
	else if (o->res >= 0)
		o->res += res;
	return --o->parts == 0;
}

int kv_tier_reap(struct kv_tier *t, struct kv_pool *p, int wait_ms)
{
	int n = 0, seen = 0;
	struct io_uring_cqe *cqe;
	if (wait_ms > 0 && t->n_free_ops < t->n_staging && io_uring_peek_cqe(&t->ring, &cqe) != 0) {
		kv_tier_submit(t);
		struct __kernel_timespec ts = { .tv_sec = wait_ms / 1000, .tv_nsec = (wait_ms % 1000) * 1000000ll };
		io_uring_wait_cqe_timeout(&t->ring, &cqe, &ts);
	}
	unsigned head;
	io_uring_for_each_cqe(&t->ring, head, cqe)
	{
		int i = (int)io_uring_cqe_get_data64(cqe);
		struct op *o = &t->ops[i];
		seen++;
		t->st.ring_cqes++;
		if (!part_done(t, i, cqe->res))
			continue;
		if (o->kind == OP_READ)
			read_done(t, p, o, stage(t, i), o->res);
		else if (o->kind == OP_WRITE)
			write_done(t, p, o, o->res);
		else if (o->kind == OP_META)
			meta_done(t, o->res);
		op_put(t, i);
		n++;
	}
	io_uring_cq_advance(&t->ring, (unsigned)seen);
	meta_flush(t);
	drain_backlog(t, p);
	kv_tier_submit(t);
	return n;
}

void kv_tier_flush(struct kv_tier *t, struct kv_pool *p)
{
	/* Oldest first, so that the newest win when the tier is smaller;
	 * shutdown may wait for the disk. */
	for (int32_t b = kv_cached_next(p, -1), next; b >= 0 && !t->off; b = next) {
		next = kv_cached_next(p, b);
		while (write_block(t, p, b, true) == -EBUSY && !t->off)
			kv_tier_reap(t, p, 100);
	}
	for (int k = 0; kv_tier_inflight(t) && k < 1000; k++)
		kv_tier_reap(t, p, 100);
}

void kv_tier_get_stats(const struct kv_tier *t, struct kv_tier_stats *s)
{
	*s = t->st;
	s->enabled = true;
	s->disabled = t->off;
}

/* ---- open and close ----------------------------------------------------------- */

static int err_at(char *err, size_t errlen, int r, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int err_at(char *err, size_t errlen, int r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return r;
}

static int cmp_seq(const void *a, const void *b)
{
	uint64_t x = ((const uint64_t *)a)[0], y = ((const uint64_t *)b)[0];
	return x < y ? -1 : x > y;
}

/* Reads the slot headers of slots [s0, s0 + n) into the staging area, one
 * page each, as one batch through the ring. Returns the pages read, < 0
 * when the ring fails; a page whose read failed is zeroed (not indexed). */
static int scan_batch(struct kv_tier *t, int32_t s0, int n)
{
	const unsigned per = (unsigned)(t->slot_bytes / PAGE); /* pages per staging buffer */
	for (int k = 0; k < n; k++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);
		uint8_t *page = t->staging + (size_t)k * PAGE;
		if (t->st.fixed_bufs)
			io_uring_prep_read_fixed(sqe, 0, page, PAGE, slot_off(t, s0 + k), (int)(k / per));
		else
			io_uring_prep_read(sqe, 0, page, PAGE, slot_off(t, s0 + k));
		sqe->flags |= IOSQE_FIXED_FILE;
		io_uring_sqe_set_data64(sqe, (uint64_t)k);
	}
	int r = io_uring_submit_and_wait(&t->ring, (unsigned)n);
	if (r < 0)
		return r;
	for (int done = 0; done < n;) {
		struct io_uring_cqe *cqe;
		if ((r = io_uring_wait_cqe(&t->ring, &cqe)) < 0)
			return r;
		if (cqe->res != (int)PAGE)
			memset(t->staging + io_uring_cqe_get_data64(cqe) * PAGE, 0, PAGE);
		io_uring_cqe_seen(&t->ring, cqe);
		t->st.ring_cqes++;
		done++;
	}
	return n;
}

/* Rebuilds the index from the slot headers (start-up): their pages are
 * read in batches as large as the staging area and the ring allow. */
static int scan(struct kv_tier *t, char *err, size_t errlen)
{
	uint64_t(*found)[2] = malloc((size_t)t->n_slots * sizeof *found);
	if (!found)
		return err_at(err, errlen, -ENOMEM, "offload tier: out of memory");
	int64_t n_found = 0, bad = 0;
	int batch = (int)((size_t)t->n_staging * t->slot_bytes / PAGE);
	if (batch > (int)t->ring.sq.ring_entries)
		batch = (int)t->ring.sq.ring_entries;
	for (int32_t s0 = 0; s0 < t->n_slots; s0 += batch) {
		int n = t->n_slots - s0 < batch ? (int)(t->n_slots - s0) : batch;
		int r = scan_batch(t, s0, n);
		if (r < 0) {
			free(found);
			return err_at(err, errlen, r, "offload tier %s: reading the slot headers: %s", t->path,
				      strerror(-r));
		}
		for (int k = 0; k < n; k++) {
			int32_t s = s0 + k;
			struct slot_hdr h;
			memcpy(&h, t->staging + (size_t)k * PAGE, sizeof h);
			if (h.magic == 0)
				continue; /* never written */
			struct kv_hash hash = { h.hash_lo, h.hash_hi };
			if (!hdr_ok(t, &h) || find(t, hash) >= 0) {
				bad++;
				continue;
			}
			t->slots[s] = (struct slot){ .hash = hash, .seqno = h.seqno, .next = -1, .lru_prev = -1,
						     .lru_next = -1, .state = S_VALID };
			index_add(t, s);
			found[n_found][0] = h.seqno;
			found[n_found++][1] = (uint64_t)s;
			if (h.seqno > t->seqno)
				t->seqno = h.seqno;
		}
	}
	qsort(found, n_found, sizeof *found, cmp_seq);
	for (int64_t i = 0; i < n_found; i++)
		lru_push(t, (int32_t)found[i][1]);
	free(found);
	/* the free list: slots not found, highest last so low slots go first */
	t->n_free = 0;
	for (int32_t s = (int32_t)t->n_slots - 1; s >= 0; s--)
		if (t->slots[s].state == S_FREE)
			t->free_slots[t->n_free++] = s;
	t->st.slots_used = n_found;
	t->st.warm_blocks = (uint64_t)n_found;
	t->st.err_header += (uint64_t)bad;
	tlog(t, KV_TIER_LOG_INFO, "offload tier %s: warm start, %lld blocks indexed from the slot headers%s",
	     t->path, (long long)n_found, bad ? " (some slot headers were bad: dropped)" : "");
	if (bad)
		tlog(t, KV_TIER_LOG_WARNING,
		     "offload tier %s: %lld slots with a corrupt, foreign or dropped header left out", t->path,
		     (long long)bad);
	return 0;
}

/* Checks the existing file's header page: true when its slots can be kept
 * (and then the epoch is the file's). */
static bool reusable(struct kv_tier *t, uint8_t *page, off_t size)
{
	if (size < (off_t)PAGE || pread(t->fd, page, PAGE, 0) != PAGE)
		return false;
	struct file_hdr h;
	memcpy(&h, page, sizeof h);
	if (memcmp(h.magic, FILE_MAGIC, 8)) {
		tlog(t, KV_TIER_LOG_WARNING, "offload tier %s: not a tier file (or a corrupt header): starting empty",
		     t->path);
		return false;
	}
	struct file_hdr c = h;
	c.hdr_crc = 0;
	if (crc32c(0, &c, sizeof c) != h.hdr_crc || h.version != FORMAT_VERSION) {
		tlog(t, KV_TIER_LOG_WARNING, "offload tier %s: corrupt header or another format: starting empty", t->path);
		return false;
	}
	if (h.fingerprint != t->fingerprint) {
		tlog(t, KV_TIER_LOG_WARNING, "offload tier %s: written for a different model: starting empty", t->path);
		return false;
	}
	if (h.slot_bytes != t->slot_bytes || h.n_slots != (uint64_t)t->n_slots || h.block_bytes != t->block_bytes ||
	    h.block_size != (uint32_t)t->block_size) {
		tlog(t, KV_TIER_LOG_WARNING, "offload tier %s: another size or block shape: starting empty", t->path);
		return false;
	}
	t->epoch = h.epoch;
	return true;
}

static int setup_file(struct kv_tier *t, const struct kv_tier_opts *o, char *err, size_t errlen)
{
	snprintf(t->path, sizeof t->path, "%s/pagoda-kv.tier", o->dir);
	struct stat st;
	if (stat(o->dir, &st) < 0 || !S_ISDIR(st.st_mode))
		return err_at(err, errlen, -ENOTDIR, "offload dir %s: %s", o->dir,
			      errno && !S_ISDIR(st.st_mode) ? strerror(errno) : "not a directory");
	t->fd = open(t->path, O_RDWR | O_CREAT | O_CLOEXEC | O_DIRECT, 0600);
	t->st.direct = t->fd >= 0;
	if (t->fd < 0 && errno == EINVAL) {
		t->fd = open(t->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (t->fd >= 0)
			tlog(t, KV_TIER_LOG_WARNING,
			     "offload tier %s: the file system refuses O_DIRECT: buffered I/O (through the page cache)",
			     t->path);
	}
	if (t->fd < 0)
		return err_at(err, errlen, -errno, "offload tier %s: %s", t->path, strerror(errno));
	if (flock(t->fd, LOCK_EX | LOCK_NB) < 0)
		return err_at(err, errlen, -EBUSY, "offload tier %s: in use by another process", t->path);
	uint8_t *page = aligned_alloc(PAGE, PAGE);
	if (!page)
		return err_at(err, errlen, -ENOMEM, "offload tier: out of memory");
	fstat(t->fd, &st);
	t->warm = reusable(t, page, st.st_size);
	off_t bytes = (off_t)PAGE + (off_t)t->n_slots * (off_t)t->slot_bytes;
	int r = 0;
	if (!t->warm && ftruncate(t->fd, 0) < 0)
		r = err_at(err, errlen, -errno, "offload tier %s: truncate: %s", t->path, strerror(errno));
	if (!r && fallocate(t->fd, 0, 0, bytes) < 0) {
		int e = errno;
		if (e == EOPNOTSUPP)
			e = posix_fallocate(t->fd, 0, bytes);
		/* what was had goes back to the file system at once */
		if (!t->warm && ftruncate(t->fd, 0) < 0)
			e = e ? e : errno;
		if (e == ENOSPC || e == EDQUOT)
			r = err_at(err, errlen, -ENOSPC,
				   "offload tier %s: cannot preallocate %lld bytes (--offload-size): no space left on "
				   "the file system of %s",
				   t->path, (long long)bytes, o->dir);
		else if (e)
			r = err_at(err, errlen, -e, "offload tier %s: preallocating %lld bytes: %s", t->path,
				   (long long)bytes, strerror(e));
	}
	if (!r && !t->warm) {
		file_hdr_fill(t, page);
		if (pwrite(t->fd, page, PAGE, 0) != PAGE)
			r = err_at(err, errlen, -EIO, "offload tier %s: writing the header: %s", t->path, strerror(errno));
	}
	free(page);
	return r;
}

/* The pool's memory as registered buffers after the staging ones, so that
 * direct I/O to and from a block is READ_FIXED/WRITE_FIXED. Registering
 * pins it (RLIMIT_MEMLOCK, unless CAP_IPC_LOCK): where the kernel refuses,
 * those I/Os are readv/writev, as fast to the disk but mapped each time. */
static void register_pool(struct kv_tier *t, const struct kv_pool *p)
{
	struct iovec *reg = malloc(MAX_REGIONS * sizeof *reg);
	int n = reg ? kv_pool_regions(p, REG_MAX, reg, MAX_REGIONS) : -ENOMEM;
	if (n == -EOPNOTSUPP) {
		free(reg); /* not in host memory: nothing to pin */
		return;
	}
	size_t bytes = 0;
	for (int k = 0; k < n; k++)
		bytes += reg[k].iov_len;
	int r = n < 0 ? n : io_uring_register_buffers_update_tag(&t->ring, (unsigned)t->n_staging, reg, NULL, (unsigned)n);
	if (r == n) {
		t->regions = reg;
		t->n_regions = n;
		t->st.pool_bufs = true;
		return;
	}
	/* a partial registration is undone: none or all */
	for (int k = 0; k < r; k++) {
		struct iovec none = { NULL, 0 };
		io_uring_register_buffers_update_tag(&t->ring, (unsigned)(t->n_staging + k), &none, NULL, 1);
	}
	struct rlimit rl = { 0, 0 };
	getrlimit(RLIMIT_MEMLOCK, &rl);
	char lim[32] = "unlimited";
	if (rl.rlim_cur != RLIM_INFINITY)
		snprintf(lim, sizeof lim, "%llu KiB", (unsigned long long)rl.rlim_cur >> 10);
	tlog(t, KV_TIER_LOG_WARNING,
	     "offload tier: cannot register the KV pool's %zu MiB with io_uring (%s; RLIMIT_MEMLOCK %s): "
	     "blocks go to and from the pool with readv/writev instead",
	     bytes >> 20, strerror(r < 0 ? -r : EAGAIN), lim);
	t->st.pool_unregistered = 1;
	free(reg);
}

static int setup_ring(struct kv_tier *t, const struct kv_tier_opts *o, const struct kv_pool *p, char *err,
		      size_t errlen)
{
	struct io_uring_params par;
	memset(&par, 0, sizeof par);
	if (o->sqpoll) {
		par.flags |= IORING_SETUP_SQPOLL;
		par.sq_thread_idle = 100;
	}
	/* an I/O is up to 1 + MAX_SPANS entries (the header page, the spans) */
	int r = io_uring_queue_init_params((unsigned)(t->n_staging * (1 + MAX_SPANS)), &t->ring, &par);
	if (r < 0)
		return err_at(err, errlen, r, "offload tier: io_uring: %s", strerror(-r));
	t->ring_ok = true;
	t->st.sqpoll = o->sqpoll;
	if ((r = io_uring_register_files(&t->ring, &t->fd, 1)) < 0)
		return err_at(err, errlen, r, "offload tier: io_uring file registration: %s", strerror(-r));
	struct iovec *iov = malloc((size_t)t->n_staging * sizeof *iov);
	if (!iov)
		return err_at(err, errlen, -ENOMEM, "offload tier: out of memory");
	for (int i = 0; i < t->n_staging; i++)
		iov[i] = (struct iovec){ stage(t, i), t->slot_bytes };
	/* A sparse table, staging buffers first: the pool's regions are
	 * registered apart, and may be refused alone. */
	bool sparse = t->st.direct && io_uring_register_buffers_sparse(&t->ring, (unsigned)(t->n_staging + MAX_REGIONS)) == 0;
	if (sparse)
		r = io_uring_register_buffers_update_tag(&t->ring, 0, iov, NULL, (unsigned)t->n_staging);
	else
		r = io_uring_register_buffers(&t->ring, iov, (unsigned)t->n_staging);
	free(iov);
	t->st.fixed_bufs = sparse ? r == t->n_staging : r == 0;
	if (!t->st.fixed_bufs)
		tlog(t, KV_TIER_LOG_WARNING, "offload tier: cannot register %d staging buffers (%s): unregistered I/O",
		     t->n_staging, strerror(r < 0 ? -r : EAGAIN));
	else if (sparse && direct_spans(t, p, 0, (struct iovec[MAX_SPANS]){ { 0 } }))
		register_pool(t, p);
	return 0;
}

int kv_tier_open(struct kv_tier **out, const struct kv_tier_opts *o, const struct kv_pool *p, char *err,
		 size_t errlen)
{
	*out = NULL;
	struct kv_tier *t = calloc(1, sizeof *t);
	if (!t)
		return err_at(err, errlen, -ENOMEM, "offload tier: out of memory");
	t->fd = -1;
	t->log = o->log;
	t->log_user = o->log_user;
	t->block_size = p->block_size;
	t->block_bytes = kv_pool_block_bytes(p);
	t->slot_bytes = SLOT_HDR + (t->block_bytes + PAGE - 1) / PAGE * PAGE;
	/* the model and the block's shape and cache types: another either way
	 * starts empty (f16/f16 hashes as it did before there were others) */
	uint64_t shape[] = { o->fingerprint, (uint64_t)p->block_size, (uint64_t)p->n_layer, (uint64_t)p->kv_dim,
			     (uint64_t)p->type_k << 32 | p->type_v };
	const bool f16 = p->type_k == PG_TYPE_F16 && p->type_v == PG_TYPE_F16;
	t->fingerprint = ((uint64_t)crc32c(0, shape, sizeof shape - (f16 ? sizeof shape[4] : 0)) << 32) ^ o->fingerprint;
	int64_t room = o->size - (int64_t)PAGE;
	t->n_slots = room > 0 ? room / (int64_t)t->slot_bytes : 0;
	int r;
	if (t->n_slots < 1 || t->n_slots > INT32_MAX / 2) {
		r = err_at(err, errlen, -EINVAL,
			   "offload tier: --offload-size %lld holds no block (a slot is %zu bytes, plus a %u-byte header)",
			   (long long)o->size, t->slot_bytes, PAGE);
		goto fail;
	}
	if (o->fault && *o->fault && (r = parse_faults(t, o->fault, err, errlen)) < 0)
		goto fail;
	t->n_staging = (int)(STAGING_BYTES / t->slot_bytes);
	t->n_staging = t->n_staging < 8 ? 8 : t->n_staging > 256 ? 256 : t->n_staging;
	t->slots = calloc((size_t)t->n_slots, sizeof *t->slots);
	t->free_slots = malloc((size_t)t->n_slots * sizeof *t->free_slots);
	t->backlog = malloc((size_t)t->n_slots * sizeof *t->backlog);
	uint64_t nb = 16;
	while (nb < (uint64_t)t->n_slots)
		nb *= 2;
	t->bucket_mask = nb - 1;
	t->buckets = malloc(nb * sizeof *t->buckets);
	t->ops = calloc((size_t)t->n_staging, sizeof *t->ops);
	t->free_ops = malloc((size_t)t->n_staging * sizeof *t->free_ops);
	t->staging = mmap(NULL, (size_t)t->n_staging * t->slot_bytes, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (t->staging == MAP_FAILED)
		t->staging = NULL;
	if (!t->slots || !t->free_slots || !t->backlog || !t->buckets || !t->ops || !t->free_ops || !t->staging) {
		r = err_at(err, errlen, -ENOMEM, "offload tier: out of memory for %lld slots", (long long)t->n_slots);
		goto fail;
	}
	for (uint64_t i = 0; i < nb; i++)
		t->buckets[i] = -1;
	for (int32_t s = 0; s < t->n_slots; s++) {
		t->slots[s] = (struct slot){ .next = -1, .lru_prev = -1, .lru_next = -1, .state = S_FREE };
		t->free_slots[s] = (int32_t)t->n_slots - 1 - s;
	}
	t->n_free = t->n_slots;
	t->lru_head = t->lru_tail = -1;
	for (int i = 0; i < t->n_staging; i++)
		t->free_ops[i] = t->n_staging - 1 - i;
	t->n_free_ops = t->n_staging;
	t->st.slots_total = t->n_slots;
	t->st.slot_bytes = t->slot_bytes;
	if ((r = setup_file(t, o, err, errlen)) < 0 || (r = setup_ring(t, o, p, err, errlen)) < 0 ||
	    (t->warm && (r = scan(t, err, errlen)) < 0))
		goto fail;
	t->st.enabled = true;
	*out = t;
	return 0;
fail:
	kv_tier_close(t);
	return r;
}

void kv_tier_close(struct kv_tier *t)
{
	if (!t)
		return;
	if (t->ring_ok) {
		struct io_uring_cqe *cqe;
		kv_tier_submit(t);
		while (t->n_free_ops < t->n_staging && io_uring_wait_cqe(&t->ring, &cqe) == 0) {
			int i = (int)io_uring_cqe_get_data64(cqe);
			if (part_done(t, i, cqe->res))
				op_put(t, i);
			io_uring_cqe_seen(&t->ring, cqe);
		}
		io_uring_queue_exit(&t->ring);
	}
	if (t->fd >= 0) {
		/* the ring's reference to the file may outlive the ring a while */
		flock(t->fd, LOCK_UN);
		close(t->fd);
	}
	if (t->staging)
		munmap(t->staging, (size_t)t->n_staging * t->slot_bytes);
	free(t->regions);
	free(t->slots);
	free(t->free_slots);
	free(t->backlog);
	free(t->buckets);
	free(t->ops);
	free(t->free_ops);
	free(t);
}
