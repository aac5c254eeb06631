/* daemon/model/tok_encode.c — tok_encode: special-token partition (as
 * llama.cpp's tokenizer_st_partition), BOS/EOS, and the SentencePiece-style
 * encoder (llama.cpp's SPM bigram merge with byte fallback). */
#include "daemon/model/tok_internal.h"

#include <ctype.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

struct frag {
	int32_t id; /* -1: raw text */
	size_t off, len;
};

struct frags {
	struct frag *v;
	size_t n, cap;
};

static int frag_add(struct frags *f, int32_t id, size_t off, size_t len)
{
	if (tokp_reserve((void **)&f->v, &f->cap, f->n + 1, sizeof *f->v))
		return -1;
	f->v[f->n++] = (struct frag){ id, off, len };
	return 0;
}

/* Split the raw fragments of *cur at every occurrence of each special token,
 * longest tokens first. Control and unknown tokens only with parse_special;
 * user-defined ones always. */
static int partition(const struct tokenizer *t, const char *text, size_t len, bool parse_special,
		     struct frags *cur)
{
	struct frags nxt = { 0 };
	int rc = -1;
	if (frag_add(cur, -1, 0, len))
		return -1;
	for (int si = 0; si < t->n_special; si++) {
		int32_t sid = t->special[si];
		const struct tokp_entry *e = &t->tok[sid];
		if (!parse_special && (e->attr & (TOKA_CONTROL | TOKA_UNKNOWN)))
			continue;
		const char *st = t->arena + e->off;
		size_t sl = e->len;
		bool any = false;
		for (size_t i = 0; i < cur->n && !any; i++)
			if (cur->v[i].id < 0 && cur->v[i].len >= sl &&
			    memmem(text + cur->v[i].off, cur->v[i].len, st, sl))
				any = true;
		if (!any)
			continue;
		nxt.n = 0;
		for (size_t i = 0; i < cur->n; i++) {
			struct frag fr = cur->v[i];
			if (fr.id >= 0) {
				if (frag_add(&nxt, fr.id, 0, 0))
					goto out;
				continue;
			}
			size_t base = fr.off, blen = fr.len;
			for (;;) {
				const char *m = blen >= sl ? memmem(text + base, blen, st, sl) : NULL;
				if (!m) {
					if (blen > 0 && frag_add(&nxt, -1, base, blen))
						goto out;
					break;
				}
				size_t mpos = (size_t)(m - text);
				if (mpos > base) {
					size_t ll = mpos - base;
					if (e->attr & TOKA_LSTRIP)
						while (ll > 0 && isspace((unsigned char)text[base + ll - 1]))
							ll--;
					if (ll > 0 && frag_add(&nxt, -1, base, ll))
						goto out;
				}
				if (frag_add(&nxt, sid, 0, 0))
					goto out;
				size_t end = base + blen, roff = mpos + sl;
				if (roff >= end)
					break;
				size_t rlen = end - roff;
				if (e->attr & TOKA_RSTRIP)
					while (rlen > 0 && isspace((unsigned char)text[roff])) {
						roff++;
						rlen--;
					}
				base = roff;
				blen = rlen;
			}
		}
		struct frags tmp = *cur;
		*cur = nxt;
		nxt = tmp;
	}
	rc = 0;
out:
	free(nxt.v);
	return rc;
}

/* ---- SPM ----------------------------------------------------------------- */

struct spm_sym {
	int prev, next;
	size_t off, n; /* in the escaped text */
};

struct spm_bigram {
	int left, right;
	float score;
	size_t size;
};

