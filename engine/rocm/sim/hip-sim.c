/* hip-sim.c: see hip-sim.h. */
#include "hip-sim.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

/* ---- switching stacks ----
 * On x86-64 a switch saves the callee-saved registers on the fiber's own
 * stack and swaps stack pointers: no system call (swapcontext saves the
 * signal mask with one, which made the model ~50x slower). Under
 * AddressSanitizer each switch is announced to it (its fiber interface),
 * so it checks the fibers' stacks too. Elsewhere, glibc's ucontext. */
#if defined(__x86_64__)
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define ASAN_FIBERS 1
#endif

struct fctx {
	void *sp;
	const void *bottom;   /* the stack, for the sanitizer */
	size_t size;
	void *fake;           /* the sanitizer's fake stack while switched away */
};

void ms_sim_switch(void **save_sp, void *to_sp);
__asm__(".text\n"
	".globl ms_sim_switch\n"
	".type ms_sim_switch, @function\n"
	"ms_sim_switch:\n"
	"	pushq %rbp\n	pushq %rbx\n	pushq %r12\n	pushq %r13\n"
	"	pushq %r14\n	pushq %r15\n"
	"	movq %rsp, (%rdi)\n"
	"	movq %rsi, %rsp\n"
	"	popq %r15\n	popq %r14\n	popq %r13\n	popq %r12\n"
	"	popq %rbx\n	popq %rbp\n"
	"	ret\n"
	".size ms_sim_switch, .-ms_sim_switch\n");

/* dies: from never runs again (a fiber at its end). */
static void ctx_switch_ex(struct fctx *from, struct fctx *to, bool dies)
{
#ifdef ASAN_FIBERS
	__sanitizer_start_switch_fiber(dies ? NULL : &from->fake, to->bottom, to->size);
#else
	(void)dies;
#endif
	ms_sim_switch(&from->sp, to->sp);
#ifdef ASAN_FIBERS
	__sanitizer_finish_switch_fiber(from->fake, NULL, NULL);
#endif
}

/* First thing a new fiber does: learn the stack it came from (the
 * scheduler's), for the sanitizer's way back. */
static void ctx_entered(struct fctx *sched)
{
#ifdef ASAN_FIBERS
	__sanitizer_finish_switch_fiber(NULL, &sched->bottom, &sched->size);
#else
	(void)sched;
#endif
}

/* A stack that "returns" into entry with the ABI's alignment: six zero
 * registers, then entry's address (rsp = 8 mod 16 on arrival). */
static void ctx_make(struct fctx *c, void *stack, size_t size, void (*entry)(void))
{
	uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
	void **sp = (void **)(top - 64);
	for (int i = 0; i < 6; i++)
		sp[i] = NULL;
	sp[6] = (void *)entry;
	sp[7] = NULL;
	c->sp = sp;
	c->bottom = stack;
	c->size = size;
	c->fake = NULL;
}
#else
struct fctx {
	ucontext_t uc;
};

static void ctx_switch_ex(struct fctx *from, struct fctx *to, bool dies)
{
	(void)dies;
	swapcontext(&from->uc, &to->uc);
}

static void ctx_entered(struct fctx *sched)
{
	(void)sched;
}

static void ctx_make(struct fctx *c, void *stack, size_t size, void (*entry)(void))
{
	getcontext(&c->uc);
	c->uc.uc_stack.ss_sp = stack;
	c->uc.uc_stack.ss_size = size;
	c->uc.uc_link = NULL;
	makecontext(&c->uc, entry, 0);
}
#endif

static void ctx_switch(struct fctx *from, struct fctx *to)
{
	ctx_switch_ex(from, to, false);
}

#define STACK_BYTES (64 * 1024)
#define MAX_BLOCK 1024

enum fstate { F_RUN, F_BARRIER, F_XLANE, F_DONE };
enum xop { X_SHFL, X_XOR, X_DOWN, X_BALLOT, X_WAVE };

