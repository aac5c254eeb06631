/* daemon/grammar/schema_num.c — JSON numbers as the grammar writes them:
 * integers and decimals between bounds (exact decimal-range grammars,
 * digit by digit), and multipleOf as p * 10^-k (a limit on the fraction's
 * digits, or a remainder automaton over the digits). A bounded number is
 * written without an exponent. */
#include "daemon/grammar/schema_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* -?(0|[1-9][0-9]*) */
int32_t sc_json_int(struct sc *c)
{
	if (!c->integer) {
		int32_t nat = sc_alt2(c, sc_lit(c, "0"), sc_seq2(c, sc_digits(c, '1', '9'), gmb_rep(c->b, sc_digits(c, '0', '9'), 0, -1)));
		c->integer = sc_seq2(c, gmb_rep(c->b, sc_lit(c, "-"), 0, 1), nat);
	}
	return c->integer;
}

static int32_t frac_exp(struct sc *c)
{
	int32_t d = gmb_rep(c->b, sc_digits(c, '0', '9'), 1, -1);
	int32_t frac = gmb_rep(c->b, sc_seq2(c, sc_lit(c, "."), d), 0, 1);
	int32_t sign = gmb_rep(c->b, gmb_alt(c->b, (int32_t[]){ sc_lit(c, "+"), sc_lit(c, "-") }, 2), 0, 1);
	int32_t exp = gmb_rep(c->b, sc_seq3(c, gmb_alt(c->b, (int32_t[]){ sc_lit(c, "e"), sc_lit(c, "E") }, 2), sign, d), 0, 1);
	return sc_seq2(c, frac, exp);
}

int32_t sc_json_number(struct sc *c)
{
	if (!c->number)
		c->number = sc_seq2(c, sc_json_int(c), frac_exp(c));
	return c->number;
}

/* ---- integers in a range ---------------------------------------------- */

/* Decimal strings of equal length n from lo to hi. */
static int32_t dig_range(struct sc *c, const char *lo, const char *hi, int n)
{
	if (n == 0)
		return gmb_eps(c->b);
	if (lo[0] == hi[0])
		return sc_seq2(c, gmb_byte(c->b, (uint8_t)lo[0]), dig_range(c, lo + 1, hi + 1, n - 1));
	char zeros[24], nines[24];
	memset(zeros, '0', n - 1);
	memset(nines, '9', n - 1);
	bool lo_min = !memcmp(lo + 1, zeros, n - 1), hi_max = !memcmp(hi + 1, nines, n - 1);
	int32_t alts[3];
	int k = 0;
	char first = lo_min ? lo[0] : lo[0] + 1, last = hi_max ? hi[0] : hi[0] - 1;
	if (!lo_min)
		alts[k++] = sc_seq2(c, gmb_byte(c->b, (uint8_t)lo[0]), dig_range(c, lo + 1, nines, n - 1));
	if (first <= last)
		alts[k++] = sc_seq2(c, sc_digits(c, first, last), gmb_rep(c->b, sc_digits(c, '0', '9'), n - 1, n - 1));
	if (!hi_max)
		alts[k++] = sc_seq2(c, gmb_byte(c->b, (uint8_t)hi[0]), dig_range(c, zeros, hi + 1, n - 1));
	return gmb_alt(c->b, alts, k);
}

/* Naturals from lo to hi (hi < 0: no bound), without leading zeros. */
static int32_t nat_range(struct sc *c, long long lo, long long hi)
{
	char a[24], z[24];
	int la = snprintf(a, sizeof a, "%lld", lo);
	int lz = hi < 0 ? la : snprintf(z, sizeof z, "%lld", hi);
	int32_t alts[24];
	int k = 0;
	for (int len = la; len <= lz; len++) {
		char from[24], to[24];
		if (len == la)
			memcpy(from, a, la + 1);
		else
			snprintf(from, sizeof from, "1%0*d", len - 1, 0);
		if (hi >= 0 && len == lz)
			memcpy(to, z, lz + 1);
		else
			memset(to, '9', len), to[len] = 0;
		alts[k++] = dig_range(c, from, to, len);
	}
	if (hi < 0)
		alts[k++] = sc_seq2(c, sc_digits(c, '1', '9'), gmb_rep(c->b, sc_digits(c, '0', '9'), la, -1));
	return gmb_alt(c->b, alts, k);
}

