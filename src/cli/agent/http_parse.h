/* The head of an HTTP/1.x request (its request line and header fields),
 * parsed in place: no I/O, so it can be fuzzed alone. Strict where being
 * lenient would let two readers disagree: CRLF line ends, no folded lines,
 * no space before a field's colon, one request line form. */
#ifndef SLUICE_CLI_HTTP_PARSE_H
#define SLUICE_CLI_HTTP_PARSE_H

#include <stddef.h>

#define HTTP_FIELDS_MAX 64

typedef struct http_field {
  const char *name, *value;
} http_field;

typedef struct http_request {
  const char *method, *target;
  int minor;      /* HTTP/1.minor */
  int keep_alive; /* the connection stays open after the answer */
  int has_body;   /* a Content-Length above 0, or a Transfer-Encoding */
  int nfields;
  http_field field[HTTP_FIELDS_MAX];
} http_request;

/* buf[0..len) is a request head ending with its empty line ("\r\n\r\n");
 * NULs are written into it, and r points into it. 0, or -1 for a head
 * that is malformed or has more than HTTP_FIELDS_MAX fields. */
int http_parse(char *buf, size_t len, http_request *r);

/* The value of field name (compared without case), or NULL. */
const char *http_field_get(const http_request *r, const char *name);

#endif
