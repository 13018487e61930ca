/*
 * thpfaults: stackbench's own program for mmtests' THP fault benchmarks, one mode each.
 *
 *   thpfaults scale NR_THREADS TOTAL_SIZE FILE MADVISE_HUGEPAGE(0|1)
 *     thpscale's procedure: each thread fills its share of TOTAL_SIZE, unmaps the first
 *     half of every 2 MB block of it, reads (through a mapping) a window of FILE a quarter
 *     of its share long so page cache lands in the holes, and then faults a second region
 *     (half its share, MADV_HUGEPAGE when asked) block by block. FILE must hold at least
 *     TOTAL_SIZE bytes (a sparse file is fine).
 *
 *   thpfaults challenge NR_THREADS TOTAL_SIZE MADVISE_HUGEPAGE(0|1)
 *     thpchallenge's procedure: each thread maps its share of TOTAL_SIZE (rounded up to
 *     8 MB) and, once every thread is ready, faults the first half of it one 2 MB block
 *     at a time. Nothing fragments memory first: the challenge is whatever else runs.
 *
 *   thpfaults compact NR_THREADS ANON_SIZE FILE_SIZE FILE MADVISE_HUGEPAGE(0|1)
 *     thpcompact's procedure: thpscale's, but the filled memory asks for huge pages and
 *     each thread reads its share of FILE_SIZE: the faulted region's huge pages exist only
 *     if compaction moves the file and anonymous pages out of the way.
 *
 * A timed fault is a store to the block's first byte, a mincore() probe of the page 64
 * pages in (resident only when the fault mapped a whole huge page: mmtests' method, it
 * needs no pagemap privileges) and a memset of the 2 MB; its locality compares the
 * memory's node with the CPU's after the memset.
 *
 * Output, in the format mmtests' extraction reads (one line per thread, then per fault):
 *   anoninit <thread> <usecs>
 *   fileinit <thread> <usecs>                        (scale and compact)
 *   fault <thread> <huge|base> <latency_us> <sec>.<usec> <locality 1|0|-1>
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

enum mode { SCALE, CHALLENGE, COMPACT };

static enum mode mode;
static size_t anon_share;	/* bytes of anonymous memory per thread */
static size_t file_share;	/* bytes of FILE each thread reads (scale, compact) */
static size_t file_stride;	/* where in FILE the next thread's window starts */
static size_t nr_faults;
static size_t page_size;
static int madvise_huge;
static const char *filename;
static pthread_barrier_t ready;

static void fail(const char *what)
{
	fprintf(stderr, "thpfaults: %s: %s\n", what, strerror(errno));
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

static char *map_anon(size_t len, int huge, const char *what)
{
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		fail(what);
	if (huge && madvise(p, len, MADV_HUGEPAGE))
		fail("madvise(MADV_HUGEPAGE)");
	return p;
}

/* scale, compact: anonymous memory with a hole in every 2 MB block, the holes then partly
 * filled with page cache; returns the file mapping so the caller unmaps it after the faults */
static char *fragment(struct worker *w, char **first, int *fd)
{
	char *blk, *end, *file;
	volatile unsigned long sum = 0;
	uint64_t t0;
	size_t i;

	*first = map_anon(anon_share, mode == COMPACT, "first mapping");
	memset(*first, 1, anon_share);
	end = *first + anon_share;
	for (blk = align_up(*first); blk + HPAGE / 2 < end; blk += HPAGE)
		munmap(blk, HPAGE / 2);

	t0 = now_us();
	*fd = open(filename, O_RDONLY);
	if (*fd < 0)
		fail(filename);
	file = mmap(NULL, file_share, PROT_READ, MAP_SHARED, *fd,
		    (off_t)(file_stride * (size_t)w->idx));
	if (file == MAP_FAILED)
		fail("file mapping");
	for (i = 0; i < file_share; i += page_size)
		sum += (unsigned char)file[i];
	(void)sum;
	w->file_init = now_us() - t0;
	return file;
}

static void *work(void *arg)
{
	struct worker *w = arg;
	size_t region = mode == CHALLENGE ? anon_share : anon_share / 2, i;
	char *first = NULL, *file = NULL, *second, *blk;
	uint64_t t0 = now_us();
	int fd = -1;

	if (mode != CHALLENGE)
		file = fragment(w, &first, &fd);
	/* one extra huge page so the faulting window can start 2 MB aligned */
	second = map_anon(region + HPAGE, madvise_huge, "fault region");
	w->anon_init = now_us() - t0 - w->file_init;

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

	munmap(second, region + HPAGE);
	if (mode != CHALLENGE) {
		munmap(file, file_share);
		close(fd);
		munmap(first, anon_share);
	}
	return NULL;
}

static void usage(void)
{
	fputs("usage: thpfaults scale NR_THREADS TOTAL_SIZE FILE MADVISE_HUGEPAGE\n"
	      "       thpfaults challenge NR_THREADS TOTAL_SIZE MADVISE_HUGEPAGE\n"
	      "       thpfaults compact NR_THREADS ANON_SIZE FILE_SIZE FILE MADVISE_HUGEPAGE\n",
	      stderr);
	exit(2);
}

int main(int argc, char **argv)
{
	struct worker *workers;
	size_t anon, per;
	int nr_threads, i;
	size_t j;

	if (argc == 6 && !strcmp(argv[1], "scale"))
		mode = SCALE;
	else if (argc == 5 && !strcmp(argv[1], "challenge"))
		mode = CHALLENGE;
	else if (argc == 7 && !strcmp(argv[1], "compact"))
		mode = COMPACT;
	else
		usage();
	nr_threads = atoi(argv[2]);
	if (nr_threads < 1) {
		fputs("thpfaults: NR_THREADS must be at least 1\n", stderr);
		return 2;
	}
	anon = (size_t)strtoull(argv[3], NULL, 0);
	per = anon / (size_t)nr_threads;
	nr_faults = per / HPAGE / 2;
	page_size = (size_t)sysconf(_SC_PAGESIZE);
	if (mode == SCALE) {
		anon_share = per & ~(HPAGE - 1);
		file_share = anon_share / 4;
		file_stride = anon_share;
		filename = argv[4];
		madvise_huge = atoi(argv[5]);
	} else if (mode == COMPACT) {
		anon_share = per & ~(HPAGE - 1);
		file_share = ((size_t)strtoull(argv[4], NULL, 0) / (size_t)nr_threads) & ~(HPAGE - 1);
		file_stride = file_share;
		filename = argv[5];
		madvise_huge = atoi(argv[6]);
	} else {
		/* thpchallenge sizes each share up to a multiple of 8 MB */
		anon_share = (per + 4 * HPAGE - 1) & ~(4 * HPAGE - 1);
		madvise_huge = atoi(argv[4]);
	}
	if (!nr_faults || (mode != CHALLENGE && !file_share) ||
	    (mode == SCALE && anon_share < 2 * HPAGE)) {
		fprintf(stderr, "thpfaults: %zu bytes is too small for %d threads\n", anon,
			nr_threads);
		return 2;
	}
	/* thpscale's header line says "bytes", its successors' "anonymous bytes" */
	printf("Running with %d thread%s, %zu %sbytes each%s\n", nr_threads,
	       nr_threads > 1 ? "s" : "", anon_share, mode == SCALE ? "" : "anonymous ",
	       madvise_huge ? ", madv_hugepage" : "");
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
	for (i = 0; mode != CHALLENGE && i < nr_threads; i++)
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
