#define _GNU_SOURCE
#include "proc_maps.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static unsigned long parse_number(const char **p, unsigned base)
{
    unsigned long v = 0;
    for (;; (*p)++) {
        char c = **p;
        int d = c >= '0' && c <= '9' ? c - '0' : base == 16 && c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return v;
        v = v * base + (unsigned long)d;
    }
}

static void skip_field(const char **p)
{
    while (**p && **p != ' ')
        (*p)++;
    while (**p == ' ')
        (*p)++;
}

/* "lo-hi perms offset dev inode   path" */
static bool parse_line(const char *p, struct gp_maps_line *l)
{
    l->lo = parse_number(&p, 16);
    if (*p++ != '-')
        return false;
    l->hi = parse_number(&p, 16);
    if (*p++ != ' ' || strlen(p) < 4)
        return false;
    l->prot = (p[0] == 'r' ? PROT_READ : 0) | (p[1] == 'w' ? PROT_WRITE : 0) | (p[2] == 'x' ? PROT_EXEC : 0);
    l->shared = p[3] == 's';
    for (int field = 0; field < 3; field++) /* perms, offset, dev */
        skip_field(&p);
    l->inode = parse_number(&p, 10);
    while (*p == ' ')
        p++;
    l->path = p;
    return true;
}

int gp_maps_each(int (*fn)(const struct gp_maps_line *line, void *arg), void *arg)
{
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char buf[8192];
    size_t have = 0;
    int rc = 0;
    while (!rc) {
        ssize_t got = read(fd, buf + have, sizeof(buf) - 1 - have);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        have += (size_t)got;
        buf[have] = 0;
        char *line = buf, *nl;
        while (!rc && (nl = strchr(line, '\n'))) {
            *nl = 0;
            struct gp_maps_line l;
            if (parse_line(line, &l))
                rc = fn(&l, arg);
            line = nl + 1;
        }
        have = (size_t)(buf + have - line);
        memmove(buf, line, have);
        if (have == sizeof(buf) - 1)
            have = 0; /* a line longer than the buffer */
    }
    close(fd);
    return rc;
}
