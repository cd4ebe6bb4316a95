/* Out of GPU memory: GPU-held snapshots give way. See snapshot_reclaim.h. */
#define _GNU_SOURCE
#include "snapshot_reclaim.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "gpck_wire.h"
#include "gpuckpt_protocol.h"
#include "../interpose/real_driver.h"
#include "../interpose/shim.h"

/* The holder answers at once; a stuck one must not stall the allocation long. */
#define RECLAIM_TIMEOUT_S 2

static int ask_holder(int fd, const struct gpck_hold_reclaim_req *req, struct gpck_hold_rep *rep)
{
    int err = gpck_send(fd, GPCK_HOLD_RECLAIM, 1, 0, 0, req, sizeof(*req), NULL, 0);
    if (err)
        return err;
    struct {
        struct gpck_header h;
        struct gpck_hold_rep r;
    } in;
    _Static_assert(sizeof(in) == sizeof(struct gpck_header) + sizeof(struct gpck_hold_rep), "one datagram, no padding");
    ssize_t n = recv(fd, &in, sizeof(in), 0);
    if (n < 0)
        return -errno;
    if ((size_t)n < sizeof(in.h) || in.h.magic != GPCK_MAGIC || in.h.type != (GPCK_HOLD_RECLAIM | GPCK_REPLY))
        return -EPROTO;
    if (in.h.status < 0)
        return in.h.status;
    if ((size_t)n != sizeof(in))
        return -EPROTO;
    *rep = in.r;
    return 0;
}

int gp_snapshot_reclaim(int device, uint64_t bytes, uint64_t *freed)
{
    *freed = 0;
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    if (snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/snapshot-holder.sock", gp_shim_config()->run_dir) >=
        (int)sizeof(addr.sun_path))
        return -ENAMETOOLONG;
    if (access(addr.sun_path, F_OK) != 0)
        return -ENOENT;
    struct gpck_hold_reclaim_req req = { .bytes = bytes };
    CUdevice dev;
    CUuuid uuid;
    if (GP_REAL(cuDeviceGet)(&dev, device) != CUDA_SUCCESS ||
        (GP_HAS_REAL(cuDeviceGetUuid_v2) ? GP_REAL(cuDeviceGetUuid_v2)(&uuid, dev)
                                         : GP_REAL(cuDeviceGetUuid)(&uuid, dev)) != CUDA_SUCCESS)
        return -ENODEV;
    memcpy(req.uuid, uuid.bytes, sizeof(req.uuid));
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct timeval tv = { .tv_sec = RECLAIM_TIMEOUT_S };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    struct gpck_hold_rep rep = { 0 };
    int err = connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 ? ask_holder(fd, &req, &rep) : -errno;
    close(fd);
    if (!err)
        *freed = rep.bytes;
    return err;
}