#define BIG 1e17

static int32_t int_range(struct sc *c, double lo, double hi)
{
	/* lo/hi: inclusive integer bounds, +-INFINITY when none */
	if (lo > hi)
		return gmb_none(c->b);
	int32_t alts[2];
	int k = 0;
	if (hi >= 0) /* the naturals */
		alts[k++] = nat_range(c, lo > 0 ? (long long)lo : 0, isinf(hi) ? -1 : (long long)hi);
	if (lo < 0) { /* -n for n from max(1, -hi) to -lo */
		long long nlo = hi < -1 ? (long long)-hi : 1;
		alts[k++] = sc_seq2(c, sc_lit(c, "-"), nat_range(c, nlo, isinf(lo) ? -1 : (long long)-lo));
	}
	return gmb_alt(c->b, alts, k);
}

static bool num_kw(struct sc *c, const struct jv *s, const char *k, double *out)
{
	const struct jv *v = jv_get(s, k);
	if (!v || v->t == JV_BOOL)
		return false;
	if (v->t != JV_NUM)
		return sc_err(c, "'%s' is not a number", k);
	*out = v->num;
	return true;
}

/* Bounds of s: [lo, hi] with strictness; false when it has none. */
static bool bounds(struct sc *c, const struct jv *s, double *lo, bool *xlo, double *hi, bool *xhi)
{
	*lo = -INFINITY, *hi = INFINITY, *xlo = *xhi = false;
	double v = 0;
	bool any = false;
	if (num_kw(c, s, "minimum", &v))
		*lo = v, any = true;
	if (num_kw(c, s, "maximum", &v))
		*hi = v, any = true;
	if (sc_true(jv_get(s, "exclusiveMinimum")))
		*xlo = true;
	if (sc_true(jv_get(s, "exclusiveMaximum")))
		*xhi = true;
	if (num_kw(c, s, "exclusiveMinimum", &v) && v >= *lo)
		*lo = v, *xlo = true, any = true;
	if (num_kw(c, s, "exclusiveMaximum", &v) && v <= *hi)
		*hi = v, *xhi = true, any = true;
	if (fabs(*lo) > BIG && !isinf(*lo))
		*lo = -INFINITY;
	if (fabs(*hi) > BIG && !isinf(*hi))
		*hi = INFINITY;
	return any;
}

/* multipleOf as p * 10^-k: false when it is not a positive decimal */
static bool mult_of(const struct jv *m, long long *p, int *k)
{
	if (m->t != JV_NUM || !(m->num > 0))
		return false;
	for (*k = 0; *k <= 12; (*k)++) {
		double x = m->num * pow(10, *k), r = round(x);
		if (fabs(x - r) <= 1e-9 * r && r < 1e9) {
			*p = (long long)r;
			return true;
		}
	}
	return false;
}

static long long gcd(long long a, long long b)
{
	while (b) {
		long long t = a % b;
		a = b;
		b = t;
	}
	return a;
}

/* Numbers (k < 0: integers) whose value * 10^k is a multiple of q (or,
 * inverted, integer-valued ones that are not, k <= 0): the digits run a
 * remainder automaton; fraction digits past the k-th must be zeros. No
 * exponent. */
