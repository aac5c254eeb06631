/* daemon/template/parse.c — tokens to a syntax tree, Jinja's grammar and
 * operator precedence. Anything outside the subset fails here, naming the
 * line and the construct. */
#include "daemon/template/tpl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ps {
	struct tpl_heap *h;
	struct tpl_token *t;
	size_t i, n;
	int nest;
};

static struct tpl_token *cur(struct ps *p) { return &p->t[p->i]; }

static bool is_op(struct ps *p, int op)
{
	return cur(p)->type == T_OP && cur(p)->op == op;
}

static bool is_name(struct ps *p, const char *w)
{
	struct tpl_token *t = cur(p);
	return t->type == T_NAME && t->n == strlen(w) && !memcmp(t->s, w, t->n);
}

static const char *describe(struct ps *p)
{
	static __thread char d[64];
	struct tpl_token *t = cur(p);
	switch (t->type) {
	case T_EOF: return "end of template";
	case T_TEXT: return "text";
	case T_VAR_BEGIN: return "'{{'";
	case T_VAR_END: return "'}}'";
	case T_BLOCK_BEGIN: return "'{%'";
	case T_BLOCK_END: return "'%}'";
	case T_NAME:
		snprintf(d, sizeof d, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s);
		return d;
	case T_STRING: return "a string";
	case T_INT: case T_FLOAT: return "a number";
	case T_OP:
		if (t->op > 255)
			snprintf(d, sizeof d, "'%c%c'", t->op >> 8, t->op & 255);
		else
			snprintf(d, sizeof d, "'%c'", t->op);
		return d;
	}
	return "?";
}

__attribute__((noreturn)) static void unexpected(struct ps *p, const char *want)
{
	if (want)
		tpl_fail(p->h, cur(p)->line, "expected %s, got %s", want, describe(p));
	tpl_fail(p->h, cur(p)->line, "unexpected %s", describe(p));
}

static void expect_op(struct ps *p, int op, const char *what)
{
	if (!is_op(p, op))
		unexpected(p, what);
	p->i++;
}

static const char *name_tok(struct ps *p)
{
	if (cur(p)->type != T_NAME)
		unexpected(p, "a name");
	struct tpl_token *t = &p->t[p->i++];
	return tpl_strdup(p->h, t->s, t->n);
}

static struct tpl_node *node(struct ps *p, enum tpl_ntype type)
{
	struct tpl_node *n = tpl_alloc(p->h, sizeof *n);
	memset(n, 0, sizeof *n);
	n->type = type;
	n->line = cur(p)->line;
	return n;
}

/* Growing node/name arrays. */
static void add_kid(struct ps *p, struct tpl_node *n, struct tpl_node *k, size_t *cap)
{
	if (n->nkids == *cap) {
		size_t nc = *cap ? *cap * 2 : 4;
		struct tpl_node **a = tpl_alloc(p->h, nc * sizeof *a);
		if (n->nkids)
			memcpy(a, n->kids, n->nkids * sizeof *a);
		n->kids = a;
		*cap = nc;
	}
	n->kids[n->nkids++] = k;
}

static void add_name(struct ps *p, struct tpl_node *n, const char *name, struct tpl_node *def,
		     size_t *cap)
{
	if (n->nnames == *cap) {
		size_t nc = *cap ? *cap * 2 : 4;
		const char **a = tpl_alloc(p->h, nc * sizeof *a);
		struct tpl_node **d = tpl_alloc(p->h, nc * sizeof *d);
		if (n->nnames) {
			memcpy(a, n->names, n->nnames * sizeof *a);
			memcpy(d, n->defs, n->nnames * sizeof *d);
		}
		n->names = a;
		n->defs = d;
		*cap = nc;
	}
	n->defs[n->nnames] = def;
	n->names[n->nnames++] = name;
}

static void enter(struct ps *p)
{
	if (++p->nest > TPL_MAX_NEST)
		tpl_fail(p->h, cur(p)->line, "nesting deeper than %d", TPL_MAX_NEST);
}

static struct tpl_node *expr(struct ps *p);
static struct tpl_node *unary(struct ps *p, bool with_filter);

