/* Unit tests of letting go of device files (shim/interpose/device_files.c),
 * with files of a temporary directory standing in for /dev/nvidia*: each
 * mapping becomes private zero memory with its protection, each fd a
 * /dev/null one with its close-on-exec flag, other files untouched; also
 * in a fork child of a threaded process, where it runs in the shim. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device_files.h"
#include "harness.h"

static char dir[64], prefix[80];
static const size_t page = 4096;

/* A file of pages pages, byte i holding (i * 7 + seed) & 0xff. */
static int make_file(const char *name, size_t pages, int seed)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    for (size_t i = 0; i < pages * page; i++) {
        unsigned char b = (unsigned char)(i * 7 + seed);
        if (write(fd, &b, 1) != 1)
            return -1;
    }
    return fd;
}

static int count_maps(const char *needle)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int n = 0;
    while (fgets(line, sizeof(line), f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

static bool points_to(int fd, const char *want)
{
    char link[64], target[256];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof(target) - 1);
    if (n < 0)
        return false;
    target[n] = 0;
    return strcmp(target, want) == 0;
}

static bool holds_pattern(const unsigned char *p, size_t n, int seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 7 + seed))
            return false;
    return true;
}

static bool all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

/* The protection of the mapping at p, from /proc/self/maps ("rw-p"). */
static bool has_perms(const void *p, const char *perms)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    bool found = false;
    while (fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        char got[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, got) == 3 && (unsigned long)p >= lo && (unsigned long)p < hi)
            found = strcmp(got, perms) == 0;
    }
    fclose(f);
    return found;
}

static void test_mappings_and_fds_let_go(void)
{
    int dev = make_file("nvidia0", 4, 3);
    int ctl = make_file("nvidiactl", 2, 5);
    int other = make_file("other", 1, 9);
    unsigned char *rw = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_SHARED, dev, 0);
    unsigned char *ro = mmap(NULL, 2 * page, PROT_READ, MAP_SHARED, ctl, 0);
    unsigned char *wo = mmap(NULL, page, PROT_WRITE, MAP_SHARED, ctl, 0); /* a doorbell: write only */
    unsigned char *keep = mmap(NULL, page, PROT_READ, MAP_SHARED, other, 0);
    fcntl(ctl, F_SETFD, FD_CLOEXEC);
    CHECK(rw != MAP_FAILED && ro != MAP_FAILED && wo != MAP_FAILED && keep != MAP_FAILED);
    CHECK(count_maps(prefix) == 3);

    struct gp_released r;
    CHECK(gp_release_device_files(prefix, &r) == 0);
    CHECK(r.mappings == 3 && r.bytes == 7 * page);
    CHECK(r.fds == 2);
    CHECK(count_maps(prefix) == 0 && count_maps(dir) == 1); /* "other" is not a device */
    CHECK(all_zero(rw, 4 * page) && all_zero(ro, 2 * page));
    CHECK(has_perms(rw, "rw-p") && has_perms(ro, "r--p") && has_perms(wo, "-w-p"));
    rw[0] = 0xee; /* private now: the file keeps its byte */
    unsigned char b;
    CHECK(pread(dev, &b, 1, 0) == 0); /* dev is /dev/null now: nothing to read */
    CHECK(pread(other, &b, 1, 0) == 1 && b == 9);
    CHECK(holds_pattern(keep, page, 9));
    CHECK(points_to(dev, "/dev/null") && points_to(ctl, "/dev/null"));
    CHECK(!(fcntl(dev, F_GETFD) & FD_CLOEXEC) && (fcntl(ctl, F_GETFD) & FD_CLOEXEC));
    CHECK(!points_to(other, "/dev/null"));
    munmap(rw, 4 * page);
    munmap(ro, 2 * page);
    munmap(wo, page);
    munmap(keep, page);
    close(dev);
    close(ctl);
    close(other);
}

static void test_nothing_to_do(void)
{
    struct gp_released r;
    CHECK(gp_release_device_files(prefix, &r) == 0);
    CHECK(r.mappings == 0 && r.fds == 0);
}

static void *spin(void *arg)
{
    for (;;)
        pause();
    return arg;
}

/* As in the shim: in the child of a process with other threads. */
static void test_in_a_fork_child(void)
{
    int dev = make_file("nvidia1", 2, 11);
    unsigned char *p = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_SHARED, dev, 0);
    pthread_t t;
    pthread_create(&t, NULL, spin, NULL);
    pid_t child = fork();
    if (child == 0) {
        struct gp_released r;
        int ok = gp_release_device_files(prefix, &r) == 0 && r.mappings == 1 && r.fds == 1 && all_zero(p, 2 * page) &&
                 count_maps(prefix) == 0;
        _exit(ok ? 0 : 1);
    }
    int status = -1;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(count_maps(prefix) == 1 && !points_to(dev, "/dev/null") && holds_pattern(p, 2 * page, 11)); /* the parent keeps its own */
    munmap(p, 2 * page);
    close(dev);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/gpuckpt-devfiles-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    snprintf(prefix, sizeof(prefix), "%s/nvidia", dir);
    RUN(test_mappings_and_fds_let_go);
    RUN(test_nothing_to_do);
    RUN(test_in_a_fork_child);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        return 1;
    return HARNESS_END();
}
