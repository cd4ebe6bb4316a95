/* What a child forked after CUDA started does with the parent's device files.
 *
 * CUDA does not survive fork: the child cannot use the driver, yet it
 * inherits the parent's mappings and fds of /dev/nvidia* (70 MiB of
 * mappings and 38 fds in a PyTorch DataLoader worker on an H100 host).
 * CRIU cannot dump them ("Can't handle non-regular mapping"), and the
 * driver's checkpoint releases them only in the process it checkpoints. So
 * the child lets go of them at once. What they hold is the driver's own
 * state (user data is not in them: pinned host memory is shared anonymous
 * memory, managed memory is not inherited), which no forked child may use:
 * zeros stand in for it. Copying it cost 106 ms a fork on an H100 host
 * (127.5 ms against 21.7 ms without the shim), the driver's memory being
 * slow to read. */
#ifndef GPUCKPT_DEVICE_FILES_H
#define GPUCKPT_DEVICE_FILES_H

#include <stdint.h>

struct gp_released {
    int mappings;       /* mappings replaced by private zero memory */
    uint64_t bytes;     /* their size */
    int fds;            /* fds pointed at /dev/null */
};

/* Every mapping of a file whose path starts with prefix becomes private
 * zero memory with the same protection, and every fd of such a file a
 * /dev/null fd with the same close-on-exec flag. Async-signal-safe (a fork
 * child of a threaded process): no malloc, no stdio. 0 or -errno; out says
 * what was done. */
int gp_release_device_files(const char *prefix, struct gp_released *out);

#endif
