/*
 * tls.h: the certificate (chain) and private key that each TLS handshake
 * gets, replaced whole by a reload (SIGHUP): cert-manager, certbot and
 * other ACME clients renew the files in place, and a restart would drop
 * the streams in flight.
 *
 * GnuTLS asks for them through a callback that carries no context of its
 * own (libmicrohttpd's MHD_OPTION_HTTPS_CERT_CALLBACK), so the current
 * pair is the process's: one HTTPS server a process. A pair that a reload
 * replaces is kept until ms_tls_free: GnuTLS does not copy what the
 * callback gives, and a handshake begun on the old pair may still use it
 * (a few KB a reload).
 */
#ifndef MS_SERVER_TLS_H
#define MS_SERVER_TLS_H

#include <gnutls/abstract.h>

#include "ms-error.h"

/* The first pair, from the PEM text of the files (password: the key's,
 * or NULL). Checked as GnuTLS will use it: the key decrypts and belongs
 * to the certificate. The message names cert_path and key_path. */
int ms_tls_init(const char *cert_pem, const char *key_pem, const char *password,
		const char *cert_path, const char *key_path, struct ms_err *err);

/* Read both files again and serve the new pair from the next handshake;
 * on any error the old pair stays and err says why. */
int ms_tls_reload(const char *cert_path, const char *key_path, const char *password,
		  struct ms_err *err);

/* How many pairs have been loaded (1 after init, +1 a good reload). */
int ms_tls_generation(void);

/* When the served (first) certificate of the chain expires, in seconds
 * since 1970; 0 without one. */
long long ms_tls_not_after(void);

/* GnuTLS's callback: the current chain and key (for
 * MHD_OPTION_HTTPS_CERT_CALLBACK). */
gnutls_certificate_retrieve_function2 ms_tls_retrieve;

/* Every pair loaded, freed: after the HTTP server has stopped. */
void ms_tls_free(void);

#endif
