#include "uuid_text.h"

#include <cstdio>

namespace gpuckpt {

std::string UuidText(const uint8_t* b) {
  char s[48];
  snprintf(s, sizeof(s), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
           b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return s;
}

bool UuidBytes(const std::string& text, uint8_t* bytes) {
  std::string hex;
  for (char c : text.rfind("GPU-", 0) == 0 ? text.substr(4) : text)
    if (c != '-') hex += c;
  if (hex.size() != 32) return false;
  for (int i = 0; i < 16; i++) {
    unsigned v;
    if (sscanf(hex.c_str() + 2 * i, "%2x", &v) != 1) return false;
    bytes[i] = static_cast<uint8_t>(v);
  }
  return true;
}

}  // namespace gpuckpt
