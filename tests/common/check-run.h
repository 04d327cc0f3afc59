/*
 * check-run.h: the end of every Check program's main, written once: run
 * the suite, print what failed, and give meson the exit status (0 passed,
 * 1 failed; a program that cannot run here returns 77 before this).
 */
#ifndef MS_TESTS_CHECK_RUN_H
#define MS_TESTS_CHECK_RUN_H

#include <check.h>

static inline int ms_check_run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}

#endif
