/* TLS through OpenSSL and libhiredis_ssl; see tls.h. */
#include <stdio.h>
#include <string.h>

#include <sluice/common.h>

#include "net/tls.h"

#ifdef SLUICE_HAVE_TLS

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>

#include <hiredis/hiredis_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

/* The newest OpenSSL error's reason, or "unknown error". */
static const char *ssl_reason(void) {
  unsigned long e = ERR_peek_last_error();
  const char *r = e ? ERR_reason_error_string(e) : NULL;
  return r ? r : "unknown error";
}

static int readable_dir(const char *path) {
  DIR *d = opendir(path);
  if (d) closedir(d);
  return d != NULL;
}

static int readable_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (f) fclose(f);
  return f != NULL;
}

/* Why the file (or directory) at path cannot be used: the system's words
 * when it cannot be opened (OpenSSL would only say "system lib"), else
 * OpenSSL's about its content. */
static int load_failed(SSL_CTX *ctx, const char *what, const char *path) {
  int is_dir = strstr(what, "directory") != NULL;
  if (*path && !(is_dir ? readable_dir(path) : readable_file(path)))
    sluice__endpoint_set_error("TLS: cannot read %s %.150s: %s", what, path, strerror(errno));
  else sluice__endpoint_set_error("TLS: cannot load %s %.150s: %s", what, path, ssl_reason());
  ERR_clear_error();
  SSL_CTX_free(ctx);
  return SLUICE_EINVAL;
}

/* Marks (as the connection's app data) that the server asked for a client
 * certificate and none was configured: with TLS 1.3 the server refuses it
 * only after the handshake, often with a reset that loses its alert, so
 * this is how we can still say why. */
static char asked_for_cert;

static int client_cert_cb(SSL *ssl, X509 **x509, EVP_PKEY **pkey) {
  SSL_set_app_data(ssl, &asked_for_cert);
  return 0; /* continue without a certificate */
}

int sluice__tls_prepare(sluice__endpoint *ep) {
  ERR_clear_error();
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  if (!ctx) {
    sluice__endpoint_set_error("TLS: cannot create an OpenSSL context: %s", ssl_reason());
    ERR_clear_error();
    return SLUICE_ENOMEM;
  }
  /* Redis speaks TLS 1.2 and 1.3; nothing older is safe. */
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, ep->tls_skip_verify ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
  if (ep->tls_ca_dir && !readable_dir(ep->tls_ca_dir)) {
    /* OpenSSL looks in a directory only when verifying: say it now. */
    return load_failed(ctx, "CA directory", ep->tls_ca_dir);
  } else if (ep->tls_ca_file || ep->tls_ca_dir) {
    if (SSL_CTX_load_verify_locations(ctx, ep->tls_ca_file, ep->tls_ca_dir) != 1)
      return load_failed(ctx, ep->tls_ca_file ? "CA file" : "CA directory",
                         ep->tls_ca_file ? ep->tls_ca_file : ep->tls_ca_dir);
  } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
    return load_failed(ctx, "the system's CA certificates", "");
  }
  if (!ep->tls_cert_file) {
    SSL_CTX_set_client_cert_cb(ctx, client_cert_cb);
  } else {
    if (SSL_CTX_use_certificate_chain_file(ctx, ep->tls_cert_file) != 1)
      return load_failed(ctx, "client certificate", ep->tls_cert_file);
    if (SSL_CTX_use_PrivateKey_file(ctx, ep->tls_key_file, SSL_FILETYPE_PEM) != 1)
      return load_failed(ctx, "client key", ep->tls_key_file);
    if (SSL_CTX_check_private_key(ctx) != 1)
      return load_failed(ctx, "client key (it does not match the certificate)", ep->tls_key_file);
  }
  ep->tls_ctx = ctx;
  return SLUICE_OK;
}

void sluice__tls_free_ctx(void *ctx) { SSL_CTX_free(ctx); }

static int is_ip_literal(const char *name) {
  unsigned char buf[16];
  return inet_pton(AF_INET, name, buf) == 1 || inet_pton(AF_INET6, name, buf) == 1;
}

