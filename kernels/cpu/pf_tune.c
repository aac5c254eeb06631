/* kernels/cpu/pf_tune.c — the decode prefetch tuner (pf_tune.h). */
#include "kernels/cpu/pf_tune.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"

#define PIN_UNKNOWN (-3) /* a name pin_of does not know */
#define PIN_UNREAD (-2)	 /* PAGODA_PREFETCH not read yet */
#define PIN_AUTO (-1)

static _Atomic int g_pin = PIN_UNREAD;

static int pin_of(const char *name)
{
	if (!name || !strcmp(name, "auto"))
		return PIN_AUTO;
	if (!strcmp(name, "lines"))
		return PG_X8_PF_LINES;
	if (!strcmp(name, "pages"))
		return PG_X8_PF_PAGES;
	return PIN_UNKNOWN;
}

int pg_pf_pinned(void)
{
	int p = atomic_load_explicit(&g_pin, memory_order_relaxed);
	if (p != PIN_UNREAD)
		return p;
	p = pin_of(getenv("PAGODA_PREFETCH"));
	if (p == PIN_UNKNOWN)
		p = PIN_AUTO; /* the tuner, as unset */
	atomic_store_explicit(&g_pin, p, memory_order_relaxed);
	return p;
}

bool pg_cpu_set_prefetch(const char *name)
{
	const int p = pin_of(name);
	if (p == PIN_UNKNOWN)
		return false;
	atomic_store_explicit(&g_pin, p, memory_order_relaxed);
	return true;
}

static enum pg_x8_pf other(enum pg_x8_pf pf)
{
	return pf == PG_X8_PF_LINES ? PG_X8_PF_PAGES : PG_X8_PF_LINES;
}

enum pg_x8_pf pg_pf_pick(struct pg_pf_tune *t)
{
	return ++t->n % (t->explore ? t->explore : PG_PF_EXPLORE) == 0 ? other(t->cur) : t->cur;
}

void pg_pf_note(struct pg_pf_tune *t, enum pg_x8_pf pf, double bytes, double ns)
{
	const double keep = 1.0 - 1.0 / PG_PF_WINDOW;
	for (int i = 0; i < PG_X8_PF_MODES; i++) {
		t->bytes[i] *= keep;
		t->ns[i] *= keep;
		t->calls[i] *= keep;
	}
	t->bytes[pf] += bytes;
	t->ns[pf] += ns;
	t->calls[pf] += 1.0;
	const enum pg_x8_pf c = t->cur, o = other(c);
	if (t->calls[c] < PG_PF_MIN_CALLS || t->calls[o] < PG_PF_MIN_CALLS)
		return;
	/* the other way's time per byte over this one's, without dividing:
	 * ns[o]/bytes[o] against (1 + x) * ns[c]/bytes[c] */
	const double other_ns = t->ns[o] * t->bytes[c], cur_ns = t->ns[c] * t->bytes[o];
	if (other_ns < (1.0 - PG_PF_MARGIN) * cur_ns) {
		t->cur = o;
		t->explore = PG_PF_EXPLORE;
	} else {
		t->explore = other_ns > (1.0 + PG_PF_FAR) * cur_ns ? PG_PF_EXPLORE_FAR : PG_PF_EXPLORE;
	}
}