struct fiber {
	struct fctx ctx;
	void *stack;
	enum fstate st;
	/* a cross-lane operation in flight */
	enum xop op;
	uint64_t in, out;   /* the value exchanged, as bits */
	int arg, width;
	uint64_t bits;
	ms_sim_wave_fn fn;  /* X_WAVE: the operation; in: the lane's record */
};

struct block {
	struct ms_sim_dim grid, dim, idx;
	int wave, n;
	void *shared;
	size_t shared_bytes;
	struct fiber *f;
	int cur;
	struct fctx sched;
	ms_sim_kernel kernel;
	void *args;
};

/* The block being run on this OS thread. */
static _Thread_local struct block *g;

/* A fiber's whole life: the kernel, then back to the scheduler for good. */
static void fiber_main(void)
{
	ctx_entered(&g->sched);
	g->kernel(g->args);
	struct fiber *me = &g->f[g->cur];
	me->st = F_DONE;
	ctx_switch_ex(&me->ctx, &g->sched, true);
}

static void yield_as(enum fstate st)
{
	struct fiber *me = &g->f[g->cur];
	me->st = st;
	ctx_switch(&me->ctx, &g->sched);
}

struct ms_sim_dim ms_sim_thread_idx(void)
{
	unsigned t = (unsigned)g->cur, x = g->dim.x, y = g->dim.y;
	return (struct ms_sim_dim){t % x, t / x % y, t / (x * y)};
}

struct ms_sim_dim ms_sim_block_idx(void) { return g->idx; }
struct ms_sim_dim ms_sim_block_dim(void) { return g->dim; }
struct ms_sim_dim ms_sim_grid_dim(void) { return g->grid; }
int ms_sim_wave_size(void) { return g->wave; }
void *ms_sim_shared(void) { return g->shared; }
void ms_sim_syncthreads(void) { yield_as(F_BARRIER); }

static uint64_t xlane(enum xop op, uint64_t v, int arg, int width, uint64_t bits)
{
	struct fiber *me = &g->f[g->cur];
	me->op = op, me->in = v, me->arg = arg, me->width = width, me->bits = bits;
	yield_as(F_XLANE);
	return me->out;
}

uint64_t ms_sim_shfl_u64(uint64_t v, int src, int width)
{
	return xlane(X_SHFL, v, src, width, 0);
}

uint64_t ms_sim_shfl_xor_u64(uint64_t v, int mask, int width)
{
	return xlane(X_XOR, v, mask, width, 0);
}

uint64_t ms_sim_shfl_down_u64(uint64_t v, unsigned delta, int width)
{
	return xlane(X_DOWN, v, (int)delta, width, 0);
}

uint64_t ms_sim_ballot(int pred)
{
	xlane(X_BALLOT, 0, 0, 0, pred != 0);
	return g->f[g->cur].bits;
}

void ms_sim_wave_op(ms_sim_wave_fn fn, void *mine)
{
	g->f[g->cur].fn = fn;
	xlane(X_WAVE, (uint64_t)(uintptr_t)mine, 0, g->wave, 0);
}

/* ---- the scheduler ---- */

/* The source lane of lane l's operation within its width segment, or -1
 * (outside: the lane keeps its own value). */
static int src_lane(const struct fiber *f, int l)
{
	int w = f->width, base = l / w * w, s;
	switch (f->op) {
	case X_SHFL: s = base + ((f->arg % w) + w) % w; break;
	case X_XOR: s = l ^ f->arg; break;
	case X_DOWN: s = l + f->arg; break;
	default: return -1;
	}
	return s >= base && s < base + w ? s : -1;
}

/* A wavefront-wide operation: every lane of a whole wavefront waits at it
 * (checked by the caller for the live ones). */
