/* bench/stream_read.h — the plain reads both bandwidth measurements use
 * (bench/membw.c, bench/mm_decode.c): four independent xor chains, of
 * 256-bit vectors where the build has AVX2 (both are built with
 * -march=native by the bench), of words otherwise; read_slice as the
 * loads come, read_slice_ahead also fetching each line READ_AHEAD bytes
 * early. Neither is the faster on this VM at all times (the kernels'
 * software prefetches streamed 1.3x a plain read in one stretch of run
 * 23, the plain read 1.03-1.08x the fetching one in others), so the
 * probes take the better of the two. */
#ifndef PAGODA_BENCH_STREAM_READ_H
#define PAGODA_BENCH_STREAM_READ_H

#include <stddef.h>
#include <stdint.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#define READ_AHEAD 8192

/* ahead: 0, or how many bytes on each line is fetched (a constant at
 * both call sites, so each gets its own loop) */
static inline __attribute__((always_inline)) uint64_t read_words(const uint64_t *p, size_t n, const size_t ahead)
{
	size_t i = 0;
#if defined(__AVX2__)
	__m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
	for (; i + 16 <= n; i += 16) {
		if (ahead) {
			_mm_prefetch((const char *)(p + i) + ahead, _MM_HINT_T0);
			_mm_prefetch((const char *)(p + i) + ahead + 64, _MM_HINT_T0);
		}
		a0 = _mm256_xor_si256(a0, _mm256_loadu_si256((const __m256i *)(p + i)));
		a1 = _mm256_xor_si256(a1, _mm256_loadu_si256((const __m256i *)(p + i + 4)));
		a2 = _mm256_xor_si256(a2, _mm256_loadu_si256((const __m256i *)(p + i + 8)));
		a3 = _mm256_xor_si256(a3, _mm256_loadu_si256((const __m256i *)(p + i + 12)));
	}
	a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
	uint64_t s[4];
	_mm256_storeu_si256((__m256i *)s, a0);
	uint64_t r0 = s[0] ^ s[1], r1 = s[2] ^ s[3], r2 = 0, r3 = 0;
#else
	uint64_t r0 = 0, r1 = 0, r2 = 0, r3 = 0;
	for (; i + 16 <= n; i += 16) {
		if (ahead) {
			__builtin_prefetch((const char *)(p + i) + ahead, 0, 3);
			__builtin_prefetch((const char *)(p + i) + ahead + 64, 0, 3);
		}
		for (size_t j = i; j < i + 16; j += 4) {
			r0 ^= p[j];
			r1 ^= p[j + 1];
			r2 ^= p[j + 2];
			r3 ^= p[j + 3];
		}
	}
#endif
	for (; i < n; i++)
		r0 ^= p[i];
	return r0 ^ r1 ^ r2 ^ r3;
}

static uint64_t read_slice(const uint64_t *p, size_t n)
{
	return read_words(p, n, 0);
}

static uint64_t read_slice_ahead(const uint64_t *p, size_t n)
{
	return read_words(p, n, READ_AHEAD);
}

#endif
