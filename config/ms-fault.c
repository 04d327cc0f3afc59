/* ms-fault.c: see ms-fault.h. Linked only into fault-injection tests, with
 * --wrap=SYMBOL for each allocator below (config/meson.build). */
#include "ms-fault.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ms-hash.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
int __real_posix_memalign(void **out, size_t align, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);
int __real_vasprintf(char **out, const char *fmt, va_list ap);
char *__real_realpath(const char *path, char *resolved);
void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
void *__real_mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __real_munmap(void *addr, size_t len);
FILE *__real_fopen(const char *path, const char *mode);
FILE *__real_fopen64(const char *path, const char *mode);
pcre2_code *__real_pcre2_compile_8(PCRE2_SPTR pat, PCRE2_SIZE len, uint32_t opts, int *ec,
				   PCRE2_SIZE *off, pcre2_compile_context *cc);
pcre2_match_context *__real_pcre2_match_context_create_8(pcre2_general_context *g);
pcre2_match_data *__real_pcre2_match_data_create_8(uint32_t n, pcre2_general_context *g);
pcre2_match_data *__real_pcre2_match_data_create_from_pattern_8(const pcre2_code *c,
								pcre2_general_context *g);
pcre2_jit_stack *__real_pcre2_jit_stack_create_8(PCRE2_SIZE lo, PCRE2_SIZE hi,
						 pcre2_general_context *g);
int __real_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg);

static atomic_uint_fast64_t count, fail_at;
static atomic_bool fired;
static void *_Atomic site;
static __thread bool exempt;

void ms_fault_arm(uint64_t n)
{
	atomic_store(&fail_at, 0);
	atomic_store(&fired, false);
	atomic_store(&site, NULL);
	atomic_store(&count, 0);
	atomic_store(&fail_at, n);
}

uint64_t ms_fault_count(void)
{
	return atomic_load(&count);
}

bool ms_fault_fired(void)
{
	return atomic_load(&fired);
}

void *ms_fault_site(void)
{
	return atomic_load(&site);
}

void ms_fault_exempt_thread(bool e)
{
	exempt = e;
}

/* Count one allocation; true when it is the one to fail. */
static bool fail_now(void *caller)
{
	if (exempt)
		return false;
	uint64_t k = atomic_fetch_add(&count, 1) + 1;
	if (k != atomic_load(&fail_at))
		return false;
	atomic_store(&site, caller);
	atomic_store(&fired, true);
	return true;
}

/* ---- live blocks: an open-addressing set of addresses ----
 * Frees and reallocs update it under the lock before the block goes back,
 * so an address is never reused while its old entry stands. Addresses not
 * in it (blocks a library made) are ignored. */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t *slots;
static size_t cap, used;

static size_t slot_of(uintptr_t a)
{
	return (size_t)ms_mix64((uint64_t)a) & (cap - 1);
}

static void set_put_locked(uintptr_t a)
{
	if (2 * (used + 1) > cap) {
		size_t ncap = cap ? 2 * cap : 1 << 16;
		uintptr_t *ns = __real_calloc(ncap, sizeof(*ns));
		if (!ns) {
			fputs("ms-fault: out of memory for the live set\n", stderr);
			abort();
		}
		uintptr_t *old = slots;
		size_t ocap = cap;
		slots = ns, cap = ncap;
		for (size_t i = 0; i < ocap; i++)
			if (old[i])
				for (size_t j = slot_of(old[i]);; j = (j + 1) & (cap - 1))
					if (!slots[j]) {
						slots[j] = old[i];
						break;
					}
		__real_free(old);
	}
	for (size_t j = slot_of(a);; j = (j + 1) & (cap - 1)) {
		if (slots[j] == a)
			return;
		if (!slots[j]) {
			slots[j] = a;
			used++;
			return;
		}
	}
}

/* Backward-shift deletion keeps every probe chain unbroken. */
static void set_del_locked(uintptr_t a)
{
	if (!cap)
		return;
	size_t j = slot_of(a);
	while (slots[j] != a) {
		if (!slots[j])
			return;
		j = (j + 1) & (cap - 1);
	}
	slots[j] = 0;
	used--;
	for (size_t k = (j + 1) & (cap - 1); slots[k]; k = (k + 1) & (cap - 1)) {
		size_t h = slot_of(slots[k]);
		/* slots[k] may move to j when j lies cyclically in [h, k) */
		if ((k > j && (h <= j || h > k)) || (k < j && h <= j && h > k)) {
			slots[j] = slots[k];
			slots[k] = 0;
			j = k;
		}
	}
}

static void *track(void *p)
{
	if (p) {
		pthread_mutex_lock(&mu);
		set_put_locked((uintptr_t)p);
		pthread_mutex_unlock(&mu);
	}
	return p;
}

int64_t ms_fault_live(void)
{
	pthread_mutex_lock(&mu);
	int64_t n = (int64_t)used;
	pthread_mutex_unlock(&mu);
	return n;
}

/* ---- the wrappers ---- */

#define CALLER __builtin_return_address(0)

void *__wrap_malloc(size_t n)
{
	if (fail_now(CALLER)) {
		errno = ENOMEM;
		return NULL;
	}
	return track(__real_malloc(n));
}

void *__wrap_calloc(size_t k, size_t n)
{
	if (fail_now(CALLER)) {
		errno = ENOMEM;
		return NULL;
	}
	return track(__real_calloc(k, n));
}

