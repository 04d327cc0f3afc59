/*
 * test-auth.c: API key sets (server/http/auth.c) without a socket.
 *
 * The key file's rules (comments, blank lines, trimming, a bad line named
 * by its number and never echoed, the limits), the match (every key, no
 * prefix or extension of one, the length bounds, the Bearer header's
 * forms), a reload that replaces the set only when the file is good, and
 * reloads racing with request threads (run under the sanitizers).
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "check-run.h"

static char path[64];

static void write_keys(const char *text)
{
	if (!path[0]) {
		snprintf(path, sizeof(path), "/tmp/ms-test-auth-XXXXXX");
		int fd = mkstemp(path);
		ck_assert_int_ge(fd, 0);
		close(fd);
	}
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

static bool match(const struct ms_keyset *ks, const char *tok)
{
	return ms_keyset_match(ks, tok, strlen(tok));
}

START_TEST(file_rules)
{
	struct ms_keyset *ks;
	struct ms_err err = {0};
	write_keys("# the keys\n\nalpha\n  beta\t\r\n#gamma\n   # indented comment\ndelta");
	ck_assert_msg(ms_keyset_load("cli-key", path, &ks, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(ms_keyset_count(ks), 4);
	ck_assert(match(ks, "alpha") && match(ks, "beta") && match(ks, "delta") &&
		  match(ks, "cli-key"));
	ck_assert(!match(ks, "gamma") && !match(ks, "#gamma") && !match(ks, "") &&
		  !match(ks, "alph") && !match(ks, "alphaa") && !match(ks, " alpha") &&
		  !match(ks, "ALPHA"));
	ck_assert(!ms_keyset_match(ks, "alpha", 4));  /* the length counts, not a NUL */
	ms_keyset_free(ks);

	/* a bad line: its number, never its text */
	write_keys("ok-key\n\nsecret with space\n");
	ck_assert_int_eq(ms_keyset_load(NULL, path, &ks, &err), -EINVAL);
	ck_assert_ptr_null(ks);
	ck_assert_msg(strstr(err.msg, path) && strstr(err.msg, "line 3") &&
		      !strstr(err.msg, "secret"), "%s", err.msg);
	write_keys("caf\xc3\xa9\n");
	ck_assert_int_eq(ms_keyset_load(NULL, path, &ks, &err), -EINVAL);
	char big[MS_AUTH_KEY_MAX + 3];
	memset(big, 'k', sizeof(big));
	big[MS_AUTH_KEY_MAX + 1] = '\n';
	big[MS_AUTH_KEY_MAX + 2] = '\0';
	write_keys(big);  /* 513 bytes: one too many */
	ck_assert_int_eq(ms_keyset_load(NULL, path, &ks, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "line 1") && strstr(err.msg, "512"), "%s", err.msg);
	big[MS_AUTH_KEY_MAX] = '\n';  /* 512: the longest key */
	big[MS_AUTH_KEY_MAX + 1] = '\0';
	write_keys(big);
	ck_assert_msg(ms_keyset_load(NULL, path, &ks, &err) == 0, "%s", err.msg);
	big[MS_AUTH_KEY_MAX] = '\0';
	ck_assert(match(ks, big));
	big[MS_AUTH_KEY_MAX - 1] = '\0';
	ck_assert(!match(ks, big));  /* a prefix of 511 */
	char longer[2 * MS_AUTH_KEY_MAX];
	memset(longer, 'k', sizeof(longer));
	ck_assert(!ms_keyset_match(ks, longer, sizeof(longer)));  /* starts with the key */
	ms_keyset_free(ks);

	/* no key at all: refused, unless --api-key brings one */
	write_keys("# none\n\n   \n");
	ck_assert_int_eq(ms_keyset_load(NULL, path, &ks, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "holds no key"), "%s", err.msg);
	ck_assert_int_eq(ms_keyset_load("k", path, &ks, &err), 0);
	ck_assert_int_eq(ms_keyset_count(ks), 1);
	ms_keyset_free(ks);
	ck_assert_int_eq(ms_keyset_load(NULL, "/nonexistent/keys", &ks, &err), -ENOENT);
	ck_assert_msg(strstr(err.msg, "/nonexistent/keys"), "%s", err.msg);
	ck_assert_int_eq(ms_keyset_load("a b", NULL, &ks, &err), -EINVAL);
	ck_assert_int_eq(ms_keyset_load("", NULL, &ks, &err), -EINVAL);
}
END_TEST

