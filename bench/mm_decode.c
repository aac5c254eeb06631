/* bench/mm_decode.c — where a decode token's memory time goes: the
 * matmuls of one token of a GGUF (every layer's seven and the output, on
 * the model's own mapped or repacked weights) set against two plain reads
 * through the same pool, and the whole forward pass of a decode token,
 * alternating so that all four see the same machine:
 *
 *   probe    a 1 GiB buffer split once between the threads, read plainly
 *            and fetching ahead, the faster of the two (bench/membw);
 *   read     the same weights, matrix by matrix, each split between the
 *            threads and joined as the matmuls are: what the token's
 *            access pattern and joins allow with no arithmetic at all;
 *   matmuls  the kernels on those weights, activations quantized as the
 *            engine does;
 *   forward  the CPU backend's step for one token, as the engine decodes one
 *            sequence (its context grows by a token a round, from empty,
 *            to FWD_CTX and around again): the matmuls plus attention,
 *            the norms, RoPE, SwiGLU and the joins between them.
 *
 * read / probe is what the 155 short jobs cost; matmuls / read what the
 * kernels cost on top; forward / probe the share of the measured
 * bandwidth a decode token's weights stream at (everything of a token
 * but sampling and handing it out, which bpf/token_time.bt puts at 60-140
 * us of 25 ms), and forward / read the share of what a plain read of the
 * same weights streams at. That last one does not depend on where the
 * host put the probe's buffer against the weights: on this VM two
 * buffers of one process can stream 1.1x apart (read/probe up to
 * 1.13). Rounds are a few tens of milliseconds apart, where the
 * host's bandwidth moves by a third within a minute, so the ratios are
 * medians of per-round ratios.
 *
 * Given ways of fetching ahead (pg_cpu_set_prefetch's names: lines, pages,
 * auto), it times the token's matmuls under each in turn instead, a round
 * of each after a warm-up, and prints each way's median time and its
 * speed against the first's, per round (median and quartiles).
 *
 *   cc -O2 -march=native -I. -o build/mm_decode bench/mm_decode.c build/libpagoda-engine.a \
 *      $(pkg-config --libs libpcre2-8 libxxhash) -lm -pthread
 *   build/mm_decode MODEL.gguf THREADS [ROUNDS [WAY...]]
 */
#include "daemon/kv/kv.h"
#include "daemon/model/model.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernels.h"
#include "kernels/pg_backend.h"
#include "stream_read.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#define PROBE_BYTES ((size_t)1 << 30)

static volatile uint64_t sink; /* keeps the reads */

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return v[n / 2];
}

/* quarter q (1 or 3) of v, sorted in place */
static double quartile(double *v, int n, int q)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return v[q * n / 4];
}

struct span {
	const uint64_t *p;
	size_t words;
	bool ahead; /* read_slice_ahead */
	uint64_t sink[64]; /* one slot per thread, 8 apart: no shared lines */
};

static void read_job(void *a, int ith, int nth)
{
	struct span *s = a;
	const size_t per = s->words / (size_t)nth;
	const size_t n = ith == nth - 1 ? s->words - per * (size_t)ith : per;
	s->sink[(ith * 8) % 64] ^= s->ahead ? read_slice_ahead(s->p + per * (size_t)ith, n)
					    : read_slice(s->p + per * (size_t)ith, n);
}

/* GB/s of one pass of read_job over s */
static double pass_gbs(struct pg_pool *pool, struct span *s)
{
	const double t = now();
	pg_pool_run(pool, read_job, s);
	return (double)s->words * 8 / (now() - t) / 1e9;
}

/* What a matrix streams: the internal types' bytes are their file type's
 * (Q4_K_X8's repacked groups excepted, which pg_wrow_bytes knows). */
static size_t weight_bytes(const struct cpu_weight *w)
{
	uint32_t t = w->type;
	if (t == PG_TYPE_Q8_0_S127)
		t = PG_TYPE_Q8_0;
	else if (t == PG_TYPE_Q4_0_X8)
		t = PG_TYPE_Q4_0;
	else if (t == PG_TYPE_IQ4_NL_X8)
		t = PG_TYPE_IQ4_NL;
	return pg_wrow_bytes(t, w->cols) * (size_t)w->rows;
}

static void matmuls(struct pg_pool *pool, const struct cpu_weight *const *w, int nw, const float *X, float *Y)
{
	for (int i = 0; i < nw; i++)
		pg_matmul(pool, w[i]->data, w[i]->type, w[i]->rows, w[i]->cols, X, 1, Y, w[i]->rows);
}

/* One sequence decoding token after token, on the engine's forward pass. */
#define FWD_CTX 256

struct decoder {
	const struct model *m;
	struct pg_backend *be;
	struct kv_pool kv;
	struct kv_seq seq;
	float *logits;
	int pos;
};