/* Call arguments after '(': positional into kids, keywords into names/defs. */
static void call_args(struct ps *p, struct tpl_node *n)
{
	size_t kc = 0, nc = 0;
	expect_op(p, '(', "'('");
	while (!is_op(p, ')')) {
		if (n->nkids || n->nnames)
			expect_op(p, ',', "','");
		if (is_op(p, ')'))
			break;
		if (cur(p)->type == T_NAME && p->t[p->i + 1].type == T_OP && p->t[p->i + 1].op == '=') {
			const char *k = name_tok(p);
			p->i++;
			add_name(p, n, k, expr(p), &nc);
		} else {
			if (n->nnames)
				tpl_fail(p->h, cur(p)->line, "positional argument after a keyword argument");
			add_kid(p, n, expr(p), &kc);
		}
	}
	p->i++;
}

static struct tpl_node *primary(struct ps *p)
{
	struct tpl_token *t = cur(p);
	struct tpl_node *n;
	switch (t->type) {
	case T_NAME: {
		static const struct { const char *w; int v; } lits[] = {
			{ "true", 1 }, { "True", 1 }, { "false", 0 }, { "False", 0 },
			{ "none", -1 }, { "None", -1 },
		};
		for (size_t k = 0; k < sizeof lits / sizeof *lits; k++)
			if (is_name(p, lits[k].w)) {
				n = node(p, N_LIT);
				n->val = lits[k].v < 0 ? tpl_none(p->h) : tpl_bool(p->h, lits[k].v);
				p->i++;
				return n;
			}
		n = node(p, N_NAME);
		n->name = name_tok(p);
		return n;
	}
	case T_STRING: {
		/* adjacent literals concatenate */
		n = node(p, N_LIT);
		struct tpl_buf b = { 0 };
		tpl_buf_put(p->h, &b, "", 0);
		while (cur(p)->type == T_STRING) {
			tpl_buf_put(p->h, &b, cur(p)->s, cur(p)->n);
			p->i++;
		}
		n->val = tpl_new(p->h, V_STR);
		n->val->str.s = b.s;
		n->val->str.n = b.n;
		return n;
	}
	case T_INT:
		n = node(p, N_LIT);
		n->val = tpl_int(p->h, t->i);
		p->i++;
		return n;
	case T_FLOAT:
		n = node(p, N_LIT);
		n->val = tpl_float(p->h, t->f);
		p->i++;
		return n;
	case T_OP:
		if (t->op == '(') {
			p->i++;
			if (is_op(p, ')')) {
				p->i++;
				return node(p, N_TUPLE);
			}
			struct tpl_node *e = expr(p);
			if (is_op(p, ',')) {
				struct tpl_node *tu = node(p, N_TUPLE);
				size_t cap = 0;
				add_kid(p, tu, e, &cap);
				while (is_op(p, ',')) {
					p->i++;
					if (is_op(p, ')'))
						break;
					add_kid(p, tu, expr(p), &cap);
				}
				e = tu;
			}
			expect_op(p, ')', "')'");
			return e;
		}
		if (t->op == '[') {
			n = node(p, N_LIST);
			size_t cap = 0;
			p->i++;
			while (!is_op(p, ']')) {
				if (n->nkids)
					expect_op(p, ',', "','");
				if (is_op(p, ']'))
					break;
				add_kid(p, n, expr(p), &cap);
			}
			p->i++;
			return n;
		}
		if (t->op == '{') {
			n = node(p, N_DICT);
			size_t cap = 0;
			p->i++;
			while (!is_op(p, '}')) {
				if (n->nkids)
					expect_op(p, ',', "','");
				if (is_op(p, '}'))
					break;
				add_kid(p, n, expr(p), &cap);
				expect_op(p, ':', "':'");
				add_kid(p, n, expr(p), &cap);
			}
			p->i++;
			return n;
		}
		break;
	default:
		break;
	}
	unexpected(p, "an expression");
}

static struct tpl_node *postfix(struct ps *p, struct tpl_node *n)
{
	for (;;) {
		if (is_op(p, '.')) {
			p->i++;
			struct tpl_node *a = node(p, N_ATTR);
			a->a = n;
			if (cur(p)->type == T_INT) {   /* x.0 is x[0] */
				a->type = N_ITEM;
				a->b = node(p, N_LIT);
				a->b->val = tpl_int(p->h, cur(p)->i);
				p->i++;
			} else {
				a->name = name_tok(p);
			}
			n = a;
		} else if (is_op(p, '[')) {
			p->i++;
			struct tpl_node *s = NULL, *parts[3] = { 0 };
			int k = 0;
			bool slice = false;
			for (;;) {
				if (is_op(p, ':')) {
					slice = true;
					if (++k > 2)
						unexpected(p, "']'");
					p->i++;
					continue;
				}
				if (is_op(p, ']'))
					break;
				if (parts[k])
					unexpected(p, "']'");
				parts[k] = expr(p);
			}
			p->i++;
			if (slice) {
				s = node(p, N_SLICE);
				s->a = n;
				s->b = parts[0];
				s->c = parts[1];
				s->d = parts[2];
			} else {
				if (!parts[0])
					unexpected(p, "a subscript");
				s = node(p, N_ITEM);
				s->a = n;
				s->b = parts[0];
			}
			n = s;
		} else if (is_op(p, '(')) {
			struct tpl_node *c = node(p, N_CALL);
			c->a = n;
			call_args(p, c);
			n = c;
		} else {
			return n;
		}
	}
}

