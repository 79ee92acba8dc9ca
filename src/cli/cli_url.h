/* What the `sluice` tool shows and passes on of a Redis URL. Its secrets
 * (the password of the user part, the values of sentinel_password=) are
 * found as the library's parser splits the URL, so what it would use as a
 * password is exactly what these hide. Plain C: no other part of the tool
 * (the URL fuzzer checks them against the parser). */
#ifndef SLUICE_CLI_URL_H
#define SLUICE_CLI_URL_H

/* A copy of url with each secret replaced by "***", for messages; NULL
 * when out of memory. Free it. */
char *cli_url_masked(const char *url);
/* Overwrite url's secrets in place with '*' (argv and environment
 * strings, which /proc shows other users: the bytes must go, not a copy). */
void cli_url_scrub(char *url);
/* A copy of url without credentials (user part, sentinel_username=,
 * sentinel_password=), for the commands the tool runs; NULL when out of
 * memory. Free it. */
char *cli_url_without_credentials(const char *url);

#endif
