/* SPOP (HAProxy's Stream Processing Offload Protocol, version 2.0) frames:
 * decoding and encoding only, no I/O, so the decoder can be fuzzed alone.
 * Every read is bounded by the frame it reads from: a truncated field,
 * a varint longer than 10 bytes, or a length past the end is refused. */
#ifndef SLUICE_CLI_SPOP_FRAME_H
#define SLUICE_CLI_SPOP_FRAME_H

#include <stddef.h>
#include <stdint.h>

enum {
  SPOP_UNSET = 0,
  SPOP_HAPROXY_HELLO = 1,
  SPOP_HAPROXY_DISCONNECT = 2,
  SPOP_NOTIFY = 3,
  SPOP_AGENT_HELLO = 101,
  SPOP_AGENT_DISCONNECT = 102,
  SPOP_ACK = 103
};
enum { SPOP_FLAG_FIN = 1, SPOP_FLAG_ABORT = 2 };
enum {
  SPOP_T_NULL = 0,
  SPOP_T_BOOL = 1,
  SPOP_T_INT32 = 2,
  SPOP_T_UINT32 = 3,
  SPOP_T_INT64 = 4,
  SPOP_T_UINT64 = 5,
  SPOP_T_IPV4 = 6,
  SPOP_T_IPV6 = 7,
  SPOP_T_STRING = 8,
  SPOP_T_BINARY = 9
};
/* Status codes of a DISCONNECT frame. */
enum {
  SPOP_ERR_NONE = 0,
  SPOP_ERR_IO = 1,
  SPOP_ERR_TOO_BIG = 3,
  SPOP_ERR_INVALID = 4,
  SPOP_ERR_NO_VSN = 5,
  SPOP_ERR_NO_FRAME_SIZE = 6,
  SPOP_ERR_NO_CAP = 7,
  SPOP_ERR_BAD_VSN = 8,
  SPOP_ERR_BAD_FRAME_SIZE = 9,
  SPOP_ERR_FRAG_NOT_SUPPORTED = 10,
  SPOP_ERR_RES = 13
};

/* The agent's frames are at most this big, and it accepts no bigger ones
 * (HAProxy's own default is its buffer size less 4: 16380). */
#define SPOP_MAX_FRAME 16380u
#define SPOP_MIN_FRAME 256u
/* Arguments kept of one NOTIFY (others are read and skipped). */
#define SPOP_ARGS_MAX 16
#define SPOP_TEXT_MAX 512 /* a value kept as text; longer ones are cut */

typedef struct spop_frame {
  uint8_t type;
  uint32_t flags;
  uint64_t stream_id, frame_id;
  const uint8_t *payload;
  size_t payload_len;
} spop_frame;

/* The frame in buf[0..len) (without its 4-byte length): 0 or -1. */
int spop_frame_parse(const uint8_t *buf, size_t len, spop_frame *f);

typedef struct spop_hello {
  int has_versions, has_frame_size, has_caps;
  int version_2; /* "supported-versions" names major version 2 */
  int healthcheck;
  int pipelining; /* "capabilities" names it */
  uint32_t max_frame_size;
} spop_hello;

/* A HAPROXY-HELLO's KV-LIST: 0, or -1 for a malformed list. */
int spop_hello_parse(const uint8_t *p, size_t len, spop_hello *h);

/* One NOTIFY argument, its value as text (ints in decimal, addresses as
 * inet_ntop writes them, booleans "true"/"false"; NULL values skipped). */
typedef struct spop_arg {
  char name[64];
  char value[SPOP_TEXT_MAX];
} spop_arg;

typedef struct spop_notify {
  char message[64]; /* the first message's name */
  int nargs;        /* of all its messages, up to SPOP_ARGS_MAX */
  spop_arg arg[SPOP_ARGS_MAX];
} spop_notify;

/* A NOTIFY's LIST-OF-MESSAGES: 0, or -1 for a malformed list. */
int spop_notify_parse(const uint8_t *p, size_t len, spop_notify *n);

/* The text of argument name (compared without case), or NULL. */
const char *spop_notify_arg(const spop_notify *n, const char *name);

/* Encoding into a caller's buffer: each returns the bytes written, or 0 when
 * buf is too small. A whole frame starts with its 4-byte length. */
typedef struct spop_out {
  uint8_t *buf;
  size_t size, len;
  int overflow;
} spop_out;

void spop_out_varint(spop_out *o, uint64_t v);
void spop_out_bytes(spop_out *o, const void *p, size_t n);
void spop_out_string(spop_out *o, const char *s);
/* Start a frame (length to be patched by spop_out_end). */
void spop_out_begin(spop_out *o, uint8_t type, uint64_t stream_id, uint64_t frame_id);
/* Patch the length; 0 when it overflowed. */
size_t spop_out_end(spop_out *o);
/* A set-var action, scope txn, of an int64 value or a string. */
void spop_out_set_var_int(spop_out *o, const char *name, int64_t v);
void spop_out_set_var_str(spop_out *o, const char *name, const char *v);

/* Whole frames. */
size_t spop_agent_hello(uint8_t *buf, size_t size, uint32_t max_frame_size, int pipelining);
size_t spop_agent_disconnect(uint8_t *buf, size_t size, uint32_t status, const char *message);

#endif
