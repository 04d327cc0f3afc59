/* ms-mapguard.c: see ms-mapguard.h. */
#include "ms-mapguard.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

struct guard_slot {
	_Atomic uintptr_t base;
	_Atomic size_t len;     /* 0: a free slot */
	_Atomic size_t fault;   /* first faulting offset + 1; 0: none */
	const char *name;
};

static struct guard_slot slots[MS_MAPGUARD_MAX];
static _Atomic int n_slots;           /* high-water mark: the handler scans [0, n_slots) */
static int n_used;                    /* under mu */
static _Atomic unsigned long n_faults;
static uintptr_t page_size;
static struct sigaction old_action;   /* what SIGBUS did before the first slot */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* The raw system call: the handler runs in the middle of any code, and an
 * interposed mmap (a sanitizer's, a profiler's) need not be signal-safe. */
static void *remap_zero(uintptr_t start, size_t len)
{
#ifdef SYS_mmap
	long r = syscall(SYS_mmap, (void *)start, len, PROT_READ,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0L);
	return r == -1 ? MAP_FAILED : (void *)r;
#else
	return mmap((void *)start, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
#endif
}

/* Not ours: do what would have happened without the guard. */
static void chain(int sig, siginfo_t *si, void *uc)
{
	if ((old_action.sa_flags & SA_SIGINFO) && old_action.sa_sigaction) {
		old_action.sa_sigaction(sig, si, uc);
		return;
	}
	if (old_action.sa_handler != SIG_DFL && old_action.sa_handler != SIG_IGN) {
		old_action.sa_handler(sig);
		return;
	}
	/* SIG_DFL (a fault cannot be ignored): returning re-runs the faulting
	 * instruction, which now ends the process with SIGBUS as before; a
	 * SIGBUS sent by a process (kill) is raised again, delivered once the
	 * handler returns */
	signal(sig, SIG_DFL);
	if (si->si_code <= 0)
		raise(sig);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr;
	int n = atomic_load(&n_slots);
	for (int i = 0; i < n; i++) {
		struct guard_slot *s = &slots[i];
		size_t len = atomic_load(&s->len);
		uintptr_t base = atomic_load(&s->base);
		if (!len || a < base || a - base >= len)
			continue;
		uintptr_t from = a & ~(page_size - 1);
		uintptr_t end = (base + len + page_size - 1) & ~(page_size - 1);
		if (remap_zero(from, end - from) == MAP_FAILED)
			break;
		size_t none = 0;
		atomic_compare_exchange_strong(&s->fault, &none, (size_t)(a - base) + 1);
		atomic_fetch_add(&n_faults, 1);
		return;
	}
	chain(sig, si, uc);
}

int ms_mapguard_add(const void *base, size_t len, const char *name, struct ms_err *err)
{
	if (!len)
		return ms_err_set(err, -EINVAL, "%s: nothing to guard", name);
	pthread_mutex_lock(&mu);
	int slot = -1;
	for (int i = 0; i < MS_MAPGUARD_MAX && slot < 0; i++)
		if (!atomic_load(&slots[i].len))
			slot = i;
	if (slot < 0) {
		pthread_mutex_unlock(&mu);
		return ms_err_set(err, -ENOSPC, "%s: more than %d files mapped at once", name,
				  MS_MAPGUARD_MAX);
	}
	if (!n_used) {
		page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = on_sigbus;
		sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
		sigemptyset(&sa.sa_mask);
		if (sigaction(SIGBUS, &sa, &old_action) != 0) {
			int e = errno;
			pthread_mutex_unlock(&mu);
			return ms_err_set(err, -e, "%s: cannot install the SIGBUS handler: %s", name,
					  strerror(e));
		}
	}
	struct guard_slot *s = &slots[slot];
	s->name = name;
	atomic_store(&s->fault, 0);
	atomic_store(&s->base, (uintptr_t)base);
	atomic_store(&s->len, len); /* last: the handler looks at len first */
	if (slot >= atomic_load(&n_slots))
		atomic_store(&n_slots, slot + 1);
	n_used++;
	pthread_mutex_unlock(&mu);
	return slot;
}

void ms_mapguard_remove(int slot)
{
	if (slot < 0 || slot >= MS_MAPGUARD_MAX)
		return;
	pthread_mutex_lock(&mu);
	if (atomic_load(&slots[slot].len)) {
		atomic_store(&slots[slot].len, 0);
		slots[slot].name = NULL;
		if (--n_used == 0)
			sigaction(SIGBUS, &old_action, NULL);
	}
	pthread_mutex_unlock(&mu);
}

unsigned long ms_mapguard_faults(void)
{
	return atomic_load_explicit(&n_faults, memory_order_acquire);
}

bool ms_mapguard_faulted(int slot, size_t *offset)
{
	if (slot < 0 || slot >= MS_MAPGUARD_MAX)
		return false;
	size_t f = atomic_load(&slots[slot].fault);
	if (f && offset)
		*offset = f - 1;
	return f != 0;
}

bool ms_mapguard_describe(char *buf, size_t len)
{
	bool found = false;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < atomic_load(&n_slots) && !found; i++) {
		size_t off;
		if (!atomic_load(&slots[i].len) || !ms_mapguard_faulted(i, &off))
			continue;
		struct stat st;
		char now[64] = "gone";
		if (stat(slots[i].name, &st) == 0)
			snprintf(now, sizeof(now), "now %lld bytes", (long long)st.st_size);
		snprintf(buf, len, "%s: byte %zu of the %zu mapped could not be read: the file "
			 "shrank while mapped (%s)", slots[i].name, off, atomic_load(&slots[i].len), now);
		found = true;
	}
	pthread_mutex_unlock(&mu);
	return found;
}
