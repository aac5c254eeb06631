/* kernels/cpu/attn_q_avx512.c — attn_q_body.h built for AVX-512. */
#pragma GCC optimize("fp-contract=off")

#define ATTN_Q_FN pg_attn_chunk_q_avx512
#include "kernels/cpu/attn_q_body.h"
