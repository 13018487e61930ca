/*
 * usemem: stackbench's own memory-access driver for the vm-scalability cases.
 *
 * It follows the behaviour of vm-scalability's usemem as the cases use it and prints the
 * same raw lines, so LKP's vm-scalability parse rules read our output unchanged:
 *
 *   <bytes> bytes / <usecs> usecs = <KB/s> KB/s      one per task, KB/s = ((bytes*1e6)>>10)/usecs
 *   <usecs> usecs to free memory                      one per task that owned its memory
 *
 * Usage: usemem [options] SIZE      (SIZE takes k/m/g/t suffixes; per task)
 *   -n, --nproc N      fork N processes (default 1)
 *   -t, --thread N     run N threads in each process (default 1)
 *   -f, --file FILE    map FILE (MAP_SHARED) instead of anonymous memory
 *   -R, --readonly     only read the memory
 *   -W, --write        write the memory (the default)
 *   -s, --step BYTES   access stride (default: the page size)
 *   -r, --repeat N     pass over the memory N times (default 1)
 *       --random       access pages in a random order instead of sequentially
 *   -P, --prealloc     map once before starting tasks: threads share it, processes inherit it
 *   -F, --prefault     touch the preallocated memory first (children then take COW faults)
 *   -h, --help
 *
 * Each process and thread is one task; tasks start together behind a barrier-like pipe so
 * the measured windows overlap as in the upstream program.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static long opt_nproc = 1;
static long opt_nthread = 1;
static const char *opt_file;
static int opt_readonly;
static int opt_random;
static int opt_prealloc;
static int opt_prefault;
static size_t opt_step;
static long opt_repeat = 1;
static size_t opt_size;

static size_t page_size;
static char *shared_buf;     /* --prealloc mapping */
static size_t shared_len;
static off_t file_len;

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("usemem: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

/* One write() per line keeps lines whole when many tasks print at once. */
static void emit(const char *fmt, ...)
{
	char line[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n > 0 && write(STDOUT_FILENO, line, (size_t)n) < 0)
		exit(1);
}

static uint64_t now_us(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (uint64_t)tv.tv_sec * 1000000 + (uint64_t)tv.tv_usec;
}

static size_t parse_size(const char *s)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s)
		die("bad size '%s'", s);
	switch (*end) {
	case 't': case 'T': v <<= 10; /* fall through */
	case 'g': case 'G': v <<= 10; /* fall through */
	case 'm': case 'M': v <<= 10; /* fall through */
	case 'k': case 'K': v <<= 10; end++; break;
	case '\0': break;
	default: die("bad size '%s'", s);
	}
	if (*end)
		die("bad size '%s'", s);
	return (size_t)v;
}

static long parse_count(const char *s, const char *what)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 1)
		die("%s must be a positive integer, got '%s'", what, s);
	return v;
}

/* Map `len` bytes: anonymous private memory, or a window of the file for task `idx`. */
static char *map_memory(size_t len, long idx)
{
	char *p;

	if (!opt_file) {
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	} else {
		int fd = open(opt_file, opt_readonly ? O_RDONLY : O_RDWR);
		off_t off = 0;

		if (fd < 0)
			die("open %s: %s", opt_file, strerror(errno));
		/* spread tasks over the file so they touch different page-cache pages */
		if ((off_t)len < file_len) {
			off_t span = file_len - (off_t)len + 1;

			off = ((off_t)idx * (off_t)len) % span;
			off -= off % (off_t)page_size;
		}
		p = mmap(NULL, len, opt_readonly ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED,
			 fd, off);
		close(fd);
	}
	if (p == MAP_FAILED)
		die("mmap %zu bytes: %s", len, strerror(errno));
	return p;
}

static uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

/* One pass over the memory; returns the bytes it accessed. */
static uint64_t access_memory(char *buf, size_t len, long idx)
{
	size_t n = len / opt_step, i;
	uint64_t seed = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)idx << 32) ^ (uint64_t)getpid();
	volatile unsigned long sink = 0;
	long r;

	for (r = 0; r < opt_repeat; r++) {
		for (i = 0; i < n; i++) {
			size_t at = opt_random ? (size_t)(xorshift(&seed) % n) : i;
			char *p = buf + at * opt_step;

			if (opt_readonly)
				sink += *(volatile unsigned char *)p;
			else
				*(volatile unsigned long *)p = (unsigned long)i;
		}
	}
	(void)sink;
	return (uint64_t)n * opt_step * (uint64_t)opt_repeat;
}