static int32_t multiples(struct sc *c, long long q, int k, bool invert)
{
	int kk = k < 0 ? 0 : k;
	int32_t *R = malloc(q * sizeof *R), *G = malloc(((size_t)kk + 1) * q * sizeof *G);
	if (!R || !G) {
		free(R), free(G);
		return gmb_fail(c->b, "out of memory"), 0;
	}
	/* R[r]: integer digits so far leave r; G[j][r]: j fraction digits read
	 * leave r, and at least one more digit follows */
	for (long long r = 0; r < q; r++)
		R[r] = gmb_nt(c->b);
	for (size_t i = 0; i < (size_t)kk * q; i++)
		G[i] = gmb_nt(c->b);
	long long *p10 = malloc(((size_t)kk + 1) * sizeof *p10); /* 10^(kk - j) mod q */
	if (!p10) {
		free(R), free(G);
		return gmb_fail(c->b, "out of memory"), 0;
	}
	p10[kk] = 1 % q;
	for (int j = kk - 1; j >= 0; j--)
		p10[j] = p10[j + 1] * 10 % q;
	int32_t zeros = gmb_rep(c->b, sc_lit(c, "0"), 0, -1);
	for (int j = 0; j < kk && !c->b->failed; j++)
		for (long long r = 0; r < q; r++)
			for (int d = 0; d <= 9; d++) {
				long long r2 = (r * 10 + d) % q;
				int32_t after;
				if (j + 1 == kk)
					after = r2 == 0 ? zeros : gmb_none(c->b);
				else
					after = r2 * p10[j + 1] % q == 0 ? sc_alt2(c, gmb_eps(c->b), G[(j + 1) * q + r2]) :
									  G[(j + 1) * q + r2];
				int32_t x = sc_seq2(c, gmb_byte(c->b, (uint8_t)('0' + d)), after);
				gmb_prod(c->b, G[j * q + r], &x, 1);
			}
	int32_t *T = malloc(q * sizeof *T);
	for (long long r = 0; T && r < q && !c->b->failed; r++) {
		int32_t alts[2];
		int n = 0;
		bool ok = (r * p10[0] % q == 0) != invert;
		if (ok)
			alts[n++] = gmb_eps(c->b);
		if (k == 0 && ok)
			alts[n++] = sc_seq3(c, sc_lit(c, "."), sc_lit(c, "0"), zeros);
		else if (k > 0)
			alts[n++] = sc_seq2(c, sc_lit(c, "."), G[r]);
		T[r] = n ? gmb_alt(c->b, alts, n) : gmb_none(c->b);
		gmb_prod(c->b, R[r], &T[r], 1);
		for (int d = 0; d <= 9; d++) {
			int32_t x = sc_seq2(c, gmb_byte(c->b, (uint8_t)('0' + d)), R[(r * 10 + d) % q]);
			gmb_prod(c->b, R[r], &x, 1);
		}
	}
	int32_t first[10] = { 0 };
	if (T) {
		first[0] = sc_seq2(c, sc_lit(c, "0"), T[0]);
		for (int d = 1; d <= 9; d++)
			first[d] = sc_seq2(c, gmb_byte(c->b, (uint8_t)('0' + d)), R[d % q]);
	}
	free(R), free(G), free(T), free(p10);
	if (!T)
		return gmb_fail(c->b, "out of memory"), 0;
	return sc_seq2(c, gmb_rep(c->b, sc_lit(c, "-"), 0, 1), gmb_alt(c->b, first, 10));
}

/* A bound as an exact decimal: |v| = ip.fr (fr without trailing zeros). */
struct dec {
	long long ip;
	char fr[32];
	bool neg;
};

static bool dec_of(const struct jv *v, struct dec *d)
{
	char dig[80];
	int nd = 0, point = -1, i = 0;
	long e = 0;
	const char *t = v->s;
	memset(d, 0, sizeof *d);
	if (t[i] == '-')
		d->neg = true, i++;
	for (; t[i] && t[i] != 'e' && t[i] != 'E'; i++) {
		if (t[i] == '.')
			point = nd;
		else if (nd < 70)
			dig[nd++] = t[i];
		else
			return false;
	}
	if (t[i])
		e = strtol(t + i + 1, NULL, 10);
	if (point < 0)
		point = nd;
	point += (int)e;
	if (point > 17 || point < -30)
		return false;
	/* digits dig[0..nd) with the decimal point before index point */
	for (int k = 0; k < point; k++)
		d->ip = d->ip * 10 + (k < nd ? dig[k] - '0' : 0);
	int n = 0;
	for (int k = point < 0 ? point : point; k < nd; k++) {
		if (n >= 31)
			return false;
		d->fr[n++] = k < 0 ? '0' : dig[k];
	}
	while (n > 0 && d->fr[n - 1] == '0')
		n--;
	d->fr[n] = 0;
	return true;
}

/* Digit strings S (fd >= 0: only zeros past fd digits) with lo <= 0.S <= hi,
 * either end strict, NULL for none. The nonempty ones; *empty: "" is one. */
