/* daemon/kv/crc32c.c — the table path and the run-time pick. */
#include "daemon/kv/crc32c.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t len); /* crc32c_avx2.c */

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void make_table(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

uint32_t crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&table_once, make_table);
	const uint8_t *p = buf;
	crc = ~crc;
	while (len && ((uintptr_t)p & 7)) {
		crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
		len--;
	}
	for (; len >= 8; len -= 8, p += 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		w ^= crc;
		crc = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
		      table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^ table[2][(w >> 40) & 0xff] ^
		      table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
	}
	while (len--)
		crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
	return ~crc;
}

uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
	/* The hardware path's unit is compiled for AVX2 (which implies
	 * SSE4.2): pick it only where AVX2 runs. */
	static int hw = -1;
	if (hw < 0)
		hw = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("sse4.2");
	return hw ? crc32c_hw(crc, buf, len) : crc32c_sw(crc, buf, len);
}
