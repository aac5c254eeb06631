/* kernels/cpu/pf_tune.h — which way decode's Q4_0_X8 and IQ4_NL_X8
 * kernels fetch ahead (enum pg_x8_pf, repack.h), chosen by timing both
 * while decode runs.
 *
 * Neither way wins on this host all the time, and which one does changes
 * within seconds, so any fixed choice loses in some stretches.
 * The engine thread times each one-row matmul of these types (one pool
 * run, no activation conversion) and keeps per way decayed sums of the
 * bytes it streamed and the nanoseconds it took, over about the last
 * PG_PF_WINDOW calls. Every PG_PF_EXPLORE-th call goes the other way, or
 * every PG_PF_EXPLORE_FAR-th while the other way is slower by more than
 * PG_PF_FAR (each such call costs that much); the tuner changes ways when
 * the other one's time per byte is lower by PG_PF_MARGIN. Summing bytes
 * and time, rather than averaging each call's rate, weighs a small matrix
 * (slower per byte) by what it costs.
 *
 * PAGODA_PREFETCH=lines|pages pins a way; unset or "auto", the tuner
 * picks. One tuner per engine thread: no sharing, no locks.
 */
#ifndef PAGODA_KERNELS_CPU_PF_TUNE_H
#define PAGODA_KERNELS_CPU_PF_TUNE_H

#include <stdint.h>

#include "kernels/cpu/repack.h"

#define PG_PF_WINDOW 512 /* calls: ~3 decode tokens of a 22-layer model */
#define PG_PF_EXPLORE 16
#define PG_PF_EXPLORE_FAR 64
#define PG_PF_MARGIN 0.03
#define PG_PF_FAR 0.10
#define PG_PF_MIN_CALLS 4.0 /* decayed calls a way needs before it is judged */

struct pg_pf_tune {
	double bytes[PG_X8_PF_MODES], ns[PG_X8_PF_MODES], calls[PG_X8_PF_MODES];
	uint32_t n;	    /* calls picked so far */
	uint32_t explore;   /* every explore-th call goes the other way; 0: PG_PF_EXPLORE */
	enum pg_x8_pf cur;
};

/* The way for the next call (the pin is the caller's to check). */
enum pg_x8_pf pg_pf_pick(struct pg_pf_tune *t);
/* What a call picked with pg_pf_pick streamed and took. */
void pg_pf_note(struct pg_pf_tune *t, enum pg_x8_pf pf, double bytes, double ns);

/* The pinned way, or -1 for the tuner's: PAGODA_PREFETCH, or what
 * pg_cpu_set_prefetch (backend.h) set last. */
int pg_pf_pinned(void);

#endif
