/*
 * clockres: how fine the guest's clock is, for the run's system state (jobs/benchmarks/collect.py).
 *
 * Prints
 *   res_ns <clock_getres(CLOCK_MONOTONIC) in ns>
 *   step_ns <smallest non-zero difference of back-to-back clock_gettime() reads>
 * clock_getres() reports the timers' resolution (one jiffy without high-resolution timers),
 * not how the clocksource advances: a jiffies clocksource reads in steps of 1/HZ, which only
 * the measured step shows.
 *
 * Usage: clockres
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <time.h>

/* read for this long (enough to see a few 4 ms jiffies pass), or until this many steps */
#define READ_FOR_NS 50000000
#define WANTED_STEPS 1000

static int64_t ns(const struct timespec *t)
{
	return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

int main(void)
{
	struct timespec res, start, a, b;
	int64_t step = -1;
	int steps = 0;

	if (clock_getres(CLOCK_MONOTONIC, &res) != 0) {
		perror("clock_getres");
		return 1;
	}
	printf("res_ns %lld\n", (long long)ns(&res));
	clock_gettime(CLOCK_MONOTONIC, &start);
	a = start;
	while (steps < WANTED_STEPS) {
		clock_gettime(CLOCK_MONOTONIC, &b);
		if (ns(&b) - ns(&start) >= READ_FOR_NS)
			break;
		int64_t d = ns(&b) - ns(&a);

		if (d > 0) {
			if (step < 0 || d < step)
				step = d;
			steps++;
			a = b;
		}
	}
	printf("step_ns %lld\n", (long long)step);
	return 0;
}
