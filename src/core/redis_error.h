/* The text of an error reply for sluice_client_last_error: Redis's own
 * words, and for a command the ACL refused, which one and which sluice
 * step needed it. */
#ifndef SLUICE_REDIS_ERROR_H
#define SLUICE_REDIS_ERROR_H

#include <stddef.h>

#include "lua_scripts.h"

/* 1 when err is the ACL refusing a command or key (NOPERM). */
int sluice__refused_by_acl(const char *err);

/* 1 when err is a refusal for now, by a node that is not ready to write
 * (loading its data, running a slow script, cut off from its master or
 * replicas, a cluster without quorum, out of memory or disk): the same
 * step may succeed later. */
int sluice__transient_error(const char *err);

/* 1 when err, a cluster node's refusal of a command inside a script, says
 * the node does not serve that key now (its slot moved or migrates, the
 * cluster is down): another node may, or the same one later. */
int sluice__not_served_here(const char *err);

/* "Redis: <err>", or for a refusal by ACL "Redis: NOPERM: sluice step
 * sem_acquire needs command 'zadd', which this ACL user may not run
 * (<err>)". script: the step's script (the command it calls is found at
 * the line Redis names), or NULL for a plain command. */
void sluice__error_text(char *out, size_t size, const sluice__script *script, const char *command,
                        const char *err);

#endif
