// Conversions between JS values and the protocol's integers, and the one
// shape of error the addon throws: a message, errno, its name as `code`,
// and whether the socket (transport) or the shim's answer failed.
#pragma once

#include <napi.h>

#include <cstdint>
#include <string>

namespace gpuckpt {

Napi::Error ErrnoError(Napi::Env env, const std::string& what, int err, bool transport = false);
// BigInt or Number -> uint64 (anything else: 0).
uint64_t ToU64(const Napi::Value& v);

}  // namespace gpuckpt
