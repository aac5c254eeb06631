/* daemon/template/render.c — walks the syntax tree: scopes, statements,
 * expressions and Python's operators. Every failure longjmps back to
 * tpl_render with the line of the node that failed. */
#include "daemon/template/tpl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tpl_scope {
	struct tpl_scope *parent;
	struct tpl_val *vars;   /* a dict */
};

struct tpl_render {
	struct tpl_heap *h;
	struct tpl_buf *out;
	struct tpl_scope *top;
	struct tpl_val *ctx;    /* the caller's variables */
	struct tpl_val *hole;   /* the captured text a set/filter block filters */
	time_t now;
	size_t max_output;
	int depth;
	long steps;
};

enum flow { F_NEXT, F_BREAK, F_CONTINUE };

struct tpl_heap *tpl_render_heap(struct tpl_render *r) { return r->h; }
time_t tpl_render_now(struct tpl_render *r) { return r->now; }

void tpl_tick(struct tpl_render *r, int line)
{
	if (++r->steps > TPL_MAX_STEPS)
		tpl_fail(r->h, line, "loop iteration and call limit (%d) reached", TPL_MAX_STEPS);
}

static void enter(struct tpl_render *r, int line)
{
	if (++r->depth > TPL_MAX_DEPTH)
		tpl_fail(r->h, line, "recursion deeper than %d", TPL_MAX_DEPTH);
}

static struct tpl_scope *scope_new(struct tpl_render *r, struct tpl_scope *parent)
{
	struct tpl_scope *s = tpl_alloc(r->h, sizeof *s);
	s->parent = parent;
	s->vars = tpl_dict(r->h);
	return s;
}

static void scope_set(struct tpl_render *r, struct tpl_scope *s, const char *name, struct tpl_val *v)
{
	tpl_dict_put(r->h, s->vars, tpl_str(r->h, name, strlen(name)), v);
}

static struct tpl_val *undef_msg(struct tpl_render *r, const char *fmt, const char *a, const char *b)
{
	char msg[160];
	snprintf(msg, sizeof msg, fmt, a, b);
	return tpl_undef(r->h, tpl_strdup(r->h, msg, strlen(msg)));
}

static struct tpl_val *lookup(struct tpl_render *r, struct tpl_scope *s, const char *name)
{
	size_t n = strlen(name);
	for (; s; s = s->parent) {
		struct tpl_val *v = tpl_dict_findz(s->vars, name, n);
		if (v)
			return v;
	}
	struct tpl_val *v = tpl_dict_findz(r->ctx, name, n);
	if (v)
		return v;
	if (tpl_is_global(name)) {
		v = tpl_new(r->h, V_GLOBAL);
		v->method.name = name;
		return v;
	}
	return undef_msg(r, "UndefinedError: '%s' is undefined", name, "");
}

__attribute__((noreturn)) static void undefined_used(struct tpl_render *r, int line, const struct tpl_val *v)
{
	tpl_fail(r->h, line, "%.*s", (int)v->str.n, v->str.s ? v->str.s : "UndefinedError: undefined value");
}

static const char *obj_name(const struct tpl_val *v)
{
	switch (v->kind) {
	case V_STR: return "str object";
	case V_LIST: return v->tuple ? "tuple object" : "list object";
	case V_DICT: return v->ns ? "Namespace object" : "dict object";
	case V_INT: return "int object";
	case V_FLOAT: return "float object";
	case V_BOOL: return "bool object";
	case V_NONE: return "None";
	default: return "object";
	}
}

static bool mutating(const struct tpl_val *x, const char *name)
{
	static const char *const list_m[] = { "append", "extend", "insert", "pop", "remove", "reverse",
					      "sort", "clear", NULL };
	static const char *const dict_m[] = { "clear", "pop", "popitem", "setdefault", "update", NULL };
	const char *const *m = x->kind == V_LIST && !x->tuple ? list_m : x->kind == V_DICT && !x->ns ? dict_m : NULL;
	for (; m && *m; m++)
		if (!strcmp(*m, name))
			return true;
	return false;
}

struct tpl_val *tpl_getattr(struct tpl_render *r, int line, struct tpl_val *x, const char *name)
{
	if (x->kind == V_UNDEF)
		undefined_used(r, line, x);
	if (mutating(x, name))
		return undef_msg(r, "SecurityError: access to attribute '%s' of '%s' object is unsafe.",
				 name, tpl_type_name(x));
	if (!x->ns && tpl_has_method(x, name)) {
		struct tpl_val *m = tpl_new(r->h, V_METHOD);
		m->method.self = x;
		m->method.name = name;
		return m;
	}
	if (x->kind == V_DICT) {
		struct tpl_val *v = tpl_dict_findz(x, name, strlen(name));
		if (v)
			return v;
	}
	return undef_msg(r, "UndefinedError: '%s' has no attribute '%s'", obj_name(x), name);
}

