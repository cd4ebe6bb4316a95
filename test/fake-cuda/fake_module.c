/* Modules, for the one kernel the shim ships (shim/control/block_digest.cu):
 * cuModuleLoadData accepts a fatbin (gen_fatbin.sh: compressed, so its
 * symbols cannot be looked for) and nothing else, and cuModuleGetFunction
 * hands out a host function computing the same digests on the CPU (device
 * memory is host memory here), so CI runs the shim's digest path end to
 * end. */
#include "fake_internal.h"

#include <stdlib.h>
#include <string.h>

#include "block_digest_fn.h"

/* The first word of a fatbin (fatbinary_section.h). */
#define FATBIN_MAGIC 0xBA55ED50u

struct fake_module {
    int has_digest;
};

/* gp_block_digest(words, nbytes, block_words, digests) over the whole
 * grid at once (the fake's launch runs a kernel once). */
static void block_digest(void **params)
{
    const uint64_t *words = *(const uint64_t **)params[0];
    uint64_t nbytes = *(uint64_t *)params[1];
    uint64_t block_words = *(uint64_t *)params[2];
    uint64_t *digests = *(uint64_t **)params[3];
    uint64_t nwords = (nbytes + 7) / 8;
    uint64_t tail_mask = gp_digest_tail_mask(nbytes);
    for (uint64_t b = 0, first = 0; first < nwords; b++, first += block_words) {
        uint64_t end = first + block_words < nwords ? first + block_words : nwords;
        uint64_t sum = 0, any = 0;
        for (uint64_t i = first; i < end; i++) {
            uint64_t w = words[i] & (i == nwords - 1 ? tail_mask : ~0ull);
            any |= w;
            sum += gp_digest_term(w, i - first);
        }
        digests[b] = any ? (sum | 1) : 0;
    }
}

FAKE_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    FAKE_ENTER();
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t magic;
    memcpy(&magic, image, sizeof(magic));
    if (magic != FATBIN_MAGIC)
        return CUDA_ERROR_INVALID_IMAGE;
    struct fake_module *m = calloc(1, sizeof(*m));
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->has_digest = 1;
    *module = (CUmodule)m;
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuModuleLoadData)

FAKE_EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    FAKE_ENTER();
    if (!hfunc || !hmod || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!((struct fake_module *)hmod)->has_digest || strcmp(name, "gp_block_digest") != 0)
        return CUDA_ERROR_NOT_FOUND;
    union {
        void (*fn)(void **);
        CUfunction f;
    } u = { .fn = block_digest };
    *hfunc = u.f;
    return CUDA_SUCCESS;
}
FAKE_LOCAL_ALIAS(cuModuleGetFunction)

/* Loads nothing (the fake's kernel is a host function); the shim calls it
 * so that a real driver's lazy loading happens before any pause. */
FAKE_EXPORT CUresult cuFuncLoad(CUfunction function)
{
    FAKE_ENTER();
    union {
        void (*fn)(void **);
        CUfunction f;
    } u = { .fn = block_digest };
    return function == u.f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
FAKE_LOCAL_ALIAS(cuFuncLoad)
