/* kernels/cpu/dispatch.c — picks the widest kernel table the CPU runs. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

enum { LVL_SCALAR, LVL_AVX2, LVL_AVX512 };
static const char *const lvl_name[] = { "scalar", "avx2", "avx512" };
static const struct pg_kern *const lvl_kern[] = { &pg_kern_scalar, &pg_kern_avx2, &pg_kern_avx512 };

static _Atomic(const struct pg_kern *) g_kern;

static int hw_level(void)
{
	__builtin_cpu_init();
	if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
	      __builtin_cpu_supports("f16c")))
		return LVL_SCALAR;
	/* The AVX-512 unit is built with these; BF16 is optional there and
	 * checked again where it is used. */
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
	    __builtin_cpu_supports("avx512vnni"))
		return LVL_AVX512;
	return LVL_AVX2;
}

static int name_level(const char *name)
{
	for (int i = 0; i <= LVL_AVX512; i++)
		if (name && strcmp(name, lvl_name[i]) == 0)
			return i;
	return -1;
}

const struct pg_kern *pg_kern_get(void)
{
	const struct pg_kern *k = atomic_load_explicit(&g_kern, memory_order_acquire);
	if (k)
		return k;
	int lvl = hw_level();
	int cap = name_level(getenv("PAGODA_ISA"));
	if (cap >= 0 && cap < lvl)
		lvl = cap;
	k = lvl_kern[lvl];
	atomic_store_explicit(&g_kern, k, memory_order_release);
	return k;
}

const char *pg_cpu_isa(void)
{
	return pg_kern_get()->name;
}

bool pg_cpu_set_isa(const char *name)
{
	int lvl = name_level(name);
	if (lvl < 0 || lvl > hw_level())
		return false;
	atomic_store_explicit(&g_kern, lvl_kern[lvl], memory_order_release);
	return true;
}