/* Python's index rules: negative counts from the end; false if out of range. */
static bool norm_index(int64_t *i, size_t n)
{
	if (*i < 0)
		*i += (int64_t)n;
	return *i >= 0 && (uint64_t)*i < n;
}

/* Byte offset of code point i in s (i <= code point count). */
static size_t cp_off(const char *s, size_t n, size_t i)
{
	size_t o = 0;
	for (; o < n && i; i--)
		for (o++; o < n && ((unsigned char)s[o] & 0xc0) == 0x80; o++)
			;
	return o;
}

struct tpl_val *tpl_getitem(struct tpl_render *r, int line, struct tpl_val *x, struct tpl_val *k)
{
	if (x->kind == V_UNDEF)
		undefined_used(r, line, x);
	if (x->kind == V_DICT) {
		struct tpl_val *v = tpl_dict_find(x, k);
		if (v)
			return v;
	}
	if ((x->kind == V_LIST || x->kind == V_STR) && (k->kind == V_INT || k->kind == V_BOOL)) {
		int64_t i = k->kind == V_INT ? k->i : k->b;
		if (x->kind == V_LIST) {
			if (norm_index(&i, x->list.n))
				return x->list.v[i];
		} else {
			size_t n = tpl_utf8_len(x->str.s, x->str.n);
			if (norm_index(&i, n)) {
				size_t a = cp_off(x->str.s, x->str.n, i);
				size_t b = cp_off(x->str.s, x->str.n, i + 1);
				return tpl_str(r->h, x->str.s + a, b - a);
			}
		}
		char num[32];
		snprintf(num, sizeof num, "%lld", (long long)i);
		return undef_msg(r, "UndefinedError: '%s' has no element %s", obj_name(x), num);
	}
	if (k->kind == V_STR && x->kind != V_DICT)
		return tpl_getattr(r, line, x, k->str.s);
	if (k->kind == V_STR && tpl_has_method(x, k->str.s))
		return tpl_getattr(r, line, x, k->str.s);
	struct tpl_buf b = { 0 };
	tpl_repr(r->h, &b, k);
	return undef_msg(r, "UndefinedError: '%s' has no attribute %s", obj_name(x), b.s ? b.s : "''");
}

struct tpl_val *tpl_iter_list(struct tpl_render *r, int line, struct tpl_val *v)
{
	switch (v->kind) {
	case V_UNDEF:
		return tpl_list(r->h);
	case V_LIST:
		return v;
	case V_DICT: {
		struct tpl_val *l = tpl_list(r->h);
		for (size_t i = 0; i < v->dict.n && !v->ns; i++)
			tpl_list_add(r->h, l, v->dict.k[i]);
		return l;
	}
	case V_STR: {
		struct tpl_val *l = tpl_list(r->h);
		for (size_t i = 0; i < v->str.n;) {
			size_t j = i + 1;
			while (j < v->str.n && ((unsigned char)v->str.s[j] & 0xc0) == 0x80)
				j++;
			tpl_list_add(r->h, l, tpl_str(r->h, v->str.s + i, j - i));
			i = j;
		}
		return l;
	}
	default:
		tpl_fail(r->h, line, "TypeError: '%s' object is not iterable", tpl_type_name(v));
	}
}

static struct tpl_val *eval(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n);

static void eval_args(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n,
		      struct tpl_args *a)
{
	a->npos = n->nkids;
	a->pos = tpl_alloc(r->h, (n->nkids + 1) * sizeof *a->pos);
	for (size_t i = 0; i < n->nkids; i++)
		a->pos[i] = eval(r, s, n->kids[i]);
	a->nkw = n->nnames;
	a->kwn = n->names;
	a->kwv = tpl_alloc(r->h, (n->nnames + 1) * sizeof *a->kwv);
	for (size_t i = 0; i < n->nnames; i++)
		a->kwv[i] = eval(r, s, n->defs[i]);
}

static int64_t int_of(struct tpl_render *r, int line, const struct tpl_val *v, const char *what)
{
	if (v->kind == V_INT)
		return v->i;
	if (v->kind == V_BOOL)
		return v->b;
	if (v->kind == V_NONE)
		return INT64_MIN;   /* slice bound left out */
	tpl_fail(r->h, line, "TypeError: %s must be an integer, not %s", what, tpl_type_name(v));
}