static int32_t frac_range(struct sc *c, const char *lo, bool xlo, const char *hi, bool xhi, int fd, bool *empty)
{
	bool lo0 = lo && !lo[strspn(lo, "0")], hi0 = hi && !hi[strspn(hi, "0")];
	if (lo0 && !xlo)
		lo = NULL, lo0 = false;
	*empty = !lo && !(hi0 && xhi);
	int32_t d = sc_digits(c, '0', '9');
	int32_t tail = fd < 0 ? gmb_rep(c->b, d, 0, -1) : sc_seq2(c, gmb_rep(c->b, d, 0, fd > 0 ? fd - 1 : 0),
								gmb_rep(c->b, sc_lit(c, "0"), 0, -1));
	int32_t zeros = gmb_rep(c->b, sc_lit(c, "0"), 1, -1);
	if (hi0) /* only zeros, if anything */
		return xhi || lo ? gmb_none(c->b) : zeros;
	if (lo0) { /* something above zero: a nonzero digit within fd */
		if (fd == 0)
			return gmb_none(c->b);
		if (!hi && fd < 0)
			return sc_seq3(c, gmb_rep(c->b, sc_lit(c, "0"), 0, -1), sc_digits(c, '1', '9'), gmb_rep(c->b, d, 0, -1));
	}
	if (!lo && !hi)
		return fd == 0 ? zeros : sc_seq2(c, d, tail);
	int32_t alts[10];
	int n = 0;
	for (int e = 0; e <= 9; e++) {
		if (fd == 0 && e > 0)
			break;
		int l0 = lo ? (lo[0] ? lo[0] : '0') - '0' : -1, h0 = hi ? (hi[0] ? hi[0] : '0') - '0' : 10;
		if (e < l0 || e > h0)
			continue;
		const char *nlo = e == l0 ? (lo[0] ? lo + 1 : lo) : NULL, *nhi = e == h0 ? (hi[0] ? hi + 1 : hi) : NULL;
		int f = e;
		while (f < 9 && f + 1 != l0 && f + 1 != h0 && e != l0 && e != h0 && !(fd == 0))
			f++;
		bool emp;
		int32_t rest = frac_range(c, nlo, xlo, nhi, xhi, fd < 0 ? -1 : fd > 0 ? fd - 1 : 0, &emp);
		int32_t after = emp ? sc_alt2(c, gmb_eps(c->b), rest) : rest;
		alts[n++] = sc_seq2(c, sc_digits(c, (char)('0' + e), (char)('0' + f)), after);
		e = f;
	}
	return n ? gmb_alt(c->b, alts, n) : gmb_none(c->b);
}

/* ip followed by a fraction in range, "." and digits, or nothing */
static int32_t with_frac(struct sc *c, int32_t ip, const char *lo, bool xlo, const char *hi, bool xhi, int fd)
{
	bool emp;
	int32_t f = sc_seq2(c, sc_lit(c, "."), frac_range(c, lo, xlo, hi, xhi, fd, &emp));
	return sc_seq2(c, ip, emp ? sc_alt2(c, gmb_eps(c->b), f) : f);
}

/* Decimals (no sign, no exponent) y with a <= y <= b (b->ip < 0: no bound). */
static int32_t magnitude(struct sc *c, const struct dec *a, bool xa, const struct dec *b, bool xb, int fd)
{
	int32_t alts[3];
	int k = 0;
	bool inf = b->ip < 0;
	if (!inf && (a->ip > b->ip || (a->ip == b->ip && strcmp(a->fr, b->fr) > 0)))
		return gmb_none(c->b);
	if (!inf && a->ip == b->ip)
		return with_frac(c, int_range(c, (double)a->ip, (double)a->ip), a->fr, xa, b->fr, xb, fd);
	if (inf || a->ip + 1 <= b->ip - 1)
		alts[k++] = with_frac(c, int_range(c, (double)a->ip + 1, inf ? INFINITY : (double)b->ip - 1), NULL, false,
				      NULL, false, fd);
	alts[k++] = with_frac(c, int_range(c, (double)a->ip, (double)a->ip), a->fr, xa, NULL, false, fd);
	if (!inf)
		alts[k++] = with_frac(c, int_range(c, (double)b->ip, (double)b->ip), NULL, false, b->fr, xb, fd);
	return gmb_alt(c->b, alts, k);
}

