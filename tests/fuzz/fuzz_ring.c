// fuzz-sources: daemon/server/proto.c
/* libFuzzer target: the daemon's side of a client's shared memory, over
 * arbitrary bytes. The input is a script of ring positions followed by an
 * image of the whole mapping (rings, entries, arena); between steps the
 * script moves the SQ tail and CQ head as a hostile client could, and the
 * daemon's code reads, checks and copies as it does in pagodad. ASan+UBSan
 * catch any out-of-bounds read or write. */
#include "daemon/server/proto.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SCRIPT 32

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static void *mem;
	static struct pg_shm_hdr lay;
	static uint64_t msize;
	if (!mem) {
		memset(&lay, 0, sizeof lay);
		msize = pg_layout(&lay, 8, 8, 128, 4096);
		lay.n_ctx = 256;
		lay.n_vocab = 512;
		mem = aligned_alloc(4096, msize);
	}
	if (size < SCRIPT * 4)
		return 0;
	struct proto_conn pc;
	memset(mem, 0, msize);
	proto_init(&pc, mem, &lay);
	/* the image covers everything after the header page */
	size_t img = size - SCRIPT * 4;
	if (img > msize - 4096)
		img = msize - 4096;
	memcpy((char *)mem + 4096, data + SCRIPT * 4, img);

	volatile uint64_t sink = 0;
	for (int step = 0; step < SCRIPT; step++) {
		uint32_t v;
		memcpy(&v, data + step * 4, 4);
		if (step % 2 == 0)
			atomic_store(&pc.sqc->tail, v);
		else
			atomic_store(&pc.cqc->head, v);
		struct pg_sqe e;
		const char *why;
		int got;
		while ((got = proto_sq_next(&pc, &e, &why)) == 1) {
			char msg[128];
			int rc = proto_sqe_check(&pc, &e, msg, sizeof msg);
			if (rc < 0)
				return 0; /* disconnect */
			if (rc == PG_OK && e.op == PG_OP_SUBMIT) {
				char *buf;
				size_t len;
				if (proto_copy_prompt(&pc, &e, &buf, &len) == 0) {
					if (e.flags & PG_SUBMIT_IDS)
						sink += (uint64_t)proto_check_ids((const int32_t *)buf, len / 4, lay.n_vocab);
					else
						sink += len ? (uint8_t)buf[len - 1] : 0;
					free(buf);
				}
				if (e.flags & PG_SUBMIT_EXT) {
					struct pg_submit_ext x;
					char *text;
					if (proto_copy_ext(&pc, &e, &x, &text, msg, sizeof msg) == PG_OK && text) {
						sink += (uint8_t)text[x.constraint_len]; /* the NUL it promises */
						free(text);
					}
				}
			}
			proto_sq_consume(&pc);
			/* answer with a completion, as the daemon would */
			int space = proto_cq_space(&pc, &why);
			if (space < 0)
				return 0;
			if (space > 0) {
				struct pg_cqe c;
				memset(&c, 0, sizeof c);
				c.type = step % 3 ? PG_CQE_TOKEN : PG_CQE_ALT;
				c.req_id = e.req_id;
				proto_cq_write(&pc, &c, (const char *)data, size < 200 ? size : 200);
				proto_cq_publish(&pc);
			}
		}
		if (got < 0)
			return 0;
	}
	(void)sink;
	return 0;
}
