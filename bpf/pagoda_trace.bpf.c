// SPDX-License-Identifier: GPL-2.0
/* bpf/pagoda_trace.bpf.c — pagoda-trace's kernel half (CO-RE). USDT
 * handlers fold the engine's probes (daemon/engine/probes.h) into log2
 * histograms and counters; two io_uring tracepoints time each request of
 * the traced processes from submission to completion. Per-CPU maps, only
 * ever added to: the loader reads them and prints the differences. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>
#include "bpf/trace_maps.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TRACE_N_HIST);
	__type(key, __u32);
	__type(value, struct trace_hist);
} hists SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TRACE_N_COUNTER);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* the processes whose io_uring requests are timed (tgid -> 1) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} io_pids SEC(".maps");

/* in-flight io_uring requests of those processes: struct io_kiocb * ->
 * submission time. LRU: a request that never posts a completion (a CQE
 * skipped on success) ages out instead of filling the map. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u64);
} io_start SEC(".maps");

static __always_inline void add(__u32 c, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &c);
	if (v)
		__sync_fetch_and_add(v, n);
}

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0, shift;
	shift = (v > 0xffffffffULL) << 5; v >>= shift; r |= shift;
	shift = (v > 0xffff) << 4; v >>= shift; r |= shift;
	shift = (v > 0xff) << 3; v >>= shift; r |= shift;
	shift = (v > 0xf) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	return r | (__u32)(v >> 1);
}

static __always_inline void record(__u32 kind, __u64 ns)
{
	struct trace_hist *h = bpf_map_lookup_elem(&hists, &kind);
	if (!h)
		return;
	__u64 slot = log2_u64(ns / 1000);
	if (slot >= TRACE_SLOTS)
		slot = TRACE_SLOTS - 1;
	/* keeps clang from folding the bound into a shift the verifier cannot follow */
	barrier_var(slot);
	slot &= TRACE_SLOTS - 1;
	__sync_fetch_and_add(&h->slots[slot], 1);
	__sync_fetch_and_add(&h->count, 1);
	__sync_fetch_and_add(&h->sum_ns, ns);
}

SEC("usdt")
int BPF_USDT(on_submit, __u64 uid, __u64 id, long n_prompt)
{
	add(TRACE_C_SUBMIT, 1);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_admit, __u64 uid, __u64 id, __u64 queued_ns, long n_cached)
{
	record(TRACE_H_QUEUE, queued_ns);
	add(TRACE_C_ADMIT, 1);
	add(TRACE_C_CACHED_TOKENS, n_cached);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_first_token, __u64 uid, __u64 id, __u64 ttft_ns)
{
	record(TRACE_H_TTFT, ttft_ns);
	add(TRACE_C_FIRST, 1);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_token, __u64 uid, __u64 id, long token, __u64 itl_ns)
{
	add(TRACE_C_TOKENS, 1);
	if (itl_ns)
		record(TRACE_H_ITL, itl_ns);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_done, __u64 uid, __u64 id, long reason, long n_gen, __u64 total_ns)
{
	record(TRACE_H_REQUEST, total_ns);
	add(TRACE_C_DONE, 1);
	add(TRACE_C_GENERATED, n_gen);
	if (reason >= 1 && reason <= 5)
		add(TRACE_C_DONE_EOS + (__u32)reason - 1, 1);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_preempt, __u64 uid, __u64 id, long n_tokens)
{
	add(TRACE_C_PREEMPT, 1);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_step, long n_tokens, long n_seqs, __u64 step_ns, __u64 forward_ns)
{
	record(TRACE_H_STEP, step_ns);
	record(TRACE_H_FORWARD, forward_ns);
	add(TRACE_C_STEPS, 1);
	add(TRACE_C_STEP_TOKENS, n_tokens);
	add(TRACE_C_STEP_SEQS, n_seqs);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_swap_out, __u64 uid, __u64 id, long n_blocks, __u64 bytes)
{
	add(TRACE_C_SWAP_OUT, 1);
	add(TRACE_C_SWAP_OUT_BLOCKS, n_blocks);
	add(TRACE_C_SWAP_OUT_BYTES, bytes);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_swap_in, __u64 uid, __u64 id, long n_blocks, __u64 bytes)
{
	add(TRACE_C_SWAP_IN, 1);
	add(TRACE_C_SWAP_IN_BLOCKS, n_blocks);
	add(TRACE_C_SWAP_IN_BYTES, bytes);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_prefix_hit, __u64 uid, __u64 id, long n_tokens, long source)
{
	add(source ? TRACE_C_HIT_NVME : TRACE_C_HIT_MEMORY, 1);
	add(source ? TRACE_C_HIT_NVME_TOKENS : TRACE_C_HIT_MEMORY_TOKENS, n_tokens);
	return 0;
}

/* io_uring_submit_req(struct io_kiocb *req) since Linux 6.0: runs in the
 * submitting task (or its SQPOLL thread), so the tgid is the process's. */
SEC("tp_btf/io_uring_submit_req")
int BPF_PROG(on_io_submit, void *req)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!bpf_map_lookup_elem(&io_pids, &tgid))
		return 0;
	__u64 key = (__u64)req, t = bpf_ktime_get_ns();
	bpf_map_update_elem(&io_start, &key, &t, BPF_ANY);
	add(TRACE_C_IO_SUBMIT, 1);
	return 0;
}

/* io_uring_complete(ctx, req, ...): the completion may be posted from any
 * context, so it is matched by the request, never by the current task. A
 * multishot request is timed to its first completion. */
SEC("tp_btf/io_uring_complete")
int BPF_PROG(on_io_complete, void *ctx_, void *req)
{
	__u64 key = (__u64)req;
	__u64 *t = bpf_map_lookup_elem(&io_start, &key);
	if (!t)
		return 0;
	__u64 ns = bpf_ktime_get_ns() - *t;
	bpf_map_delete_elem(&io_start, &key);
	record(TRACE_H_IO, ns);
	add(TRACE_C_IO_COMPLETE, 1);
	return 0;
}