static struct tpl_val *slice(struct tpl_render *r, int line, struct tpl_val *x, int64_t a, int64_t b,
			     int64_t step)
{
	if (x->kind == V_UNDEF)
		undefined_used(r, line, x);
	if (x->kind != V_LIST && x->kind != V_STR)
		tpl_fail(r->h, line, "TypeError: '%s' object is not subscriptable", tpl_type_name(x));
	if (step == INT64_MIN)
		step = 1;
	if (step == 0)
		tpl_fail(r->h, line, "ValueError: slice step cannot be zero");
	int64_t n = x->kind == V_LIST ? (int64_t)x->list.n : (int64_t)tpl_utf8_len(x->str.s, x->str.n);
	/* Python's PySlice_AdjustIndices */
	int64_t lo = step < 0 ? -1 : 0, hi = step < 0 ? n - 1 : n;
	if (a == INT64_MIN) {
		a = step < 0 ? hi : lo;
	} else {
		if (a < 0)
			a = a + n < lo ? lo : a + n;
		else if (a > hi)
			a = hi;
	}
	if (b == INT64_MIN) {
		b = step < 0 ? lo : hi;
	} else {
		if (b < 0)
			b = b + n < lo ? lo : b + n;
		else if (b > hi)
			b = hi;
	}
	struct tpl_val *out = x->kind == V_LIST ? tpl_list(r->h) : NULL;
	struct tpl_buf buf = { 0 };
	size_t *offs = NULL;
	if (x->kind == V_STR) {
		offs = tpl_alloc(r->h, (n + 1) * sizeof *offs);
		size_t o = 0;
		for (int64_t i = 0; i <= n; i++) {
			offs[i] = o;
			for (o++; o < x->str.n && ((unsigned char)x->str.s[o] & 0xc0) == 0x80; o++)
				;
		}
		offs[n] = x->str.n;
		tpl_buf_put(r->h, &buf, "", 0);
	}
	for (int64_t i = a; step > 0 ? i < b : i > b; i += step) {
		if (out)
			tpl_list_add(r->h, out, x->list.v[i]);
		else
			tpl_buf_put(r->h, &buf, x->str.s + offs[i], offs[i + 1] - offs[i]);
		if (step > 0 ? i > INT64_MAX - step : i < INT64_MIN - step)
			break;
	}
	if (out) {
		out->tuple = x->tuple;
		return out;
	}
	struct tpl_val *v = tpl_new(r->h, V_STR);
	v->str.s = buf.s;
	v->str.n = buf.n;
	return v;
}

static bool is_num(const struct tpl_val *v)
{
	return v->kind == V_INT || v->kind == V_FLOAT || v->kind == V_BOOL;
}

static double fnum(const struct tpl_val *v)
{
	return v->kind == V_FLOAT ? v->f : v->kind == V_INT ? (double)v->i : v->b;
}

__attribute__((noreturn)) static void bad_operands(struct tpl_render *r, int line, const char *op,
						    const struct tpl_val *a, const struct tpl_val *b)
{
	if (a->kind == V_UNDEF)
		undefined_used(r, line, a);
	if (b->kind == V_UNDEF)
		undefined_used(r, line, b);
	if (!strcmp(op, "+") && a->kind == V_STR)
		tpl_fail(r->h, line, "TypeError: can only concatenate str (not \"%s\") to str", tpl_type_name(b));
	tpl_fail(r->h, line, "TypeError: unsupported operand type(s) for %s: '%s' and '%s'", op,
		 tpl_type_name(a), tpl_type_name(b));
}

static struct tpl_val *repeat(struct tpl_render *r, int line, struct tpl_val *x, int64_t k)
{
	if (k < 0)
		k = 0;
	size_t unit = x->kind == V_STR ? x->str.n : x->list.n;
	if (unit && (uint64_t)k > r->h->limit / unit)
		tpl_fail(r->h, line, "MemoryError: repetition too large");
	if (x->kind == V_STR) {
		struct tpl_buf b = { 0 };
		tpl_buf_put(r->h, &b, "", 0);
		for (int64_t i = 0; i < k; i++)
			tpl_buf_put(r->h, &b, x->str.s, x->str.n);
		struct tpl_val *v = tpl_new(r->h, V_STR);
		v->str.s = b.s;
		v->str.n = b.n;
		return v;
	}
	struct tpl_val *l = tpl_list(r->h);
	for (int64_t i = 0; i < k; i++)
		for (size_t j = 0; j < x->list.n; j++)
			tpl_list_add(r->h, l, x->list.v[j]);
	return l;
}

