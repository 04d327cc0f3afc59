/*
 * tls.c: the served certificate chain and key, and their reload (see
 * tls.h).
 */
#include "tls.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ms-file.h"

#define MS_TLS_MAX_CHAIN 16        /* certificates in one chain */
#define MS_TLS_MAX_FILE (1u << 20) /* bytes of a PEM file, as at start */

/* One loaded pair; pairs are never freed before ms_tls_free (tls.h). */
struct pair {
	gnutls_pcert_st chain[MS_TLS_MAX_CHAIN];
	unsigned n_chain;
	gnutls_privkey_t key;
	struct pair *older;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct pair *current; /* under mu; the newest, heading the older ones */
static int generation;

static void pair_free(struct pair *p)
{
	for (unsigned i = 0; i < p->n_chain; i++)
		gnutls_pcert_deinit(&p->chain[i]);
	if (p->key)
		gnutls_privkey_deinit(p->key);
	free(p);
}

/* The pair as GnuTLS will serve it: the key decrypts and is the
 * certificate's (what gnutls_certificate_set_x509_key_mem2 checks). */
static int pair_check(const gnutls_datum_t *cd, const gnutls_datum_t *kd, const char *password,
		      struct ms_err *err)
{
	gnutls_certificate_credentials_t cred;
	if (gnutls_certificate_allocate_credentials(&cred) < 0)
		return ms_err_set(err, -ENOMEM, "out of memory");
	int rc = gnutls_certificate_set_x509_key_mem2(cred, cd, kd, GNUTLS_X509_FMT_PEM, password, 0);
	gnutls_certificate_free_credentials(cred);
	if (rc >= 0)
		return 0;
	return ms_err_set(err, -EINVAL, "%s%s", gnutls_strerror(rc),
			  rc != GNUTLS_E_DECRYPTION_FAILED ? ""
			  : password ? " (a wrong --tls-key-password?)"
			  : " (an encrypted key needs --tls-key-password)");
}

static int pair_new(const char *cert_pem, const char *key_pem, const char *password,
		    struct pair **out, struct ms_err *err)
{
	gnutls_datum_t cd = {(unsigned char *)cert_pem, (unsigned)strlen(cert_pem)};
	gnutls_datum_t kd = {(unsigned char *)key_pem, (unsigned)strlen(key_pem)};
	int rc = pair_check(&cd, &kd, password, err);
	if (rc)
		return rc;
	struct pair *p = calloc(1, sizeof(*p));
	if (!p)
		return ms_err_set(err, -ENOMEM, "out of memory");
	p->n_chain = MS_TLS_MAX_CHAIN;
	int g = gnutls_pcert_list_import_x509_raw(p->chain, &p->n_chain, &cd, GNUTLS_X509_FMT_PEM, 0);
	if (g < 0) {
		p->n_chain = 0;
		pair_free(p);
		return ms_err_set(err, -EINVAL, "the certificate chain: %s%s", gnutls_strerror(g),
				  g == GNUTLS_E_SHORT_MEMORY_BUFFER ? " (more than 16 certificates)" : "");
	}
	if ((g = gnutls_privkey_init(&p->key)) >= 0)
		g = gnutls_privkey_import_x509_raw(p->key, &kd, GNUTLS_X509_FMT_PEM, password, 0);
	if (g < 0) {
		pair_free(p);
		return ms_err_set(err, g == GNUTLS_E_MEMORY_ERROR ? -ENOMEM : -EINVAL, "the key: %s",
				  gnutls_strerror(g));
	}
	*out = p;
	return 0;
}

static void pair_publish(struct pair *p)
{
	pthread_mutex_lock(&mu);
	p->older = current;
	current = p;
	generation++;
	pthread_mutex_unlock(&mu);
}

int ms_tls_init(const char *cert_pem, const char *key_pem, const char *password,
		const char *cert_path, const char *key_path, struct ms_err *err)
{
	struct pair *p;
	int rc = pair_new(cert_pem, key_pem, password, &p, err);
	if (rc)
		return ms_err_prefix(err, "--tls-cert %s, --tls-key %s: ", cert_path, key_path);
	pair_publish(p);
	return 0;
}

/* A PEM file read whole, its size bounded as at start. */
static int read_pem(const char *opt, const char *path, char **out, struct ms_err *err)
{
	size_t len;
	int rc = ms_read_file(path, out, &len, err);
	if (rc)
		return ms_err_prefix(err, "%s: ", opt);
	if (len > MS_TLS_MAX_FILE || strlen(*out) != len) {
		free(*out);
		*out = NULL;
		return ms_err_set(err, -EINVAL, "%s: \"%s\" is not a PEM file of at most 1 MiB", opt,
				  path);
	}
	return 0;
}

int ms_tls_reload(const char *cert_path, const char *key_path, const char *password,
		  struct ms_err *err)
{
	char *cert = NULL, *key = NULL;
	struct pair *p = NULL;
	int rc = read_pem("--tls-cert", cert_path, &cert, err);
	if (!rc)
		rc = read_pem("--tls-key", key_path, &key, err);
	if (!rc && (rc = pair_new(cert, key, password, &p, err)))
		ms_err_prefix(err, "--tls-cert %s, --tls-key %s: ", cert_path, key_path);
	if (key)
		explicit_bzero(key, strlen(key));
	free(cert);
	free(key);
	if (!rc)
		pair_publish(p);
	return rc;
}

int ms_tls_generation(void)
{
	pthread_mutex_lock(&mu);
	int g = generation;
	pthread_mutex_unlock(&mu);
	return g;
}

long long ms_tls_not_after(void)
{
	pthread_mutex_lock(&mu);
	struct pair *p = current;
	pthread_mutex_unlock(&mu);
	gnutls_x509_crt_t crt;
	if (!p || !p->n_chain || gnutls_x509_crt_init(&crt) < 0)
		return 0;
	long long t = 0;
	if (gnutls_x509_crt_import(crt, &p->chain[0].cert, GNUTLS_X509_FMT_DER) >= 0)
		t = (long long)gnutls_x509_crt_get_expiration_time(crt);
	gnutls_x509_crt_deinit(crt);
	return t > 0 ? t : 0;
}

int ms_tls_retrieve(gnutls_session_t session, const gnutls_datum_t *req_ca_rdn, int nreqs,
		    const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length,
		    gnutls_pcert_st **chain, unsigned int *n_chain, gnutls_privkey_t *key)
{
	(void)session, (void)req_ca_rdn, (void)nreqs, (void)pk_algos, (void)pk_algos_length;
	pthread_mutex_lock(&mu);
	struct pair *p = current;
	pthread_mutex_unlock(&mu);
	if (!p)
		return -1; /* the handshake fails: nothing to serve */
	*chain = p->chain;
	*n_chain = p->n_chain;
	*key = p->key;
	return 0;
}

void ms_tls_free(void)
{
	pthread_mutex_lock(&mu);
	struct pair *p = current;
	current = NULL;
	generation = 0;
	pthread_mutex_unlock(&mu);
	while (p) {
		struct pair *o = p->older;
		pair_free(p);
		p = o;
	}
}
