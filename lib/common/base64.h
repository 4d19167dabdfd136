// Standard base64 (RFC 4648), as a Secret's data and a docker config.json's "auth" hold it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace nodelet {

// The decoded bytes; padding ('=') and line breaks and spaces are skipped; nullopt for any other
// character outside the alphabet.
std::optional<std::string> DecodeBase64(std::string_view in);
// `in` encoded, with padding and no line breaks.
std::string EncodeBase64(std::string_view in);

}  // namespace nodelet