static struct tpl_val *arith(struct tpl_render *r, int line, int op, struct tpl_val *a, struct tpl_val *b)
{
	struct tpl_heap *h = r->h;
	char ops[3] = { op > 255 ? op >> 8 : op, op > 255 ? op & 255 : 0, 0 };
	bool ints = (a->kind == V_INT || a->kind == V_BOOL) && (b->kind == V_INT || b->kind == V_BOOL);
	int64_t x = a->kind == V_INT ? a->i : a->kind == V_BOOL ? a->b : 0;
	int64_t y = b->kind == V_INT ? b->i : b->kind == V_BOOL ? b->b : 0, z;
	if (op == '+' || op == '-' || op == '*') {
		if (ints) {
			bool ovf = op == '+' ? __builtin_add_overflow(x, y, &z)
				 : op == '-' ? __builtin_sub_overflow(x, y, &z)
					     : __builtin_mul_overflow(x, y, &z);
			if (ovf)
				tpl_fail(h, line, "OverflowError: integer result out of range");
			return tpl_int(h, z);
		}
		if (is_num(a) && is_num(b)) {
			double p = fnum(a), q = fnum(b);
			return tpl_float(h, op == '+' ? p + q : op == '-' ? p - q : p * q);
		}
		if (op == '+' && a->kind == V_STR && b->kind == V_STR) {
			/* Markup + str escapes the str (markupsafe), and stays Markup */
			bool m = a->markup || b->markup;
			struct tpl_buf buf = { 0 };
			tpl_buf_put(h, &buf, "", 0);
			if (m && !a->markup)
				tpl_escape(h, &buf, a->str.s, a->str.n);
			else
				tpl_buf_put(h, &buf, a->str.s, a->str.n);
			if (m && !b->markup)
				tpl_escape(h, &buf, b->str.s, b->str.n);
			else
				tpl_buf_put(h, &buf, b->str.s, b->str.n);
			struct tpl_val *v = tpl_new(h, V_STR);
			v->str.s = buf.s;
			v->str.n = buf.n;
			v->markup = m;
			return v;
		}
		if (op == '+' && a->kind == V_LIST && b->kind == V_LIST && a->tuple == b->tuple) {
			struct tpl_val *l = tpl_list(h);
			l->tuple = a->tuple;
			for (size_t i = 0; i < a->list.n; i++)
				tpl_list_add(h, l, a->list.v[i]);
			for (size_t i = 0; i < b->list.n; i++)
				tpl_list_add(h, l, b->list.v[i]);
			return l;
		}
		if (op == '*' && (a->kind == V_STR || a->kind == V_LIST) && (b->kind == V_INT || b->kind == V_BOOL))
			return repeat(r, line, a, y);
		if (op == '*' && (b->kind == V_STR || b->kind == V_LIST) && (a->kind == V_INT || a->kind == V_BOOL))
			return repeat(r, line, b, x);
		bad_operands(r, line, ops, a, b);
	}
	if (op == '%' && a->kind == V_STR) {
		if (b->kind == V_LIST && b->tuple)
			return tpl_percent(r, line, a, b->list.v, b->list.n);
		return tpl_percent(r, line, a, &b, 1);
	}
	if (!is_num(a) || !is_num(b))
		bad_operands(r, line, ops, a, b);
	double p = fnum(a), q = fnum(b);
	if (op == TPL_OP2('*', '*')) {
		if (ints && y >= 0) {
			int64_t acc = 1;
			for (int64_t i = 0; i < y; i++) {
				if (__builtin_mul_overflow(acc, x, &acc))
					tpl_fail(h, line, "OverflowError: integer result out of range");
				if (acc == 0 || acc == 1 || (acc == -1 && i > 64))
					return tpl_int(h, (acc == -1 && (y - i - 1) % 2) ? 1 : acc == -1 ? -1 : acc);
			}
			return tpl_int(h, acc);
		}
		return tpl_float(h, pow(p, q));
	}
	if (q == 0)
		tpl_fail(h, line, "ZeroDivisionError: division by zero");
	if (op == '/')
		return tpl_float(h, p / q);
	if (ints) {
		if (x == INT64_MIN && y == -1)
			tpl_fail(h, line, "OverflowError: integer result out of range");
		int64_t qt = x / y, m = x % y;
		if (m && ((m < 0) != (y < 0))) {
			qt--;
			m += y;
		}
		return tpl_int(h, op == '%' ? m : qt);
	}
	double m = fmod(p, q);
	if (m && ((m < 0) != (q < 0)))
		m += q;
	if (op == '%')
		return tpl_float(h, m);
	return tpl_float(h, floor((p - m) / q + 0.5));
}

