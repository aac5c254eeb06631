/* kernels/cpu/ops.c — the elementwise entry points of the door. */
#include <math.h>

#include "kernels/cpu/cpu.h"

void pg_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps)
{
	double sum = 0;
	for (int64_t i = 0; i < n; i++)
		sum += (double)(x[i] * x[i]);
	const float mean = (float)(sum / (double)n);
	const float scale = 1.0f / sqrtf(mean + eps);
	if (w)
		for (int64_t i = 0; i < n; i++)
			y[i] = (x[i] * scale) * w[i];
	else
		for (int64_t i = 0; i < n; i++)
			y[i] = x[i] * scale;
}

void pg_softmax(float *x, int64_t n)
{
	if (n > 0)
		pg_kern_get()->softmax(x, n);
}

void pg_swiglu(float *out, const float *gate, const float *up, int64_t n)
{
	pg_kern_get()->swiglu(out, gate, up, n);
}

void pg_f32_to_f16_row(const float *x, pg_f16 *y, int64_t n)
{
	pg_kern_get()->f32_to_f16(x, y, n);
}

void pg_f16_to_f32_row(const pg_f16 *x, float *y, int64_t n)
{
	pg_kern_get()->f16_to_f32(x, y, n);
}

float pg_dot_f16(const pg_f16 *a, const pg_f16 *b, int64_t n)
{
	return pg_kern_get()->dot_f16(a, b, n);
}

void pg_f16_scale_row(pg_f16 *acc, float s, int64_t n)
{
	pg_kern_get()->f16_scale(acc, s, n);
}

void pg_f16_fma_row(pg_f16 *acc, const pg_f16 *v, float s, int64_t n)
{
	pg_kern_get()->f16_fma(acc, v, s, n);
}
