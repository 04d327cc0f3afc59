/*
 * auth.c: API key sets, their constant-time match and their reload (see
 * auth.h).
 */
#include "auth.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct key {
	uint32_t len;
	unsigned char b[MS_AUTH_KEY_MAX];   /* zero-padded */
};

struct ms_keyset {
	int n;
	struct key k[];
};

const char *ms_auth_key_invalid(const char *key, size_t len)
{
	if (!len)
		return "empty";
	if (len > MS_AUTH_KEY_MAX)
		return "longer than 512 bytes";
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)key[i] <= 0x20 || (unsigned char)key[i] >= 0x7f)
			return "not visible ASCII (a space, a control or a non-ASCII byte in it)";
	return NULL;
}

static void put_key(struct ms_keyset *ks, const char *key, size_t len)
{
	struct key *k = &ks->k[ks->n++];
	k->len = (uint32_t)len;
	memcpy(k->b, key, len);
}

/* The file's text (NUL-terminated, *len bytes); at most MS_AUTH_FILE_MAX. */
static int read_text(const char *path, char **out, size_t *len, struct ms_err *err)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return ms_err_set(err, -ENOENT, "cannot read \"%s\": %s", path, strerror(errno));
	char *buf = malloc(MS_AUTH_FILE_MAX + 2);
	if (!buf) {
		fclose(f);
		return ms_err_set(err, -ENOMEM, "\"%s\": out of memory", path);
	}
	size_t n = fread(buf, 1, MS_AUTH_FILE_MAX + 1, f);
	int bad = ferror(f);
	fclose(f);
	if (bad) {
		free(buf);
		return ms_err_set(err, -ENOENT, "cannot read \"%s\": I/O error", path);
	}
	if (n > MS_AUTH_FILE_MAX) {
		free(buf);
		return ms_err_set(err, -EINVAL, "\"%s\" is larger than 1 MiB", path);
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	return 0;
}

/* The keys of text into ks (room for MS_AUTH_KEYS_MAX - ks->n more). A
 * bad line is named by its number: the text may be a secret. */
static int parse_keys(struct ms_keyset *ks, char *text, size_t len, const char *path,
		      struct ms_err *err)
{
	int line = 0;
	for (size_t pos = 0; pos < len;) {
		char *p = text + pos, *nl = memchr(p, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - p) : len - pos;
		pos += n + 1;
		line++;
		while (n && (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '\r'))
			n--;
		while (n && (*p == ' ' || *p == '\t')) {
			p++;
			n--;
		}
		if (!n || *p == '#')
			continue;
		const char *why = ms_auth_key_invalid(p, n);
		if (why)
			return ms_err_set(err, -EINVAL, "\"%s\" line %d: the key is %s", path, line, why);
		if (ks->n == MS_AUTH_KEYS_MAX)
			return ms_err_set(err, -EINVAL, "\"%s\": more than %d keys", path,
					  MS_AUTH_KEYS_MAX);
		put_key(ks, p, n);
	}
	return 0;
}

int ms_keyset_load(const char *key, const char *path, struct ms_keyset **out, struct ms_err *err)
{
	*out = NULL;
	if (key && ms_auth_key_invalid(key, strlen(key)))
		return ms_err_set(err, -EINVAL, "the API key is %s",
				  ms_auth_key_invalid(key, strlen(key)));
	struct ms_keyset *ks = calloc(1, sizeof(*ks) + MS_AUTH_KEYS_MAX * sizeof(struct key));
	if (!ks)
		return ms_err_set(err, -ENOMEM, "API keys: out of memory");
	if (key)
		put_key(ks, key, strlen(key));
	if (path) {
		char *text = NULL;
		size_t len = 0;
		int rc = read_text(path, &text, &len, err);
		if (!rc)
			rc = parse_keys(ks, text, len, path, err);
		if (!rc && !ks->n)
			rc = ms_err_set(err, -EINVAL, "\"%s\" holds no key (only blank or # lines)", path);
		if (text) {
			explicit_bzero(text, len);
			free(text);
		}
		if (rc) {
			ms_keyset_free(ks);
			return rc;
		}
	}
	/* keep only the room the keys take */
	struct ms_keyset *fit = realloc(ks, sizeof(*ks) + (size_t)ks->n * sizeof(struct key));
	*out = fit ? fit : ks;
	return 0;
}