static int decoder_init(struct decoder *d, const struct model *m, struct pg_backend *be, char *err, size_t errlen)
{
	*d = (struct decoder){ .m = m, .be = be };
	const struct pg_step_limits lim = { 1, 1, FWD_CTX };
	if (pg_backend_reserve(be, &lim, err, errlen) ||
	    kv_pool_init(&d->kv, be, FWD_CTX / 16, 16, m->hp.n_layer, m->hp.n_head_kv * m->hp.head_dim, false, err,
			 errlen))
		return -1;
	d->logits = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
	if (!d->logits || kv_seq_reserve(&d->kv, &d->seq, FWD_CTX)) {
		snprintf(err, errlen, "out of memory for a decoder of %d positions", FWD_CTX);
		return -1;
	}
	return 0;
}

static void decoder_free(struct decoder *d)
{
	if (d->kv.meta) {
		kv_seq_release(&d->kv, &d->seq); /* frees the block table too */
		kv_pool_free(&d->kv);
	}
	free(d->logits);
}

/* One decode step; the next at the following position, wrapping at
 * FWD_CTX (every earlier position is then in the cache already). */
static int decode_step(struct decoder *d)
{
	const int32_t tok = (int32_t)((d->pos * 7919) % d->m->hp.n_vocab), pos = d->pos;
	const int32_t seq = 0, ub = 1;
	const bool want = true;
	const struct pg_block_table table = kv_seq_table(&d->seq);
	const struct pg_batch b = { .n_tokens = 1, .tokens = &tok, .pos = &pos, .seq = &seq, .want = &want,
				    .ubatch = &ub, .n_seqs = 1, .seqs = &table, .logits = d->logits };
	d->pos = (d->pos + 1) % FWD_CTX;
	return pg_backend_step(d->be, &b);
}

#define MAX_WAYS 8
#define MAX_ROUNDS 400

