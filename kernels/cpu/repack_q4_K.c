/* kernels/cpu/repack_q4_K.c — building the Q4_K 8-row layout (repack.h)
 * from the file's blocks: whole matrices at load, single blocks for the
 * kernels that read Q4_K where it lies. */
#include <string.h>

#include "kernels/cpu/cpu.h"

size_t pg_q4_K_x8_size(int64_t n, int64_t k)
{
	if (n <= 0 || k <= 0 || n % 8 || k % QK_K)
		return 0;
	return (size_t)(n / 8) * PG_Q4KX8_GROUP_BYTES(k / QK_K);
}

void pg_q4_K_x8_block(const block_q4_K *const rows[8], int64_t i, uint8_t *sb)
{
	pg_f16 d[8], dmin[8];
	for (int j = 0; j < 8; j++) {
		const block_q4_K *b = rows[j] + i;
		for (int g = 0; g < 4; g++)
			for (int e = 0; e < 8; e++)
				memcpy(sb + 32 * (8 * g + e) + 4 * j, b->qs + 32 * g + 4 * e, 4);
		for (int t = 0; t < 8; t++) {
			uint8_t sc, mn;
			pg_scale_min_k4(t, b->scales, &sc, &mn);
			sb[1024 + 8 * t + j] = sc;
			sb[1088 + 8 * t + j] = mn;
		}
		d[j] = b->d;
		dmin[j] = b->dmin;
	}
	memcpy(sb + 1152, d, sizeof d);
	memcpy(sb + 1168, dmin, sizeof dmin);
}

void pg_q4_K_x8_repack(const void *src, void *dst, int64_t n, int64_t k)
{
	const int64_t nb = k / QK_K;
	const size_t wrow = (size_t)nb * sizeof(block_q4_K), gbytes = PG_Q4KX8_GROUP_BYTES(nb);
	for (int64_t grp = 0; grp < n / 8; grp++) {
		uint8_t *out = (uint8_t *)dst + (size_t)grp * gbytes;
		const block_q4_K *rows[8];
		for (int j = 0; j < 8; j++)
			rows[j] = (const block_q4_K *)((const char *)src + (size_t)(8 * grp + j) * wrow);
		for (int64_t i = 0; i < nb; i++)
			pg_q4_K_x8_block(rows, i, out + (size_t)i * PG_Q4KX8_SB);
		memset(out + (size_t)nb * PG_Q4KX8_SB, 0, gbytes - (size_t)nb * PG_Q4KX8_SB);
	}
}
