// A GPU's 16-byte UUID as nvidia-smi writes it ("GPU-xxxxxxxx-xxxx-xxxx-
// xxxx-xxxxxxxxxxxx") and back: the one spelling the addon, the protocol
// codec and the user see.
#pragma once

#include <cstdint>
#include <string>

namespace gpuckpt {

std::string UuidText(const uint8_t* bytes);
// The "GPU-" and the dashes are optional; false on anything but 32 hex digits.
bool UuidBytes(const std::string& text, uint8_t* bytes);

}  // namespace gpuckpt
