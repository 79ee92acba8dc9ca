/* The fenced resource of the partition harness, built as docs/failures.md
 * tells users to build one: a file every client process shares that
 * accepts a write carrying fencing token t only if t >= every token it
 * accepted before. The file holds that highest token; writers serialise on
 * flock(2), and each outcome is logged (event_log) while the lock is held,
 * so the logs order accepted writes as the file did. */
#ifndef PARTITION_FENCED_FILE_H
#define PARTITION_FENCED_FILE_H

#include <stdint.h>

/* Write token for permit id: 1 accepted, 0 refused (a higher token was
 * accepted before), -1 the file failed. Logs "fence ID TOKEN accepted" or
 * "fence ID TOKEN refused MAX". */
int fenced_write(const char *path, const char *id, uint64_t token);

#endif