static bool contains(struct tpl_render *r, int line, struct tpl_val *x, struct tpl_val *hay)
{
	switch (hay->kind) {
	case V_UNDEF:
		return false;
	case V_STR:
		if (x->kind != V_STR)
			tpl_fail(r->h, line, "TypeError: 'in <string>' requires string as left operand, not %s",
				 tpl_type_name(x));
		return x->str.n == 0 || memmem(hay->str.s, hay->str.n, x->str.s, x->str.n);
	case V_LIST:
		for (size_t i = 0; i < hay->list.n; i++)
			if (tpl_equal(hay->list.v[i], x))
				return true;
		return false;
	case V_DICT:
		return !hay->ns && tpl_dict_find(hay, x);
	default:
		tpl_fail(r->h, line, "TypeError: argument of type '%s' is not iterable", tpl_type_name(hay));
	}
}

static struct tpl_val *binop(struct tpl_render *r, int line, int op, struct tpl_val *a, struct tpl_val *b)
{
	struct tpl_heap *h = r->h;
	switch (op) {
	case '~': {
		struct tpl_buf buf = { 0 };
		tpl_buf_put(h, &buf, "", 0);
		tpl_str_of(h, &buf, a);
		tpl_str_of(h, &buf, b);
		struct tpl_val *v = tpl_new(h, V_STR);
		v->str.s = buf.s;
		v->str.n = buf.n;
		return v;
	}
	case TPL_OP2('=', '='): return tpl_bool(h, tpl_equal(a, b));
	case TPL_OP2('!', '='): return tpl_bool(h, !tpl_equal(a, b));
	case '<': case '>': case TPL_OP2('<', '='): case TPL_OP2('>', '='): {
		if (a->kind == V_UNDEF)
			undefined_used(r, line, a);
		if (b->kind == V_UNDEF)
			undefined_used(r, line, b);
		int c = tpl_compare(h, line, a, b);
		bool res = op == '<' ? c < 0 : op == '>' ? c > 0 : op == TPL_OP2('<', '=') ? c <= 0 : c >= 0;
		return tpl_bool(h, res);
	}
	case 'i': return tpl_bool(h, contains(r, line, a, b));
	case 'n': return tpl_bool(h, !contains(r, line, a, b));
	default:
		if (a->kind == V_UNDEF)
			undefined_used(r, line, a);
		if (b->kind == V_UNDEF)
			undefined_used(r, line, b);
		return arith(r, line, op, a, b);
	}
}

struct tpl_val *tpl_call_value(struct tpl_render *r, int line, struct tpl_val *fn, struct tpl_args *a)
{
	switch (fn->kind) {
	case V_MACRO: return tpl_call_macro(r, line, fn, a);
	case V_METHOD: return tpl_method(r, line, fn->method.self, fn->method.name, a);
	case V_GLOBAL: return tpl_global(r, line, fn->method.name, a);
	case V_UNDEF: undefined_used(r, line, fn);
	default: tpl_fail(r->h, line, "TypeError: '%s' object is not callable", tpl_type_name(fn));
	}
}

