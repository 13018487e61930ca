/*
 * thpscale: stackbench's own program following mmtests' thpscale procedure.
 *
 * Each thread works on its share of TOTAL_SIZE:
 *   1. map and fill anonymous memory (its share),
 *   2. punch holes: unmap the first half of every 2MB-aligned block,
 *   3. fill the holes with page cache by reading (through a mapping) a window of FILE,
 *   4. then, once every thread is initialised, fault a second anonymous region (half the
 *      share, MADV_HUGEPAGE when asked) one 2MB-aligned block at a time, timing a store,
 *      a mincore() probe and a memset of the whole 2MB.
 * The probe checks a page 64 pages into the block: only a huge-page fault makes it
 * resident, so "resident" means the fault was served by a THP (mmtests' method; it needs
 * no pagemap privileges).
 *
 * Output, read by mmtests' extraction rules:
 *   anoninit <thread> <usecs>
 *   fileinit <thread> <usecs>
 *   fault <thread> <huge|base> <latency_us> <sec>.<usec> <locality 1|0|-1>
 *
 * Usage: thpscale NR_THREADS TOTAL_SIZE FILE MADVISE_HUGEPAGE(0|1)
 * FILE must hold at least TOTAL_SIZE bytes (a sparse file is fine).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#define HPAGE (2UL << 20)
#define PROBE_PAGE 64
/* get_mempolicy(2) flags, spelled out so the program needs no libnuma headers */
#define MPOL_F_NODE_FLAG (1 << 0)
#define MPOL_F_ADDR_FLAG (1 << 1)

struct fault {
	int huge;
	int locality;
	uint64_t latency;
	struct timeval done;
};

struct worker {
	pthread_t th;
	int idx;
	uint64_t anon_init;
	uint64_t file_init;
	struct fault *faults;
};

static size_t thread_size;
static size_t nr_faults;
static size_t page_size;
static int madvise_huge;
static const char *filename;
static pthread_barrier_t ready;

static void fail(const char *what)
{
	fprintf(stderr, "thpscale: %s: %s\n", what, strerror(errno));
	exit(1);
}

static uint64_t tv_us(const struct timeval *tv)
{
	return (uint64_t)tv->tv_sec * 1000000 + (uint64_t)tv->tv_usec;
}

static uint64_t now_us(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return tv_us(&tv);
}

static char *align_up(char *p)
{
	return (char *)(((uintptr_t)p + HPAGE - 1) & ~(uintptr_t)(HPAGE - 1));
}

/* 1 when the memory is on the node the thread runs on, 0 when not, -1 when unknown. */
static int locality(void *addr)
{
	unsigned int cpu, node;
	int mem_node;

	if (syscall(SYS_getcpu, &cpu, &node, NULL))
		return -1;
	if (syscall(SYS_get_mempolicy, &mem_node, NULL, 0UL, addr,
		    MPOL_F_NODE_FLAG | MPOL_F_ADDR_FLAG))
		return -1;
	return (unsigned int)mem_node == node ? 1 : 0;
}

