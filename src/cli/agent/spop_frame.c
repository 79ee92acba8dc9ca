/* SPOP frames (see spop_frame.h); the wire format is HAProxy's doc/SPOE.txt,
 * section 3. */
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "spop_frame.h"

typedef struct reader {
  const uint8_t *p, *end;
} reader;

/* SPOP's varint: below 240 one byte; else the first byte's low 4 bits and
 * 7 bits per following byte, the last one below 128. At most 10 bytes. */
static int read_varint(reader *r, uint64_t *out) {
  if (r->p >= r->end) return -1;
  uint64_t v = *r->p++;
  if (v < 240) {
    *out = v;
    return 0;
  }
  unsigned shift = 4;
  uint8_t b;
  do {
    if (r->p >= r->end || shift > 60) return -1;
    b = *r->p++;
    v += (uint64_t)b << shift;
    shift += 7;
  } while (b >= 128);
  *out = v;
  return 0;
}

static int read_byte(reader *r, uint8_t *out) {
  if (r->p >= r->end) return -1;
  *out = *r->p++;
  return 0;
}

/* A length-prefixed string: *s points into the frame (not terminated). */
static int read_string(reader *r, const uint8_t **s, size_t *n) {
  uint64_t len;
  if (read_varint(r, &len) || len > (uint64_t)(r->end - r->p)) return -1;
  *s = r->p;
  *n = (size_t)len;
  r->p += len;
  return 0;
}

static void copy_text(char *dst, size_t size, const uint8_t *s, size_t n) {
  if (n >= size) n = size - 1;
  memcpy(dst, s, n);
  dst[n] = 0;
}

/* A typed value as text into out; *present 0 for NULL. */
static int read_typed(reader *r, char *out, size_t size, int *present, uint64_t *num) {
  uint8_t t;
  const uint8_t *s;
  size_t n;
  uint64_t v = 0;
  *present = 1;
  out[0] = 0;
  if (read_byte(r, &t)) return -1;
  switch (t & 0x0f) {
    case SPOP_T_NULL: *present = 0; return 0;
    case SPOP_T_BOOL:
      v = (t & 0x10) != 0;
      snprintf(out, size, "%s", v ? "true" : "false");
      break;
    case SPOP_T_INT32:
    case SPOP_T_INT64:
      if (read_varint(r, &v)) return -1;
      snprintf(out, size, "%" PRId64, (int64_t)v);
      break;
    case SPOP_T_UINT32:
    case SPOP_T_UINT64:
      if (read_varint(r, &v)) return -1;
      snprintf(out, size, "%" PRIu64, v);
      break;
    case SPOP_T_IPV4:
    case SPOP_T_IPV6: {
      size_t len = (t & 0x0f) == SPOP_T_IPV4 ? 4 : 16;
      if ((size_t)(r->end - r->p) < len) return -1;
      char text[INET6_ADDRSTRLEN];
      if (!inet_ntop(len == 4 ? AF_INET : AF_INET6, r->p, text, sizeof text)) return -1;
      snprintf(out, size, "%s", text);
      r->p += len;
      break;
    }
    case SPOP_T_STRING:
    case SPOP_T_BINARY:
      if (read_string(r, &s, &n)) return -1;
      copy_text(out, size, s, n);
      break;
    default: return -1; /* 10..15 are reserved */
  }
  if (num) *num = v;
  return 0;
}

int spop_frame_parse(const uint8_t *buf, size_t len, spop_frame *f) {
  reader r = {buf, buf + len};
  uint8_t b[4];
  memset(f, 0, sizeof *f);
  if (read_byte(&r, &f->type)) return -1;
  for (int i = 0; i < 4; i++)
    if (read_byte(&r, &b[i])) return -1;
  f->flags = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
  if (read_varint(&r, &f->stream_id) || read_varint(&r, &f->frame_id)) return -1;
  f->payload = r.p;
  f->payload_len = (size_t)(r.end - r.p);
  return 0;
}

/* Whether the comma-separated list (spaces ignored) has an item that is
 * word, or with whole 0 starts with it ("2." in "2.0, 1.5"). */
static int list_has(const char *list, const char *word, int whole) {
  size_t n = strlen(word);
  for (const char *p = list; *p;) {
    while (*p == ' ' || *p == ',') p++;
    if (strncmp(p, word, n) == 0 && (!whole || p[n] == 0 || p[n] == ',' || p[n] == ' ')) return 1;
    while (*p && *p != ',') p++;
  }
  return 0;
}

/* One KV-LIST item: its name (into the frame) and its value as text. */
typedef struct kv {
  const uint8_t *name;
  size_t name_len;
  int present; /* 0 for a NULL value */
  uint64_t num;
  char value[SPOP_TEXT_MAX];
} kv;

static int read_kv(reader *r, kv *item) {
  item->num = 0;
  if (read_string(r, &item->name, &item->name_len)) return -1;
  return read_typed(r, item->value, sizeof item->value, &item->present, &item->num);
}

static int named(const kv *item, const char *name) {
  return item->name_len == strlen(name) && memcmp(item->name, name, item->name_len) == 0;
}

