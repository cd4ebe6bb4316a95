#include "js_values.h"

#include <cstring>

namespace gpuckpt {

Napi::Error ErrnoError(Napi::Env env, const std::string& what, int err, bool transport) {
  Napi::Error e = Napi::Error::New(env, what + ": " + strerror(err));
  const char* name = strerrorname_np(err);
  e.Set("errno", Napi::Number::New(env, err));
  e.Set("code", Napi::String::New(env, name ? name : "EUNKNOWN"));
  e.Set("transport", Napi::Boolean::New(env, transport));
  return e;
}

uint64_t ToU64(const Napi::Value& v) {
  if (v.IsBigInt()) {
    bool lossless = false;
    return v.As<Napi::BigInt>().Uint64Value(&lossless);
  }
  if (v.IsNumber()) return static_cast<uint64_t>(v.As<Napi::Number>().Int64Value());
  return 0;
}

}  // namespace gpuckpt