static struct tpl_node *filters_tests(struct ps *p, struct tpl_node *n)
{
	for (;;) {
		if (is_op(p, '|')) {
			p->i++;
			struct tpl_node *f = node(p, N_FILTER);
			f->name = name_tok(p);
			f->a = n;
			if (is_op(p, '('))
				call_args(p, f);
			n = f;
		} else if (is_name(p, "is")) {
			p->i++;
			struct tpl_node *t = node(p, N_TEST);
			if (is_name(p, "not")) {
				p->i++;
				t->op = 1;
			}
			t->name = name_tok(p);
			t->a = n;
			if (is_op(p, '(')) {
				call_args(p, t);
			} else {
				/* one bare argument, as `is divisibleby 3` */
				struct tpl_token *c = cur(p);
				bool arg = c->type == T_STRING || c->type == T_INT || c->type == T_FLOAT ||
					   (c->type == T_OP && (c->op == '[' || c->op == '{' || c->op == '-')) ||
					   (c->type == T_NAME && !is_name(p, "else") && !is_name(p, "or") &&
					    !is_name(p, "and") && !is_name(p, "if") && !is_name(p, "in") &&
					    !is_name(p, "is") && !is_name(p, "not"));
				if (arg) {
					size_t cap = 0;
					struct tpl_node *a = unary(p, false);
					add_kid(p, t, postfix(p, a), &cap);
				}
			}
			n = t;
		} else if (is_op(p, '(')) {
			struct tpl_node *c = node(p, N_CALL);
			c->a = n;
			call_args(p, c);
			n = c;
		} else {
			return n;
		}
	}
}

static struct tpl_node *unary(struct ps *p, bool with_filter)
{
	struct tpl_node *n;
	enter(p);
	if (is_op(p, '-') || is_op(p, '+')) {
		n = node(p, is_op(p, '-') ? N_NEG : N_POS);
		p->i++;
		n->a = unary(p, false);
	} else {
		n = primary(p);
	}
	n = postfix(p, n);
	if (with_filter)
		n = filters_tests(p, n);
	p->nest--;
	return n;
}

static struct tpl_node *binary(struct ps *p, struct tpl_node *a, int op, struct tpl_node *b)
{
	struct tpl_node *n = node(p, N_BIN);
	n->op = op;
	n->a = a;
	n->b = b;
	return n;
}

/* Arithmetic operators by precedence, loosest first; a level's operands
 * are the next level's, the last level's are unary expressions. */
static const int arith_ops[][4] = {
	{ '+', '-' },
	{ '~' },
	{ '*', '/', '%', TPL_OP2('/', '/') },
	{ TPL_OP2('*', '*') },
};
#define ARITH_LEVELS (int)(sizeof arith_ops / sizeof arith_ops[0])

static bool arith_op_at(struct ps *p, int level)
{
	for (int k = 0; k < 4 && arith_ops[level][k]; k++)
		if (is_op(p, arith_ops[level][k]))
			return true;
	return false;
}

static struct tpl_node *arith(struct ps *p, int level)
{
	if (level == ARITH_LEVELS)
		return unary(p, true);
	struct tpl_node *n = arith(p, level + 1);
	while (arith_op_at(p, level)) {
		int op = cur(p)->op;
		p->i++;
		n = binary(p, n, op, arith(p, level + 1));
	}
	return n;
}

