/* json.c: see json.h. */
#include "json.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms-json.h"
#include "ms-utf8.h"

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

bool ms_json_push(cJSON *arr, cJSON *item)
{
	if (arr && cJSON_AddItemToArray(arr, item))
		return true;
	cJSON_Delete(item);
	return false;
}

bool ms_json_put(cJSON *obj, const char *key, cJSON *item)
{
	if (obj && cJSON_AddItemToObject(obj, key, item))
		return true;
	cJSON_Delete(item);
	return false;
}

bool ms_json_replace(cJSON *obj, const char *key, cJSON *item)
{
	if (obj && item && cJSON_ReplaceItemInObjectCaseSensitive(obj, key, item))
		return true;
	cJSON_Delete(item);
	return false;
}

char *ms_json_text(const cJSON *v)
{
	return ms_nul_json_escape(cJSON_PrintUnformatted(v));
}

char *ms_json_print(cJSON *j, unsigned long since)
{
	char *s = j ? ms_json_text(j) : NULL;
	cJSON_Delete(j);
	if (s && failures != since) {
		free(s);
		s = NULL;
	}
	return s;
}

int ms_json_parse_strict(const char *text, size_t len, cJSON **out, char *msg, size_t cap)
{
	char m[512];
	int rc = ms_json_parse_rfc(text, len, MS_JSON_CARRY_NUL | MS_JSON_BODY, out, m, sizeof(m));
	if (rc)
		snprintf(msg, cap, "%s%s", rc == -EINVAL ? "the body is " : "", m);
	return rc;
}
