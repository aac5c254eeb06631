/* kernels/types.c — type table and scalar half/bfloat16 conversions. */
#include "types.h"

#include <string.h>

static const struct pg_type_info type_table[PG_TYPE_COUNT] = {
	[PG_TYPE_F32] = { "F32", 1, 4 },
	[PG_TYPE_F16] = { "F16", 1, 2 },
	[PG_TYPE_Q4_0] = { "Q4_0", QK4_0, sizeof(block_q4_0) },
	[PG_TYPE_Q4_1] = { "Q4_1", QK4_1, sizeof(block_q4_1) },
	[PG_TYPE_Q5_0] = { "Q5_0", QK5_0, sizeof(block_q5_0) },
	[PG_TYPE_Q5_1] = { "Q5_1", QK5_1, sizeof(block_q5_1) },
	[PG_TYPE_Q8_0] = { "Q8_0", QK8_0, sizeof(block_q8_0) },
	[PG_TYPE_Q8_1] = { "Q8_1", QK8_1, sizeof(block_q8_1) },
	[PG_TYPE_Q2_K] = { "Q2_K", QK_K, sizeof(block_q2_K) },
	[PG_TYPE_Q3_K] = { "Q3_K", QK_K, sizeof(block_q3_K) },
	[PG_TYPE_Q4_K] = { "Q4_K", QK_K, sizeof(block_q4_K) },
	[PG_TYPE_Q5_K] = { "Q5_K", QK_K, sizeof(block_q5_K) },
	[PG_TYPE_Q6_K] = { "Q6_K", QK_K, sizeof(block_q6_K) },
	[PG_TYPE_Q8_K] = { "Q8_K", QK_K, sizeof(block_q8_K) },
	[PG_TYPE_I8] = { "I8", 1, 1 },
	[PG_TYPE_I16] = { "I16", 1, 2 },
	[PG_TYPE_I32] = { "I32", 1, 4 },
	[PG_TYPE_I64] = { "I64", 1, 8 },
	[PG_TYPE_F64] = { "F64", 1, 8 },
	[PG_TYPE_BF16] = { "BF16", 1, 2 },
	[PG_TYPE_IQ4_NL] = { "IQ4_NL", 32, sizeof(block_iq4_nl) },
	[PG_TYPE_IQ4_XS] = { "IQ4_XS", QK_K, sizeof(block_iq4_xs) },
};

const int8_t pg_iq4nl_values[16] = { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 };

_Static_assert(sizeof(block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(block_q2_K) == 84, "q2_K layout");
_Static_assert(sizeof(block_q3_K) == 110, "q3_K layout");
_Static_assert(sizeof(block_q4_K) == 144, "q4_K layout");
_Static_assert(sizeof(block_q5_K) == 176, "q5_K layout");
_Static_assert(sizeof(block_q6_K) == 210, "q6_K layout");
_Static_assert(sizeof(block_iq4_nl) == sizeof(block_q4_0), "iq4_nl layout");
_Static_assert(sizeof(block_iq4_xs) == 136, "iq4_xs layout");
_Static_assert(sizeof(block_q8_K) == 292, "q8_K layout");

const struct pg_type_info *pg_type_info(uint32_t type)
{
	if (type >= PG_TYPE_COUNT || type_table[type].blck == 0)
		return NULL;
	return &type_table[type];
}

const char *pg_type_name(uint32_t type)
{
	const struct pg_type_info *ti = pg_type_info(type);
	return ti ? ti->name : "unknown";
}

size_t pg_row_size(uint32_t type, uint64_t n)
{
	const struct pg_type_info *ti = pg_type_info(type);
	if (!ti || n % ti->blck)
		return 0;
	uint64_t blocks = n / ti->blck;
	if (blocks > SIZE_MAX / ti->size)
		return 0;
	return (size_t)(blocks * ti->size);
}

static const struct {
	const char *name;
	uint32_t type;
} kv_types[] = {
	{ "f16", PG_TYPE_F16 },   { "q8_0", PG_TYPE_Q8_0 }, { "q4_0", PG_TYPE_Q4_0 },
	{ "q4_1", PG_TYPE_Q4_1 }, { "iq4_nl", PG_TYPE_IQ4_NL }, { "q5_0", PG_TYPE_Q5_0 },
	{ "q5_1", PG_TYPE_Q5_1 },
};

int pg_kv_type_parse(const char *name)
{
	for (size_t i = 0; name && i < sizeof kv_types / sizeof kv_types[0]; i++)
		if (strcmp(name, kv_types[i].name) == 0)
			return (int)kv_types[i].type;
	return -1;
}

const char *pg_kv_type_name(uint32_t type)
{
	for (size_t i = 0; i < sizeof kv_types / sizeof kv_types[0]; i++)
		if (kv_types[i].type == type)
			return kv_types[i].name;
	return "?";
}

bool pg_kv_type_ok(uint32_t type)
{
	return pg_kv_type_name(type)[0] != '?';
}

static inline float f32_from_bits(uint32_t w)
{
	float f;
	memcpy(&f, &w, 4);
	return f;
}

static inline uint32_t f32_to_bits(float f)
{
	uint32_t w;
	memcpy(&w, &f, 4);
	return w;
}

/* The branch-free conversions of FP16 (Maratyszcza), the ones ggml uses
 * when no F16C instruction is at hand, so rounding agrees bit for bit. */
float pg_f16_to_f32(pg_f16 h)
{
	const uint32_t w = (uint32_t)h << 16;
	const uint32_t sign = w & 0x80000000u;
	const uint32_t two_w = w + w;
	const uint32_t exp_offset = 0xE0u << 23;
	const float exp_scale = 0x1.0p-112f;
	const float normalized = f32_from_bits((two_w >> 4) + exp_offset) * exp_scale;
	const uint32_t magic_mask = 126u << 23;
	const float magic_bias = 0.5f;
	const float denormalized = f32_from_bits((two_w >> 17) | magic_mask) - magic_bias;
	const uint32_t denormalized_cutoff = 1u << 27;
	const uint32_t result = sign |
		(two_w < denormalized_cutoff ? f32_to_bits(denormalized) : f32_to_bits(normalized));
	return f32_from_bits(result);
}

pg_f16 pg_f32_to_f16(float f)
{
	const float scale_to_inf = 0x1.0p+112f;
	const float scale_to_zero = 0x1.0p-110f;
	float base = (f < 0 ? -f : f) * scale_to_inf;
	base *= scale_to_zero;
	const uint32_t w = f32_to_bits(f);
	const uint32_t shl1_w = w + w;
	const uint32_t sign = w & 0x80000000u;
	uint32_t bias = shl1_w & 0xFF000000u;
	if (bias < 0x71000000u)
		bias = 0x71000000u;
	base = f32_from_bits((bias >> 1) + 0x07800000u) + base;
	const uint32_t bits = f32_to_bits(base);
	const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
	const uint32_t mantissa_bits = bits & 0x00000FFFu;
	const uint32_t nonsign = exp_bits + mantissa_bits;
	return (pg_f16)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

float pg_bf16_to_f32(pg_bf16 h)
{
	return f32_from_bits((uint32_t)h << 16);
}

pg_bf16 pg_f32_to_bf16(float f)
{
	uint32_t u = f32_to_bits(f);
	if ((u & 0x7fffffff) > 0x7f800000)
		return (pg_bf16)((u >> 16) | 64); /* quiet NaN */
	return (pg_bf16)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}
