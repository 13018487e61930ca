/*
 * readfile: read a file sequentially with read(2) and report like GNU dd does.
 *
 * The lru-file-readtwice case streams files through the page cache with dd; busybox's dd
 * prints no transfer line, so this prints GNU dd's
 *   <bytes> bytes (<x> MB, <y> MiB) copied, <seconds> s, <rate> MB/s
 * which LKP's vm-scalability parser reads as (bytes >> 10) / seconds per task.
 *
 * Usage: readfile [-b BLOCKSIZE] FILE
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

int main(int argc, char **argv)
{
	size_t bs = 4096;
	unsigned long long total = 0;
	double t0, secs;
	char *buf;
	ssize_t n;
	int c, fd;

	while ((c = getopt(argc, argv, "b:")) != -1) {
		if (c != 'b')
			goto usage;
		bs = (size_t)strtoul(optarg, NULL, 0);
		if (!bs)
			goto usage;
	}
	if (optind != argc - 1)
		goto usage;
	fd = open(argv[optind], O_RDONLY);
	if (fd < 0) {
		fprintf(stderr, "readfile: %s: %s\n", argv[optind], strerror(errno));
		return 1;
	}
	buf = malloc(bs);
	if (!buf)
		return 1;
	t0 = now_s();
	while ((n = read(fd, buf, bs)) > 0)
		total += (unsigned long long)n;
	if (n < 0) {
		fprintf(stderr, "readfile: read %s: %s\n", argv[optind], strerror(errno));
		return 1;
	}
	secs = now_s() - t0;
	if (secs <= 0)
		secs = 1e-6;
	printf("%llu bytes (%.1f MB, %.1f MiB) copied, %.6f s, %.1f MB/s\n", total,
	       (double)total / 1e6, (double)total / 1048576.0, secs, (double)total / 1e6 / secs);
	return 0;
usage:
	fputs("usage: readfile [-b blocksize] FILE\n", stderr);
	return 2;
}
