/* daemon/engine/probes.c — the probes' semaphores. A tracer attached to a
 * probe raises its semaphore (the kernel's uprobe reference counter), so
 * the engine can skip computing what only the probe would use. They live
 * in .probes, where sys/sdt.h's notes and the tracers look for them. */
#include "daemon/engine/probes.h"

#define SEMAPHORE(name) __attribute__((section(".probes"))) unsigned short PROBE_SEMAPHORE(name)
SEMAPHORE(request__submit);
SEMAPHORE(request__admit);
SEMAPHORE(request__first_token);
SEMAPHORE(request__token);
SEMAPHORE(request__done);
SEMAPHORE(request__preempt);
SEMAPHORE(step);
SEMAPHORE(kv__swap_out);
SEMAPHORE(kv__swap_in);
SEMAPHORE(kv__prefix_hit);