START_TEST(header_forms_and_reload)
{
	struct ms_auth a;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_auth_init(&a, NULL, NULL, &err), 0);
	ck_assert(!ms_auth_enabled(&a) && ms_auth_check(&a, NULL));  /* off: all pass */
	int n = -1;
	ck_assert_int_eq(ms_auth_reload(&a, &n, &err), -ENOENT);
	ms_auth_free(&a);

	write_keys("one\ntwo\n");
	ck_assert_msg(ms_auth_init(&a, "cli", path, &err) == 0, "%s", err.msg);
	ck_assert(ms_auth_enabled(&a));
	static const char *const good[] = {"Bearer one", "bearer two", "BEARER cli", "Bearer \t one"};
	static const char *const bad[] = {NULL, "", "Bearer", "Bearer ", "Bearerone", "Basic one",
					  "one", "Bearer one two", "Bearer three"};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		ck_assert_msg(ms_auth_check(&a, good[i]), "%s refused", good[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(!ms_auth_check(&a, bad[i]), "%s accepted", bad[i] ? bad[i] : "NULL");

	write_keys("two\nthree\n");
	ck_assert_msg(ms_auth_reload(&a, &n, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(n, 3);  /* with --api-key's */
	ck_assert(!ms_auth_check(&a, "Bearer one") && ms_auth_check(&a, "Bearer three") &&
		  ms_auth_check(&a, "Bearer cli"));
	/* a bad file and an empty one: the set stays */
	write_keys("four\nfi ve\n");
	ck_assert_int_eq(ms_auth_reload(&a, &n, &err), -EINVAL);
	write_keys("");
	ck_assert_int_eq(ms_auth_reload(&a, &n, &err), 0);  /* --api-key's key is enough */
	ck_assert(ms_auth_check(&a, "Bearer cli") && !ms_auth_check(&a, "Bearer two"));
	ms_auth_free(&a);

	write_keys("only\n");
	ck_assert_int_eq(ms_auth_init(&a, NULL, path, &err), 0);
	write_keys("# emptied\n");
	ck_assert_int_eq(ms_auth_reload(&a, &n, &err), -EINVAL);
	ck_assert(ms_auth_check(&a, "Bearer only"));  /* never an empty set */
	unlink(path);
	ck_assert_int_eq(ms_auth_reload(&a, &n, &err), -ENOENT);
	ck_assert(ms_auth_check(&a, "Bearer only"));
	ms_auth_free(&a);
}
END_TEST

static struct ms_auth race;
static atomic_bool race_stop;

static void *checker(void *arg)
{
	(void)arg;
	long bad = 0;
	while (!atomic_load(&race_stop))
		bad += !ms_auth_check(&race, "Bearer stay") + ms_auth_check(&race, "Bearer never");
	return (void *)bad;
}

START_TEST(reload_races_checks)
{
	struct ms_err err = {0};
	write_keys("stay\n");
	ck_assert_int_eq(ms_auth_init(&race, NULL, path, &err), 0);
	pthread_t th[3];
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, checker, NULL), 0);
	for (int i = 0; i < 200; i++) {
		char text[64];
		snprintf(text, sizeof(text), "k%d\nstay\n%s", i, i % 3 ? "" : "bad line\n");
		write_keys(text);
		int n;
		ck_assert_int_eq(ms_auth_reload(&race, &n, &err), i % 3 ? 0 : -EINVAL);
	}
	atomic_store(&race_stop, true);
	for (int i = 0; i < 3; i++) {
		void *r;
		pthread_join(th[i], &r);
		ck_assert_ptr_null(r);  /* no wrong answer during the swaps */
	}
	ms_auth_free(&race);
	unlink(path);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("auth");
	TCase *t = tcase_create("auth");
	tcase_add_test(t, file_rules);
	tcase_add_test(t, header_forms_and_reload);
	tcase_add_test(t, reload_races_checks);
	tcase_set_timeout(t, 60);
	suite_add_tcase(s, t);
	return ms_check_run(s);
}
