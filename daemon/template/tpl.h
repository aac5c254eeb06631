/* daemon/template/tpl.h — the template room's inside: values, heap, AST.
 * Only files of daemon/template include it. */
#ifndef PAGODA_TPL_H
#define PAGODA_TPL_H

#include "daemon/template/template.h"

#include <setjmp.h>
#include <stdarg.h>

enum tpl_kind {
	V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT,
	V_MACRO, V_METHOD, V_GLOBAL,
};

struct tpl_node;

struct tpl_val {
	enum tpl_kind kind;
	bool tuple;      /* V_LIST made from a tuple: repr uses ( ) */
	bool ns;         /* V_DICT made by namespace(): attributes assignable */
	bool markup;     /* V_STR from |safe: markupsafe's Markup, '+' escapes the other side */
	union {
		bool b;
		int64_t i;
		double f;
		struct { const char *s; size_t n; } str;   /* V_STR; V_UNDEF: its hint */
		struct { struct tpl_val **v; size_t n, cap; } list;
		struct { struct tpl_val **k, **v; size_t n, cap; } dict;
		struct { const struct tpl_node *node; struct tpl_scope *scope; } macro;
		struct { struct tpl_val *self; const char *name; } method; /* also V_GLOBAL */
	};
};

/* ---- heap: an arena; inside a render, running out longjmps to it ---- */
struct tpl_heap {
	struct tpl_chunk *chunks;
	size_t used, limit;
	jmp_buf *fail;   /* set while rendering/compiling */
	struct tpl_error *err;
};
void *tpl_alloc(struct tpl_heap *h, size_t n);
char *tpl_strdup(struct tpl_heap *h, const char *s, size_t n);
struct tpl_val *tpl_new(struct tpl_heap *h, enum tpl_kind k);
struct tpl_val *tpl_undef(struct tpl_heap *h, const char *hint);
void tpl_list_add(struct tpl_heap *h, struct tpl_val *l, struct tpl_val *v);
void tpl_dict_put(struct tpl_heap *h, struct tpl_val *d, struct tpl_val *k, struct tpl_val *v);
struct tpl_val *tpl_dict_find(const struct tpl_val *d, const struct tpl_val *k);
struct tpl_val *tpl_dict_findz(const struct tpl_val *d, const char *k, size_t n);
/* Fail the current render/compile: longjmps, never returns. */
__attribute__((noreturn, format(printf, 3, 4)))
void tpl_fail(struct tpl_heap *h, int line, const char *fmt, ...);

