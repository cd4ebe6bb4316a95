/* The lines of /proc/self/maps, read without malloc or stdio: a fork child
 * of a threaded process reads them too (device_files.c), and so does the
 * driver's zero-page drop (control/driver_zeros.c). */
#ifndef GPUCKPT_PROC_MAPS_H
#define GPUCKPT_PROC_MAPS_H

#include <stdbool.h>
#include <stdint.h>

struct gp_maps_line {
    uintptr_t lo, hi;
    int prot;            /* PROT_READ, PROT_WRITE, PROT_EXEC from the perms */
    bool shared;         /* 's', else private */
    unsigned long inode;
    const char *path;    /* "" for anonymous memory; "[heap]", "[anon:name]", a file's path */
};

/* fn for each line, in order, until it returns nonzero, which is returned;
 * 0 at the end, -errno when the file cannot be read. A line longer than
 * 8 KiB is passed over (no mapping looked for has such a path). */
int gp_maps_each(int (*fn)(const struct gp_maps_line *line, void *arg), void *arg);

#endif
