/* daemon/kv/crc32c_avx2.c — CRC32C with SSE4.2's crc32 instruction, 8
 * bytes at a time (compiled with the AVX2 flags; called only where AVX2,
 * and so SSE4.2, runs). */
#include "daemon/kv/crc32c.h"

#include <nmmintrin.h>
#include <string.h>

uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t len);

uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	uint64_t c = ~crc;
	while (len && ((uintptr_t)p & 7)) {
		c = _mm_crc32_u8((uint32_t)c, *p++);
		len--;
	}
	for (; len >= 8; len -= 8, p += 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		c = _mm_crc32_u64(c, w);
	}
	while (len--)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	return ~(uint32_t)c;
}
