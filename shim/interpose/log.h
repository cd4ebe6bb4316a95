/* Logging for the shim: stderr, one line per message, prefixed with
 * "gpuckpt[pid] component: ". Level from GPUCKPT_LOG (error, warn, info,
 * debug; default warn). The shim never writes to fixed paths. */
#ifndef GPUCKPT_LOG_H
#define GPUCKPT_LOG_H

enum gp_log_level { GP_LOG_ERROR = 0, GP_LOG_WARN = 1, GP_LOG_INFO = 2, GP_LOG_DEBUG = 3 };

void gp_log_init(void);
int gp_log_enabled(enum gp_log_level level);
void gp_log(enum gp_log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define GP_ERROR(comp, ...) gp_log(GP_LOG_ERROR, comp, __VA_ARGS__)
#define GP_WARN(comp, ...) gp_log(GP_LOG_WARN, comp, __VA_ARGS__)
#define GP_INFO(comp, ...) gp_log(GP_LOG_INFO, comp, __VA_ARGS__)
#define GP_DEBUG(comp, ...) \
    do { if (gp_log_enabled(GP_LOG_DEBUG)) gp_log(GP_LOG_DEBUG, comp, __VA_ARGS__); } while (0)

#endif
