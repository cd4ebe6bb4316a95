// Byte planes of fixed-size elements (a "shuffle"): byte k of every
// element together, then byte k+1. Float data (weights, optimizer state)
// compresses better so: its sign and exponent bytes repeat, its low
// mantissa bytes do not (measured: test/gpu/probes/shuffle.mjs).
#ifndef GPUCKPT_NATIVE_BYTE_PLANES_H
#define GPUCKPT_NATIVE_BYTE_PLANES_H

#include <napi.h>

namespace gpuckpt {

// byteplanes(src: Uint8Array, dst: Uint8Array, size: 2 | 4, inverse: boolean):
// dst (as long as src) gets src's byte planes (inverse: src's planes put
// back into elements). Trailing bytes of a partial element are copied as
// they are.
Napi::Value BytePlanes(const Napi::CallbackInfo& info);

}  // namespace gpuckpt

#endif
