// SPDX-License-Identifier: GPL-2.0
/*
 * fragment: stackbench's scenario stage programs. Each mode sets memory up, prints one
 * summary line, creates READY_FILE and then holds its memory until SIGTERM.
 *
 *   fragment fill-free <keep_per_512> <ready_file>
 *       Fill free memory with anonymous base pages, then, for every physical 2 MB block
 *       (pfn / 512), free all pages but the last keep_per_512 of it (seed 001: "allocates
 *       all memory and then for each 2M aligned section, frees 3/4 of base pages"; 128).
 *   fragment spread <percent> movable|unmovable <ready_file>
 *       Keep percent% of free memory, evenly spread (seed 003). movable: anonymous pages,
 *       kept when (pfn * percent) % 100 < percent, so the spread is over physical
 *       addresses. unmovable: pipe buffers (the kernel allocates them unmovable, so their
 *       pageblocks turn unmovable), the i-th page allocated kept by the same rule; the
 *       allocation order stands in for the physical order.
 *   fragment hog <megabytes> <ready_file>
 *       Hold that much anonymous memory.
 *   fragment churn <tasks> <max_mb> <stop_file>
 *       A compile-like background load: <tasks> loops of short-lived children that each
 *       touch up to max_mb of anonymous memory and write a small file, until stop_file
 *       exists (no ready file: it starts at once).
 *
 * Pages are found by physical frame number through /proc/self/pagemap (root only) when the
 * kernel has it (CONFIG_PROC_PAGE_MONITOR); without it, by virtual address in a 2 MB aligned
 * mapping, as the seed's own program did ("for each 2M aligned section"): base pages
 * faulted in order come mostly from contiguous free blocks. The summary line says which.
 * Pages are freed with MADV_DONTNEED so one mapping never becomes ~100000 VMAs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096UL
#define BLOCK_PAGES 512UL
/*
 * Memory left free when filling "all" of it: MemAvailable (free memory less the
 * watermarks and zone reserves) less this. Little, so that what is left in large blocks
 * keeps the fragmentation score above proactive compaction's thresholds; more for pipes,
 * whose bookkeeping the kernel allocates as we go.
 */
#define RESERVE_KB (8UL * 1024)
#define RESERVE_PIPES_KB (64UL * 1024)

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static void die(const char *what)
{
	fprintf(stderr, "fragment: %s: %s\n", what, strerror(errno));
	exit(1);
}

