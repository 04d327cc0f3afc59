/*
 * test-mapfault.c: a checkpoint whose file shrinks while it is mapped
 * (config/ms-mapguard.h): the load fails naming the file and the tensor,
 * a serving engine fails its step and refuses what comes after, and the
 * process lives; a file truncated before the load is refused as before; a
 * SIGBUS outside the checkpoint still ends the process. On the random model
 * (MS_FIXTURE_RANDOM), copied, since the test truncates it.
 */
#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check-run.h"
#include "backend.h"
#include "engine.h"
#include "model.h"
#include "ms-mapguard.h"

static char dir[256], weights[320];

static void copy_file(const char *from, const char *to)
{
	FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
	ck_assert_msg(a && b, "copy %s -> %s", from, to);
	char buf[65536];
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), a)) > 0)
		ck_assert_uint_eq(fwrite(buf, 1, n, b), n);
	fclose(a);
	ck_assert_int_eq(fclose(b), 0);
}

/* A fresh copy of the random model in a temporary folder. */
static void setup(void)
{
	const char *src = getenv("MS_FIXTURE_RANDOM");
	ck_assert_msg(src != NULL, "MS_FIXTURE_RANDOM not set");
	snprintf(dir, sizeof(dir), "/tmp/ms-mapfault-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char a[512], b[512];
	snprintf(a, sizeof(a), "%s/config.json", src);
	snprintf(b, sizeof(b), "%s/config.json", dir);
	copy_file(a, b);
	snprintf(a, sizeof(a), "%s/model.safetensors", src);
	snprintf(weights, sizeof(weights), "%s/model.safetensors", dir);
	copy_file(a, weights);
}

static void teardown(void)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/config.json", dir);
	unlink(p);
	unlink(weights);
	rmdir(dir);
}

static off_t file_size(const char *p)
{
	struct stat st;
	ck_assert_int_eq(stat(p, &st), 0);
	return st.st_size;
}

static struct ms_backend *open_backend(void)
{
	/* the reference kernels read the bf16 rows in place: the mapping stays
	 * in use while serving */
	struct ms_backend_opts o = {.kernels = "ref", .threads = 2};
	struct ms_backend *be = NULL;
	struct ms_err err = {0};
	ck_assert_msg(ms_backend_open(&o, &be, &err) == 0, "%s", err.msg);
	return be;
}

/* SIGBUS's handler: the default, or a sanitizer's (installed at start). */
static void *sigbus_handler(void)
{
	struct sigaction cur;
	ck_assert_int_eq(sigaction(SIGBUS, NULL, &cur), 0);
	return (cur.sa_flags & SA_SIGINFO) ? (void *)cur.sa_sigaction : (void *)cur.sa_handler;
}

/* Between the mapping and the first tensor read: cut the data in half. */
static void truncate_hook(struct ms_model *m)
{
	ck_assert_int_eq(truncate(weights, (off_t)(m->ck.files[0].size / 2)), 0);
}

START_TEST(load_truncated_while_mapped)
{
	struct ms_backend *be = open_backend();
	unsigned long f0 = ms_mapguard_faults();
	void *h0 = sigbus_handler();
	struct ms_model m;
	struct ms_err err = {0};
	ms_model_load_hook = truncate_hook;
	int rc = ms_model_load(&m, dir, be, &err);
	ms_model_load_hook = NULL;
	ck_assert_int_eq(rc, -EIO);
	ck_assert_msg(strstr(err.msg, weights) && strstr(err.msg, "tensor \"") &&
		      strstr(err.msg, "shrank while mapped"), "%s", err.msg);
	ck_assert_uint_gt(ms_mapguard_faults(), f0);
	/* the model let go of its mapping: the guard's handler is gone with it */
	ck_assert(sigbus_handler() == h0);
	/* and the process goes on: an intact copy loads */
	teardown();
	setup();
	ck_assert_msg(ms_model_load(&m, dir, be, &err) == 0, "%s", err.msg);
	ck_assert(sigbus_handler() != h0);
	ms_model_free(&m);
	ck_assert(sigbus_handler() == h0);
	ms_backend_close(be);
}
END_TEST

START_TEST(load_truncated_before)
{
	struct ms_backend *be = open_backend();
	ck_assert_int_eq(truncate(weights, file_size(weights) / 2), 0);
	struct ms_model m;
	struct ms_err err = {0};
	int rc = ms_model_load(&m, dir, be, &err);
	ck_assert_int_eq(rc, -EBADMSG);
	ck_assert_msg(strstr(err.msg, weights) && strstr(err.msg, "truncated file?"), "%s", err.msg);
	ms_backend_close(be);
}
END_TEST

struct seen {
	int n;
	bool finished;
	enum ms_finish why;
	char error[1024];
};

static void on_event(void *ctx, const struct ms_event *ev)
{
	struct seen *s = ctx;
	if (ev->kind == MS_EV_TOKEN)
		s->n++;
	if (ev->kind == MS_EV_FINISH) {
		s->finished = true;
		s->why = ev->finish;
		snprintf(s->error, sizeof(s->error), "%s", ev->error ? ev->error : "");
	}
}

