/* bench/mm_decode.c — the matmuls of one decode token of a GGUF (every
 * layer's seven and the output), on the model's own mapped (or repacked)
 * weights, nothing else: what the kernels alone allow decode to reach.
 *
 *   cc -O2 -I. -o build/mm_decode bench/mm_decode.c build/libpagoda-engine.a \
 *      $(pkg-config --libs libpcre2-8 libxxhash) -lm -pthread
 *   build/mm_decode MODEL.gguf THREADS [REPS]
 */
#include "daemon/model/model.h"
#include "kernels/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s MODEL.gguf THREADS [REPS]\n", argv[0]);
		return 2;
	}
	struct model *m;
	char err[512];
	if (model_load(argv[1], &m, err, sizeof err)) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	const int reps = argc > 3 ? atoi(argv[3]) : 8;
	struct pg_pool *p = pg_pool_create(atoi(argv[2]));
	const int64_t wide = m->hp.n_ff > m->hp.n_embd ? m->hp.n_ff : m->hp.n_embd;
	float *X = malloc(sizeof(float) * (size_t)wide), *Y = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
	srand(3);
	for (int64_t i = 0; i < wide; i++)
		X[i] = (float)rand() / (float)RAND_MAX - 0.5f;
	double *ts = calloc((size_t)reps, sizeof(double));
	for (int r = 0; r < reps; r++) {
		double t = now();
		for (int l = 0; l < m->hp.n_layer; l++) {
			const struct model_layer *L = &m->layers[l];
			const struct model_weight *ws[] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down };
			for (int w = 0; w < 7; w++)
				pg_matmul(p, ws[w]->data, ws[w]->type, ws[w]->rows, ws[w]->cols, X, 1, Y, ws[w]->rows);
		}
		pg_matmul(p, m->output.data, m->output.type, m->output.rows, m->output.cols, X, 1, Y, m->output.rows);
		t = now() - t;
		ts[r] = t;
	}
	qsort(ts, (size_t)reps, sizeof(double), cmp_double);
	printf("matmuls of one decode token: best %.2f ms = %.1f tok/s, median %.2f ms = %.1f tok/s\n", ts[0] * 1e3,
	       1 / ts[0], ts[reps / 2] * 1e3, 1 / ts[reps / 2]);
	free(ts);
	pg_pool_destroy(p);
	model_free(m);
	return 0;
}
