#include "stored_frame.h"

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "js_values.h"

namespace gpuckpt {

namespace {

// XXH64 as zstd's format specifies it (seed 0): the frame's checksum is
// its low 4 bytes.
constexpr uint64_t P1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t P2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t P3 = 0x165667B19E3779F9ULL;
constexpr uint64_t P4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t P5 = 0x27D4EB2F165667C5ULL;

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t Read64(const uint8_t* p) {
  uint64_t v;
  memcpy(&v, p, 8);  // little-endian hosts only, as the rest of gpuckpt
  return v;
}

inline uint32_t Read32(const uint8_t* p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

inline uint64_t Round(uint64_t acc, uint64_t input) { return Rotl(acc + input * P2, 31) * P1; }

inline uint64_t Merge(uint64_t h, uint64_t v) { return (h ^ Round(0, v)) * P1 + P4; }

// Fed in pieces whose lengths are multiples of 32 but the last, so that
// each block is hashed right after its copy, while it is in the cache.
struct Xxh64 {
  uint64_t v1 = P1 + P2, v2 = P2, v3 = 0, v4 = 0 - P1;
  size_t total = 0;

  // Whole stripes of p; returns where the rest (under 32 bytes) begins.
  const uint8_t* Stripes(const uint8_t* p, size_t n) {
    const uint8_t* end = p + n / 32 * 32;
    for (; p < end; p += 32) {
      v1 = Round(v1, Read64(p));
      v2 = Round(v2, Read64(p + 8));
      v3 = Round(v3, Read64(p + 16));
      v4 = Round(v4, Read64(p + 24));
    }
    total += n / 32 * 32;
    return p;
  }

  uint64_t Finish(const uint8_t* p, size_t n) {
    const uint8_t* end = p + n;
    uint64_t h = total ? Rotl(v1, 1) + Rotl(v2, 7) + Rotl(v3, 12) + Rotl(v4, 18) : P5;
    if (total) h = Merge(Merge(Merge(Merge(h, v1), v2), v3), v4);
    h += total + n;
    for (; p + 8 <= end; p += 8) h = Rotl(h ^ Round(0, Read64(p)), 27) * P1 + P4;
    if (p + 4 <= end) {
      h = Rotl(h ^ (uint64_t)Read32(p) * P1, 23) * P2 + P3;
      p += 4;
    }
    for (; p < end; p++) h = Rotl(h ^ (uint64_t)*p * P5, 11) * P1;
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    return h ^ (h >> 32);
  }
};

constexpr size_t kBlock = 128 * 1024;  // zstd's largest block
constexpr size_t kHeader = 4 + 1 + 8;  // magic, descriptor, 8-byte content size

void PutLe(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

}  // namespace

Napi::Value StoredZstdFrame(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsTypedArray() || !info[1].IsTypedArray()) {
    ErrnoError(env, "storedZstdFrame", EINVAL).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto src = info[0].As<Napi::Uint8Array>();
  auto dst = info[1].As<Napi::Uint8Array>();
  size_t n = src.ByteLength();
  size_t blocks = n ? (n + kBlock - 1) / kBlock : 1;
  size_t total = kHeader + 3 * blocks + n + 4;
  if (dst.ByteLength() < total) {
    ErrnoError(env, "storedZstdFrame", EINVAL).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  const uint8_t* s = src.Data();
  uint8_t* d = dst.Data();
  PutLe(d, 0xFD2FB528u, 4);
  // Frame_Content_Size_flag 3 (8 bytes), Single_Segment_flag, Content_Checksum_flag.
  d[4] = (3 << 6) | (1 << 5) | (1 << 2);
  PutLe(d + 5, n, 8);
  uint8_t* at = d + kHeader;
  size_t done = 0;
  Xxh64 hash;
  uint64_t sum = 0;
  do {
    size_t len = n - done < kBlock ? n - done : kBlock;
    bool last = done + len == n;
    PutLe(at, (uint32_t)(len << 3) | (last ? 1u : 0u), 3);  // Block_Type 0: raw
    memcpy(at + 3, s + done, len);
    const uint8_t* rest = hash.Stripes(at + 3, len);  // whole blocks are whole stripes
    if (last) sum = hash.Finish(rest, at + 3 + len - rest);
    at += 3 + len;
    done += len;
  } while (done < n);
  PutLe(at, (uint32_t)sum, 4);
  return Napi::Number::New(env, (double)(at + 4 - d));
}

}  // namespace gpuckpt