/* The tighter of a bound and its exclusive form: the keyword's value. */
static const struct jv *bound_of(const struct jv *s, bool lower, bool *x)
{
	const struct jv *in = jv_get(s, lower ? "minimum" : "maximum");
	const struct jv *ex = jv_get(s, lower ? "exclusiveMinimum" : "exclusiveMaximum");
	if (in && in->t != JV_NUM)
		in = NULL;
	*x = ex && ex->t == JV_BOOL && ex->b;
	if (ex && ex->t == JV_NUM && (!in || (lower ? ex->num >= in->num : ex->num <= in->num))) {
		*x = true;
		return fabs(ex->num) > BIG ? NULL : ex;
	}
	return in && fabs(in->num) > BIG ? NULL : in;
}

/* The multiples of p * 10^-k between the bounds, listed (up to 1000). */
static int32_t listed(struct sc *c, double lo, bool xlo, double hi, bool xhi, long long p, int k, bool integer)
{
	double scale = pow(10, k), m = (double)p / scale;
	if (isinf(lo) || isinf(hi))
		return sc_err(c, "unsupported keyword '%s' with one bound", "multipleOf"), 0;
	long long jlo = (long long)ceil(lo / m - 1e-9), jhi = (long long)floor(hi / m + 1e-9);
	if (xlo && fabs(jlo * m - lo) < 1e-9 * fmax(1, fabs(lo)))
		jlo++;
	if (xhi && fabs(jhi * m - hi) < 1e-9 * fmax(1, fabs(hi)))
		jhi--;
	if (jhi - jlo >= 1000)
		return sc_err(c, "'%s' with bounds allows over 1000 values", "multipleOf"), 0;
	if (jhi < jlo)
		return gmb_none(c->b);
	int32_t *alts = malloc((jhi - jlo + 1) * sizeof *alts);
	if (!alts)
		return gmb_fail(c->b, "out of memory"), 0;
	int32_t zeros = gmb_rep(c->b, sc_lit(c, "0"), 0, -1);
	int32_t dot0 = gmb_rep(c->b, sc_seq2(c, sc_lit(c, "."), gmb_rep(c->b, sc_lit(c, "0"), 1, -1)), 0, 1);
	int n = 0;
	for (long long j = jlo; j <= jhi; j++) {
		char t[64];
		long long v = j * p, a = v < 0 ? -v : v, ten = 1;
		for (int i = 0; i < k; i++)
			ten *= 10;
		int l = snprintf(t, sizeof t, "%s%lld", v < 0 ? "-" : "", a / ten);
		if (k > 0 && a % ten) {
			l += snprintf(t + l, sizeof t - l, ".%0*lld", k, a % ten);
			while (t[l - 1] == '0')
				t[--l] = 0;
		}
		bool frac = memchr(t, '.', l) != NULL;
		if (integer && frac)
			continue;
		alts[n++] = sc_seq2(c, gmb_lit(c->b, t, l), integer ? gmb_eps(c->b) : frac ? zeros : dot0);
	}
	int32_t r = n ? gmb_alt(c->b, alts, n) : gmb_none(c->b);
	free(alts);
	return r;
}

/* Numbers that are not integers: a nonzero fraction digit; those with an
 * exponent all pass (1.5e1 is 15: accepted though an integer). */
static int32_t fractional(struct sc *c)
{
	int32_t d = sc_digits(c, '0', '9');
	int32_t frac = sc_seq3(c, sc_lit(c, "."), gmb_rep(c->b, d, 0, -1),
			       sc_seq2(c, sc_digits(c, '1', '9'), gmb_rep(c->b, d, 0, -1)));
	int32_t sign = gmb_rep(c->b, sc_alt2(c, sc_lit(c, "+"), sc_lit(c, "-")), 0, 1);
	int32_t exp = sc_seq3(c, sc_alt2(c, sc_lit(c, "e"), sc_lit(c, "E")), sign, gmb_rep(c->b, d, 1, -1));
	int32_t anyfrac = gmb_rep(c->b, sc_seq2(c, sc_lit(c, "."), gmb_rep(c->b, d, 1, -1)), 0, 1);
	return sc_alt2(c, sc_seq2(c, sc_json_int(c), frac), sc_seq3(c, sc_json_int(c), anyfrac, exp));
}

