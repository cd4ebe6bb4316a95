/* When a process started: field 22 of /proc/PID/stat (clock ticks since
 * boot), after the command name, which may hold spaces and parentheses
 * (the last ')' ends it). With the PID it names one process even once the
 * PID is reused; 0 when there is no such process. Shared by the helper
 * programs (keeper/, holder/). */
#ifndef GPUCKPT_PROC_STAT_H
#define GPUCKPT_PROC_STAT_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static inline unsigned long long gp_proc_start_time(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

#endif
