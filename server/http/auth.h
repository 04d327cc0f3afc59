/*
 * auth.h: the API keys the /v1 routes accept, and their reload.
 *
 * A key set is immutable once built: the --api-key key plus the keys of
 * --api-key-file (one a line; blank lines and lines starting with # are
 * ignored; whitespace around a key is trimmed). A key is 1..MS_AUTH_KEY_MAX
 * visible ASCII bytes (no spaces: a Bearer token has none).
 *
 * Matching compares the presented token with every key over a fixed
 * MS_AUTH_KEY_MAX bytes, whatever the lengths, with no early exit: its time
 * depends on the number of keys only, so it tells an attacker nothing about
 * which key nearly matched, nor how long the keys are.
 *
 * struct ms_auth holds the current set behind an rwlock: request threads
 * take it for reading for the comparison only; a reload builds the new set
 * first, swaps the pointer under the write lock and frees the old set once
 * no reader can hold it. A file that fails to read or parse leaves the old
 * set in place.
 */
#ifndef MS_AUTH_H
#define MS_AUTH_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "ms-error.h"

#define MS_AUTH_KEY_MAX 512      /* bytes in one key */
#define MS_AUTH_KEYS_MAX 1024    /* keys in one set */
#define MS_AUTH_FILE_MAX (1u << 20)

struct ms_keyset;

/* The set of key (NULL: none) plus the keys of the file at path (NULL:
 * none). Errors: -ENOENT the file cannot be read (strerror named), -EINVAL
 * a bad key (its line number named, never its text), too many keys, a file
 * over 1 MiB, or no key at all; -ENOMEM. Messages name the file. */
int ms_keyset_load(const char *key, const char *path, struct ms_keyset **out, struct ms_err *err);
void ms_keyset_free(struct ms_keyset *ks);
int ms_keyset_count(const struct ms_keyset *ks);
/* Is tok (len bytes, not NUL-terminated) one of the keys? Constant time
 * over the set (see above). */
bool ms_keyset_match(const struct ms_keyset *ks, const char *tok, size_t len);

/* Why key is not a valid key (a static string), or NULL when it is. */
const char *ms_auth_key_invalid(const char *key, size_t len);

struct ms_auth {
	pthread_rwlock_t lock;
	struct ms_keyset *set;   /* under lock; NULL: authentication is off */
	char *key;               /* --api-key, or NULL */
	char *file;              /* --api-key-file, or NULL: nothing to reload */
	bool enabled;            /* a set was loaded at init (fixed from then on) */
	bool inited;
};

/* Build the first set (key and file as for ms_keyset_load; both NULL:
 * authentication off). The strings are copied. */
int ms_auth_init(struct ms_auth *a, const char *key, const char *file, struct ms_err *err);
/* Read the file again; on success the new set replaces the old one and
 * *n_keys is its size. On failure the old set stays (the error says why).
 * -ENOENT with nothing to reload (no --api-key-file). */
int ms_auth_reload(struct ms_auth *a, int *n_keys, struct ms_err *err);
/* Is authentication on? Fixed at init: a reload never empties the set. */
bool ms_auth_enabled(const struct ms_auth *a);
/* An Authorization header (NULL: absent) that carries a valid key:
 * "Bearer TOKEN", the scheme's case ignored (RFC 7235), spaces after it
 * skipped. */
bool ms_auth_check(struct ms_auth *a, const char *header);
/* A key as such (the x-api-key header's value). */
bool ms_auth_check_key(struct ms_auth *a, const char *key);
void ms_auth_free(struct ms_auth *a);

#endif
