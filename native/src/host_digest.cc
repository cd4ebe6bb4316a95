#include "host_digest.h"

#include <cstdint>
#include <cstring>

#include "block_digest_fn.h"
#include "js_values.h"

namespace gpuckpt {

namespace {

// The kernel's digest of one block: word i counts with its index inside
// the block; the bytes of a last partial word count as zeros.
uint64_t DigestBlock(const uint8_t* p, uint64_t nbytes) {
  unsigned long long sum = 0, any = 0;
  uint64_t whole = nbytes / 8;
  for (uint64_t i = 0; i < whole; i++) {
    unsigned long long w;
    memcpy(&w, p + 8 * i, 8);
    any |= w;
    sum += gp_digest_term(w, i);
  }
  if (nbytes % 8) {
    unsigned long long w = 0;
    memcpy(&w, p + 8 * whole, nbytes % 8);
    any |= w;
    sum += gp_digest_term(w, whole);
  }
  return any ? (sum | 1ULL) : 0;
}

}  // namespace

Napi::Value HostBlockDigests(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsTypedArray()) {
    Napi::TypeError::New(env, "hostBlockDigests(view: Uint8Array, blockSize)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Napi::Uint8Array view = info[0].As<Napi::Uint8Array>();
  uint64_t block = ToU64(info[1]);
  if (block == 0 || block % 8) {
    Napi::RangeError::New(env, "hostBlockDigests: blockSize must be a positive multiple of 8").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  const uint8_t* data = view.Data();
  uint64_t length = view.ByteLength();
  uint64_t blocks = (length + block - 1) / block;
  Napi::Buffer<uint8_t> out = Napi::Buffer<uint8_t>::New(env, blocks * 8);
  for (uint64_t b = 0; b < blocks; b++) {
    uint64_t n = length - b * block < block ? length - b * block : block;
    uint64_t d = DigestBlock(data + b * block, n);
    memcpy(out.Data() + 8 * b, &d, 8);
  }
  return out;
}

}  // namespace gpuckpt
