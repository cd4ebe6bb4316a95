/* The digest function of shim/control/block_digest.cu, in one place for the
 * GPU kernel and for the fake driver's CPU stand-in (test/fake-cuda), so
 * both compute the same digests by construction:
 *
 * digest(block) = 0 if every word is zero, else
 *                 (sum over words w_i of gp_digest_term(w_i, i)) | 1,
 * i the word's index inside the block. */
#ifndef GPUCKPT_BLOCK_DIGEST_FN_H
#define GPUCKPT_BLOCK_DIGEST_FN_H

#ifdef __CUDACC__
#define GP_DIGEST_FN __host__ __device__ __forceinline__
#else
#define GP_DIGEST_FN static inline
#endif

/* splitmix64's finaliser. */
GP_DIGEST_FN unsigned long long gp_digest_mix(unsigned long long x)
{
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

/* One word's share: the word mixed, then mixed again with its position, so
 * a changed word or two swapped words change the sum (mixing the word
 * first keeps words that differ by multiples of the position step from
 * trading places unseen). */
GP_DIGEST_FN unsigned long long gp_digest_term(unsigned long long w, unsigned long long i)
{
    return gp_digest_mix(gp_digest_mix(w) + (i + 1) * 0x9E3779B97F4A7C15ull);
}

/* The bytes of a range's last word past its end count as zeros. */
GP_DIGEST_FN unsigned long long gp_digest_tail_mask(unsigned long long nbytes)
{
    return nbytes % 8 ? (1ull << (8 * (nbytes % 8))) - 1 : ~0ull;
}

#endif
