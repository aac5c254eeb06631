/* kernels/types.h — tensor element types, as numbered by GGUF/ggml.
 *
 * Part of the kernels door: the GGUF reader uses the size table to check
 * tensor extents, the kernels use it to walk rows. Block layouts are the
 * on-disk ones, byte for byte, so a mapped GGUF is used without conversion.
 */
#ifndef PAGODA_KERNELS_TYPES_H
#define PAGODA_KERNELS_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum pg_type {
	PG_TYPE_F32 = 0,
	PG_TYPE_F16 = 1,
	PG_TYPE_Q4_0 = 2,
	PG_TYPE_Q4_1 = 3,
	PG_TYPE_Q5_0 = 6,
	PG_TYPE_Q5_1 = 7,
	PG_TYPE_Q8_0 = 8,
	PG_TYPE_Q8_1 = 9,
	PG_TYPE_Q2_K = 10,
	PG_TYPE_Q3_K = 11,
	PG_TYPE_Q4_K = 12,
	PG_TYPE_Q5_K = 13,
	PG_TYPE_Q6_K = 14,
	PG_TYPE_Q8_K = 15,
	PG_TYPE_I8 = 24,
	PG_TYPE_I16 = 25,
	PG_TYPE_I32 = 26,
	PG_TYPE_I64 = 27,
	PG_TYPE_IQ4_NL = 20,
	PG_TYPE_IQ4_XS = 23,
	PG_TYPE_F64 = 28,
	PG_TYPE_BF16 = 30,
	/* Internal, never in a file: Q4_0 weights repacked at load into groups
	 * of 8 interleaved rows (kernels/cpu/repack.h). The type table does not
	 * know it, so the GGUF reader refuses it and pg_row_size gives 0. */
	PG_TYPE_Q4_0_X8 = 38,
	/* Internal: Q8_0 whose quants the loader found all in [-127, 127]
	 * (-128 is no quantizer's output, but a file may hold it). Same
	 * layout; kernels may then take |y| and sign(w, y), which -128 breaks. */
	PG_TYPE_Q8_0_S127 = 39,
	/* Internal: Q4_K weights repacked at load into groups of 8 rows with
	 * the rows as vector lanes (kernels/cpu/repack.h). */
	PG_TYPE_Q4_K_X8 = 40,
	/* Internal: IQ4_NL weights repacked at load, in Q4_0_X8's layout (the
	 * blocks are alike: an f16 scale and 32 nibbles). */
	PG_TYPE_IQ4_NL_X8 = 41,
	PG_TYPE_COUNT = 42,
};

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K 256
#define K_SCALE_SIZE 12

typedef uint16_t pg_f16;
typedef uint16_t pg_bf16;

typedef struct { pg_f16 d; uint8_t qs[QK4_0 / 2]; } block_q4_0;
typedef struct { pg_f16 d, m; uint8_t qs[QK4_1 / 2]; } block_q4_1;
typedef struct { pg_f16 d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; } block_q5_0;
typedef struct { pg_f16 d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; } block_q5_1;
typedef struct { pg_f16 d; int8_t qs[QK8_0]; } block_q8_0;
typedef struct { pg_f16 d, s; int8_t qs[QK8_1]; } block_q8_1;
typedef struct { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; pg_f16 d, dmin; } block_q2_K;
typedef struct { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; pg_f16 d; } block_q3_K;
typedef struct { pg_f16 d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; } block_q4_K;
typedef struct { pg_f16 d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; } block_q5_K;
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; pg_f16 d; } block_q6_K;
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8_K;
/* 32 non-linear 4-bit levels (pg_iq4nl_values) times d; nibbles as in
 * block_q4_0 (low: elements 0-15, high: 16-31) */
typedef struct { pg_f16 d; uint8_t qs[32 / 2]; } block_iq4_nl;
/* 8 groups of 32 non-linear 4-bit levels (pg_iq4nl_values), each group's
 * 6-bit scale split in scales_l (low 4 bits, two a byte) and scales_h (2
 * bits each), less 32 */
typedef struct { pg_f16 d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; } block_iq4_xs;

/* The 16 levels of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl). */
extern const int8_t pg_iq4nl_values[16];

/* Elements per block and bytes per block; 0/0 for a type pagoda cannot
 * size (unknown or unsupported: IQ quants and friends). */
struct pg_type_info {
	const char *name;
	uint32_t blck;
	uint32_t size;
};

const struct pg_type_info *pg_type_info(uint32_t type);
const char *pg_type_name(uint32_t type);

/* Bytes of a row of n elements, or 0 if n is not a whole number of blocks
 * or the type is unknown. */
size_t pg_row_size(uint32_t type, uint64_t n);

/* The KV cache's element types, named as llama.cpp's -ctk/-ctv name them:
 * f16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1. pg_kv_type_parse gives the
 * type of a name, or -1; pg_kv_type_name the name of one ("?" for a type
 * that is not a cache type). */
int pg_kv_type_parse(const char *name);
bool pg_kv_type_ok(uint32_t type);
const char *pg_kv_type_name(uint32_t type);
/* "f16, q8_0, ...", for messages */
#define PG_KV_TYPE_NAMES "f16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1"

/* IEEE half and bfloat16 conversions (round to nearest even, as ggml). */
float pg_f16_to_f32(pg_f16 h);
pg_f16 pg_f32_to_f16(float f);
float pg_bf16_to_f32(pg_bf16 h);
pg_bf16 pg_f32_to_bf16(float f);

#ifdef __cplusplus
}
#endif

#endif