void ms_keyset_free(struct ms_keyset *ks)
{
	if (!ks)
		return;
	explicit_bzero(ks->k, (size_t)ks->n * sizeof(struct key));
	free(ks);
}

int ms_keyset_count(const struct ms_keyset *ks)
{
	return ks ? ks->n : 0;
}

bool ms_keyset_match(const struct ms_keyset *ks, const char *tok, size_t len)
{
	unsigned char buf[MS_AUTH_KEY_MAX] = {0};
	/* a token longer than any key matches none, but is compared all the same */
	uint32_t too_long = len > MS_AUTH_KEY_MAX;
	size_t n = too_long ? MS_AUTH_KEY_MAX : len;
	memcpy(buf, tok, n);
	uint32_t found = 0;
	for (int i = 0; i < ks->n; i++) {
		const struct key *k = &ks->k[i];
		uint32_t d = (k->len ^ (uint32_t)n) | too_long;
		for (size_t j = 0; j < MS_AUTH_KEY_MAX; j++)
			d |= (uint32_t)(buf[j] ^ k->b[j]);
		/* keep the compiler from turning the loop into an early exit */
		__asm__ volatile("" : "+r"(d));
		found |= (d - 1u) >> 31;  /* 1 exactly when d == 0 (d < 2^31) */
	}
	explicit_bzero(buf, sizeof(buf));
	return found != 0;
}

/* ---- the reloadable set ---- */

int ms_auth_init(struct ms_auth *a, const char *key, const char *file, struct ms_err *err)
{
	memset(a, 0, sizeof(*a));
	if (!key && !file)
		return 0;
	int rc = ms_keyset_load(key, file, &a->set, err);
	if (rc)
		return rc;
	a->key = key ? strdup(key) : NULL;
	a->file = file ? strdup(file) : NULL;
	if ((key && !a->key) || (file && !a->file)) {
		ms_keyset_free(a->set);
		free(a->key);
		free(a->file);
		memset(a, 0, sizeof(*a));
		return ms_err_set(err, -ENOMEM, "API keys: out of memory");
	}
	/* glibc's default prefers readers: under a steady stream of requests a
	 * reload could wait for ever */
	pthread_rwlockattr_t attr;
	pthread_rwlockattr_init(&attr);
	pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&a->lock, &attr);
	pthread_rwlockattr_destroy(&attr);
	a->enabled = a->inited = true;
	return 0;
}

int ms_auth_reload(struct ms_auth *a, int *n_keys, struct ms_err *err)
{
	if (!a->inited || !a->file)
		return ms_err_set(err, -ENOENT, "no --api-key-file to reload");
	struct ms_keyset *ks;
	int rc = ms_keyset_load(a->key, a->file, &ks, err);
	if (rc)
		return rc;
	pthread_rwlock_wrlock(&a->lock);
	struct ms_keyset *old = a->set;
	a->set = ks;
	pthread_rwlock_unlock(&a->lock);
	/* the write lock was held: no reader is left holding old */
	ms_keyset_free(old);
	*n_keys = ms_keyset_count(ks);
	return 0;
}

bool ms_auth_enabled(const struct ms_auth *a)
{
	return a->enabled;
}

bool ms_auth_check(struct ms_auth *a, const char *header)
{
	if (!a->enabled)
		return true;
	if (!header || strncasecmp(header, "Bearer", 6) || (header[6] != ' ' && header[6] != '\t'))
		return false;
	const char *tok = header + 6;
	while (*tok == ' ' || *tok == '\t')
		tok++;
	return ms_auth_check_key(a, tok);
}

bool ms_auth_check_key(struct ms_auth *a, const char *key)
{
	if (!a->enabled)
		return true;
	pthread_rwlock_rdlock(&a->lock);
	bool ok = ms_keyset_match(a->set, key, strlen(key));
	pthread_rwlock_unlock(&a->lock);
	return ok;
}

void ms_auth_free(struct ms_auth *a)
{
	if (!a || !a->inited)
		return;
	pthread_rwlock_destroy(&a->lock);
	ms_keyset_free(a->set);
	free(a->key);
	free(a->file);
	memset(a, 0, sizeof(*a));
}
