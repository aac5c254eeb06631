/* kernels/registry.c — backends by name: the built-in CPU, and CUDA from
 * its own shared object, loaded only when asked for (or, for "auto", when
 * it finds a device), so that nothing else needs CUDA to build or run. */
#include "kernels/pg_backend.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CUDA_LIB "libpagoda-cuda.so"

/* The running binary's directory, with a trailing slash; "" if unknown. */
static void exe_dir(char *buf, size_t len)
{
	char path[PATH_MAX];
	const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
	buf[0] = '\0';
	if (n <= 0)
		return;
	path[n] = '\0';
	char *slash = strrchr(path, '/');
	if (slash) {
		slash[1] = '\0';
		snprintf(buf, len, "%s", path);
	}
}

/* dlopens the CUDA library and fetches its table. On failure msg says
 * which step failed and where it looked. */
static void *cuda_load(const struct pg_backend_ops **ops, char *msg, size_t msglen)
{
	char path[PATH_MAX + 32], dir[PATH_MAX];
	const char *env = getenv("PAGODA_CUDA_LIB");
	void *h = NULL;
	if (env && env[0]) {
		snprintf(path, sizeof path, "%s", env);
		h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	} else {
		exe_dir(dir, sizeof dir);
		snprintf(path, sizeof path, "%s%s", dir, CUDA_LIB);
		if (dir[0] && access(path, F_OK) == 0) {
			h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		} else {
			snprintf(path, sizeof path, "%s", CUDA_LIB);
			h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
			if (!h) {
				snprintf(msg, msglen, "%s not found (next to the binary in %s, nor on the library path; "
						      "PAGODA_CUDA_LIB names it)",
					 CUDA_LIB, dir[0] ? dir : "?");
				return NULL;
			}
		}
	}
	if (!h) {
		snprintf(msg, msglen, "cannot load %.200s: %.300s", path, dlerror());
		return NULL;
	}
	pg_backend_entry_fn entry;
	*(void **)&entry = dlsym(h, PG_BACKEND_CUDA_ENTRY);
	if (!entry) {
		snprintf(msg, msglen, "%.300s has no %s", path, PG_BACKEND_CUDA_ENTRY);
		dlclose(h);
		return NULL;
	}
	*ops = entry(PG_BACKEND_ABI);
	if (!*ops || (*ops)->abi != PG_BACKEND_ABI) {
		snprintf(msg, msglen, "%.300s was built for another backend ABI (this pagoda's is %d)", path,
			 PG_BACKEND_ABI);
		dlclose(h);
		return NULL;
	}
	return h;
}

static int create(const struct pg_backend_ops *ops, void *lib, const struct pg_backend_opts *o,
		  struct pg_backend **out, char *msg, size_t msglen)
{
	static const struct pg_backend_opts none;
	char err[256] = "";
	int r = ops->create(o ? o : &none, out, err, sizeof err);
	if (r) {
		snprintf(msg, msglen, "%s", err[0] ? err : strerror(-r));
		if (lib)
			dlclose(lib);
		return r;
	}
	(*out)->lib = lib;
	return 0;
}

int pg_backend_open(const char *name, const struct pg_backend_opts *o, struct pg_backend **out, char *msg,
		    size_t msglen)
{
	*out = NULL;
	if (msglen)
		msg[0] = '\0';
	if (!name || !name[0])
		name = "auto";
	if (strcmp(name, "cpu") == 0)
		return create(pg_backend_cpu_ops(), NULL, o, out, msg, msglen);
	const bool is_auto = strcmp(name, "auto") == 0;
	if (!is_auto && strcmp(name, "cuda") != 0) {
		snprintf(msg, msglen, "unknown backend '%s' (cpu, cuda or auto)", name);
		return -EINVAL;
	}
	char why[1024] = "";
	const struct pg_backend_ops *ops = NULL;
	void *lib = cuda_load(&ops, why, sizeof why);
	int n = 0;
	if (lib) {
		n = ops->probe(why, sizeof why);
		if (n <= 0) {
			if (!why[0])
				snprintf(why, sizeof why, "no CUDA device found");
			dlclose(lib);
			lib = NULL;
		}
	}
	if (lib) {
		const int r = create(ops, lib, o, out, why, sizeof why); /* why: its error, if any */
		if (r == 0)
			return 0;
		n = r;
	}
	if (!is_auto) {
		snprintf(msg, msglen, "backend cuda: %s", why);
		return n < 0 ? n : -ENODEV;
	}
	int r = create(pg_backend_cpu_ops(), NULL, o, out, msg, msglen);
	if (r == 0)
		snprintf(msg, msglen, "picked the CPU: %s", why);
	return r;
}

void pg_backend_close(struct pg_backend *b)
{
	if (!b)
		return;
	void *lib = b->lib;
	b->ops->destroy(b);
	if (lib)
		dlclose(lib);
}
