/* kernels/cpu/attn_q_avx2.c — attn_q_body.h built for AVX2 and FMA: the
 * same bits as the scalar unit's, with fmaf one instruction. */
#pragma GCC optimize("fp-contract=off")

#define ATTN_Q_FN pg_attn_chunk_q_avx2
#include "kernels/cpu/attn_q_body.h"