/* "not multipleOf" (schema_not.c): its one whole divisor, or 0 (refused) */
static long long not_multiple(struct sc *c, const struct jv *s)
{
	const struct jv *l = jv_get(s, "\x01notMultipleOf");
	long long p;
	int k;
	if (!l)
		return 1;
	if (l->t != JV_ARR || l->n != 1 || !mult_of(l->a[0], &p, &k) || k > 0 || p > 1000 || jv_get(s, "multipleOf") ||
	    jv_get(s, "minimum") || jv_get(s, "maximum") || jv_get(s, "exclusiveMinimum") || jv_get(s, "exclusiveMaximum"))
		return sc_err(c, "unsupported keyword '%s' (not a whole multipleOf up to 1000, alone)", "not"), 0;
	return p;
}

int32_t sc_integer(struct sc *c, const struct jv *s)
{
	double lo, hi;
	bool xlo, xhi;
	const struct jv *m = jv_get(s, "multipleOf");
	long long p = 1, q = 1;
	int k = 0;
	if (m && !mult_of(m, &p, &k))
		return sc_err(c, "'%s' is not a positive number", "multipleOf"), 0;
	if (m) {
		long long ten = 1;
		for (int i = 0; i < k; i++)
			ten *= 10;
		q = p / gcd(p, ten);
	}
	long long nm = not_multiple(c, s);
	if (!nm)
		return 0;
	if (nm > 1)
		return multiples(c, nm, -1, true);
	bool bounded = bounds(c, s, &lo, &xlo, &hi, &xhi);
	if (q > 1) {
		if (bounded)
			return listed(c, xlo ? lo : lo, xlo, hi, xhi, q, 0, true);
		if (q > 1000)
			return sc_err(c, "'%s' above 1000", "multipleOf"), 0;
		return multiples(c, q, -1, false);
	}
	if (!bounded)
		return sc_json_int(c);
	lo = xlo ? floor(lo) + 1 : ceil(lo);
	hi = xhi ? ceil(hi) - 1 : floor(hi);
	return int_range(c, lo, hi);
}

int32_t sc_number(struct sc *c, const struct jv *s)
{
	const struct jv *m = jv_get(s, "multipleOf");
	long long p = 1;
	int k = -1;
	if (m && !mult_of(m, &p, &k))
		return sc_err(c, "'%s' is not a positive number", "multipleOf"), 0;
	bool xlo, xhi;
	const struct jv *lv = bound_of(s, true, &xlo), *hv = bound_of(s, false, &xhi);
	long long nm = not_multiple(c, s);
	const struct jv *fr = jv_get(s, "\x01fraction"); /* "not integer" (schema_not.c) */
	if (!nm)
		return 0;
	if (fr && (m || lv || hv || nm > 1))
		return sc_err(c, "unsupported keyword '%s' (not integer, with bounds or multipleOf)", "not"), 0;
	if (fr)
		return fractional(c);
	if (nm > 1)
		return sc_alt2(c, multiples(c, nm, 0, true), fractional(c));
	if (m && p > 1) {
		if (lv || hv)
			return listed(c, lv ? lv->num : -INFINITY, xlo, hv ? hv->num : INFINITY, xhi, p, k < 0 ? 0 : k,
				      false);
		if (p > 1000)
			return sc_err(c, "'%s' above 1000", "multipleOf"), 0;
		return multiples(c, p, k, false);
	}
	if (!lv && !hv && !m)
		return sc_json_number(c);
	struct dec lo = { .ip = 0 }, hi = { .ip = -1 }, zero = { .ip = 0 };
	bool has_lo = lv != NULL;
	if ((lv && !dec_of(lv, &lo)) || (hv && !dec_of(hv, &hi)))
		return sc_err(c, "'%s' has too many digits", lv ? "minimum" : "maximum"), 0;
	int32_t alts[2];
	int n = 0;
	/* x >= 0 */
	if (!hv || !hi.neg) {
		bool pos_lo = has_lo && !lo.neg;
		alts[n++] = magnitude(c, pos_lo ? &lo : &zero, pos_lo && xlo, &hi, hv && xhi, k);
	}
	/* x = -y, y > 0 */
	if (!has_lo || lo.neg) {
		struct dec a = hv && hi.neg ? hi : zero, b = has_lo ? lo : (struct dec){ .ip = -1 };
		alts[n++] = sc_seq2(c, sc_lit(c, "-"), magnitude(c, &a, hv && hi.neg ? xhi : true, &b, has_lo && xlo, k));
	}
	return n ? gmb_alt(c->b, alts, n) : gmb_none(c->b);
}