static void *work(void *arg)
{
	struct worker *w = arg;
	size_t second_size = thread_size / 2, file_size = thread_size / 4, i;
	char *first, *second, *blk, *end, *file;
	volatile unsigned long sum = 0;
	uint64_t t0;
	int fd;

	t0 = now_us();
	first = mmap(NULL, thread_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (first == MAP_FAILED)
		fail("first mapping");
	memset(first, 1, thread_size);
	end = first + thread_size;
	for (blk = align_up(first); blk + HPAGE / 2 < end; blk += HPAGE)
		munmap(blk, HPAGE / 2);

	/* reserve one extra huge page so the faulting window can be 2MB aligned */
	second = mmap(NULL, second_size + HPAGE, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (second == MAP_FAILED)
		fail("second mapping");
	if (madvise_huge && madvise(second, second_size + HPAGE, MADV_HUGEPAGE))
		fail("madvise(MADV_HUGEPAGE)");
	w->anon_init = now_us() - t0;

	t0 = now_us();
	fd = open(filename, O_RDONLY);
	if (fd < 0)
		fail(filename);
	file = mmap(NULL, file_size, PROT_READ, MAP_SHARED, fd, (off_t)(thread_size * (size_t)w->idx));
	if (file == MAP_FAILED)
		fail("file mapping");
	for (i = 0; i < file_size; i += page_size)
		sum += (unsigned char)file[i];
	w->file_init = now_us() - t0;
	(void)sum;

	pthread_barrier_wait(&ready);

	blk = align_up(second);
	for (i = 0; i < nr_faults; i++, blk += HPAGE) {
		struct fault *f = &w->faults[i];
		unsigned char vec = 0;
		struct timeval start;

		gettimeofday(&start, NULL);
		blk[0] = 1;
		if (mincore(blk + PROBE_PAGE * page_size, page_size, &vec))
			fail("mincore");
		f->huge = vec & 1;
		memset(blk, 2, HPAGE);
		gettimeofday(&f->done, NULL);
		f->latency = tv_us(&f->done) - tv_us(&start);
		f->locality = locality(blk);
	}

	munmap(file, file_size);
	close(fd);
	munmap(first, thread_size);
	munmap(second, second_size + HPAGE);
	return NULL;
}

int main(int argc, char **argv)
{
	struct worker *workers;
	size_t total;
	int nr_threads, i;
	size_t j;

	if (argc != 5) {
		fputs("usage: thpscale NR_THREADS TOTAL_SIZE FILE MADVISE_HUGEPAGE\n", stderr);
		return 2;
	}
	nr_threads = atoi(argv[1]);
	total = (size_t)strtoull(argv[2], NULL, 0);
	filename = argv[3];
	madvise_huge = atoi(argv[4]);
	page_size = (size_t)sysconf(_SC_PAGESIZE);
	if (nr_threads < 1) {
		fputs("thpscale: NR_THREADS must be at least 1\n", stderr);
		return 2;
	}
	thread_size = (total / (size_t)nr_threads) & ~(HPAGE - 1);
	nr_faults = total / (size_t)nr_threads / HPAGE / 2;
	if (thread_size < 2 * HPAGE || !nr_faults) {
		fprintf(stderr, "thpscale: %zu bytes is too small for %d threads\n", total,
			nr_threads);
		return 2;
	}
	printf("Running with %d thread%s, %zu bytes each%s\n", nr_threads,
	       nr_threads > 1 ? "s" : "", thread_size, madvise_huge ? ", madv_hugepage" : "");
	fflush(stdout);

	workers = calloc((size_t)nr_threads, sizeof(*workers));
	if (!workers)
		fail("calloc");
	pthread_barrier_init(&ready, NULL, (unsigned int)nr_threads);
	for (i = 0; i < nr_threads; i++) {
		workers[i].idx = i;
		workers[i].faults = calloc(nr_faults, sizeof(struct fault));
		if (!workers[i].faults)
			fail("calloc");
		if (pthread_create(&workers[i].th, NULL, work, &workers[i]))
			fail("pthread_create");
	}
	for (i = 0; i < nr_threads; i++)
		pthread_join(workers[i].th, NULL);

	putchar('\n');
	for (i = 0; i < nr_threads; i++)
		printf("anoninit %d %12llu\n", i, (unsigned long long)workers[i].anon_init);
	for (i = 0; i < nr_threads; i++)
		printf("fileinit %d %12llu\n", i, (unsigned long long)workers[i].file_init);
	for (i = 0; i < nr_threads; i++)
		for (j = 0; j < nr_faults; j++) {
			struct fault *f = &workers[i].faults[j];

			printf("fault %d %s %12llu %ld.%06ld %d\n", i, f->huge ? "huge" : "base",
			       (unsigned long long)f->latency, (long)f->done.tv_sec,
			       (long)f->done.tv_usec, f->locality);
		}
	return 0;
}
