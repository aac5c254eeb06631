/* tests/unit/test_rng.h — the unit tests' random numbers: xorshift64,
 * seeded by the file that includes it (TEST_RNG_SEED), so that each
 * test's data is fixed from run to run. */
#ifndef PAGODA_TEST_RNG_H
#define PAGODA_TEST_RNG_H

#include <stdint.h>

#ifndef TEST_RNG_SEED
#error "define TEST_RNG_SEED before including test_rng.h"
#endif

static uint64_t rng_state = TEST_RNG_SEED;

static inline uint32_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state >> 16);
}

/* uniform [-1, 1) */
static inline float frand(void)
{
	return (float)((double)rnd() / 2147483648.0 - 1.0);
}

/* roughly gaussian */
static inline float grand(void)
{
	return (frand() + frand() + frand() + frand()) * 0.866f;
}

#endif