static struct tpl_val *eval(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n)
{
	struct tpl_heap *h = r->h;
	struct tpl_val *v, *x;
	struct tpl_args args;
	enter(r, n->line);
	switch (n->type) {
	case N_LIT:
		v = n->val ? n->val : r->hole;
		break;
	case N_NAME:
		v = lookup(r, s, n->name);
		break;
	case N_LIST: case N_TUPLE:
		v = tpl_list(h);
		v->tuple = n->type == N_TUPLE;
		for (size_t i = 0; i < n->nkids; i++)
			tpl_list_add(h, v, eval(r, s, n->kids[i]));
		break;
	case N_DICT:
		v = tpl_dict(h);
		for (size_t i = 0; i + 1 < n->nkids; i += 2) {
			x = eval(r, s, n->kids[i]);
			if (x->kind == V_LIST && !x->tuple)
				tpl_fail(h, n->line, "TypeError: unhashable type: 'list'");
			if (x->kind == V_DICT)
				tpl_fail(h, n->line, "TypeError: unhashable type: 'dict'");
			tpl_dict_put(h, v, x, eval(r, s, n->kids[i + 1]));
		}
		break;
	case N_ATTR:
		v = tpl_getattr(r, n->line, eval(r, s, n->a), n->name);
		break;
	case N_ITEM:
		x = eval(r, s, n->a);
		v = tpl_getitem(r, n->line, x, eval(r, s, n->b));
		break;
	case N_SLICE: {
		x = eval(r, s, n->a);
		int64_t a = n->b ? int_of(r, n->line, eval(r, s, n->b), "slice index") : INT64_MIN;
		int64_t b = n->c ? int_of(r, n->line, eval(r, s, n->c), "slice index") : INT64_MIN;
		int64_t st = n->d ? int_of(r, n->line, eval(r, s, n->d), "slice step") : INT64_MIN;
		v = slice(r, n->line, x, a, b, st);
		break;
	}
	case N_CALL:
		x = eval(r, s, n->a);
		eval_args(r, s, n, &args);
		v = tpl_call_value(r, n->line, x, &args);
		break;
	case N_FILTER:
		x = eval(r, s, n->a);
		eval_args(r, s, n, &args);
		v = tpl_filter(r, n->line, n->name, x, &args);
		break;
	case N_TEST:
		x = eval(r, s, n->a);
		eval_args(r, s, n, &args);
		v = tpl_bool(h, tpl_test(r, n->line, n->name, x, &args) != (n->op != 0));
		break;
	case N_NEG: case N_POS:
		x = eval(r, s, n->a);
		if (x->kind == V_UNDEF)
			undefined_used(r, n->line, x);
		if (x->kind == V_FLOAT)
			v = tpl_float(h, n->type == N_NEG ? -x->f : x->f);
		else if (x->kind == V_INT || x->kind == V_BOOL) {
			int64_t i = x->kind == V_INT ? x->i : x->b;
			if (n->type == N_NEG && i == INT64_MIN)
				tpl_fail(h, n->line, "OverflowError: integer result out of range");
			v = tpl_int(h, n->type == N_NEG ? -i : i);
		} else
			tpl_fail(h, n->line, "TypeError: bad operand type for unary %c: '%s'",
				 n->type == N_NEG ? '-' : '+', tpl_type_name(x));
		break;
	case N_NOT:
		v = tpl_bool(h, !tpl_truthy(eval(r, s, n->a)));
		break;
	case N_AND:
		v = eval(r, s, n->a);
		if (tpl_truthy(v))
			v = eval(r, s, n->b);
		break;
	case N_OR:
		v = eval(r, s, n->a);
		if (!tpl_truthy(v))
			v = eval(r, s, n->b);
		break;
	case N_COND:
		if (tpl_truthy(eval(r, s, n->b)))
			v = eval(r, s, n->a);
		else
			v = n->c ? eval(r, s, n->c) : tpl_undef(h, "UndefinedError: the inline if-expression evaluated to false and no else section was defined.");
		break;
	case N_BIN:
		x = eval(r, s, n->a);
		v = binop(r, n->line, n->op, x, eval(r, s, n->b));
		break;
	default:
		tpl_fail(h, n->line, "internal: statement node in an expression");
	}
	r->depth--;
	return v;
}

static enum flow exec(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n);

static void unpack(struct tpl_render *r, int line, struct tpl_scope *s, const char **names, size_t nn,
		   struct tpl_val *v)
{
	if (nn == 1) {
		scope_set(r, s, names[0], v);
		return;
	}
	struct tpl_val *l = tpl_iter_list(r, line, v);
	if (l->list.n != nn)
		tpl_fail(r->h, line, "ValueError: expected %zu values to unpack, got %zu", nn, l->list.n);
	for (size_t i = 0; i < nn; i++)
		scope_set(r, s, names[i], l->list.v[i]);
}

/* Render body into a fresh buffer and return it as a string value. */
static struct tpl_val *capture(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *body)
{
	struct tpl_buf *saved = r->out, b = { .max = r->max_output };
	tpl_buf_put(r->h, &b, "", 0);
	r->out = &b;
	exec(r, s, body);
	r->out = saved;
	struct tpl_val *v = tpl_new(r->h, V_STR);
	v->str.s = b.s;
	v->str.n = b.n;
	return v;
}

