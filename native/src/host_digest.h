// Block digests of host memory with the function of the shim's GPU kernel
// (protocol/block_digest_fn.h): a live checkpoint compares the digests of
// what it copied with the kernel's digests of the pool to find what changed.
#ifndef GPUCKPT_NATIVE_HOST_DIGEST_H
#define GPUCKPT_NATIVE_HOST_DIGEST_H

#include <napi.h>

namespace gpuckpt {

// hostBlockDigests(view: Uint8Array, blockSize): Buffer of one 64-bit LE
// digest per block of view (the last may be shorter), as the kernel would
// compute for the same bytes at a device range.
Napi::Value HostBlockDigests(const Napi::CallbackInfo& info);

}  // namespace gpuckpt

#endif