static void *task(void *arg)
{
	long idx = (long)(intptr_t)arg;
	uint64_t t0, t1, bytes, usecs;
	size_t len = opt_size;
	char *buf;

	t0 = now_us();
	if (shared_buf) {
		buf = shared_buf;
		len = shared_len;
	} else {
		buf = map_memory(len, idx);
	}
	bytes = access_memory(buf, len, idx);
	t1 = now_us();
	usecs = t1 > t0 ? t1 - t0 : 1;
	emit("%llu bytes / %llu usecs = %llu KB/s\n", (unsigned long long)bytes,
	     (unsigned long long)usecs, (unsigned long long)(((bytes * 1000000) >> 10) / usecs));
	if (!shared_buf) {
		t0 = now_us();
		munmap(buf, len);
		emit("%llu usecs to free memory\n", (unsigned long long)(now_us() - t0));
	}
	return NULL;
}

static int run_process(long pidx)
{
	pthread_t *th;
	long i;

	if (opt_nthread == 1) {
		task((void *)(intptr_t)pidx);
		return 0;
	}
	th = calloc((size_t)opt_nthread, sizeof(*th));
	if (!th)
		die("out of memory");
	for (i = 0; i < opt_nthread; i++)
		if (pthread_create(&th[i], NULL, task, (void *)(intptr_t)(pidx * opt_nthread + i)))
			die("pthread_create failed");
	for (i = 0; i < opt_nthread; i++)
		pthread_join(th[i], NULL);
	free(th);
	return 0;
}

static void usage(int code)
{
	fputs("usage: usemem [-n nproc] [-t threads] [-f file] [-R|-W] [-s step] [-r repeat]\n"
	      "              [--random] [--prealloc] [--prefault] SIZE\n",
	      code ? stderr : stdout);
	exit(code);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "nproc", required_argument, NULL, 'n' },
		{ "thread", required_argument, NULL, 't' },
		{ "file", required_argument, NULL, 'f' },
		{ "readonly", no_argument, NULL, 'R' },
		{ "write", no_argument, NULL, 'W' },
		{ "step", required_argument, NULL, 's' },
		{ "repeat", required_argument, NULL, 'r' },
		{ "random", no_argument, NULL, 'a' },
		{ "prealloc", no_argument, NULL, 'P' },
		{ "prefault", no_argument, NULL, 'F' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c, failed = 0;
	long i;

	page_size = (size_t)sysconf(_SC_PAGESIZE);
	while ((c = getopt_long(argc, argv, "n:t:f:RWs:r:PFh", longopts, NULL)) != -1) {
		switch (c) {
		case 'n': opt_nproc = parse_count(optarg, "-n"); break;
		case 't': opt_nthread = parse_count(optarg, "-t"); break;
		case 'f': opt_file = optarg; break;
		case 'R': opt_readonly = 1; break;
		case 'W': opt_readonly = 0; break;
		case 's': opt_step = parse_size(optarg); break;
		case 'r': opt_repeat = parse_count(optarg, "-r"); break;
		case 'a': opt_random = 1; break;
		case 'P': opt_prealloc = 1; break;
		case 'F': opt_prefault = 1; break;
		case 'h': usage(0); break;
		default: usage(2);
		}
	}
	if (optind != argc - 1)
		usage(2);
	opt_size = parse_size(argv[optind]);
	if (!opt_step)
		opt_step = page_size;
	if (opt_step < sizeof(unsigned long))
		die("step must be at least %zu bytes", sizeof(unsigned long));
	if (opt_size < opt_step)
		die("size %zu is smaller than the step %zu", opt_size, opt_step);
	if (opt_file) {
		struct stat st;

		if (stat(opt_file, &st))
			die("stat %s: %s", opt_file, strerror(errno));
		file_len = st.st_size;
		if ((off_t)opt_size > file_len)
			opt_size = (size_t)file_len - (size_t)file_len % page_size;
		if (opt_size < opt_step)
			die("%s is too small (%lld bytes)", opt_file, (long long)file_len);
	}
	if (opt_prefault && !opt_prealloc)
		die("--prefault needs --prealloc");
	if (opt_prealloc) {
		shared_len = opt_size;
		shared_buf = map_memory(shared_len, 0);
		if (opt_prefault) {
			int ro = opt_readonly;
			long rep = opt_repeat;

			/* write-fault it so the tasks' writes are COW faults on shared pages */
			opt_readonly = opt_file ? ro : 0;
			opt_repeat = 1;
			access_memory(shared_buf, shared_len, -1);
			opt_readonly = ro;
			opt_repeat = rep;
		}
	}

	fflush(NULL);
	if (opt_nproc == 1)
		return run_process(0);
	for (i = 0; i < opt_nproc; i++) {
		pid_t pid = fork();

		if (pid < 0)
			die("fork: %s", strerror(errno));
		if (pid == 0)
			_exit(run_process(i));
	}
	for (i = 0; i < opt_nproc; i++) {
		int status;

		if (wait(&status) < 0)
			break;
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			failed = 1;
	}
	return failed;
}
