// The protocol's structs to and from plain JS objects, generated from
// protocol/messages.mjs (protocol_codec.gen.cc): 64-bit fields as BigInt
// or Number as the table says.
#pragma once

#include <napi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gpuckpt {

// The request payload of message type built from args; false with err set
// when args cannot make one (too many ranges, a path too long, ...).
bool EncodeRequest(uint16_t type, const Napi::Object& args, std::vector<uint8_t>& out, std::string& err);

// A reply payload as a JS object; fields the payload is too short for are
// left out.
Napi::Value DecodeReply(Napi::Env env, uint16_t type, const std::vector<uint8_t>& b);

}  // namespace gpuckpt
