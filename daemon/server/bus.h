/* daemon/server/bus.h — pagodad's D-Bus object: org.pagoda.Daemon1 at
 * /org/pagoda/Daemon1, interface org.pagoda.Daemon1.
 *
 * Properties (anyone may read them): the model (ModelName, Architecture,
 * ParameterCount, WeightType, ContextLength, TrainedContextLength), Backend,
 * State, UptimeUSec, LoadProgress, the counters and gauges of the engine and
 * the server, and latency percentiles in microseconds. PropertiesChanged is
 * sent at most once a second, for the properties that changed (UptimeUSec
 * never announces itself).
 *
 * Methods: Drain(), Reload(), DropPrefixCache(), Stats() -> a{sv}. Callers
 * must be root, the daemon's own uid, or a member of allow-group (group
 * "pagoda" when allow-group is unset): the daemon asks the bus for the
 * caller's credentials (uid and supplementary groups) without blocking, and
 * answers org.freedesktop.DBus.Error.AccessDenied to anyone else, whatever
 * the bus policy let through.
 *
 * The connection lives on the main thread's epoll loop (bus_prepare /
 * bus_process); nothing here blocks. A bus that is missing or goes away is
 * retried every few seconds; the daemon serves its socket regardless.
 */
#ifndef PAGODA_SERVER_BUS_H
#define PAGODA_SERVER_BUS_H

#include <stdint.h>

#include "daemon/server/config.h"

struct engine;
struct server;
struct pbus;

enum bus_kind { BUS_AUTO, BUS_SYSTEM, BUS_SESSION, BUS_NONE };

#define PAGODA_BUS_NAME "org.pagoda.Daemon1"
#define PAGODA_BUS_PATH "/org/pagoda/Daemon1"
#define PAGODA_BUS_IFACE "org.pagoda.Daemon1"

/* "auto", "system", "session", "none" (or "" for auto); -1 if unknown. */
int bus_parse_kind(const char *s);
/* What "auto" means for this process: the system bus for a system service
 * (started by PID 1 with $INVOCATION_ID, running as root or as the pagoda
 * user), else the session bus. */
enum bus_kind bus_auto_kind(void);

/* Returns NULL for BUS_NONE. Never fails for want of a bus: it retries. */
struct pbus *bus_open(enum bus_kind kind, const struct srv_config *cfg);
void bus_close(struct pbus *b);
/* The loaded engine, and the server once it listens (either may be NULL). */
void bus_set_engine(struct pbus *b, struct engine *e);
void bus_set_server(struct pbus *b, struct server *s);
/* After a reload: re-reads allow-group. */
void bus_reconfigure(struct pbus *b, const struct srv_config *cfg);

/* Main loop glue: before each wait, the fd to watch (-1: none), its epoll
 * events and the longest wait in ms (-1: none); after each wait, process. */
void bus_prepare(struct pbus *b, int *fd, uint32_t *events, int *timeout_ms);
void bus_process(struct pbus *b);

#endif