/* Comparison chains (a < b < c) are and-ed pairwise, as Python. */
static struct tpl_node *compare(struct ps *p)
{
	struct tpl_node *n = arith(p, 0), *prev = n, *result = NULL;
	for (;;) {
		int op;
		if (cur(p)->type == T_OP && (cur(p)->op == TPL_OP2('=', '=') || cur(p)->op == TPL_OP2('!', '=') ||
					     cur(p)->op == '<' || cur(p)->op == '>' ||
					     cur(p)->op == TPL_OP2('<', '=') || cur(p)->op == TPL_OP2('>', '='))) {
			op = cur(p)->op;
			p->i++;
		} else if (is_name(p, "in")) {
			op = 'i';
			p->i++;
		} else if (is_name(p, "not") && p->t[p->i + 1].type == T_NAME &&
			   p->t[p->i + 1].n == 2 && !memcmp(p->t[p->i + 1].s, "in", 2)) {
			op = 'n';
			p->i += 2;
		} else {
			break;
		}
		struct tpl_node *rhs = arith(p, 0);
		struct tpl_node *c = binary(p, prev, op, rhs);
		if (result) {
			struct tpl_node *a = node(p, N_AND);
			a->a = result;
			a->b = c;
			result = a;
		} else {
			result = c;
		}
		prev = rhs;
	}
	return result ? result : n;
}

static struct tpl_node *not_expr(struct ps *p)
{
	if (is_name(p, "not")) {
		struct tpl_node *n = node(p, N_NOT);
		p->i++;
		enter(p);
		n->a = not_expr(p);
		p->nest--;
		return n;
	}
	return compare(p);
}

/* a and b, a or b: left-associative chains of one word. */
static struct tpl_node *logic(struct ps *p, const char *word, enum tpl_ntype type,
			      struct tpl_node *(*operand)(struct ps *))
{
	struct tpl_node *n = operand(p);
	while (is_name(p, word)) {
		struct tpl_node *a = node(p, type);
		p->i++;
		a->a = n;
		a->b = operand(p);
		n = a;
	}
	return n;
}

static struct tpl_node *and_expr(struct ps *p) { return logic(p, "and", N_AND, not_expr); }
static struct tpl_node *or_expr(struct ps *p) { return logic(p, "or", N_OR, and_expr); }

static struct tpl_node *expr(struct ps *p)
{
	enter(p);
	struct tpl_node *n = or_expr(p);
	while (is_name(p, "if")) {
		struct tpl_node *c = node(p, N_COND);
		p->i++;
		c->a = n;
		c->b = or_expr(p);
		if (is_name(p, "else")) {
			p->i++;
			c->c = or_expr(p);
		}
		n = c;
	}
	p->nest--;
	return n;
}

/* ---- statements ---- */

static struct tpl_node *body(struct ps *p, const char *const *ends, const char **found);

static void block_end(struct ps *p)
{
	if (cur(p)->type != T_BLOCK_END)
		unexpected(p, "'%}'");
	p->i++;
}

/* Target names of for/set: a, b or (a, b). */
static void targets(struct ps *p, struct tpl_node *n)
{
	size_t cap = 0;
	bool paren = is_op(p, '(');
	if (paren)
		p->i++;
	do {
		if (n->nnames)
			p->i++;
		add_name(p, n, name_tok(p), NULL, &cap);
	} while (is_op(p, ','));
	if (paren)
		expect_op(p, ')', "')'");
}

static struct tpl_node *stmt_if(struct ps *p)
{
	static const char *const ends[] = { "elif", "else", "endif", NULL };
	struct tpl_node *n = node(p, N_IF);
	const char *found;
	n->a = expr(p);
	block_end(p);
	n->b = body(p, ends, &found);
	if (!strcmp(found, "elif")) {
		n->c = stmt_if(p);
		return n;
	}
	if (!strcmp(found, "else")) {
		static const char *const endif[] = { "endif", NULL };
		block_end(p);
		n->c = body(p, endif, &found);
	}
	block_end(p);
	return n;
}

static struct tpl_node *stmt_for(struct ps *p)
{
	static const char *const ends[] = { "else", "endfor", NULL };
	struct tpl_node *n = node(p, N_FOR);
	const char *found;
	targets(p, n);
	if (!is_name(p, "in"))
		unexpected(p, "'in'");
	p->i++;
	n->a = or_expr(p);
	if (is_name(p, "if")) {
		p->i++;
		n->d = or_expr(p);
	}
	if (is_name(p, "recursive"))
		tpl_fail(p->h, cur(p)->line, "unsupported construct 'recursive' loop");
	block_end(p);
	n->b = body(p, ends, &found);
	if (!strcmp(found, "else")) {
		static const char *const endfor[] = { "endfor", NULL };
		block_end(p);
		n->c = body(p, endfor, &found);
	}
	block_end(p);
	return n;
}

