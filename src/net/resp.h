/*
 * A command in RESP, the form Redis reads: "*<argc>\r\n", then
 * "$<len>\r\n<bytes>\r\n" for each argument. hiredis's
 * redisFormatCommandArgv makes the same bytes, but grows a string argument
 * by argument through a printf-like formatter and allocates it; a cluster
 * client formats a command for nearly every step, so net/conn.c writes it
 * here in one pass into a buffer of the size computed first.
 */
#ifndef SLUICE_RESP_H
#define SLUICE_RESP_H

#include <stddef.h>

/* lens NULL: every argument is a C string. */
size_t sluice__resp_size(int argc, const char *const *argv, const size_t *lens);
/* Writes sluice__resp_size(argc, argv, lens) bytes and a '\0' after
 * them: hiredis reads a command it is given with strchr (to spot
 * SUBSCRIBE and its channels), so out needs room for size + 1. */
void sluice__resp_write(char *out, int argc, const char *const *argv, const size_t *lens);

#endif
