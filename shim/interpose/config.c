#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

int gp_parse_size(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-')
        return -EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s)
        return -EINVAL;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B')
        end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
    if (*end || (shift && v > (UINT64_MAX >> shift)))
        return -EINVAL;
    *out = (uint64_t)v << shift;
    return 0;
}

static int size_var(const char *name, uint64_t dflt, uint64_t *out)
{
    const char *v = getenv(name);
    *out = dflt;
    if (!v || !*v)
        return 0;
    if (gp_parse_size(v, out)) {
        GP_ERROR("config", "%s=%s is not a size", name, v);
        return -EINVAL;
    }
    return 0;
}

int gp_config_load(struct gp_config *c)
{
    memset(c, 0, sizeof(*c));
    const char *dis = getenv("GPUCKPT_DISABLE");
    c->disabled = dis && !strcmp(dis, "1");
    const char *zeros = getenv("GPUCKPT_DRIVER_ZEROS");
    c->keep_driver_zeros = zeros && !strcmp(zeros, "keep");
    const char *stacks = getenv("GPUCKPT_STACKS");
    c->keep_stacks = stacks && !strcmp(stacks, "keep");
    int err = size_var("GPUCKPT_POOL_BASE", GP_DEFAULT_POOL_BASE, &c->pool_base);
    err = err ?: size_var("GPUCKPT_POOL_SIZE", GP_DEFAULT_SLICE_SIZE, &c->slice_size);
    err = err ?: size_var("GPUCKPT_CHUNK_SIZE", GP_DEFAULT_CHUNK_SIZE, &c->chunk_size);
    err = err ?: size_var("GPUCKPT_POOL_RETAIN", GP_DEFAULT_RETAIN, &c->retain_bytes);
    err = err ?: size_var("GPUCKPT_STAGING_PIECE", GP_DEFAULT_STAGING_PIECE, &c->staging_piece);
    err = err ?: size_var("GPUCKPT_STAGING_FILE", GP_DEFAULT_STAGING_FILE, &c->staging_file);
    err = err ?: size_var("GPUCKPT_HOST_RETAIN", GP_DEFAULT_HOST_RETAIN, &c->host_retain);
    err = err ?: size_var("GPUCKPT_NCCL_TIMEOUT", GP_DEFAULT_NCCL_TIMEOUT_S, &c->nccl_timeout_s);
    if (err)
        return err;
    c->staging_piece = (c->staging_piece + 4095) / 4096 * 4096;
    c->staging_file = c->staging_file ? (c->staging_file + 4095) / 4096 * 4096 : GP_DEFAULT_STAGING_FILE;
    /* Round the slice up to whole chunks so every chunk lies in one slice. */
    if (c->chunk_size && c->slice_size % c->chunk_size)
        c->slice_size += c->chunk_size - c->slice_size % c->chunk_size;

    const char *dir = getenv("GPUCKPT_RUN_DIR");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int n;
    if (dir && *dir)
        n = snprintf(c->run_dir, sizeof(c->run_dir), "%s", dir);
    else if (xdg && *xdg)
        n = snprintf(c->run_dir, sizeof(c->run_dir), "%s/gpuckpt", xdg);
    else
        n = snprintf(c->run_dir, sizeof(c->run_dir), "/tmp/gpuckpt-%u", (unsigned)getuid());
    if (n < 0 || (size_t)n >= sizeof(c->run_dir) - 16) {
        GP_ERROR("config", "run directory path too long");
        return -ENAMETOOLONG;
    }
    return 0;
}