static int wave_op(struct block *b, int w0, int w1, ms_sim_wave_fn fn, struct ms_err *err)
{
	void *lanes[64];
	if (w1 - w0 != b->wave)
		return ms_err_set(err, -EDEADLK, "sim: a wavefront operation in a partial wavefront "
				  "(%d of %d lanes: the block size is not a whole number of them)",
				  w1 - w0, b->wave), -1;
	for (int l = w0; l < w1; l++) {
		if (b->f[l].st != F_XLANE)
			return ms_err_set(err, -EDEADLK, "sim: a wavefront operation with lane %d "
					  "returned (every lane must take part)", l - w0), -1;
		lanes[l - w0] = (void *)(uintptr_t)b->f[l].in;
	}
	fn(lanes, w1 - w0);
	for (int l = w0; l < w1; l++)
		b->f[l].st = F_RUN;
	return 1;
}

/* Complete the cross-lane operation of wavefront [w0, w1) if every live
 * lane waits at the same one: 1 done, 0 not ready, -1 divergence. */
static int resolve_wave(struct block *b, int w0, int w1, struct ms_err *err)
{
	int n_x = 0, n_live = 0;
	enum xop op = X_SHFL;
	int arg = 0, width = 0;
	ms_sim_wave_fn fn = NULL;
	for (int l = w0; l < w1; l++) {
		struct fiber *f = &b->f[l];
		if (f->st == F_DONE)
			continue;
		n_live++;
		if (f->st != F_XLANE)
			continue;
		if (n_x++ == 0)
			op = f->op, arg = f->arg, width = f->width, fn = f->fn;
		else if (f->op != op || f->width != width || (op == X_XOR && f->arg != arg) ||
			 (op == X_WAVE && f->fn != fn))
			return ms_err_set(err, -EDEADLK, "sim: lanes of wavefront %d wait at different "
					  "cross-lane operations", w0 / b->wave), -1;
	}
	if (!n_x)
		return 0;
	if (n_x != n_live)
		return ms_err_set(err, -EDEADLK, "sim: wavefront %d: %d lanes at a cross-lane "
				  "operation, %d elsewhere (divergence)", w0 / b->wave, n_x,
				  n_live - n_x), -1;
	if (op != X_BALLOT && (width < 1 || width > b->wave || (width & (width - 1))))
		return ms_err_set(err, -EINVAL, "sim: shuffle width %d (a power of two <= %d)", width,
				  b->wave), -1;
	if (op == X_WAVE)
		return wave_op(b, w0, w1, fn, err);
	uint64_t bits = 0;
	for (int l = w0; l < w1; l++)
		if (b->f[l].st == F_XLANE && b->f[l].bits)
			bits |= 1ull << (l - w0);
	for (int l = w0; l < w1; l++) {
		struct fiber *f = &b->f[l];
		if (f->st != F_XLANE)
			continue;
		if (op == X_BALLOT) {
			f->bits = bits;
		} else {
			int s = src_lane(f, l - w0);
			const struct fiber *from = s >= 0 && w0 + s < w1 ? &b->f[w0 + s] : NULL;
			f->out = from && from->st == F_XLANE ? from->in : f->in;
		}
		f->st = F_RUN;
	}
	return 1;
}

/* After every fiber stopped: release what can go on. 1 something runs
 * again, 0 all done, -1 divergence or deadlock. */
static int release(struct block *b, struct ms_err *err)
{
	int done = 0, barrier = 0, resolved = 0;
	for (int w0 = 0; w0 < b->n; w0 += b->wave) {
		int w1 = w0 + b->wave < b->n ? w0 + b->wave : b->n;
		int r = resolve_wave(b, w0, w1, err);
		if (r < 0)
			return -1;
		resolved += r;
	}
	if (resolved)
		return 1;
	for (int i = 0; i < b->n; i++)
		done += b->f[i].st == F_DONE, barrier += b->f[i].st == F_BARRIER;
	if (done == b->n)
		return 0;
	if (done)
		return ms_err_set(err, -EDEADLK, "sim: %d threads wait at __syncthreads while %d "
				  "have returned (divergence)", barrier, done), -1;
	for (int i = 0; i < b->n; i++)
		b->f[i].st = F_RUN;
	return 1;
}

/* A fiber at the start of the kernel. */
static void fiber_start(struct block *b, struct fiber *f)
{
	(void)b;
	ctx_make(&f->ctx, f->stack, STACK_BYTES, fiber_main);
	f->st = F_RUN;
}

