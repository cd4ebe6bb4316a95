#define _GNU_SOURCE
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int level = GP_LOG_WARN;

void gp_log_init(void)
{
    const char *v = getenv("GPUCKPT_LOG");
    if (!v)
        return;
    static const char *names[] = { "error", "warn", "info", "debug" };
    for (int i = 0; i < 4; i++)
        if (!strcmp(v, names[i]))
            level = i;
}

int gp_log_enabled(enum gp_log_level l)
{
    return (int)l <= level;
}

void gp_log(enum gp_log_level l, const char *component, const char *fmt, ...)
{
    if (!gp_log_enabled(l))
        return;
    char line[1024];
    /* At debug, the time of day to the millisecond, as the controller's
     * debug lines have it: the two traces of one command line up. */
    char at[40] = "";
    if (l == GP_LOG_DEBUG) {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        snprintf(at, sizeof(at), " %02d:%02d:%02d.%03ld", tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
    }
    int n = snprintf(line, sizeof(line), "gpuckpt[%d]%s %s: ", (int)getpid(), at, component);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(line))
        n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(line) - 1)
        n = sizeof(line) - 2;
    line[n++] = '\n';
    /* One write(2) so lines from several threads never interleave. */
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}
