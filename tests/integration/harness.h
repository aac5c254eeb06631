/* tests/integration/harness.h — what every integration suite does to a real
 * pagodad: find the binary and the model, give it a private directory, start
 * it with the suite's flags, wait for its socket, stop it, show its log.
 * Assertions abort the current Check test with the daemon's log named. */
#ifndef PAGODA_TEST_HARNESS_H
#define PAGODA_TEST_HARNESS_H

#include <stdint.h>
#include <sys/types.h>

struct th_daemon {
	char model[1024]; /* stories260K.gguf from the test data */
	char bin[1024];   /* $PAGODA_BUILD/pagodad, else build/pagodad */
	char dir[256];    /* private directory, removed by th_cleanup */
	char sock[300];   /* dir/s.sock */
	char log[300];    /* dir/pagodad.log: the daemon's stderr */
	pid_t pid;        /* -1 when not running */
};

uint64_t th_now_ms(void);
void th_msleep(int ms);

/* 0 when the model and the daemon binary exist; else says SKIP and why. */
int th_need(struct th_daemon *d);
/* A fresh directory under $TMPDIR named after tag, readable by other uids. */
void th_mkdir(struct th_daemon *d, const char *tag);
/* Forks pagodad --model M --socket S followed by extra (NULL-terminated);
 * the child runs pre(arg), if given, just before exec. */
void th_spawn(struct th_daemon *d, const char *const *extra, void (*pre)(void *), void *arg);
/* Waits until a client connects; aborts the test if the daemon exits first
 * or timeout_ms passes. */
void th_wait_up(struct th_daemon *d, int timeout_ms);
/* Waits for *pid to exit (killing it after timeout_ms: -1000); its exit
 * status, or -signal. *pid becomes -1. */
int th_wait_exit(pid_t *pid, int timeout_ms);
/* Sends sig and waits as th_wait_exit does. */
int th_stop(struct th_daemon *d, int sig, int timeout_ms);
/* The daemon log's last lines on stderr. */
void th_show_log(const struct th_daemon *d, int lines);
/* Lines of the daemon log that contain s. */
int th_log_count(const struct th_daemon *d, const char *s);
/* Kills a daemon still running and removes the directory. */
void th_cleanup(struct th_daemon *d);

#endif
