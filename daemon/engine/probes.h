/* daemon/engine/probes.h — USDT probes (provider "pagoda") in the step
 * loop. Each is a nop until a tracer (bpftrace, pagoda-trace) attaches.
 * The arguments are a stable interface (docs/trace.md): a probe keeps its
 * arguments, in this order, and new ones only ever come as new probes.
 * Times are CLOCK_MONOTONIC nanoseconds; uid is unique per engine request,
 * id is the caller's request id.
 *
 *   request__submit(uid, id, n_prompt)
 *   request__admit(uid, id, queued_ns, n_cached)
 *   request__first_token(uid, id, ttft_ns)
 *   request__token(uid, id, token, itl_ns)
 *   request__done(uid, id, reason, n_gen, total_ns)
 *   request__preempt(uid, id, n_tokens)
 *   step(n_tokens, n_seqs, step_ns, forward_ns)
 *   kv__swap_out(uid, id, n_blocks, bytes)   blocks queued for the tier
 *   kv__swap_in(uid, id, n_blocks, bytes)    blocks read back for a request
 *   kv__prefix_hit(uid, id, n_tokens, source) prompt tokens found at
 *       admission; source 0 the memory pool, 1 the NVMe tier
 *
 * kv__swap_out fires for a preempted sequence's blocks (its uid and id)
 * and for blocks the pool evicts from its cache (uid and id 0).
 *
 * reason is enum finish_reason (1 eos, 2 length, 3 stop, 4 cancel, 5
 * error).
 *
 * A step's time is its forward pass plus sampling and handing the tokens
 * out (to the client's ring in pagodad): step_ns - forward_ns is what the
 * delivery costs, and a token's itl_ns minus its step what the loop around
 * the steps costs.
 *
 * Every probe has a semaphore (in .probes, defined in probes.c) that a
 * tracer raises while attached: PROBE_X_ENABLED() is true only then, so
 * an argument that costs something to compute is computed only then.
 */
#ifndef PAGODA_PROBES_H
#define PAGODA_PROBES_H

#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

#define PROBE_SEMAPHORE(name) pagoda_##name##_semaphore
extern unsigned short PROBE_SEMAPHORE(request__submit), PROBE_SEMAPHORE(request__admit),
	PROBE_SEMAPHORE(request__first_token), PROBE_SEMAPHORE(request__token),
	PROBE_SEMAPHORE(request__done), PROBE_SEMAPHORE(request__preempt), PROBE_SEMAPHORE(step),
	PROBE_SEMAPHORE(kv__swap_out), PROBE_SEMAPHORE(kv__swap_in), PROBE_SEMAPHORE(kv__prefix_hit);
#define PROBE_ON(name) __builtin_expect(PROBE_SEMAPHORE(name) != 0, 0)

#define PROBE_SUBMIT(uid, id, n) DTRACE_PROBE3(pagoda, request__submit, uid, id, n)
#define PROBE_ADMIT(uid, id, q, c) DTRACE_PROBE4(pagoda, request__admit, uid, id, q, c)
#define PROBE_FIRST(uid, id, t) DTRACE_PROBE3(pagoda, request__first_token, uid, id, t)
#define PROBE_TOKEN(uid, id, tok, itl) DTRACE_PROBE4(pagoda, request__token, uid, id, tok, itl)
#define PROBE_DONE(uid, id, why, n, t) DTRACE_PROBE5(pagoda, request__done, uid, id, why, n, t)
#define PROBE_PREEMPT(uid, id, n) DTRACE_PROBE3(pagoda, request__preempt, uid, id, n)
#define PROBE_STEP(n, s, t, f) DTRACE_PROBE4(pagoda, step, n, s, t, f)
#define PROBE_SWAP_OUT(uid, id, nb, bytes) DTRACE_PROBE4(pagoda, kv__swap_out, uid, id, nb, bytes)
#define PROBE_SWAP_IN(uid, id, nb, bytes) DTRACE_PROBE4(pagoda, kv__swap_in, uid, id, nb, bytes)
#define PROBE_PREFIX_HIT(uid, id, n, src) DTRACE_PROBE4(pagoda, kv__prefix_hit, uid, id, n, src)

#define PROBE_SUBMIT_ENABLED() PROBE_ON(request__submit)
#define PROBE_ADMIT_ENABLED() PROBE_ON(request__admit)
#define PROBE_FIRST_ENABLED() PROBE_ON(request__first_token)
#define PROBE_TOKEN_ENABLED() PROBE_ON(request__token)
#define PROBE_DONE_ENABLED() PROBE_ON(request__done)
#define PROBE_PREEMPT_ENABLED() PROBE_ON(request__preempt)
#define PROBE_STEP_ENABLED() PROBE_ON(step)
#define PROBE_SWAP_OUT_ENABLED() PROBE_ON(kv__swap_out)
#define PROBE_SWAP_IN_ENABLED() PROBE_ON(kv__swap_in)
#define PROBE_PREFIX_HIT_ENABLED() PROBE_ON(kv__prefix_hit)

enum probe_kv_source { PROBE_KV_MEMORY = 0, PROBE_KV_NVME = 1 };

#endif