/* Run the hand-stepped engine until the request finished; a failed step
 * fails the running requests, as the engine's thread does. */
static int64_t run(struct ms_engine *e, struct seen *s, struct ms_err *err)
{
	int64_t rc = 0;
	for (int i = 0; i < 100 && !s->finished && rc >= 0; i++)
		rc = ms_engine_step(e, err);
	return rc;
}

START_TEST(serve_truncated)
{
	struct ms_backend *be = open_backend();
	struct ms_model m;
	struct ms_err err = {0};
	ck_assert_msg(ms_model_load(&m, dir, be, &err) == 0, "%s", err.msg);
	struct ms_engine *e;
	struct ms_engine_config ec = {.max_context = 64};
	ck_assert_msg(ms_engine_init(&e, &m.lm, NULL, &ec, &err) == 0, "%s", err.msg);
	const int32_t prompt[] = {1, 2, 3, 4, 5};
	struct ms_request_params p = {.max_tokens = 4, .prompt_logprobs = -1};
	ms_sampling_defaults(&p.sampling);
	struct seen a = {0}, b = {0};
	ck_assert_msg(ms_engine_submit(e, prompt, 5, &p, on_event, &a, NULL, &err) == 0, "%s", err.msg);
	ck_assert_int_ge(run(e, &a, &err), 0);
	ck_assert(a.finished && a.why == MS_FINISH_LENGTH && a.n == 4);

	ck_assert_int_eq(truncate(weights, 0), 0);
	ck_assert_msg(ms_engine_submit(e, prompt, 5, &p, on_event, &b, NULL, &err) == 0, "%s", err.msg);
	int64_t rc = run(e, &b, &err);
	ck_assert_int_eq(rc, -EIO);
	ck_assert_msg(strstr(err.msg, weights) && strstr(err.msg, "shrank while mapped"), "%s",
		      err.msg);
	/* nothing runs on lost weights any more */
	struct seen c = {0};
	ck_assert_int_eq(ms_engine_submit(e, prompt, 5, &p, on_event, &c, NULL, &err), -EIO);
	ck_assert_msg(strstr(err.msg, "restarted"), "%s", err.msg);
	ms_engine_free(e); /* b, still running after the failed step, is cancelled */
	ck_assert(b.finished);
	ms_model_free(&m);
	ms_backend_close(be);
}
END_TEST

/* In a forked child: the weights mapped and guarded, as a load does;
 * false when that fails. */
static bool child_guards_weights(void)
{
	int fd = open(weights, O_RDONLY);
	if (fd < 0)
		return false;
	size_t n = (size_t)file_size(weights);
	const void *g = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
	struct ms_err err = {0};
	return g != MAP_FAILED && ms_mapguard_add(g, n, weights, &err) >= 0;
}

/* The child died of the SIGBUS itself, or of a sanitizer's report of it
 * (abort_on_error), rather than exiting. */
static void expect_killed_by_sigbus(pid_t pid)
{
	int st = 0;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(!WIFEXITED(st), "the child exited %d instead of dying", WEXITSTATUS(st));
	ck_assert_msg(WTERMSIG(st) == SIGBUS || WTERMSIG(st) == SIGABRT, "signal %d", WTERMSIG(st));
}

/* A SIGBUS that is not the checkpoint's ends the process as it would
 * without the guard (here: a second file, mapped but not guarded). */
START_TEST(foreign_sigbus_kills)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		char other[512];
		snprintf(other, sizeof(other), "%s/other", dir);
		int fo = open(other, O_RDWR | O_CREAT | O_TRUNC, 0600);
		if (!child_guards_weights() || fo < 0 || ftruncate(fo, 1 << 20) != 0)
			_exit(3);
		const volatile char *u = mmap(NULL, 1 << 20, PROT_READ, MAP_PRIVATE, fo, 0);
		if (u == MAP_FAILED || ftruncate(fo, 0) != 0)
			_exit(3);
		unlink(other);
		(void)u[65536]; /* past the end, unguarded: SIGBUS */
		_exit(0);       /* survived: wrong */
	}
	expect_killed_by_sigbus(pid);
}
END_TEST

/* A SIGBUS sent by a process (kill -BUS) is not a fault to absorb. */
START_TEST(sent_sigbus_kills)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (!child_guards_weights())
			_exit(3);
		kill(getpid(), SIGBUS);
		_exit(0); /* survived: wrong */
	}
	expect_killed_by_sigbus(pid);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("mapfault");
	TCase *tc = tcase_create("mapfault");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, load_truncated_while_mapped);
	tcase_add_test(tc, load_truncated_before);
	tcase_add_test(tc, serve_truncated);
	tcase_add_test(tc, foreign_sigbus_kills);
	tcase_add_test(tc, sent_sigbus_kills);
	suite_add_tcase(s, tc);
	return ms_check_run(s);
}
