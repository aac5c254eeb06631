/* kernels/cpu/repack.h — Q4_0 weights repacked 8 rows at a time
 * (PG_TYPE_Q4_0_X8), and the activation rows its kernels read.
 *
 * llama.cpp repacks Q4_0 weights with a multiple of 8 rows (q4_0_8x8) and
 * its kernels keep, per output, one float chain: acc = fma((float)isum,
 * dw*dy, acc) per 32-element block, isum the block's exact integer sum.
 * The layout here serves that order with no horizontal sums: a vector of
 * 16 dword lanes holds 8 consecutive nibble bytes of each of the 8 rows
 * (lane pair 2j, 2j+1 = row j), so one vpdpbusd against a broadcast of 8
 * activation bytes leaves row j's partial sum in lanes 2j + 2j+1.
 *
 * A group (8 rows of k = 32·nb elements) is one contiguous run, 64-byte
 * aligned, PG_X8_GROUP_BYTES(nb) long, so decode streams it linearly. It
 * goes 4 blocks at a time (a quad; the last may hold fewer, c): the quad's
 * c × 128 bytes of nibbles, then its c × 16 bytes of scales, so the
 * scales are in the stream right after the nibbles they scale:
 *   block i's nibbles at pg_x8_qs(g, i), 128 bytes:
 *       [0, 64):   row j's qs[0..7]  at 8·j   (elements 0-7 | 16-23)
 *       [64, 128): row j's qs[8..15] at 64+8·j (elements 8-15 | 24-31)
 *     (bytes as in block_q4_0: low nibble element e, high e + 16);
 *   its 8 rows' d (f16, as in the file) at pg_x8_sc(g, nb, i);
 *   padding to a multiple of 64.
 * (All the nibbles first and all the scales after them made the scales a
 * second stream per group, whose lines the prefetches reached late.)
 * Nibbles stay unsigned levels 0..15: (q - 8)·y = q·y - 8·Σy, and -8·Σy,
 * the same for all rows, comes with the activation block (pg_q8x.off).
 *
 * The layout is the same for every ISA: the table can change at run time.
 */
#ifndef PAGODA_KERNELS_CPU_REPACK_H
#define PAGODA_KERNELS_CPU_REPACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/types.h"

#define PG_X8_GROUP_BYTES(nb) ((((size_t)(nb) * 144) + 63) & ~(size_t)63)
#define PG_X8_QUAD 576 /* 4 blocks: 512 bytes of nibbles, 64 of scales */

static inline const uint8_t *pg_x8_qs(const void *g, int64_t i)
{
	return (const uint8_t *)g + PG_X8_QUAD * (size_t)(i / 4) + 128 * (size_t)(i % 4);
}

static inline const pg_f16 *pg_x8_sc(const void *g, int64_t nb, int64_t i)
{
	const int64_t q0 = i - i % 4, c = nb - q0 < 4 ? nb - q0 : 4;
	return (const pg_f16 *)((const uint8_t *)g + PG_X8_QUAD * (size_t)(i / 4) + 128 * (size_t)c) + 8 * (i % 4);
}

/* Widest tile of activation rows one kernel call takes. */
#define PG_X8_MAX_NR 8

/* One activation block as the repacked kernels read it: Q8_0's scale as
 * f32 (exact), the scale of the same block of the next row (the row the
 * 512-bit kernel pairs this one with; d itself for the last row), -8
 * times the sum of the 32 values, and the values. d and dn side by side
 * make a pair's scales one 64-bit broadcast. */
typedef struct {
	float d, dn;
	int32_t off;
	int8_t qs[32];
} pg_q8x;

/* Decode streams the groups from DRAM faster than the core alone asks for
 * them, so the kernels fetch ahead, in one of two ways (enum pg_x8_pf),
 * neither of which wins on this host all the time (pf_tune.h picks):
 *
 *   LINES  every line of the stream, PG_X8_PF_AHEAD bytes on (about one
 *          group of k = 2048, so into the next group): at each block its
 *          two lines of nibbles, and at the last block of a quad the
 *          quad's line of scales;
 *   PAGES  only the first PG_X8_PF_KICK bytes of the next 4 KB page, as
 *          the stream enters a page: the hardware's stream prefetcher
 *          follows a linear stream within a page but stops at its end,
 *          and these lines start it on the next page one page early.
 *
 * Which way is faster flips with the host within seconds, in either
 * direction, so pf_tune.h times both; a kick of 448 bytes from 4 KB ahead
 * was the best of the PAGES variants tried (bench/mm_decode alternates the
 * ways). Q8_0's kernel, whose eight row streams the hardware does not
 * follow, cannot use PAGES. */
enum pg_x8_pf { PG_X8_PF_LINES, PG_X8_PF_PAGES, PG_X8_PF_MODES };