static int run_block(struct block *b, struct ms_err *err)
{
	memset(b->shared, 0, b->shared_bytes);
	for (int i = 0; i < b->n; i++)
		fiber_start(b, &b->f[i]);
	for (;;) {
		for (int i = 0; i < b->n; i++)
			if (b->f[i].st == F_RUN) {
				b->cur = i;
				ctx_switch(&b->sched, &b->f[i].ctx);
			}
		int r = release(b, err);
		if (r <= 0)
			return r;
	}
}

/* Fiber stacks outlive a launch: a forward pass launches thousands of
 * blocks, and mapping 256 stacks each time cost more than the kernels.
 * One list for every thread (a launch takes what it needs and gives it
 * back), so the stacks stay reachable and are never reported as leaks. */
static struct {
	pthread_mutex_t mu;
	void **free;
	int n, cap;
} stacks = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void *stack_get(void)
{
	void *p = NULL;
	pthread_mutex_lock(&stacks.mu);
	if (stacks.n)
		p = stacks.free[--stacks.n];
	pthread_mutex_unlock(&stacks.mu);
	return p ? p : malloc(STACK_BYTES);
}

static void stack_put(void *p)
{
	pthread_mutex_lock(&stacks.mu);
	if (stacks.n == stacks.cap) {
		int cap = stacks.cap ? 2 * stacks.cap : 1024;
		void **f = realloc(stacks.free, (size_t)cap * sizeof(*f));
		if (!f) {
			pthread_mutex_unlock(&stacks.mu);
			free(p);
			return;
		}
		stacks.free = f;
		stacks.cap = cap;
	}
	stacks.free[stacks.n++] = p;
	pthread_mutex_unlock(&stacks.mu);
}

static void block_free(struct block *b)
{
	for (int i = 0; b->f && i < b->n; i++)
		if (b->f[i].stack)
			stack_put(b->f[i].stack);
	free(b->f);
	free(b->shared);
}

int ms_sim_launch(struct ms_sim_dim grid, struct ms_sim_dim block, size_t shared_bytes,
		  int wave, ms_sim_kernel kernel, void *args, struct ms_err *err)
{
	uint64_t n = (uint64_t)block.x * block.y * block.z;
	if (wave != 32 && wave != 64)
		return ms_err_set(err, -EINVAL, "sim: wavefront of %d lanes (32 or 64)", wave);
	if (!n || n > MAX_BLOCK || !grid.x || !grid.y || !grid.z)
		return ms_err_set(err, -EINVAL, "sim: block of %llu threads, grid %ux%ux%u",
				  (unsigned long long)n, grid.x, grid.y, grid.z);
	struct block b = {.grid = grid, .dim = block, .wave = wave, .n = (int)n,
			  .shared_bytes = shared_bytes, .kernel = kernel, .args = args};
	b.shared = calloc(1, shared_bytes ? shared_bytes : 1);
	b.f = calloc(n, sizeof(*b.f));
	bool ok = b.shared && b.f;
	for (uint64_t i = 0; ok && i < n; i++)
		ok = (b.f[i].stack = stack_get()) != NULL;
	if (!ok) {
		block_free(&b);
		return ms_err_set(err, -ENOMEM, "sim: out of memory for a block of %llu threads",
				  (unsigned long long)n);
	}
	struct block *saved = g;
	g = &b;
	int rc = 0;
	for (unsigned z = 0; !rc && z < grid.z; z++)
		for (unsigned y = 0; !rc && y < grid.y; y++)
			for (unsigned x = 0; !rc && x < grid.x; x++) {
				b.idx = (struct ms_sim_dim){x, y, z};
				rc = run_block(&b, err) < 0 ? -EDEADLK : 0;
			}
	g = saved;
	if (rc && err && !err->msg[0])
		ms_err_set(err, rc, "sim: kernel failed");
	block_free(&b);
	return rc ? (err ? err->code : rc) : 0;
}