int sluice__tls_attach(const sluice__endpoint *ep, redisAsyncContext *ac, void **ssl_out, char *err,
                       size_t errlen) {
  /* The name the certificate must carry: the SNI name when one is given
   * (reaching a named server by address), else the host connected to. */
  const char *name = ep->tls_server_name ? ep->tls_server_name : ep->host;
  int ip = is_ip_literal(name);
  ERR_clear_error();
  SSL *ssl = SSL_new(ep->tls_ctx);
  if (!ssl) {
    snprintf(err, errlen, "TLS: cannot create a connection: %s", ssl_reason());
    ERR_clear_error();
    return -1;
  }
  /* SNI carries host names only (RFC 6066), never addresses. */
  if ((!ip && SSL_set_tlsext_host_name(ssl, name) != 1) ||
      (!ep->tls_skip_verify && (ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name)
                                   : SSL_set1_host(ssl, name)) != 1)) {
    snprintf(err, errlen, "TLS: cannot use server name %.60s: %s", name, ssl_reason());
    ERR_clear_error();
    SSL_free(ssl);
    return -1;
  }
  if (redisInitiateSSL(&ac->c, ssl) != REDIS_OK) {
    /* On loopback the whole handshake may already have run (and failed)
     * here. hiredis took ownership only on success. */
    if (!sluice__tls_explain(ssl, err, errlen))
      snprintf(err, errlen, "TLS: %s", ac->c.errstr[0] ? ac->c.errstr : ssl_reason());
    ERR_clear_error();
    SSL_free(ssl);
    return -1;
  }
  *ssl_out = ssl;
  return 0;
}

int sluice__tls_explain(void *p, char *err, size_t errlen) {
  SSL *ssl = p;
  long vr = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
  unsigned long e = ERR_peek_last_error();
  int said = 1;
  if (vr != X509_V_OK) {
    snprintf(err, errlen, "TLS: server certificate not accepted: %s",
             X509_verify_cert_error_string(vr));
  } else if (ssl && SSL_get_app_data(ssl) == &asked_for_cert) {
    snprintf(err, errlen,
             "TLS: the server requires a client certificate and none is "
             "configured (cert= and key=, or tls_cert_file and tls_key_file)");
  } else if (e) {
    const char *r = ERR_reason_error_string(e);
    snprintf(err, errlen, "TLS: %s", r ? r : "handshake failed");
  } else if (ssl && SSL_is_init_finished(ssl)) {
    /* A server that refuses our client certificate does so after the
     * handshake, often with a reset that loses its alert. */
    snprintf(err, errlen,
             "TLS: the server closed the connection after the handshake "
             "(did it refuse the client certificate?)");
  } else {
    said = 0;
  }
  ERR_clear_error();
  return said;
}

int sluice__tls_timed_out(void *p, char *err, size_t errlen) {
  SSL *ssl = p;
  if (!ssl || SSL_is_init_finished(ssl) || BIO_number_written(SSL_get_wbio(ssl)) == 0)
    return 0; /* no TLS yet: the TCP connection itself timed out */
  if (BIO_number_read(SSL_get_rbio(ssl)) == 0)
    /* Our hello sent, not a byte back: a plain-text Redis keeps waiting
     * for a line end that a TLS hello does not have. */
    snprintf(err, errlen,
             "TLS handshake failed: the server did not answer TLS (is this a "
             "plain-text port? use redis://)");
  else snprintf(err, errlen, "TLS handshake failed: not complete in time");
  return 1;
}

#else /* no TLS in this build */

int sluice__tls_prepare(sluice__endpoint *ep) {
  sluice__endpoint_set_error(
      "rediss:// (TLS) is not supported by this build of sluice: TLS needs hiredis >= 1.0 "
      "with libhiredis_ssl (build with -Dtls=enabled)");
  return SLUICE_EINVAL;
}

void sluice__tls_free_ctx(void *ctx) {}

int sluice__tls_attach(const sluice__endpoint *ep, redisAsyncContext *ac, void **ssl, char *err,
                       size_t errlen) {
  snprintf(err, errlen, "TLS is not supported by this build");
  return -1;
}

int sluice__tls_explain(void *ssl, char *err, size_t errlen) { return 0; }

int sluice__tls_timed_out(void *ssl, char *err, size_t errlen) { return 0; }

#endif