void __wrap_free(void *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&mu);
	set_del_locked((uintptr_t)p);
	__real_free(p);
	pthread_mutex_unlock(&mu);
}

void *__wrap_realloc(void *p, size_t n)
{
	if (!p)
		return __wrap_malloc(n);
	if (!n) {
		__wrap_free(p);
		return NULL;
	}
	if (fail_now(CALLER)) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&mu);
	void *q = __real_realloc(p, n);
	if (q) {
		set_del_locked((uintptr_t)p);
		set_put_locked((uintptr_t)q);
	}
	pthread_mutex_unlock(&mu);
	return q;
}

char *__wrap_strdup(const char *s)
{
	if (fail_now(CALLER)) {
		errno = ENOMEM;
		return NULL;
	}
	return track(__real_strdup(s));
}

char *__wrap_strndup(const char *s, size_t n)
{
	if (fail_now(CALLER)) {
		errno = ENOMEM;
		return NULL;
	}
	return track(__real_strndup(s, n));
}

int __wrap_posix_memalign(void **out, size_t align, size_t n)
{
	if (fail_now(CALLER))
		return ENOMEM;
	int rc = __real_posix_memalign(out, align, n);
	if (!rc)
		track(*out);
	return rc;
}

void *__wrap_aligned_alloc(size_t align, size_t n)
{
	if (fail_now(CALLER)) {
		errno = ENOMEM;
		return NULL;
	}
	return track(__real_aligned_alloc(align, n));
}

int __wrap_vasprintf(char **out, const char *fmt, va_list ap)
{
	if (fail_now(CALLER)) {
		errno = ENOMEM;
		return -1;
	}
	int rc = __real_vasprintf(out, fmt, ap);
	if (rc >= 0)
		track(*out);
	return rc;
}

int __wrap_asprintf(char **out, const char *fmt, ...)
{
	if (fail_now(CALLER)) {
		errno = ENOMEM;
		return -1;
	}
	va_list ap;
	va_start(ap, fmt);
	int rc = __real_vasprintf(out, fmt, ap);
	va_end(ap);
	if (rc >= 0)
		track(*out);
	return rc;
}

char *__wrap_realpath(const char *path, char *resolved)
{
	if (resolved)
		return __real_realpath(path, resolved); /* allocates nothing */
	if (fail_now(CALLER)) {
		errno = ENOMEM;
		return NULL;
	}
	return track(__real_realpath(path, NULL));
}

void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (fail_now(CALLER)) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	void *p = __real_mmap(addr, len, prot, flags, fd, off);
	if (p != MAP_FAILED)
		track(p);
	return p;
}

/* _FILE_OFFSET_BITS=64 (meson's default) makes every mmap call mmap64 */
void *__wrap_mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (fail_now(CALLER)) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	void *p = __real_mmap64(addr, len, prot, flags, fd, off);
	if (p != MAP_FAILED)
		track(p);
	return p;
}

int __wrap_munmap(void *addr, size_t len)
{
	pthread_mutex_lock(&mu);
	set_del_locked((uintptr_t)addr);
	int rc = __real_munmap(addr, len);
	pthread_mutex_unlock(&mu);
	return rc;
}

/* Allocations inside libc that our code asks for: they fail the way libc
 * reports running out, and are not tracked (libc frees them itself). */
FILE *__wrap_fopen(const char *path, const char *mode)
{
	if (fail_now(CALLER)) {
		errno = ENOMEM;
		return NULL;
	}
	return __real_fopen(path, mode);
}

FILE *__wrap_fopen64(const char *path, const char *mode)
{
	if (fail_now(CALLER)) {
		errno = ENOMEM;
		return NULL;
	}
	return __real_fopen64(path, mode);
}

/* PCRE2's objects: each creation allocates (inside libpcre2, which
 * --wrap cannot reach, so the creation itself is the allocation). */
pcre2_code *__wrap_pcre2_compile_8(PCRE2_SPTR pat, PCRE2_SIZE len, uint32_t opts, int *ec,
				   PCRE2_SIZE *off, pcre2_compile_context *cc)
{
	if (fail_now(CALLER)) {
		*ec = PCRE2_ERROR_HEAP_FAILED;
		*off = 0;
		return NULL;
	}
	return __real_pcre2_compile_8(pat, len, opts, ec, off, cc);
}

pcre2_match_context *__wrap_pcre2_match_context_create_8(pcre2_general_context *g)
{
	return fail_now(CALLER) ? NULL : __real_pcre2_match_context_create_8(g);
}

pcre2_match_data *__wrap_pcre2_match_data_create_8(uint32_t n, pcre2_general_context *g)
{
	return fail_now(CALLER) ? NULL : __real_pcre2_match_data_create_8(n, g);
}

pcre2_match_data *__wrap_pcre2_match_data_create_from_pattern_8(const pcre2_code *c,
								pcre2_general_context *g)
{
	return fail_now(CALLER) ? NULL : __real_pcre2_match_data_create_from_pattern_8(c, g);
}

pcre2_jit_stack *__wrap_pcre2_jit_stack_create_8(PCRE2_SIZE lo, PCRE2_SIZE hi,
						 pcre2_general_context *g)
{
	return fail_now(CALLER) ? NULL : __real_pcre2_jit_stack_create_8(lo, hi, g);
}

/* A thread is an allocation too (its stack). */
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
	if (fail_now(CALLER))
		return EAGAIN;
	return __real_pthread_create(t, a, fn, arg);
}
