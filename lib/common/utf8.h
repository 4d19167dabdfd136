// Text a container or a manifest controls is data, never structure: these helpers make any
// bytes valid UTF-8 before they reach a serializer, cut them without splitting a character, and
// escape what a terminal would take as a command before they reach an operator's screen.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace nodelet {

// The Unicode replacement character, U+FFFD, in UTF-8.
inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";

// True when `text` is well-formed UTF-8 (no overlong forms, no surrogates, nothing past
// U+10FFFF).
bool IsValidUtf8(std::string_view text);

// `text` with every ill-formed sequence replaced by U+FFFD: one replacement for each maximal
// subpart of an ill-formed sequence, as the Unicode standard recommends (a lone continuation
// byte is one, a lead byte whose sequence breaks off is one). Valid text comes back unchanged.
std::string ValidUtf8(std::string_view text);

// The longest prefix of `text` of at most `max_bytes` that does not end inside a character.
// Only the cut is looked at: invalid bytes before it are kept (pass the result to ValidUtf8).
std::string_view CutUtf8(std::string_view text, size_t max_bytes);

// The longest suffix of `text` of at most `max_bytes` that does not start inside a character
// (the end of a message or a log is what matters most).
std::string_view CutUtf8Tail(std::string_view text, size_t max_bytes);

// `text` made valid UTF-8 (ValidUtf8), then with every control character a terminal acts on
// escaped so that it shows as text: ESC as "^[" and CR as "\r" (kubectl's forms), every other
// C0 control but LF and TAB, DEL and the C1 controls U+0080..U+009F as "\u00XX". A JSON
// document stays valid and means the same (it can hold only DEL and C1 raw, and "\u00XX" is
// their JSON escape).
std::string EscapeForTerminal(std::string_view text);

}  // namespace nodelet
