/* HTTP/1.x request heads (see http_parse.h), after RFC 9112. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_parse.h"

/* RFC 9110's tchar: what a method or a field name is made of. */
static int is_tchar(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* The next line of [*p, end): NUL-terminated in place (its CRLF cut),
 * *p moved past it; NULL when no CRLF ends it or a bare CR or LF is in it. */
static char *next_line(char **p, char *end) {
  char *line = *p;
  for (char *q = line; q + 1 < end; q++) {
    if (q[0] == '\r' && q[1] == '\n') {
      *q = 0;
      *p = q + 2;
      return line;
    }
    if (*q == '\r' || *q == '\n') return NULL;
  }
  return NULL;
}

static int request_line(char *line, http_request *r) {
  char *sp1 = strchr(line, ' ');
  if (!sp1 || sp1 == line) return -1;
  *sp1 = 0;
  for (char *m = line; *m; m++)
    if (!is_tchar((unsigned char)*m)) return -1;
  char *target = sp1 + 1, *sp2 = strchr(target, ' ');
  if (!sp2 || sp2 == target) return -1;
  *sp2 = 0;
  for (char *t = target; *t; t++)
    if ((unsigned char)*t <= ' ' || *t == 0x7f) return -1;
  const char *version = sp2 + 1;
  if (strncmp(version, "HTTP/1.", 7) != 0 || version[7] < '0' || version[7] > '9' || version[8])
    return -1;
  r->method = line;
  r->target = target;
  r->minor = version[7] - '0';
  return 0;
}

/* "name: value", value without its surrounding spaces and tabs. */
static int field_line(char *line, http_field *f) {
  char *colon = strchr(line, ':');
  if (!colon || colon == line) return -1;
  for (char *n = line; n < colon; n++)
    if (!is_tchar((unsigned char)*n)) return -1;
  *colon = 0;
  char *v = colon + 1;
  while (*v == ' ' || *v == '\t') v++;
  char *e = v + strlen(v);
  while (e > v && (e[-1] == ' ' || e[-1] == '\t')) e--;
  *e = 0;
  for (char *c = v; *c; c++)
    if (((unsigned char)*c < ' ' && *c != '\t') || *c == 0x7f) return -1;
  f->name = line;
  f->value = v;
  return 0;
}

/* Whether the comma-separated list holds token (without case). */
static int has_token(const char *list, const char *token) {
  size_t n = strlen(token);
  for (const char *p = list; *p;) {
    while (*p == ' ' || *p == '\t' || *p == ',') p++;
    const char *e = p + strcspn(p, ",");
    const char *t = e;
    while (t > p && (t[-1] == ' ' || t[-1] == '\t')) t--;
    if ((size_t)(t - p) == n && strncasecmp(p, token, n) == 0) return 1;
    p = e;
  }
  return 0;
}

/* What the fields say about the body and the connection. */
static int read_fields(http_request *r) {
  const char *length = http_field_get(r, "Content-Length");
  const char *connection = http_field_get(r, "Connection");
  if (length) {
    if (!*length || strspn(length, "0123456789") != strlen(length)) return -1;
    r->has_body = strspn(length, "0") != strlen(length);
  }
  if (http_field_get(r, "Transfer-Encoding")) r->has_body = 1;
  r->keep_alive = r->minor >= 1 ? !(connection && has_token(connection, "close"))
                                : connection && has_token(connection, "keep-alive");
  return 0;
}

int http_parse(char *buf, size_t len, http_request *r) {
  char *p = buf, *end = buf + len, *line;
  memset(r, 0, sizeof *r);
  if (!(line = next_line(&p, end)) || request_line(line, r) != 0) return -1;
  while ((line = next_line(&p, end)) != NULL && *line) {
    if (r->nfields == HTTP_FIELDS_MAX || field_line(line, &r->field[r->nfields]) != 0) return -1;
    r->nfields++;
  }
  if (!line || p != end) return -1; /* no empty line, or bytes after it */
  return read_fields(r);
}

const char *http_field_get(const http_request *r, const char *name) {
  for (int i = 0; i < r->nfields; i++)
    if (strcasecmp(r->field[i].name, name) == 0) return r->field[i].value;
  return NULL;
}
