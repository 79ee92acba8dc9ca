/* Status messages, generated from the one SLUICE_STATUS_MAP table. */
#include <sluice/common.h>

const char *sluice_strerror(int status) {
  switch (status) {
#define SLUICE_STATUS_MSG_(name, value, msg) \
  case value: return msg;
    SLUICE_STATUS_MAP(SLUICE_STATUS_MSG_)
#undef SLUICE_STATUS_MSG_
  }
  return "unknown status";
}

const char *sluice_err_name(int status) {
  switch (status) {
#define SLUICE_STATUS_NAME_(name, value, msg) \
  case value: return "SLUICE_" #name;
    SLUICE_STATUS_MAP(SLUICE_STATUS_NAME_)
#undef SLUICE_STATUS_NAME_
  }
  return "SLUICE_UNKNOWN";
}

const char *sluice_version(void) { return SLUICE_VERSION_STRING; }
