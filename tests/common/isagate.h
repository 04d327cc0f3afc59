/*
 * isagate.h: one meson test per ISA. A case that needs a CPU feature was
 * once skipped inside a passing test where the CPU lacked it, so a pass did
 * not say what had run. Now such cases sit in a TCase of their ISA, run
 * only as `prog --isa NAME`: where this CPU lacks what NAME needs, the
 * program says so on one line and exits 77 (meson's skip), and a test that
 * passes has run all its cases. With no argument the program runs its
 * portable cases, those that need nothing special.
 */
#ifndef MS_TESTS_ISAGATE_H
#define MS_TESTS_ISAGATE_H

#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "check-run.h"
#include "cpu.h"

struct isa_gate {
	const char *name;           /* NAME of --isa NAME, and of its TCase */
	unsigned flags;             /* MS_CPU_* its cases need, all of them */
	const char *(*lacks)(void); /* or NULL: what else is missing here (NULL: nothing) */
	void (*add)(TCase *tc, int arg); /* adds its cases */
	int arg;                    /* passed to add: a row of the program's table of kernels */
};

#define ISA_GATES(g) (g), (int)(sizeof(g) / sizeof((g)[0]))

/* What g needs and this machine lacks, or NULL. */
static inline const char *isa_lacks(const struct isa_gate *g, char *buf, size_t len)
{
	unsigned missing = g->flags & ~ms_cpu_detect();
	if (missing)
		return ms_cpu_flags_str(missing, buf, len);
	return g->lacks ? g->lacks() : NULL;
}

/* The gate argv names, or NULL after saying why on stderr (exit 2). */
static inline const struct isa_gate *isa_find(const char *prog, int argc, char **argv,
					      const struct isa_gate *gates, int n)
{
	bool isa = argc == 3 && !strcmp(argv[1], "--isa");
	for (int i = 0; isa && i < n; i++)
		if (!strcmp(argv[2], gates[i].name))
			return &gates[i];
	if (isa)
		fprintf(stderr, "%s: unknown --isa \"%s\" (known:", prog, argv[2]);
	else
		fprintf(stderr, "usage: %s [--isa NAME] (NAME:", prog);
	for (int i = 0; i < n; i++)
		fprintf(stderr, "%s %s", i ? "," : "", gates[i].name);
	fprintf(stderr, ")\n");
	return NULL;
}

/* Runs suite `name`: with no argument the cases portable(s) adds, with
 * --isa NAME that gate's cases in a TCase of `timeout` seconds. Returns the
 * exit status: 0 passed, 1 failed, 2 bad arguments, 77 not run here. */
static inline int isa_run(int argc, char **argv, const char *name, void (*portable)(Suite *s),
			  const struct isa_gate *gates, int n, double timeout)
{
	const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	const struct isa_gate *g = NULL;
	if (argc > 1 && !(g = isa_find(prog, argc, argv, gates, n)))
		return 2;
	char buf[256];
	const char *why = g ? isa_lacks(g, buf, sizeof(buf)) : NULL;
	if (why) {
		printf("%s: %s not run: this CPU lacks %s\n", prog, g->name, why);
		return 77;
	}
	Suite *s = suite_create(name);
	if (g) {
		TCase *tc = tcase_create(g->name);
		tcase_set_timeout(tc, timeout);
		g->add(tc, g->arg);
		suite_add_tcase(s, tc);
	} else {
		portable(s);
	}
	return ms_check_run(s);
}

#endif
