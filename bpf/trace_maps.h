/* bpf/trace_maps.h — what pagoda_trace.bpf.c counts and pagoda-trace reads:
 * shared by the BPF program and the loader, so only fixed-size types. The
 * kernel side only ever adds; the loader prints the difference between two
 * readings, so no event is lost or counted twice between intervals. */
#ifndef PAGODA_TRACE_MAPS_H
#define PAGODA_TRACE_MAPS_H

/* log2 slots of microseconds: slot 0 holds 0-1 us, slot k 2^k..2^(k+1)-1 us,
 * the last one everything from 2^31 us (36 minutes) up; a power of two */
#define TRACE_SLOTS 32

enum trace_hist_kind {
	TRACE_H_QUEUE,   /* request__admit queued_ns */
	TRACE_H_TTFT,    /* request__first_token ttft_ns */
	TRACE_H_ITL,     /* request__token itl_ns, after the first token */
	TRACE_H_REQUEST, /* request__done total_ns */
	TRACE_H_STEP,    /* step step_ns */
	TRACE_H_FORWARD, /* step forward_ns */
	TRACE_H_IO,      /* io_uring submit_req to complete */
	TRACE_N_HIST
};

struct trace_hist {
	__u64 slots[TRACE_SLOTS];
	__u64 count;
	__u64 sum_ns;
};

enum trace_counter {
	TRACE_C_SUBMIT,
	TRACE_C_ADMIT,
	TRACE_C_CACHED_TOKENS, /* request__admit n_cached */
	TRACE_C_FIRST,
	TRACE_C_TOKENS,
	TRACE_C_DONE,
	TRACE_C_DONE_EOS, /* + reason - 1, in enum finish_reason's order */
	TRACE_C_DONE_LENGTH,
	TRACE_C_DONE_STOP,
	TRACE_C_DONE_CANCEL,
	TRACE_C_DONE_ERROR,
	TRACE_C_GENERATED, /* request__done n_gen */
	TRACE_C_PREEMPT,
	TRACE_C_STEPS,
	TRACE_C_STEP_TOKENS,
	TRACE_C_STEP_SEQS,
	TRACE_C_SWAP_OUT,
	TRACE_C_SWAP_OUT_BLOCKS,
	TRACE_C_SWAP_OUT_BYTES,
	TRACE_C_SWAP_IN,
	TRACE_C_SWAP_IN_BLOCKS,
	TRACE_C_SWAP_IN_BYTES,
	TRACE_C_HIT_MEMORY, /* kv__prefix_hit with source 0 */
	TRACE_C_HIT_MEMORY_TOKENS,
	TRACE_C_HIT_NVME, /* source 1 */
	TRACE_C_HIT_NVME_TOKENS,
	TRACE_C_IO_SUBMIT,
	TRACE_C_IO_COMPLETE,
	TRACE_N_COUNTER
};

#endif