#define PG_X8_PF_AHEAD 8192
#define PG_X8_PF_KICK 448
#if defined(__x86_64__)
#include <xmmintrin.h>
static inline __attribute__((always_inline)) void pg_x8_prefetch(const void *g, int64_t i, enum pg_x8_pf pf)
{
	const char *q = (const char *)pg_x8_qs(g, i);
	if (pf == PG_X8_PF_PAGES) {
		q += 4096;
		if (((uintptr_t)q & 4095) >= PG_X8_PF_KICK)
			return;
	} else {
		q += PG_X8_PF_AHEAD;
	}
	_mm_prefetch(q, _MM_HINT_T0);
	_mm_prefetch(q + 64, _MM_HINT_T0);
	if (i % 4 == 3)
		_mm_prefetch(q + 128, _MM_HINT_T0);
}
#endif

/* Eight weight rows (one group, g) against nr (1..PG_X8_MAX_NR) activation
 * rows of nb blocks each, bx bytes apart: s[r*bs + j] = dot(row j, x_r),
 * fetching ahead as pf says. */
typedef void pg_x8_kernel(int64_t nb, const void *g, const pg_q8x *x, size_t bx, int nr, float *s, size_t bs,
			  enum pg_x8_pf pf);
typedef pg_x8_kernel *pg_q4_0_x8_fn;

/* Bytes of the repacked copy of n rows (n % 8 == 0) of k (k % 32 == 0). */
size_t pg_q4_0_x8_size(int64_t n, int64_t k);
/* Repacks n rows of Q4_0 (k elements each, contiguous) into dst
 * (pg_q4_0_x8_size bytes, 64-byte aligned). */
void pg_q4_0_x8_repack(const void *src, void *dst, int64_t n, int64_t k);
/* Whether a quant of the nb Q8_0 blocks at src is -128: the loader marks
 * the matrices without one PG_TYPE_Q8_0_S127. */
bool pg_q8_0_has_m128(const void *src, int64_t nb);

/* ---- Q4_K, 8 rows at a time (PG_TYPE_Q4_K_X8) --------------------------------
 *
 * llama.cpp repacks Q4_K weights with a multiple of 8 rows (q4_K_8x8). Its
 * gemv keeps per output two float chains (scaled sums, mins) with one FMA
 * per super-block each; its gemm, which takes a ubatch's rows 4 at a time,
 * one per pair of sub-blocks. This layout serves both with the 8 rows as
 * the lanes of a vector, so no sum is ever horizontal. A group of 8 rows is
 * nb super-blocks of PG_Q4KX8_SB bytes, padded to a multiple of 64:
 *   [0, 1024): the quant bytes transposed in 4-byte units: unit e (0..7) of
 *     pair g (0..3) at 32·(8g + e), row j's qs[32g + 4e .. 32g + 4e + 3] at
 *     +4j (low nibbles: sub-block 2g, its elements 4e..4e+3; high: 2g+1);
 *   [1024, 1088): the 6-bit scales, sub-block t's at 1024 + 8t, row j's +j;
 *   [1088, 1152): the mins, likewise;
 *   [1152, 1168): the rows' d (f16); [1168, 1184): their dmin.
 * As with Q4_0_X8, the layout is the same for every ISA. Kernels take a
 * group through pg_kern.gemv8 with a row stride of a group's bytes / 8. */
#define PG_Q4KX8_SB 1184
#define PG_Q4KX8_GROUP_BYTES(nb) ((((size_t)(nb) * PG_Q4KX8_SB) + 63) & ~(size_t)63)

/* Bytes of the repacked copy of n rows (n % 8 == 0) of k (k % 256 == 0). */
size_t pg_q4_K_x8_size(int64_t n, int64_t k);
/* Repacks n rows of Q4_K (k elements each, contiguous) into dst. */
void pg_q4_K_x8_repack(const void *src, void *dst, int64_t n, int64_t k);
/* Super-block i of that layout (PG_Q4KX8_SB bytes at sb) from 8 rows in
 * the file's layout: the load-time repack, and the kernels that take Q4_K
 * left in the file, one block at a time. */
void pg_q4_K_x8_block(const block_q4_K *const rows[8], int64_t i, uint8_t *sb);

/* Q8_0 blocks to pg_q8x blocks, nb of them (dn = d: a row alone). */
void pg_q8x_from_q8_0(const void *src, pg_q8x *dst, int64_t nb);

pg_x8_kernel pg_q4_0_x8_scalar, pg_q4_0_x8_avx2, pg_q4_0_x8_avx512;
/* IQ4_NL (PG_TYPE_IQ4_NL_X8): the same layout, built by pg_q4_0_x8_repack
 * (block_iq4_nl is block_q4_0's shape), levels from pg_iq4nl_values and no
 * offset; ggml_gemv/gemm_iq4_nl_8x8_q8_0 keep Q4_0's order. */
pg_x8_kernel pg_iq4_nl_x8_scalar, pg_iq4_nl_x8_avx2, pg_iq4_nl_x8_avx512;

#endif
