// How fast a restore's unpack can fill a tmpfs file and CRIU can read it
// back: THREADS threads each write their slice of one file through a shared
// mapping (as the codec workers do, controller/engine/codec-worker.ts), then
// one thread reads it into fresh anonymous memory in 1 MiB preads (as one
// CRIU task reads its pages). Run it on /dev/shm and on a tmpfs mounted with
// huge=always to see what huge pages in the scratch would change.
//   gcc -O2 -pthread -o /tmp/tmpfs_pages test/gpu/probes/tmpfs_pages.c && /tmp/tmpfs_pages DIR [GIB] [THREADS]
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define SLICE_ALIGN (2ull << 20)
#define CHUNK (4ull << 20)
#define READ_PIECE (1ull << 20)

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

static int fd;
static size_t slice;
static unsigned char *src;

static void *writer(void *arg)
{
    size_t off = (size_t)(uintptr_t)arg * slice;
    unsigned char *dst = mmap(NULL, slice, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off);
    if (dst == MAP_FAILED) { perror("mmap"); exit(1); }
    for (size_t at = 0; at < slice; at += CHUNK) memcpy(dst + at, src, slice - at < CHUNK ? slice - at : CHUNK);
    munmap(dst, slice);
    return NULL;
}

static long meminfo_kb(const char *key)
{
    char line[256];
    long v = -1;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, strlen(key))) v = atol(line + strlen(key));
    fclose(f);
    return v;
}

int main(int argc, char **argv)
{
    if (argc < 2) { fprintf(stderr, "usage: %s DIR [GIB] [THREADS]\n", argv[0]); return 2; }
    double gib = argc > 2 ? atof(argv[2]) : 0.75;
    int threads = argc > 3 ? atoi(argv[3]) : 31;
    size_t total = (size_t)(gib * (1ull << 30)) / (threads * SLICE_ALIGN) * (threads * SLICE_ALIGN);
    slice = total / threads;
    char path[4096];
    snprintf(path, sizeof path, "%s/tmpfs-probe-%d", argv[1], getpid());
    fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) { perror(path); return 1; }
    if (ftruncate(fd, (off_t)total)) { perror("ftruncate"); return 1; }
    src = malloc(CHUNK);
    for (size_t i = 0; i < CHUNK; i++) src[i] = (unsigned char)(i * 2654435761u >> 13) | 1;

    long huge0 = meminfo_kb("ShmemHugePages:");
    double t0 = now();
    pthread_t tid[256];
    for (int i = 0; i < threads; i++) pthread_create(&tid[i], NULL, writer, (void *)(uintptr_t)i);
    for (int i = 0; i < threads; i++) pthread_join(tid[i], NULL);
    double tw = now() - t0;
    long huge1 = meminfo_kb("ShmemHugePages:");

    unsigned char *into = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (into == MAP_FAILED) { perror("mmap anon"); return 1; }
    t0 = now();
    for (size_t at = 0; at < total; at += READ_PIECE)
        if (pread(fd, into + at, READ_PIECE, (off_t)at) != (ssize_t)READ_PIECE) { perror("pread"); return 1; }
    double tr = now() - t0;
    int same = !memcmp(into, src, CHUNK < total ? CHUNK : total);

    t0 = now();
    close(fd);
    unlink(path);
    double tu = now() - t0;
    printf("%s: %.2f GB by %d threads: write %.3f s (%.2f GB/s), read into fresh memory %.3f s (%.2f GB/s), unlink %.3f s, shmem huge pages +%ld MiB%s\n",
           argv[1], total / 1e9, threads, tw, total / 1e9 / tw, tr, total / 1e9 / tr, tu, (huge1 - huge0) / 1024, same ? "" : " DATA WRONG");
    return same ? 0 : 1;
}
