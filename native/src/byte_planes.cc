#include "byte_planes.h"

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "js_values.h"

namespace gpuckpt {

namespace {

// One pass over the elements, one write stream per plane: sequential on
// both sides, which the compiler unrolls.
template <int N>
void Split(const uint8_t* src, uint8_t* dst, size_t count) {
  for (size_t i = 0; i < count; i++)
    for (int b = 0; b < N; b++) dst[b * count + i] = src[i * N + b];
}

template <int N>
void Join(const uint8_t* src, uint8_t* dst, size_t count) {
  for (size_t i = 0; i < count; i++)
    for (int b = 0; b < N; b++) dst[i * N + b] = src[b * count + i];
}

}  // namespace

Napi::Value BytePlanes(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 4 || !info[0].IsTypedArray() || !info[1].IsTypedArray() || !info[2].IsNumber()) {
    ErrnoError(env, "byteplanes", EINVAL).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto src = info[0].As<Napi::Uint8Array>();
  auto dst = info[1].As<Napi::Uint8Array>();
  int size = info[2].As<Napi::Number>().Int32Value();
  bool inverse = info[3].ToBoolean();
  size_t n = src.ByteLength();
  if (dst.ByteLength() != n || (size != 2 && size != 4)) {
    ErrnoError(env, "byteplanes", EINVAL).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  const uint8_t* s = src.Data();
  uint8_t* d = dst.Data();
  size_t count = n / size;
  if (size == 4) (inverse ? Join<4> : Split<4>)(s, d, count);
  else (inverse ? Join<2> : Split<2>)(s, d, count);
  memcpy(d + count * size, s + count * size, n - count * size);
  return env.Undefined();
}

}  // namespace gpuckpt