/* ---- growing byte buffers in the heap ---- */
struct tpl_buf { char *s; size_t n, cap, max; };
void tpl_buf_put(struct tpl_heap *h, struct tpl_buf *b, const char *s, size_t n);
void tpl_buf_printf(struct tpl_heap *h, struct tpl_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- Python semantics ---- */
bool tpl_truthy(const struct tpl_val *v);
bool tpl_equal(const struct tpl_val *a, const struct tpl_val *b);
/* <0, 0, >0; fails (TypeError) on unorderable kinds. */
int tpl_compare(struct tpl_heap *h, int line, const struct tpl_val *a, const struct tpl_val *b);
const char *tpl_type_name(const struct tpl_val *v);
void tpl_str_of(struct tpl_heap *h, struct tpl_buf *b, const struct tpl_val *v);  /* str() */
void tpl_repr(struct tpl_heap *h, struct tpl_buf *b, const struct tpl_val *v);    /* repr() */
void tpl_float_repr(char out[32], double d);
/* json.dumps(v, indent=indent (<0: None), sort_keys, ensure_ascii,
 * separators=(item_sep, key_sep) (NULL: Python's defaults)). */
struct tpl_json_style {
	int indent;
	bool sort_keys, ascii;
	const char *item_sep, *key_sep;
};
void tpl_json_dump(struct tpl_heap *h, int line, struct tpl_buf *b, const struct tpl_val *v,
		   const struct tpl_json_style *st);
size_t tpl_utf8_len(const char *s, size_t n);

/* ---- syntax tree ---- */
enum tpl_ntype {
	/* statements */
	N_TEXT, N_OUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_FILTERBLOCK,
	N_BODY, N_BREAK, N_CONTINUE, N_WITH, N_CALLBLOCK,
	/* expressions */
	N_LIT, N_NAME, N_LIST, N_TUPLE, N_DICT, N_ATTR, N_ITEM, N_SLICE, N_CALL,
	N_FILTER, N_TEST, N_NEG, N_POS, N_NOT, N_BIN, N_AND, N_OR, N_COND,
};

struct tpl_node {
	enum tpl_ntype type;
	int line;
	int op;                 /* N_BIN: token of the operator; N_TEST: negated */
	const char *name;       /* N_NAME/N_ATTR/N_FILTER/N_TEST/N_MACRO; N_TEXT: text */
	size_t len;             /* N_TEXT length */
	struct tpl_val *val;    /* N_LIT */
	struct tpl_node *a, *b, *c;  /* operands; N_IF: cond/then/else; N_FOR: iter/body/else */
	struct tpl_node *d;     /* N_FOR: filter condition; N_SET(ns.attr): attr target */
	struct tpl_node **kids; /* N_BODY statements, N_LIST/TUPLE/DICT items, call args */
	size_t nkids;
	const char **names;     /* N_FOR/N_SET targets, N_MACRO params, N_CALL kwarg names */
	size_t nnames;
	struct tpl_node **defs; /* N_MACRO defaults; N_CALL/FILTER/TEST kwarg values */
};

struct tpl_template {
	struct tpl_heap *heap;
	struct tpl_node *root;
};

/* ---- tokens (lex.c) ---- */
enum tpl_tok {
	T_EOF, T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
	T_NAME, T_STRING, T_INT, T_FLOAT, T_OP,
};
/* Two-character operators are packed as c1 << 8 | c2. */
#define TPL_OP2(a, b) ((a) << 8 | (b))
struct tpl_token {
	enum tpl_tok type;
	int line;
	int op;             /* T_OP */
	const char *s;      /* T_TEXT, T_NAME, T_STRING (decoded) */
	size_t n;
	int64_t i;
	double f;
};
/* Tokenize with Hugging Face's whitespace rules; fails through h. */
struct tpl_token *tpl_lex(struct tpl_heap *h, const char *src, size_t len, size_t *ntok);

struct tpl_node *tpl_parse(struct tpl_heap *h, const char *src, size_t len);

/* ---- rendering (render.c) and the builtins (builtins.c) ---- */
struct tpl_render;
struct tpl_args {
	struct tpl_val **pos; size_t npos;
	const char **kwn; struct tpl_val **kwv; size_t nkw;
};
struct tpl_val *tpl_call_value(struct tpl_render *r, int line, struct tpl_val *fn, struct tpl_args *a);
struct tpl_val *tpl_filter(struct tpl_render *r, int line, const char *name, struct tpl_val *v,
			   struct tpl_args *a);
bool tpl_test(struct tpl_render *r, int line, const char *name, struct tpl_val *v, struct tpl_args *a);
struct tpl_val *tpl_method(struct tpl_render *r, int line, struct tpl_val *self, const char *name,
			   struct tpl_args *a);
struct tpl_val *tpl_global(struct tpl_render *r, int line, const char *name, struct tpl_args *a);
/* Attribute lookup x.name as Jinja's getattr (attribute, then item). */
struct tpl_val *tpl_getattr(struct tpl_render *r, int line, struct tpl_val *x, const char *name);
struct tpl_val *tpl_getitem(struct tpl_render *r, int line, struct tpl_val *x, struct tpl_val *k);
bool tpl_has_method(const struct tpl_val *self, const char *name);
bool tpl_is_global(const char *name);
struct tpl_heap *tpl_render_heap(struct tpl_render *r);
time_t tpl_render_now(struct tpl_render *r);
void tpl_tick(struct tpl_render *r, int line);   /* one loop iteration / call */
/* Python's printf-style fmt % args (args: a tuple's items, or one value). */
struct tpl_val *tpl_percent(struct tpl_render *r, int line, const struct tpl_val *fmt,
			    struct tpl_val **args, size_t nargs);
/* HTML-escape s into b, as markupsafe.escape. */
void tpl_escape(struct tpl_heap *h, struct tpl_buf *b, const char *s, size_t n);
/* Iterate v as Python's iter(): a list of items (dict: keys; str: characters). */
struct tpl_val *tpl_iter_list(struct tpl_render *r, int line, struct tpl_val *v);
/* Call a macro (V_MACRO) with arguments. */
struct tpl_val *tpl_call_macro(struct tpl_render *r, int line, struct tpl_val *m, struct tpl_args *a);

#define TPL_MAX_NEST 128        /* parser nesting of blocks and expressions */
#define TPL_MAX_DEPTH 1024      /* evaluation frames (macro recursion included) */
#define TPL_MAX_STEPS 2000000   /* loop iterations and macro calls per render */

/* Encodes code point cp (at most 0x10FFFF) as UTF-8 at o; its length. */
static inline size_t utf8_put(char *o, unsigned cp)
{
	if (cp < 0x80) { o[0] = cp; return 1; }
	if (cp < 0x800) { o[0] = 0xc0 | cp >> 6; o[1] = 0x80 | (cp & 63); return 2; }
	if (cp < 0x10000) {
		o[0] = 0xe0 | cp >> 12; o[1] = 0x80 | (cp >> 6 & 63); o[2] = 0x80 | (cp & 63);
		return 3;
	}
	o[0] = 0xf0 | cp >> 18; o[1] = 0x80 | (cp >> 12 & 63);
	o[2] = 0x80 | (cp >> 6 & 63); o[3] = 0x80 | (cp & 63);
	return 4;
}

#endif