static unsigned long meminfo_kb(const char *key)
{
	char line[256];
	unsigned long v = 0;
	size_t n = strlen(key);
	FILE *f = fopen("/proc/meminfo", "r");

	if (!f)
		die("/proc/meminfo");
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) && line[n] == ':') {
			v = strtoul(line + n + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

static unsigned long fill_pages(unsigned long reserve_kb)
{
	unsigned long avail = meminfo_kb("MemAvailable");

	if (avail <= reserve_kb * 2) {
		fprintf(stderr, "fragment: only %lu kB available\n", avail);
		exit(1);
	}
	unsigned long pages = (avail - reserve_kb) / 4;
	const char *cap = getenv("FRAGMENT_MAX_MB");

	/* host tests fill a few MB, never the host's memory */
	if (cap && strtoul(cap, NULL, 10) * 256 < pages)
		pages = strtoul(cap, NULL, 10) * 256;
	return pages;
}

static void ready(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (fd < 0)
		die(path);
	close(fd);
	fflush(stdout);
	while (!stop)
		pause();
}

/* Anonymous base pages, every one touched; the caller frees some by pfn. */
static const char *frames = "physical";

static char *fill_anon(unsigned long pages)
{
	size_t align = BLOCK_PAGES * PAGE;
	char *p = mmap(NULL, pages * PAGE + align, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (p == MAP_FAILED)
		die("mmap");
	/* 2 MB aligned, so virtual 2 MB sections are whole when pagemap is missing */
	p = (char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
	/* base pages only: a THP would move 512 pages at once and its partial unmap would
	 * only be freed later by the deferred split */
	madvise(p, pages * PAGE, MADV_NOHUGEPAGE);
	for (unsigned long i = 0; i < pages; i++)
		p[i * PAGE] = (char)i | 1;
	return p;
}

/* Free the pages keep() rejects; returns how many stayed. */
static unsigned long thin_by_pfn(char *p, unsigned long pages, int (*keep)(uint64_t, long),
				 long arg)
{
	int fd = open("/proc/self/pagemap", O_RDONLY);
	unsigned long kept = 0, run_start = 0, run_len = 0;
	static uint64_t ents[BLOCK_PAGES];

	if (fd < 0 && errno != ENOENT)
		die("/proc/self/pagemap");
	if (fd < 0)
		frames = "virtual";
	for (unsigned long i = 0; i < pages; i++) {
		uint64_t ent;
		int drop;

		if (fd < 0) {
			/* no pagemap: the virtual page number stands in for the frame */
			ents[i % BLOCK_PAGES] = (1ULL << 63) | ((uintptr_t)p / PAGE + i);
		} else if (i % BLOCK_PAGES == 0) {
			size_t n = pages - i < BLOCK_PAGES ? pages - i : BLOCK_PAGES;
			off_t off = (off_t)(((uintptr_t)p / PAGE) + i) * 8;

			if (pread(fd, ents, n * 8, off) != (ssize_t)(n * 8))
				die("pagemap read");
		}
		ent = ents[i % BLOCK_PAGES];
		if (!(ent >> 63) || !(ent & ((1ULL << 55) - 1))) {
			fprintf(stderr, "fragment: no pfn in pagemap (not root?)\n");
			exit(1);
		}
		drop = !keep(ent & ((1ULL << 55) - 1), arg);
		kept += !drop;
		if (drop && run_len && run_start + run_len == i) {
			run_len++;
			continue;
		}
		if (run_len)
			madvise(p + run_start * PAGE, run_len * PAGE, MADV_DONTNEED);
		run_len = 0;
		if (drop) {
			run_start = i;
			run_len = 1;
		}
	}
	if (run_len)
		madvise(p + run_start * PAGE, run_len * PAGE, MADV_DONTNEED);
	if (fd >= 0)
		close(fd);
	return kept;
}

static int keep_block_tail(uint64_t pfn, long keep)
{
	return (long)(pfn % BLOCK_PAGES) >= (long)BLOCK_PAGES - keep;
}

static int keep_spread(uint64_t pfn, long percent)
{
	return (long)((pfn * (uint64_t)percent) % 100) < percent;
}

static int mode_fill_free(long keep, const char *ready_file)
{
	unsigned long pages = fill_pages(RESERVE_KB);
	char *p = fill_anon(pages);
	unsigned long kept = thin_by_pfn(p, pages, keep_block_tail, keep);

	printf("fragment: fill-free filled %lu pages, kept %lu (%ld of every %lu, by %s "
	       "address)\n", pages, kept, keep, BLOCK_PAGES, frames);
	ready(ready_file);
	return 0;
}

static int mode_spread_movable(long percent, const char *ready_file)
{
	unsigned long pages = fill_pages(RESERVE_KB);
	char *p = fill_anon(pages);
	unsigned long kept = thin_by_pfn(p, pages, keep_spread, percent);

	printf("fragment: spread movable filled %lu pages, kept %lu (%ld%%, by %s address)\n",
	       pages, kept, percent, frames);
	ready(ready_file);
	return 0;
}

static int mode_spread_unmovable(long percent, const char *ready_file)
{
	unsigned long pages = fill_pages(RESERVE_PIPES_KB), per_pipe = 256, npipes, i;
	unsigned long used[2] = { 0, 0 }, next[2];
	struct rlimit rl;
	int (*fds)[2];
	char buf[PAGE];

	/* two streams of pipes: page i goes to the kept one when (i * percent) % 100 < percent,
	 * so kept pages alternate with freed ones in allocation order (25%: one in four) */
	npipes = pages / per_pipe + 4;
	rl.rlim_cur = rl.rlim_max = npipes * 2 + 64;
	if (setrlimit(RLIMIT_NOFILE, &rl))
		die("setrlimit RLIMIT_NOFILE");
	fds = calloc(npipes, sizeof(*fds));
	if (!fds)
		die("calloc");
	memset(buf, 0x5a, sizeof(buf));
	for (i = 0; i < npipes; i++) {
		if (pipe(fds[i]))
			die("pipe");
		if (fcntl(fds[i][1], F_SETPIPE_SZ, (int)(per_pipe * PAGE)) < 0)
			die("F_SETPIPE_SZ");
	}
	/* kept pipes count up from 0, freed ones down from the end */
	next[1] = 0;
	next[0] = npipes - 1;
	for (i = 0; i < pages && next[1] <= next[0]; i++) {
		int keep = (long)((i * (unsigned long)percent) % 100) < percent;
		unsigned long pipe_no = next[keep];

		if (write(fds[pipe_no][1], buf, PAGE) != (ssize_t)PAGE)
			die("pipe write");
		if (++used[keep] % per_pipe == 0)
			next[keep] = keep ? next[keep] + 1 : next[keep] - 1;
	}
	for (i = next[0]; i < npipes; i++) {
		close(fds[i][0]);
		close(fds[i][1]);
	}
	printf("fragment: spread unmovable filled %lu pages, kept %lu in pipes (%ld%%)\n", pages,
	       used[1], percent);
	ready(ready_file);
	return 0;
}

static int mode_hog(long mb, const char *ready_file)
{
	unsigned long pages = (unsigned long)mb * 256;

	fill_anon(pages);
	printf("fragment: hog holds %ld MB\n", mb);
	ready(ready_file);
	return 0;
}

static void churn_child(long max_mb, unsigned long seed, const char *dir)
{
	unsigned long mb = 1 + seed % (unsigned long)max_mb;
	char path[256];
	char *p = fill_anon(mb * 256);
	int fd;

	snprintf(path, sizeof(path), "%s/churn-%lu.o", dir, seed % 64);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0) {
		for (int i = 0; i < 64; i++)
			if (write(fd, p + (unsigned long)i * PAGE, PAGE) < 0)
				break;
		close(fd);
	}
	_exit(0);
}

static int mode_churn(long tasks, long max_mb, const char *stop_file)
{
	char dir[256];
	unsigned long n = 0;
	struct stat st;

	snprintf(dir, sizeof(dir), "%s", stop_file);
	*(strrchr(dir, '/') ? strrchr(dir, '/') : dir) = '\0';
	if (!dir[0])
		strcpy(dir, ".");
	for (long t = 0; t < tasks; t++) {
		if (fork() == 0) {
			while (!stop && stat(stop_file, &st) != 0) {
				pid_t c = fork();

				n = n * 6364136223846793005UL + 1442695040888963407UL + (unsigned long)t;
				if (c == 0)
					churn_child(max_mb, n >> 33, dir);
				if (c > 0)
					waitpid(c, NULL, 0);
			}
			_exit(0);
		}
	}
	while (wait(NULL) > 0)
		;
	return 0;
}

int main(int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = on_term };

	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	if (argc == 4 && !strcmp(argv[1], "fill-free"))
		return mode_fill_free(atol(argv[2]), argv[3]);
	if (argc == 5 && !strcmp(argv[1], "spread") && !strcmp(argv[3], "movable"))
		return mode_spread_movable(atol(argv[2]), argv[4]);
	if (argc == 5 && !strcmp(argv[1], "spread") && !strcmp(argv[3], "unmovable"))
		return mode_spread_unmovable(atol(argv[2]), argv[4]);
	if (argc == 4 && !strcmp(argv[1], "hog"))
		return mode_hog(atol(argv[2]), argv[3]);
	if (argc == 5 && !strcmp(argv[1], "churn"))
		return mode_churn(atol(argv[2]), atol(argv[3]), argv[4]);
	fprintf(stderr, "usage: fragment fill-free KEEP_PER_512 READY | spread PCT movable|"
			"unmovable READY | hog MB READY | churn TASKS MAX_MB STOP\n");
	return 2;
}