/* max-heap on (score, -left) */
static bool spm_before(const void *x, const void *y)
{
	const struct spm_bigram *a = x, *b = y;
	return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static int spm_try(const struct tokenizer *t, const char *s, struct spm_sym *sym, int l, int r,
		   struct tokp_heap *h)
{
	if (l < 0 || r < 0)
		return 0;
	size_t n = sym[l].n + sym[r].n;
	if (n > t->max_token_len)
		return 0;
	int32_t id = tokp_find(t, s + sym[l].off, n);
	if (id < 0)
		return 0;
	return tokp_heap_push(h, &(struct spm_bigram){ l, r, t->tok[id].score, n });
}

/* s: the text with spaces already escaped to U+2581 */
static int spm_encode(const struct tokenizer *t, const char *s, size_t n, struct tokp_ids *out)
{
	if (n == 0)
		return 0;
	struct spm_sym *sym = malloc(n * sizeof *sym);
	struct tokp_heap h = { .size = sizeof(struct spm_bigram), .before = spm_before };
	int rc = -1;
	if (!sym)
		return -1;
	int ns = 0;
	for (size_t off = 0; off < n;) {
		size_t l = (size_t)tokp_utf8_len((uint8_t)s[off]);
		if (l > n - off)
			l = n - off;
		sym[ns].off = off;
		sym[ns].n = l;
		off += l;
		sym[ns].prev = ns - 1;
		sym[ns].next = off == n ? -1 : ns + 1;
		ns++;
	}
	for (int i = 1; i < ns; i++)
		if (spm_try(t, s, sym, i - 1, i, &h))
			goto out;
	while (h.n) {
		struct spm_bigram b;
		tokp_heap_pop(&h, &b);
		struct spm_sym *L = &sym[b.left], *R = &sym[b.right];
		if (L->n == 0 || R->n == 0 || L->n + R->n != b.size)
			continue;
		L->n += R->n;
		R->n = 0;
		L->next = R->next;
		if (R->next >= 0)
			sym[R->next].prev = b.left;
		if (spm_try(t, s, sym, L->prev, b.left, &h) || spm_try(t, s, sym, b.left, L->next, &h))
			goto out;
	}
	for (int i = 0; i != -1; i = sym[i].next) {
		int32_t id = tokp_find(t, s + sym[i].off, sym[i].n);
		if (id >= 0) {
			if (tokp_push(out, id))
				goto out;
			continue;
		}
		/* byte fallback (a byte without a token is dropped: llama.cpp
		 * would throw) */
		for (size_t j = 0; j < sym[i].n; j++) {
			int32_t bid = t->byte_tok[(uint8_t)s[sym[i].off + j]];
			if (bid >= 0 && tokp_push(out, bid))
				goto out;
		}
	}
	rc = 0;
out:
	free(sym);
	free(h.v);
	return rc;
}


/* ---- tok_encode ------------------------------------------------------------ */

int tok_encode(const struct tokenizer *t, const char *text, size_t len, bool add_bos, bool parse_special,
	       int32_t *out, int max)
{
	if (!t || (!text && len) || max < 0 || (max > 0 && !out) || len > (size_t)INT_MAX / 4)
		return TOK_ERR;
	struct tokp_ids ids = { 0 };
	struct frags fr = { 0 };
	char *esc = NULL;
	size_t esc_cap = 0;
	int rc = TOK_ERR;
	if (add_bos && t->bos >= 0 && tokp_push(&ids, t->bos))
		goto out;
	if (len && partition(t, text, len, parse_special, &fr))
		goto out;
	bool prev_special = true;
	for (size_t i = 0; i < fr.n; i++) {
		const struct frag *f = &fr.v[i];
		if (f->id >= 0) {
			if (tokp_push(&ids, f->id))
				goto out;
			prev_special = true;
			continue;
		}
		if (t->type == TOKP_SPM) {
			/* optional leading space, then ' ' -> U+2581 */
			size_t need = (f->len + 1) * 3;
			if (tokp_reserve((void **)&esc, &esc_cap, need, 1))
				goto out;
			size_t k = 0;
			if (t->add_space_prefix && prev_special) {
				memcpy(esc, "\xE2\x96\x81", 3);
				k = 3;
			}
			for (size_t j = 0; j < f->len; j++) {
				char c = text[f->off + j];
				if (c == ' ') {
					memcpy(esc + k, "\xE2\x96\x81", 3);
					k += 3;
				} else {
					esc[k++] = c;
				}
			}
			if (spm_encode(t, esc, k, &ids))
				goto out;
		} else {
			if (tokp_bpe_encode(t, text + f->off, f->len, &ids))
				goto out;
		}
		prev_special = false;
	}
	if (add_bos && t->add_eos && t->eos >= 0 && tokp_push(&ids, t->eos))
		goto out;
	if (ids.n > (size_t)INT_MAX)
		goto out;
	if ((int)ids.n > max) {
		rc = -(int)ids.n;
		goto out;
	}
	if (ids.n)
		memcpy(out, ids.v, ids.n * sizeof *out);
	rc = (int)ids.n;
out:
	free(ids.v);
	free(fr.v);
	free(esc);
	return rc;
}
