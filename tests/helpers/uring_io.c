/* tests/helpers/uring_io.c — a process with known io_uring traffic, for
 * tests/e2e/trace.sh: once a line comes on stdin (the tracer is attached by
 * then), it writes N 4 KiB blocks to FILE, fsyncs it and reads the blocks
 * back, one request at a time, and prints how many requests completed.
 *   uring_io FILE N */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK 4096

static int one(struct io_uring *ring, int op, int fd, char *buf, long block)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	if (op == 'w')
		io_uring_prep_write(sqe, fd, buf, BLOCK, (__u64)block * BLOCK);
	else if (op == 'r')
		io_uring_prep_read(sqe, fd, buf, BLOCK, (__u64)block * BLOCK);
	else
		io_uring_prep_fsync(sqe, fd, 0);
	int r = io_uring_submit(ring);
	if (r != 1)
		return r < 0 ? r : -EIO;
	struct io_uring_cqe *cqe;
	r = io_uring_wait_cqe(ring, &cqe);
	if (r)
		return r;
	r = cqe->res;
	io_uring_cqe_seen(ring, cqe);
	return r < 0 ? r : op == 'f' || r == BLOCK ? 0 : -EIO;
}

int main(int argc, char **argv)
{
	if (argc != 3 || atol(argv[2]) <= 0) {
		fprintf(stderr, "usage: uring_io FILE N\n");
		return 2;
	}
	long n = atol(argv[2]);
	int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0) {
		fprintf(stderr, "uring_io: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	struct io_uring ring;
	int r = io_uring_queue_init(8, &ring, 0);
	if (r) {
		fprintf(stderr, "uring_io: io_uring_queue_init: %s\n", strerror(-r));
		return 1;
	}
	char line[64], buf[BLOCK];
	if (!fgets(line, sizeof line, stdin))
		return 1;
	long done = 0;
	for (long i = 0; i < n && !r; i++) {
		memset(buf, (int)(i & 0xff), sizeof buf);
		r = one(&ring, 'w', fd, buf, i);
		done += !r;
	}
	if (!r) {
		r = one(&ring, 'f', fd, NULL, 0);
		done += !r;
	}
	for (long i = 0; i < n && !r; i++) {
		r = one(&ring, 'r', fd, buf, i);
		if (!r && buf[BLOCK - 1] != (char)(i & 0xff))
			r = -EIO;
		done += !r;
	}
	io_uring_queue_exit(&ring);
	close(fd);
	if (r) {
		fprintf(stderr, "uring_io: %s\n", strerror(-r));
		return 1;
	}
	printf("%ld\n", done);
	return 0;
}
