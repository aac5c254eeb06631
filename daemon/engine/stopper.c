/* daemon/engine/stopper.c — stop-string matching with hold-back. */
#include "daemon/engine/stopper.h"

#include <string.h>

void stopper_init(struct stopper *s, const char (*stop)[ENGINE_STOP_LEN + 1], int n_stop)
{
	s->stop = stop;
	s->n_stop = 0;
	s->n_hold = 0;
	/* empty stop strings would match everywhere: ignore them */
	for (int i = 0; i < n_stop; i++)
		if (stop[i][0])
			s->n_stop = i + 1;
}

/* Longest suffix of buf[0..n) that is a proper prefix of a stop string. */
static int held_suffix(const struct stopper *s, const char *buf, int n)
{
	int best = 0;
	for (int i = 0; i < s->n_stop; i++) {
		int sl = (int)strnlen(s->stop[i], ENGINE_STOP_LEN);
		for (int k = (sl - 1 < n ? sl - 1 : n); k > best; k--)
			if (memcmp(buf + n - k, s->stop[i], k) == 0) {
				best = k;
				break;
			}
	}
	return best;
}

int stopper_feed(struct stopper *s, const char *text, int n, char *out, int cap, bool *matched)
{
	*matched = false;
	if (s->n_stop == 0) {
		int m = n < cap ? n : cap;
		memcpy(out, text, m);
		return m;
	}
	/* work in out: held text, then the new text */
	if (s->n_hold + n > cap)
		n = cap - s->n_hold;
	memcpy(out, s->hold, s->n_hold);
	memcpy(out + s->n_hold, text, n);
	int len = s->n_hold + n;
	int first = -1;
	for (int i = 0; i < s->n_stop; i++) {
		int sl = (int)strnlen(s->stop[i], ENGINE_STOP_LEN);
		char *hit = memmem(out, len, s->stop[i], sl);
		if (hit && (first < 0 || hit - out < first))
			first = (int)(hit - out);
	}
	if (first >= 0) {
		*matched = true;
		s->n_hold = 0;
		return first;
	}
	int keep = held_suffix(s, out, len);
	memcpy(s->hold, out + len - keep, keep);
	s->n_hold = keep;
	return len - keep;
}

int stopper_flush(struct stopper *s, char *out, int cap)
{
	int m = s->n_hold < cap ? s->n_hold : cap;
	memcpy(out, s->hold, m);
	s->n_hold = 0;
	return m;
}
