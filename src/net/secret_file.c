/* A password read from a file (sluice_client_options.password_file), so
 * that it never has to be in a URL, argv or the environment. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/common.h>

#include "net/url.h"

#define SECRET_FILE_MAX 4096

/* One line, its line break ("\n" or "\r\n") not part of it: what
 * `echo PW > file` and editors write. */
static int one_line(const char *path, char *buf, size_t n) {
  if (n > 0 && buf[n - 1] == '\n') n--;
  if (n > 0 && buf[n - 1] == '\r') n--;
  if (n == 0) {
    sluice__endpoint_set_error("password_file %.200s is empty", path);
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)buf[i];
    if (ch < 0x20 || ch == 0x7f) {
      /* Never say which byte: it is part of the secret. */
      sluice__endpoint_set_error(
          "password_file %.200s holds more than one line or a control "
          "character: it must hold the password alone",
          path);
      return -1;
    }
  }
  buf[n] = '\0';
  return (int)n;
}

int sluice__read_secret_file(const char *path, char **out) {
  char buf[SECRET_FILE_MAX + 2];
  FILE *f = fopen(path, "re");
  if (!f) {
    sluice__endpoint_set_error("password_file %.200s: %s", path, strerror(errno));
    return SLUICE_EINVAL;
  }
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  int err = ferror(f) ? errno : 0;
  fclose(f);
  int len = -1;
  if (err) sluice__endpoint_set_error("password_file %.200s: %s", path, strerror(err));
  else if (n > SECRET_FILE_MAX)
    sluice__endpoint_set_error("password_file %.200s is longer than %d bytes", path,
                               SECRET_FILE_MAX);
  else len = one_line(path, buf, n);
  if (len >= 0) *out = strdup(buf);
  explicit_bzero(buf, sizeof buf);
  if (len < 0) return SLUICE_EINVAL;
  return *out ? SLUICE_OK : SLUICE_ENOMEM;
}
