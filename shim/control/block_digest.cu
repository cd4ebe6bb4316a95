/* The one GPU kernel the shim ships: a 64-bit digest of every block of a
 * device range, read at HBM speed, so that a checkpoint moves only the
 * blocks that changed since its parent image (a digest of 0 also marks a
 * block all zeros). Shipped as a fatbin (block_digest.fatbin.h, made by
 * gen_fatbin.sh): machine code for each GPU major, and PTX for newer ones.
 *
 * The function (block_digest_fn.h) is a 64-bit sum of per-word terms: a
 * change of any word, or two words swapped, changes the digest but with
 * probability ~2^-63. Not a cryptographic hash: it guards against
 * accidents, not an adversary (the data is the application's own). */

#include "block_digest_fn.h"

/* One CTA per block (gridDim.x blocks of block_words 8-byte words; the last
 * may be shorter: the range ends at nbytes, and the bytes of its last word
 * past nbytes, which belong to no allocation, count as zeros). */
extern "C" __global__ void gp_block_digest(const unsigned long long *words, unsigned long long nbytes,
                                           unsigned long long block_words, unsigned long long *digests)
{
    unsigned long long nwords = (nbytes + 7) / 8;
    unsigned long long tail_mask = gp_digest_tail_mask(nbytes);
    unsigned long long first = (unsigned long long)blockIdx.x * block_words;
    unsigned long long end = first + block_words < nwords ? first + block_words : nwords;
    unsigned long long sum = 0, any = 0;
    for (unsigned long long i = first + threadIdx.x; i < end; i += blockDim.x) {
        unsigned long long w = words[i] & (i == nwords - 1 ? tail_mask : ~0ull);
        any |= w;
        sum += gp_digest_term(w, i - first);
    }
    for (int off = 16; off > 0; off >>= 1) {
        sum += __shfl_down_sync(0xffffffffu, sum, off);
        any |= __shfl_down_sync(0xffffffffu, any, off);
    }
    __shared__ unsigned long long warp_sum[32], warp_any[32];
    unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        warp_sum[warp] = sum;
        warp_any[warp] = any;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (unsigned k = 1; k < (blockDim.x + 31) / 32; k++) {
            sum += warp_sum[k];
            any |= warp_any[k];
        }
        digests[blockIdx.x] = any ? (sum | 1ull) : 0ull;
    }
}