static struct tpl_node *filter_chain(struct ps *p, struct tpl_node *base)
{
	while (is_op(p, '|')) {
		p->i++;
		struct tpl_node *f = node(p, N_FILTER);
		f->name = name_tok(p);
		f->a = base;
		if (is_op(p, '('))
			call_args(p, f);
		base = f;
	}
	return base;
}

static struct tpl_node *stmt_set(struct ps *p)
{
	struct tpl_node *n = node(p, N_SET);
	if (cur(p)->type == T_NAME && p->t[p->i + 1].type == T_OP && p->t[p->i + 1].op == '.') {
		/* set ns.attr = value */
		size_t cap = 0;
		add_name(p, n, name_tok(p), NULL, &cap);
		p->i++;
		n->d = node(p, N_NAME);
		n->d->name = name_tok(p);
	} else {
		targets(p, n);
	}
	if (is_op(p, '=')) {
		p->i++;
		n->a = expr(p);
		if (is_op(p, ',')) {   /* set a = 1, 2: a tuple */
			struct tpl_node *tu = node(p, N_TUPLE);
			size_t cap = 0;
			add_kid(p, tu, n->a, &cap);
			while (is_op(p, ',')) {
				p->i++;
				add_kid(p, tu, expr(p), &cap);
			}
			n->a = tu;
		}
		block_end(p);
		return n;
	}
	if (n->nnames != 1 || n->d)
		unexpected(p, "'='");
	/* {% set x %}...{% endset %}, optionally filtered */
	static const char *const ends[] = { "endset", NULL };
	const char *found;
	n->type = N_SETBLOCK;
	struct tpl_node *hole = node(p, N_LIT);   /* the captured text goes here */
	n->c = filter_chain(p, hole);
	n->d = hole;
	block_end(p);
	n->b = body(p, ends, &found);
	block_end(p);
	return n;
}

static struct tpl_node *stmt_macro(struct ps *p)
{
	static const char *const ends[] = { "endmacro", NULL };
	struct tpl_node *n = node(p, N_MACRO);
	const char *found;
	size_t cap = 0;
	n->name = name_tok(p);
	expect_op(p, '(', "'('");
	while (!is_op(p, ')')) {
		if (n->nnames)
			expect_op(p, ',', "','");
		const char *a = name_tok(p);
		struct tpl_node *def = NULL;
		if (is_op(p, '=')) {
			p->i++;
			def = expr(p);
		}
		add_name(p, n, a, def, &cap);
	}
	p->i++;
	block_end(p);
	n->b = body(p, ends, &found);
	block_end(p);
	return n;
}

