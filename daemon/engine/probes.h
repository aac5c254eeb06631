/* daemon/engine/probes.h — USDT probes (provider "pagoda") in the step
 * loop. Each is a nop until a tracer (bpftrace, pagoda-trace) attaches.
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
 * A step's time is its forward pass plus sampling and handing the tokens
 * out (to the client's ring in pagodad): step_ns - forward_ns is what the
 * delivery costs, and a token's itl_ns minus its step what the loop around
 * the steps costs.
 */
#ifndef PAGODA_PROBES_H
#define PAGODA_PROBES_H

#include <sys/sdt.h>

#define PROBE_SUBMIT(uid, id, n) DTRACE_PROBE3(pagoda, request__submit, uid, id, n)
#define PROBE_ADMIT(uid, id, q, c) DTRACE_PROBE4(pagoda, request__admit, uid, id, q, c)
#define PROBE_FIRST(uid, id, t) DTRACE_PROBE3(pagoda, request__first_token, uid, id, t)
#define PROBE_TOKEN(uid, id, tok, itl) DTRACE_PROBE4(pagoda, request__token, uid, id, tok, itl)
#define PROBE_DONE(uid, id, why, n, t) DTRACE_PROBE5(pagoda, request__done, uid, id, why, n, t)
#define PROBE_PREEMPT(uid, id, n) DTRACE_PROBE3(pagoda, request__preempt, uid, id, n)
#define PROBE_STEP(n, s, t, f) DTRACE_PROBE4(pagoda, step, n, s, t, f)
#define PROBE_SWAP_OUT(uid, id, n, b) DTRACE_PROBE4(pagoda, kv__swap_out, uid, id, n, b)
#define PROBE_SWAP_IN(uid, id, n, b) DTRACE_PROBE4(pagoda, kv__swap_in, uid, id, n, b)
#define PROBE_PREFIX_HIT(uid, id, n, src) DTRACE_PROBE4(pagoda, kv__prefix_hit, uid, id, n, src)

#endif