struct tpl_val *tpl_call_macro(struct tpl_render *r, int line, struct tpl_val *m, struct tpl_args *a)
{
	const struct tpl_node *n = m->macro.node;
	tpl_tick(r, line);
	if (a->npos > n->nnames)
		tpl_fail(r->h, line, "TypeError: macro '%s' takes not more than %zu argument(s)", n->name,
			 n->nnames);
	struct tpl_scope *s = scope_new(r, m->macro.scope);
	for (size_t k = 0; k < a->nkw; k++) {
		size_t i;
		for (i = 0; i < n->nnames && strcmp(n->names[i], a->kwn[k]); i++)
			;
		if (i == n->nnames && !strcmp(a->kwn[k], "caller")) {
			scope_set(r, s, "caller", a->kwv[k]);   /* from {% call %} */
			continue;
		}
		if (i == n->nnames)
			tpl_fail(r->h, line, "TypeError: macro '%s' takes no keyword argument '%s'", n->name,
				 a->kwn[k]);
		if (i < a->npos)
			tpl_fail(r->h, line, "TypeError: macro '%s' got multiple values for argument '%s'",
				 n->name, a->kwn[k]);
	}
	for (size_t i = 0; i < n->nnames; i++) {
		struct tpl_val *v = i < a->npos ? a->pos[i] : NULL;
		for (size_t k = 0; !v && k < a->nkw; k++)
			if (!strcmp(n->names[i], a->kwn[k]))
				v = a->kwv[k];
		if (!v)
			v = n->defs[i] ? eval(r, s, n->defs[i])
				       : undef_msg(r, "UndefinedError: '%s' is undefined", n->names[i], "");
		scope_set(r, s, n->names[i], v);
	}
	enter(r, line);
	struct tpl_val *out = capture(r, s, n->b);
	r->depth--;
	return out;
}

static enum flow exec_for(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n)
{
	struct tpl_heap *h = r->h;
	struct tpl_val *seq = eval(r, s, n->a), *items;
	if (seq->kind == V_NONE || seq->kind == V_INT || seq->kind == V_FLOAT || seq->kind == V_BOOL)
		tpl_fail(h, n->line, "TypeError: '%s' object is not iterable", tpl_type_name(seq));
	items = tpl_iter_list(r, n->line, seq);
	if (n->d) {   /* for x in xs if cond: loop.* counts the kept items only */
		struct tpl_val *kept = tpl_list(h);
		for (size_t i = 0; i < items->list.n; i++) {
			struct tpl_scope *f = scope_new(r, s);
			tpl_tick(r, n->line);
			unpack(r, n->line, f, n->names, n->nnames, items->list.v[i]);
			if (tpl_truthy(eval(r, f, n->d)))
				tpl_list_add(h, kept, items->list.v[i]);
		}
		items = kept;
	}
	size_t len = items->list.n;
	for (size_t i = 0; i < len; i++) {
		struct tpl_scope *it = scope_new(r, s);
		tpl_tick(r, n->line);
		struct tpl_val *loop = tpl_dict(h);
		tpl_dict_set(h, loop, "index", tpl_int(h, i + 1));
		tpl_dict_set(h, loop, "index0", tpl_int(h, i));
		tpl_dict_set(h, loop, "revindex", tpl_int(h, len - i));
		tpl_dict_set(h, loop, "revindex0", tpl_int(h, len - i - 1));
		tpl_dict_set(h, loop, "first", tpl_bool(h, i == 0));
		tpl_dict_set(h, loop, "last", tpl_bool(h, i + 1 == len));
		tpl_dict_set(h, loop, "length", tpl_int(h, len));
		tpl_dict_set(h, loop, "depth", tpl_int(h, 1));
		tpl_dict_set(h, loop, "depth0", tpl_int(h, 0));
		if (i > 0)
			tpl_dict_set(h, loop, "previtem", items->list.v[i - 1]);
		if (i + 1 < len)
			tpl_dict_set(h, loop, "nextitem", items->list.v[i + 1]);
		struct tpl_val *cycle = tpl_new(h, V_METHOD);
		cycle->method.self = loop;
		cycle->method.name = "cycle";
		tpl_dict_set(h, loop, "cycle", cycle);
		scope_set(r, it, "loop", loop);
		unpack(r, n->line, it, n->names, n->nnames, items->list.v[i]);
		if (exec(r, it, n->b) == F_BREAK)
			break;
	}
	if (len == 0 && n->c)
		return exec(r, s, n->c);
	return F_NEXT;
}