static int compare_ways(struct pg_pool *pool, const struct cpu_weight *const *w, int nw, const float *X, float *Y,
			int rounds, char **ways, int nways)
{
	static double t[MAX_WAYS][MAX_ROUNDS];
	if (nways > MAX_WAYS || rounds > MAX_ROUNDS) {
		fprintf(stderr, "at most %d ways and %d rounds\n", MAX_WAYS, MAX_ROUNDS);
		return 2;
	}
	for (int v = 0; v < nways; v++)
		if (!pg_cpu_set_prefetch(ways[v])) {
			fprintf(stderr, "unknown way %s (lines, pages, auto)\n", ways[v]);
			return 2;
		}
	for (int r = -1; r < rounds; r++)
		for (int v = 0; v < nways; v++) {
			pg_cpu_set_prefetch(ways[v]);
			const double t0 = now();
			matmuls(pool, w, nw, X, Y);
			if (r >= 0)
				t[v][r] = now() - t0;
		}
	printf("one decode token's matmuls, %d rounds per way:\n", rounds);
	for (int v = 0; v < nways; v++) {
		double speed[MAX_ROUNDS];
		for (int r = 0; r < rounds; r++)
			speed[r] = t[0][r] / t[v][r];
		qsort(speed, (size_t)rounds, sizeof *speed, cmp_double);
		printf("  %-6s %.3f ms, speed vs %s %.3f [quartiles %.3f %.3f]\n", ways[v], median(t[v], rounds) * 1e3,
		       ways[0], speed[rounds / 2], speed[rounds / 4], speed[3 * rounds / 4]);
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s MODEL.gguf THREADS [ROUNDS]\n", argv[0]);
		return 2;
	}
	struct model *m;
	struct pg_backend *be;
	char err[512];
	const struct pg_backend_opts bo = { .threads = atoi(argv[2]) };
	if (model_load(argv[1], &m, err, sizeof err) || pg_backend_open("cpu", &bo, &be, err, sizeof err) ||
	    pg_backend_load_weights(be, &m->desc, err, sizeof err)) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	const int rounds = argc > 3 && atoi(argv[3]) > 0 ? atoi(argv[3]) : 9;
	/* the backend's own pool: the reads and matmuls join as its steps do */
	struct pg_pool *pool = pg_cpu_backend_pool(be);
	const struct cpu_model *cm = pg_cpu_backend_model(be);
	const struct cpu_weight *w[7 * 256 + 1];
	int nw = 0;
	for (int l = 0; l < cm->hp.n_layer && l < 256; l++) {
		const struct cpu_layer *L = &cm->layers[l];
		const struct cpu_weight *lw[] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down };
		for (int i = 0; i < 7; i++)
			w[nw++] = lw[i];
	}
	w[nw++] = &cm->output;
	double bytes = 0;
	int64_t wide = 0;
	for (int i = 0; i < nw; i++) {
		bytes += (double)weight_bytes(w[i]);
		wide = w[i]->rows > wide ? w[i]->rows : wide;
		wide = w[i]->cols > wide ? w[i]->cols : wide;
	}
	float *X = malloc(sizeof(float) * (size_t)wide), *Y = malloc(sizeof(float) * (size_t)wide);
	uint64_t *buf = aligned_alloc(2u << 20, PROBE_BYTES); /* on 2 MiB pages, as the weights */
	if (buf)
		madvise(buf, PROBE_BYTES, MADV_HUGEPAGE);
	double *probe = calloc((size_t)rounds, sizeof(double)), *rd = calloc((size_t)rounds, sizeof(double));
	double *mm = calloc((size_t)rounds, sizeof(double)), *r_rd = calloc((size_t)rounds, sizeof(double));
	double *r_mm = calloc((size_t)rounds, sizeof(double)), *r_kern = calloc((size_t)rounds, sizeof(double));
	double *fw = calloc((size_t)rounds, sizeof(double)), *r_fw = calloc((size_t)rounds, sizeof(double));
	double *r_fwrd = calloc((size_t)rounds, sizeof(double));
	if (!X || !Y || !buf || !probe || !rd || !mm || !r_rd || !r_mm || !r_kern || !fw || !r_fw || !r_fwrd) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	srand(3);
	for (int64_t i = 0; i < wide; i++)
		X[i] = (float)rand() / (float)RAND_MAX - 0.5f;
	int rc = 0;
	if (argc > 4) {
		rc = compare_ways(pool, w, nw, X, Y, rounds, argv + 4, argc - 4);
		goto done;
	}
	struct decoder dec;
	int dr = decoder_init(&dec, m, be, err, sizeof err);
	if (!dr && decode_step(&dec)) { /* the warm-up step */
		snprintf(err, sizeof err, "the step failed");
		dr = -1;
	}
	if (dr) {
		fprintf(stderr, "decoder: %s\n", err);
		decoder_free(&dec);
		rc = 1;
		goto done;
	}
	for (size_t i = 0; i < PROBE_BYTES / 8; i++)
		buf[i] = i * 0x9e3779b97f4a7c15ull;
	uint64_t check = 0;
	for (int r = 0; r < rounds; r++) {
		/* the probe: the better of a plain pass and a fetching one */
		struct span s = { buf, PROBE_BYTES / 8, false, { 0 } };
		probe[r] = pass_gbs(pool, &s);
		s.ahead = true;
		const double ahead = pass_gbs(pool, &s);
		probe[r] = ahead > probe[r] ? ahead : probe[r];
		double t = now();
		for (int i = 0; i < nw; i++) {
			struct span ws = { w[i]->data, weight_bytes(w[i]) / 8, false, { 0 } };
			pg_pool_run(pool, read_job, &ws);
			check ^= ws.sink[0];
		}
		rd[r] = bytes / (now() - t) / 1e9;
		t = now();
		matmuls(pool, w, nw, X, Y);
		mm[r] = bytes / (now() - t) / 1e9;
		r_rd[r] = rd[r] / probe[r];
		r_mm[r] = mm[r] / probe[r];
		r_kern[r] = mm[r] / rd[r];
		t = now();
		if (decode_step(&dec)) {
			fprintf(stderr, "decoder: the step failed\n");
			rc = 1;
			break;
		}
		fw[r] = bytes / (now() - t) / 1e9;
		r_fw[r] = fw[r] / probe[r];
		r_fwrd[r] = fw[r] / rd[r];
		check ^= s.sink[0];
	}
	decoder_free(&dec);
	if (rc)
		goto done;
	printf("one decode token's weights, %.3f GB in %d matrices, %d rounds (GB/s, median):\n", bytes / 1e9, nw,
	       rounds);
	printf("  probe %.1f | read matrix by matrix %.1f | matmuls %.1f (%.1f tok/s)\n", median(probe, rounds),
	       median(rd, rounds), median(mm, rounds), median(mm, rounds) * 1e9 / bytes);
	printf("  paired: read/probe %.3f, matmuls/probe %.3f, matmuls/read %.3f\n", median(r_rd, rounds),
	       median(r_mm, rounds), median(r_kern, rounds));
	printf("  forward pass of a decode token %.1f GB/s (%.1f tok/s), paired forward/probe %.3f [quartiles %.3f %.3f]\n",
	       median(fw, rounds), median(fw, rounds) * 1e9 / bytes, median(r_fw, rounds), quartile(r_fw, rounds, 1),
	       quartile(r_fw, rounds, 3));
	printf("  paired forward/read %.3f [quartiles %.3f %.3f]\n", median(r_fwrd, rounds), quartile(r_fwrd, rounds, 1),
	       quartile(r_fwrd, rounds, 3));
	sink = check;
done:
	free(X);
	free(Y);
	free(buf);
	free(probe);
	free(rd);
	free(mm);
	free(r_rd);
	free(r_mm);
	free(r_kern);
	free(fw);
	free(r_fw);
	free(r_fwrd);
	pg_backend_close(be);
	model_free(m);
	return rc;
}
