/* The first driver call that failed while a request was served, so that
 * its reply can name the call and its CUresult instead of a bare -EIO
 * (GPCK_REPLY_ERROR_TEXT in gpuckpt_protocol.h). One record for the process:
 * requests are served one at a time, and the copy workers of a request
 * fail on its behalf. */
#ifndef GPUCKPT_DRIVER_ERROR_H
#define GPUCKPT_DRIVER_ERROR_H

#include <errno.h>
#include <stddef.h>

#include "cuda_api.h"
#include "real_driver.h"

/* Forgets the record: a request starts. */
void gp_driver_error_clear(void);
/* Records call and r unless a failure is recorded already (the first one
 * is the cause). Returns r, so a call site can wrap its check. */
CUresult gp_driver_error_note(const char *call, CUresult r);
/* A real driver call whose failure ends the request: GP_CALL(cuMemAlloc_v2, &p, n). */
#define GP_CALL(name, ...) gp_driver_error_note(#name, GP_REAL(name)(__VA_ARGS__))
/* A failure that was not a driver call's (NCCL's, say), in one line: kept
 * unless a failure is recorded already. */
void gp_failure_note(const char *text);
/* "cuMemcpyDtoHAsync_v2 returned CUDA_ERROR_ILLEGAL_ADDRESS (700)" into
 * buf (NUL-terminated), or the text of gp_failure_note; its length, 0
 * when nothing is recorded. */
size_t gp_driver_error_text(char *buf, size_t len);
/* A failed driver call as the control side answers it: r into *cu_err,
 * -ENOMEM when the GPU is out of memory, else -EIO. */
static inline int gp_cu_errno(CUresult r, CUresult *cu_err)
{
    *cu_err = r;
    return r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
}

#endif