static enum flow exec(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n)
{
	struct tpl_heap *h = r->h;
	enum flow f = F_NEXT;
	enter(r, n->line);
	switch (n->type) {
	case N_BODY:
		for (size_t i = 0; i < n->nkids && f == F_NEXT; i++)
			f = exec(r, s, n->kids[i]);
		break;
	case N_TEXT:
		tpl_buf_put(h, r->out, n->name, n->len);
		break;
	case N_OUT:
		tpl_str_of(h, r->out, eval(r, s, n->a));
		break;
	case N_IF:
		if (tpl_truthy(eval(r, s, n->a)))
			f = exec(r, s, n->b);
		else if (n->c)
			f = exec(r, s, n->c);
		break;
	case N_FOR:
		f = exec_for(r, s, n);
		break;
	case N_SET: {
		struct tpl_val *v = eval(r, s, n->a);
		if (n->d) {
			struct tpl_val *ns = lookup(r, s, n->names[0]);
			if (ns->kind != V_DICT || !ns->ns)
				tpl_fail(h, n->line, "TemplateRuntimeError: cannot assign attribute on non-namespace object");
			tpl_dict_set(h, ns, n->d->name, v);
		} else {
			unpack(r, n->line, s, n->names, n->nnames, v);
		}
		break;
	}
	case N_SETBLOCK: case N_FILTERBLOCK: {
		struct tpl_val *text = capture(r, s, n->b), *saved = r->hole;
		r->hole = text;
		struct tpl_val *v = eval(r, s, n->c);
		r->hole = saved;
		if (n->type == N_SETBLOCK)
			scope_set(r, s, n->names[0], v);
		else
			tpl_str_of(h, r->out, v);
		break;
	}
	case N_WITH: {
		struct tpl_scope *w = scope_new(r, s);
		struct tpl_val **vals = tpl_alloc(h, (n->nnames + 1) * sizeof *vals);
		for (size_t i = 0; i < n->nnames; i++)   /* evaluated outside, then bound */
			vals[i] = eval(r, s, n->defs[i]);
		for (size_t i = 0; i < n->nnames; i++)
			scope_set(r, w, n->names[i], vals[i]);
		f = exec(r, w, n->b);
		break;
	}
	case N_CALLBLOCK: {
		struct tpl_args args;
		struct tpl_val *fn = eval(r, s, n->a->a), *caller = tpl_new(h, V_MACRO);
		caller->macro.node = n->c;
		caller->macro.scope = s;
		eval_args(r, s, n->a, &args);
		const char **kwn = tpl_alloc(h, (args.nkw + 1) * sizeof *kwn);
		struct tpl_val **kwv = tpl_alloc(h, (args.nkw + 1) * sizeof *kwv);
		if (args.nkw) {
			memcpy(kwn, args.kwn, args.nkw * sizeof *kwn);
			memcpy(kwv, args.kwv, args.nkw * sizeof *kwv);
		}
		kwn[args.nkw] = "caller";
		kwv[args.nkw] = caller;
		args.kwn = kwn;
		args.kwv = kwv;
		args.nkw++;
		tpl_str_of(h, r->out, tpl_call_value(r, n->line, fn, &args));
		break;
	}
	case N_MACRO: {
		struct tpl_val *m = tpl_new(h, V_MACRO);
		m->macro.node = n;
		m->macro.scope = s;
		scope_set(r, s, n->name, m);
		break;
	}
	case N_BREAK:
		f = F_BREAK;
		break;
	case N_CONTINUE:
		f = F_CONTINUE;
		break;
	default:
		tpl_fail(h, n->line, "internal: expression node as a statement");
	}
	r->depth--;
	return f;
}

int tpl_render(const struct tpl_template *t, struct tpl_heap *h, struct tpl_val *vars,
	       const struct tpl_opts *opts, char **out, size_t *outlen, struct tpl_error *err)
{
	jmp_buf jb;
	struct tpl_buf b = { 0 };
	struct tpl_render r = { .h = h, .out = &b };
	memset(err, 0, sizeof *err);
	if (!vars || vars->kind != V_DICT) {
		snprintf(err->msg, sizeof err->msg, "the variables must be a dict");
		return -1;
	}
	r.ctx = vars;
	r.now = opts && opts->now ? opts->now : time(NULL);
	r.max_output = opts && opts->max_output ? opts->max_output : 4u << 20;
	b.max = r.max_output;
	h->err = err;
	h->fail = &jb;
	if (setjmp(jb)) {
		h->fail = NULL;
		return -1;
	}
	r.top = scope_new(&r, NULL);
	tpl_buf_put(h, &b, "", 0);
	exec(&r, r.top, t->root);
	h->fail = NULL;
	char *s = malloc(b.n + 1);
	if (!s) {
		snprintf(err->msg, sizeof err->msg, "out of memory");
		return -1;
	}
	memcpy(s, b.s, b.n + 1);
	*out = s;
	*outlen = b.n;
	return 0;
}
