#define _GNU_SOURCE
#include "device_files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "proc_maps.h"

struct range {
    uintptr_t lo, hi;
    int prot;
};

/* Static: no malloc in a fork child. A pass takes up to MAX_RANGES; the
 * ones it replaced no longer match, so the next pass finds the rest. */
#define MAX_RANGES 512
#define MAX_PASSES 64
static struct range ranges[MAX_RANGES];

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

struct collected {
    const char *prefix;
    int n;
};

static int collect_one(const struct gp_maps_line *l, void *arg)
{
    struct collected *c = arg;
    if (c->n < MAX_RANGES && l->path[0] == '/' && starts_with(l->path, c->prefix))
        ranges[c->n++] = (struct range){ l->lo, l->hi, l->prot };
    return 0;
}

/* Up to MAX_RANGES matching mappings into ranges; their count or -errno. */
static int collect(const char *prefix)
{
    struct collected c = { prefix, 0 };
    int err = gp_maps_each(collect_one, &c);
    return err ? err : c.n;
}

/* The mapping at r becomes private zero memory with its protection, in
 * one step (MAP_FIXED replaces what lies there). */
static int replace(const struct range *r, struct gp_released *out)
{
    size_t len = r->hi - r->lo;
    if (mmap((void *)r->lo, len, r->prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
        return -errno;
    out->mappings++;
    out->bytes += len;
    return 0;
}

static int release_mappings(const char *prefix, struct gp_released *out)
{
    for (int pass = 0; pass < MAX_PASSES; pass++) {
        int n = collect(prefix);
        if (n <= 0)
            return n;
        for (int i = 0; i < n; i++) {
            int err = replace(&ranges[i], out);
            if (err)
                return err;
        }
    }
    return -ELOOP;
}

struct linux_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

static int release_fds(const char *prefix, struct gp_released *out)
{
    int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return -errno;
    int null = -1, err = 0;
    char ents[4096];
    long got;
    while (!err && (got = syscall(SYS_getdents64, dir, ents, sizeof(ents))) > 0) {
        for (long off = 0; off < got && !err;) {
            struct linux_dirent64 *d = (struct linux_dirent64 *)(ents + off);
            off += d->d_reclen;
            if (d->d_name[0] < '0' || d->d_name[0] > '9')
                continue;
            int fd = 0;
            for (const char *c = d->d_name; *c; c++)
                fd = fd * 10 + (*c - '0');
            char target[256];
            ssize_t len = readlinkat(dir, d->d_name, target, sizeof(target) - 1);
            if (fd == dir || fd == null || len <= 0)
                continue;
            target[len] = 0;
            if (!starts_with(target, prefix))
                continue;
            if (null < 0 && (null = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0) {
                err = -errno;
                break;
            }
            int flags = fcntl(fd, F_GETFD);
            if (dup3(null, fd, flags > 0 && (flags & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0)
                err = -errno;
            else
                out->fds++;
        }
    }
    if (null >= 0)
        close(null);
    close(dir);
    return err;
}

int gp_release_device_files(const char *prefix, struct gp_released *out)
{
    memset(out, 0, sizeof(*out));
    int err = release_mappings(prefix, out);
    int fd_err = release_fds(prefix, out);
    return err ? err : fd_err;
}
