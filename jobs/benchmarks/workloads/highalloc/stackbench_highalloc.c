// SPDX-License-Identifier: GPL-2.0
/*
 * stackbench_highalloc: huge-page-order allocation stress for mmtests' stress-highalloc
 * procedure (the upstream test needed SystemTap to do this from inside the kernel).
 *
 * One pass attempts a number of allocations of the huge page order at a fixed pace,
 * holds everything it got until the pass ends, then frees it all.  A pass is started by
 * writing "<attempts> [<pace_ms> [<gfp>]]" to /proc/stackbench_highalloc; the write
 * returns when the pass is over (a signal stops it early).  Reading the file returns the
 * last pass's log:
 *
 *   <n> success|failure <ns>        one line per attempt (allocation latency)
 *   % Success: <percent>            successes * 100 / attempts
 *
 * gfp variants: "movable" (GFP_HIGHUSER_MOVABLE, the original test), "hugetlb" (as the
 * hugetlb pool allocates: movable + __GFP_RETRY_MAYFAIL) and "thp" (GFP_TRANSHUGE_LIGHT,
 * as a THP fault without direct compaction would).  Failures never warn.
 *
 * Up to PAGE_ALLOC_COSTLY_ORDER (order 3) the allocator does not fail a reclaiming
 * allocation: it retries and calls the OOM killer, and with nothing left to kill the guest
 * panics.  An attempt must be able to fail (seed 003's order-3 runs fail most of theirs),
 * so at those orders every reclaiming variant adds __GFP_RETRY_MAYFAIL: it still reclaims
 * and compacts as hard, but fails instead of killing.
 */
#include <linux/delay.h>
#include <linux/gfp.h>
#include <linux/kernel.h>
#include <linux/ktime.h>
#include <linux/mm.h>		/* brings huge_mm.h (HPAGE_PMD_ORDER) in the right order */
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/proc_fs.h>
#include <linux/sched/signal.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#define PROC_NAME "stackbench_highalloc"
#define LINE_MAX_LEN 48

#ifdef CONFIG_TRANSPARENT_HUGEPAGE
#define SB_HUGE_ORDER HPAGE_PMD_ORDER
#else
#define SB_HUGE_ORDER (PMD_SHIFT - PAGE_SHIFT)
#endif

static unsigned int order = SB_HUGE_ORDER;
module_param(order, uint, 0444);
MODULE_PARM_DESC(order, "allocation order (default: the PMD huge page order)");

static unsigned int max_attempts = 1 << 20;
module_param(max_attempts, uint, 0644);
MODULE_PARM_DESC(max_attempts, "upper bound on attempts per pass");

static DEFINE_MUTEX(pass_lock);
static char *last_log;
static size_t last_len;

static bool parse_gfp(const char *name, gfp_t *gfp)
{
	if (!strcmp(name, "movable"))
		*gfp = GFP_HIGHUSER_MOVABLE | __GFP_NOWARN;
	else if (!strcmp(name, "hugetlb"))
		*gfp = GFP_HIGHUSER_MOVABLE | __GFP_RETRY_MAYFAIL | __GFP_NOWARN;
	else if (!strcmp(name, "thp"))
		*gfp = GFP_TRANSHUGE_LIGHT | __GFP_NOWARN;
	else
		return false;
	if (order <= PAGE_ALLOC_COSTLY_ORDER && (*gfp & __GFP_DIRECT_RECLAIM))
		*gfp |= __GFP_RETRY_MAYFAIL;
	return true;
}

/* Run one pass; the caller holds pass_lock.  Returns the log (kvmalloc'd) and its length. */
static char *run_pass(unsigned int attempts, unsigned int pace_ms, gfp_t gfp, size_t *lenp)
{
	size_t size = (size_t)attempts * LINE_MAX_LEN + 64, len = 0;
	unsigned int i, done = 0, got = 0;
	struct page **held;
	char *log;

	held = kvcalloc(attempts, sizeof(*held), GFP_KERNEL);
	log = kvmalloc(size, GFP_KERNEL);
	if (!held || !log) {
		kvfree(held);
		kvfree(log);
		return NULL;
	}
	for (i = 0; i < attempts; i++) {
		struct page *page;
		u64 t0, dt;

		t0 = ktime_get_ns();
		page = alloc_pages(gfp, order);
		dt = ktime_get_ns() - t0;
		done++;
		if (page)
			held[got++] = page;
		len += scnprintf(log + len, size - len, "%u %s %llu\n", i + 1,
				 page ? "success" : "failure", dt);
		if (signal_pending(current))
			break;
		if (pace_ms && i + 1 < attempts && msleep_interruptible(pace_ms))
			break;
		cond_resched();
	}
	len += scnprintf(log + len, size - len, "%% Success: %u\n", done ? got * 100 / done : 0);
	for (i = 0; i < got; i++)
		__free_pages(held[i], order);
	kvfree(held);
	*lenp = len;
	return log;
}

static ssize_t highalloc_write(struct file *file, const char __user *ubuf, size_t count,
			       loff_t *ppos)
{
	unsigned int attempts = 0, pace_ms = 125;
	char cmd[64], name[16] = "movable";
	size_t len;
	char *log;
	gfp_t gfp;
	int n;

	if (count >= sizeof(cmd))
		return -EINVAL;
	if (copy_from_user(cmd, ubuf, count))
		return -EFAULT;
	cmd[count] = '\0';
	n = sscanf(cmd, "%u %u %15s", &attempts, &pace_ms, name);
	if (n < 1 || !attempts || attempts > max_attempts || !parse_gfp(name, &gfp))
		return -EINVAL;

	if (mutex_lock_interruptible(&pass_lock))
		return -EINTR;
	log = run_pass(attempts, pace_ms, gfp, &len);
	if (log) {
		kvfree(last_log);
		last_log = log;
		last_len = len;
	}
	mutex_unlock(&pass_lock);
	return log ? (ssize_t)count : -ENOMEM;
}

static int highalloc_show(struct seq_file *m, void *v)
{
	mutex_lock(&pass_lock);
	if (last_log)
		seq_write(m, last_log, last_len);
	mutex_unlock(&pass_lock);
	return 0;
}

static int highalloc_open(struct inode *inode, struct file *file)
{
	return single_open_size(file, highalloc_show, NULL, last_len + PAGE_SIZE);
}

static const struct proc_ops highalloc_ops = {
	.proc_open = highalloc_open,
	.proc_read = seq_read,
	.proc_lseek = seq_lseek,
	.proc_release = single_release,
	.proc_write = highalloc_write,
};

static int __init highalloc_init(void)
{
	if (order > MAX_ORDER - 1)
		return -EINVAL;
	if (!proc_create(PROC_NAME, 0600, NULL, &highalloc_ops))
		return -ENOMEM;
	return 0;
}

static void __exit highalloc_exit(void)
{
	remove_proc_entry(PROC_NAME, NULL);
	kvfree(last_log);
}

module_init(highalloc_init);
module_exit(highalloc_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("stackbench: paced huge-page-order allocation passes (stress-highalloc)");