int spop_hello_parse(const uint8_t *p, size_t len, spop_hello *h) {
  reader r = {p, p + len};
  kv item;
  memset(h, 0, sizeof *h);
  while (r.p < r.end) {
    if (read_kv(&r, &item)) return -1;
    if (named(&item, "supported-versions")) {
      h->has_versions = 1;
      h->version_2 = list_has(item.value, "2.", 0);
    } else if (named(&item, "max-frame-size")) {
      h->has_frame_size = 1;
      h->max_frame_size = item.num > UINT32_MAX ? UINT32_MAX : (uint32_t)item.num;
    } else if (named(&item, "capabilities")) {
      h->has_caps = 1;
      h->pipelining = list_has(item.value, "pipelining", 1);
    } else if (named(&item, "healthcheck")) {
      h->healthcheck = item.num != 0;
    }
  }
  return 0;
}

int spop_notify_parse(const uint8_t *p, size_t len, spop_notify *msg) {
  reader r = {p, p + len};
  kv item;
  memset(msg, 0, sizeof *msg);
  while (r.p < r.end) {
    const uint8_t *s;
    size_t n;
    uint8_t nargs;
    if (read_string(&r, &s, &n) || read_byte(&r, &nargs)) return -1; /* the message's name */
    if (!msg->message[0]) copy_text(msg->message, sizeof msg->message, s, n);
    for (unsigned i = 0; i < nargs; i++) {
      if (read_kv(&r, &item)) return -1;
      if (!item.present || msg->nargs == SPOP_ARGS_MAX) continue;
      spop_arg *a = &msg->arg[msg->nargs++];
      copy_text(a->name, sizeof a->name, item.name, item.name_len);
      memcpy(a->value, item.value, sizeof a->value);
    }
  }
  return 0;
}

const char *spop_notify_arg(const spop_notify *n, const char *name) {
  for (int i = 0; i < n->nargs; i++)
    if (strcasecmp(n->arg[i].name, name) == 0) return n->arg[i].value;
  return NULL;
}

void spop_out_bytes(spop_out *o, const void *p, size_t n) {
  if (o->overflow || n > o->size - o->len) {
    o->overflow = 1;
    return;
  }
  memcpy(o->buf + o->len, p, n);
  o->len += n;
}

void spop_out_varint(spop_out *o, uint64_t v) {
  uint8_t b[10];
  size_t n = 0;
  if (v < 240) {
    b[n++] = (uint8_t)v;
  } else {
    b[n++] = (uint8_t)(v | 240);
    v = (v - 240) >> 4;
    while (v >= 128) {
      b[n++] = (uint8_t)(v | 128);
      v = (v - 128) >> 7;
    }
    b[n++] = (uint8_t)v;
  }
  spop_out_bytes(o, b, n);
}

void spop_out_string(spop_out *o, const char *s) {
  size_t n = strlen(s);
  spop_out_varint(o, n);
  spop_out_bytes(o, s, n);
}

void spop_out_begin(spop_out *o, uint8_t type, uint64_t stream_id, uint64_t frame_id) {
  static const uint8_t fin[4] = {0, 0, 0, SPOP_FLAG_FIN};
  o->len = 0;
  o->overflow = 0;
  spop_out_bytes(o, "\0\0\0\0", 4); /* the length, patched by spop_out_end */
  spop_out_bytes(o, &type, 1);
  spop_out_bytes(o, fin, 4);
  spop_out_varint(o, stream_id);
  spop_out_varint(o, frame_id);
}

size_t spop_out_end(spop_out *o) {
  if (o->overflow) return 0;
  uint32_t n = htonl((uint32_t)(o->len - 4));
  memcpy(o->buf, &n, 4);
  return o->len;
}

void spop_out_set_var_int(spop_out *o, const char *name, int64_t v) {
  static const uint8_t head[3] = {1 /* set-var */, 3 /* args */, 2 /* scope txn */};
  uint8_t t = SPOP_T_INT64;
  spop_out_bytes(o, head, 3);
  spop_out_string(o, name);
  spop_out_bytes(o, &t, 1);
  spop_out_varint(o, (uint64_t)v);
}

void spop_out_set_var_str(spop_out *o, const char *name, const char *v) {
  static const uint8_t head[3] = {1 /* set-var */, 3 /* args */, 2 /* scope txn */};
  uint8_t t = SPOP_T_STRING;
  spop_out_bytes(o, head, 3);
  spop_out_string(o, name);
  spop_out_bytes(o, &t, 1);
  spop_out_string(o, v);
}

static void kv_string(spop_out *o, const char *name, const char *value) {
  uint8_t t = SPOP_T_STRING;
  spop_out_string(o, name);
  spop_out_bytes(o, &t, 1);
  spop_out_string(o, value);
}

static void kv_uint32(spop_out *o, const char *name, uint32_t v) {
  uint8_t t = SPOP_T_UINT32;
  spop_out_string(o, name);
  spop_out_bytes(o, &t, 1);
  spop_out_varint(o, v);
}

size_t spop_agent_hello(uint8_t *buf, size_t size, uint32_t max_frame_size, int pipelining) {
  spop_out o = {buf, size, 0, 0};
  spop_out_begin(&o, SPOP_AGENT_HELLO, 0, 0);
  kv_string(&o, "version", "2.0");
  kv_uint32(&o, "max-frame-size", max_frame_size);
  kv_string(&o, "capabilities", pipelining ? "pipelining" : "");
  return spop_out_end(&o);
}

size_t spop_agent_disconnect(uint8_t *buf, size_t size, uint32_t status, const char *message) {
  spop_out o = {buf, size, 0, 0};
  spop_out_begin(&o, SPOP_AGENT_DISCONNECT, 0, 0);
  kv_uint32(&o, "status-code", status);
  kv_string(&o, "message", message);
  return spop_out_end(&o);
}
