/* A framework's allocator, asked what it holds unused (GPCK_FRAMEWORK_FREE).
 *
 * A hook inside the application (shim/python/: PyTorch's caching allocator)
 * waits in gpuckpt_framework_wait() on a thread of its own; the control
 * thread, inside a pause, wakes it and waits for its gpuckpt_framework_report()
 * of the ranges the framework holds but no tensor uses. While it serves a
 * request the hook's thread passes the closed gate (it reads allocator state,
 * it launches nothing). No hook, a late or failed one: the image takes the
 * whole pool, and the reply says why. */
#ifndef GPUCKPT_FRAMEWORK_HOOK_H
#define GPUCKPT_FRAMEWORK_HOOK_H

#include <stddef.h>
#include <stdint.h>

#include "gpuckpt_protocol.h"

/* Control thread: asks the hook and waits up to timeout_ms. Fills *state
 * (GPCK_FRAMEWORK_*), framework and why (NUL-terminated, cut to their
 * sizes) and up to max ranges, the largest first, *count of them. */
void gp_framework_ask(uint32_t timeout_ms, uint32_t *state, char framework[32], char why[GPCK_NAME_LEN],
                      struct gpck_free_range *ranges, uint32_t max, uint32_t *count);

/* The hook's side, exported for ctypes and the like. */
/* Blocks until a request comes; returns its id (never 0). */
__attribute__((visibility("default"))) uint64_t gpuckpt_framework_wait(void);
/* Answers request id: state GPCK_FRAMEWORK_*, the framework's name, why
 * (FAILED), and n ranges as addr, size pairs. -ESTALE if the request was
 * given up meanwhile. */
__attribute__((visibility("default"))) int gpuckpt_framework_report(uint64_t id, uint32_t state, const char *framework,
                                                                    const char *why, const uint64_t *pairs, uint32_t n);

#endif