static struct tpl_node *stmt(struct ps *p, const char *const *ends, const char **found)
{
	int line = cur(p)->line;
	if (cur(p)->type != T_NAME)
		unexpected(p, "a tag name");
	struct tpl_token *t = cur(p);
	const char *inner;
	for (size_t k = 0; ends && ends[k]; k++)
		if (is_name(p, ends[k])) {
			*found = ends[k];
			p->i++;
			return NULL;
		}
	p->i++;
	struct tpl_node *n;
#define TAG(w) (t->n == strlen(w) && !memcmp(t->s, w, t->n))
	if (TAG("if"))
		return stmt_if(p);
	if (TAG("for"))
		return stmt_for(p);
	if (TAG("set"))
		return stmt_set(p);
	if (TAG("macro"))
		return stmt_macro(p);
	if (TAG("break") || TAG("continue")) {
		n = node(p, TAG("break") ? N_BREAK : N_CONTINUE);
		n->line = line;
		block_end(p);
		return n;
	}
	if (TAG("with")) {   /* {% with a = x, b = y %}: a scope of its own */
		static const char *const e[] = { "endwith", NULL };
		size_t cap = 0;
		n = node(p, N_WITH);
		n->line = line;
		while (cur(p)->type != T_BLOCK_END) {
			if (n->nnames)
				expect_op(p, ',', "','");
			const char *name = name_tok(p);
			expect_op(p, '=', "'='");
			add_name(p, n, name, expr(p), &cap);
		}
		block_end(p);
		n->b = body(p, e, &inner);
		block_end(p);
		return n;
	}
	if (TAG("call")) {   /* {% call [(params)] m(args) %}body{% endcall %}: body is caller() */
		static const char *const e[] = { "endcall", NULL };
		size_t cap = 0;
		n = node(p, N_CALLBLOCK);
		n->line = line;
		struct tpl_node *caller = node(p, N_MACRO);
		caller->name = "caller";
		if (is_op(p, '(')) {
			p->i++;
			while (!is_op(p, ')')) {
				if (caller->nnames)
					expect_op(p, ',', "','");
				const char *a = name_tok(p);
				struct tpl_node *def = NULL;
				if (is_op(p, '=')) {
					p->i++;
					def = expr(p);
				}
				add_name(p, caller, a, def, &cap);
			}
			p->i++;
		}
		n->a = expr(p);
		if (n->a->type != N_CALL)
			tpl_fail(p->h, line, "expected a call after 'call'");
		block_end(p);
		caller->b = body(p, e, &inner);
		block_end(p);
		n->c = caller;
		return n;
	}
	if (TAG("generation")) {
		static const char *const e[] = { "endgeneration", NULL };
		block_end(p);
		n = body(p, e, &inner);
		block_end(p);
		return n;
	}
	if (TAG("filter")) {
		static const char *const e[] = { "endfilter", NULL };
		n = node(p, N_FILTERBLOCK);
		struct tpl_node *hole = node(p, N_LIT);
		hole->line = line;
		n->d = hole;
		/* the first filter has no '|' before it */
		struct tpl_node *f = node(p, N_FILTER);
		f->name = name_tok(p);
		f->a = hole;
		if (is_op(p, '('))
			call_args(p, f);
		n->c = filter_chain(p, f);
		block_end(p);
		n->b = body(p, e, &inner);
		block_end(p);
		return n;
	}
#undef TAG
	p->i--;
	if (ends)
		tpl_fail(p->h, line, "unexpected tag %s (expected '%s')", describe(p), ends[0]);
	tpl_fail(p->h, line, "unsupported tag %s", describe(p));
}

/* Statements until one of the end tags (whose name is then consumed, the
 * '%}' after it not), or the end of the template when ends is NULL. */
static struct tpl_node *body(struct ps *p, const char *const *ends, const char **found)
{
	struct tpl_node *b = node(p, N_BODY);
	size_t cap = 0;
	int line = cur(p)->line;
	enter(p);
	for (;;) {
		struct tpl_token *t = cur(p);
		if (t->type == T_EOF) {
			size_t k = 0;
			while (ends && ends[k + 1])
				k++;
			if (ends)
				tpl_fail(p->h, line, "missing '%s' for the block opened here", ends[k]);
			break;
		}
		if (t->type == T_TEXT) {
			struct tpl_node *n = node(p, N_TEXT);
			n->name = t->s;
			n->len = t->n;
			add_kid(p, b, n, &cap);
			p->i++;
		} else if (t->type == T_VAR_BEGIN) {
			struct tpl_node *n = node(p, N_OUT);
			p->i++;
			n->a = expr(p);
			if (cur(p)->type != T_VAR_END)
				unexpected(p, "'}}'");
			p->i++;
			add_kid(p, b, n, &cap);
		} else if (t->type == T_BLOCK_BEGIN) {
			p->i++;
			struct tpl_node *n = stmt(p, ends, found);
			if (!n)
				break;
			add_kid(p, b, n, &cap);
		} else {
			unexpected(p, NULL);
		}
	}
	p->nest--;
	return b;
}

struct tpl_node *tpl_parse(struct tpl_heap *h, const char *src, size_t len)
{
	struct ps p = { .h = h };
	p.t = tpl_lex(h, src, len, &p.n);
	return body(&p, NULL, NULL);
}

int tpl_compile(const char *src, size_t len, struct tpl_template **out, struct tpl_error *err)
{
	struct tpl_template *t = calloc(1, sizeof *t);
	struct tpl_heap *h = tpl_heap_new(0);
	jmp_buf jb;
	memset(err, 0, sizeof *err);
	if (!t || !h) {
		free(t);
		tpl_heap_free(h);
		snprintf(err->msg, sizeof err->msg, "out of memory");
		return -1;
	}
	h->err = err;
	h->fail = &jb;
	if (setjmp(jb)) {
		tpl_heap_free(h);
		free(t);
		return -1;
	}
	t->root = tpl_parse(h, src, len);
	h->fail = NULL;
	t->heap = h;
	*out = t;
	return 0;
}

void tpl_free(struct tpl_template *t)
{
	if (t) {
		tpl_heap_free(t->heap);
		free(t);
	}
}
