/* json.c: see json.h. */
#include "json.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

static __thread unsigned long failures, fail_at;

static void *counting_malloc(size_t n)
{
	bool injected = fail_at && --fail_at == 0; /* tests */
	void *p = injected ? NULL : malloc(n);
	if (!p)
		failures++;
	return p;
}

static void install(void)
{
	/* free stays free: trees parsed before (the options' config file)
	 * are released the same way */
	cJSON_InitHooks(&(cJSON_Hooks){.malloc_fn = counting_malloc, .free_fn = free});
}

void ms_json_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, install);
}

unsigned long ms_json_failures(void)
{
	return failures;
}

void ms_json_fail_nth(unsigned long n)
{
	fail_at = n;
}

char *ms_json_print(cJSON *j, unsigned long since)
{
	char *s = j ? cJSON_PrintUnformatted(j) : NULL;
	cJSON_Delete(j);
	if (s && failures != since) {
		free(s);
		s = NULL;
	}
	return s;
}
