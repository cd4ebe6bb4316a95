// A zstd frame that stores its bytes as they are (raw blocks), with the
// content size and the XXH64 content checksum any zstd decoder checks: how
// a byte plane that would not compress (a float's low mantissa bytes) goes
// into an image without a compressor's time (format 5, frame-codec.ts).
#ifndef GPUCKPT_NATIVE_STORED_FRAME_H
#define GPUCKPT_NATIVE_STORED_FRAME_H

#include <napi.h>

namespace gpuckpt {

// storedZstdFrame(src: Uint8Array, dst: Uint8Array): number. Writes the
// frame into dst (at least storedFrameBound(src.length) bytes, see
// frame-codec.ts) and returns its length; EINVAL when dst is too short.
Napi::Value StoredZstdFrame(const Napi::CallbackInfo& info);

}  // namespace gpuckpt

#endif
