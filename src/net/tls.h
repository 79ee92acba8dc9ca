/*
 * TLS for the connections of a client (rediss://), through OpenSSL and
 * hiredis >= 1.0's libhiredis_ssl. Built without them (hiredis 0.14, or
 * -Dtls=disabled), sluice__tls_prepare refuses TLS with a clear reason and
 * nothing here touches OpenSSL.
 */
#ifndef SLUICE_TLS_H
#define SLUICE_TLS_H

#include <stddef.h>

#include <hiredis/async.h>

#include "net/url.h"

/* Build ep->tls_ctx from ep's TLS settings: CA file or directory (else the
 * system's), client certificate and key, verification. Files are read now,
 * so a bad one is reported by sluice_client_new. Returns 0, or
 * SLUICE_EINVAL / SLUICE_ENOMEM with sluice__endpoint_error() saying why. */
int sluice__tls_prepare(sluice__endpoint *ep);
void sluice__tls_free_ctx(void *ctx);
/* Start TLS on ac, a context just returned by redisAsyncConnect (the
 * handshake then runs as the connection is used). *ssl receives the
 * connection's TLS object, owned by hiredis from then on (valid while ac
 * is). Returns 0, or -1 with err filled. */
int sluice__tls_attach(const sluice__endpoint *ep, redisAsyncContext *ac, void **ssl, char *err,
                       size_t errlen);
/* Why TLS failed on ssl, when it did (certificate verification, or an
 * OpenSSL error such as an alert from the server): writes a short text to
 * err and returns 1; 0 when TLS has nothing to say. Clears OpenSSL's error
 * queue. */
int sluice__tls_explain(void *ssl, char *err, size_t errlen);
/* Why a connection whose connect deadline passed did not come up, when TLS
 * knows: the server never answered our hello (a plain-text port), or the
 * handshake started but did not finish. Writes it to err and returns 1; 0
 * when TLS had not started (the TCP connection itself timed out). */
int sluice__tls_timed_out(void *ssl, char *err, size_t errlen);

#endif
