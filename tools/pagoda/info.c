/* tools/pagoda/info.c — `pagoda info`: what a GGUF file holds, and whether
 * pagoda can run it. */
#include "daemon/model/gguf.h"
#include "daemon/model/model.h"
#include "kernels/cpu/kernels.h"
#include "kernels/types.h"
#include "tools/pagoda/cmds.h"

#include <stdio.h>
#include <string.h>

static void print_kv(const struct gguf_kv *kv)
{
	printf("  %-44.*s %-4s ", (int)kv->key.len, kv->key.ptr, gguf_vtype_name(kv->type));
	switch (kv->type) {
	case GGUF_STRING:
		printf("%.*s%s\n", (int)(kv->v.str.len > 64 ? 64 : kv->v.str.len), kv->v.str.ptr,
		       kv->v.str.len > 64 ? "..." : "");
		break;
	case GGUF_ARRAY:
		printf("[%s x %llu]\n", gguf_vtype_name(kv->v.arr.type), (unsigned long long)kv->v.arr.n);
		break;
	case GGUF_FLOAT32:
	case GGUF_FLOAT64:
		printf("%g\n", kv->v.f64);
		break;
	case GGUF_INT8: case GGUF_INT16: case GGUF_INT32: case GGUF_INT64:
		printf("%lld\n", (long long)kv->v.i64);
		break;
	default:
		printf("%llu\n", (unsigned long long)kv->v.u64);
	}
}

static bool refused(const struct pg_tensor *t, char *err, size_t errlen)
{
	if (pg_type_supported(t->type))
		return false;
	snprintf(err, errlen, "model: tensor %s: weight type %s is not supported", t->name, pg_type_name(t->type));
	return true;
}

/* The CPU backend's check of the weight types, without its copy of them. */
static bool cpu_refuses(struct model *m, char *err, size_t errlen)
{
	const struct pg_model_desc *d = &m->desc;
	bool no = refused(&d->tok_embd, err, errlen) || refused(&d->output, err, errlen);
	for (int i = 0; !no && i < d->hp.n_layer; i++) {
		const struct pg_layer_desc *ly = &d->layers[i];
		no = refused(&ly->wq, err, errlen) || refused(&ly->wk, err, errlen) || refused(&ly->wv, err, errlen) ||
		     refused(&ly->wo, err, errlen) || refused(&ly->w_gate, err, errlen) ||
		     refused(&ly->w_up, err, errlen) || refused(&ly->w_down, err, errlen);
	}
	if (no)
		model_free(m);
	return no;
}

int cmd_info(int argc, char **argv)
{
	const char *path = NULL;
	bool tensors = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--tensors"))
			tensors = true;
		else if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc)
			path = argv[++i];
		else {
			fprintf(stderr, "usage: pagoda info -m MODEL.gguf [--tensors]\n");
			return strcmp(argv[i], "--help") ? 2 : 0;
		}
	}
	if (!path) {
		fprintf(stderr, "pagoda info: -m MODEL is required\n");
		return 2;
	}
	char err[512];
	struct gguf_file *f;
	if (gguf_open(path, &f, err, sizeof err)) {
		fprintf(stderr, "pagoda info: %s\n", err);
		return 1;
	}
	printf("%s: GGUF v%u, %llu metadata keys, %llu tensors\n", path, f->version,
	       (unsigned long long)f->n_kv, (unsigned long long)f->n_tensors);
	for (uint64_t i = 0; i < f->n_kv; i++)
		print_kv(&f->kv[i]);
	if (tensors)
		for (uint64_t i = 0; i < f->n_tensors; i++) {
			const struct gguf_tensor *t = &f->tensors[i];
			printf("  %-32.*s %-5s [%llu, %llu, %llu, %llu] %llu bytes\n", (int)t->name.len,
			       t->name.ptr, pg_type_name(t->type), (unsigned long long)t->ne[0],
			       (unsigned long long)t->ne[1], (unsigned long long)t->ne[2],
			       (unsigned long long)t->ne[3], (unsigned long long)t->size);
		}
	gguf_close(f);
	struct model *m;
	if (model_load(path, &m, err, sizeof err) || cpu_refuses(m, err, sizeof err)) {
		printf("not runnable by pagoda: %s\n", err);
		return 1;
	}
	const struct model_hparams *hp = &m->hp;
	printf("model: %s (%s), %.2fM parameters, mostly %s\n", m->name, m->arch_name, m->n_params / 1e6,
	       pg_type_name(m->main_type));
	printf("  dim %d, %d layers, %d heads (%d KV, head dim %d), ffn %d, vocab %d, context %d\n",
	       hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_ff, hp->n_vocab,
	       hp->n_ctx_train);
	model_free(m);
	return 0;
}
