// The helpers that keep container and manifest text data: valid UTF-8 for every serializer, cuts
// on character boundaries, and terminal escaping of the controls a container could use to drive
// the operator's terminal.
#include "lib/common/utf8.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "lib/common/json_text.h"

namespace nodelet {
namespace {

const std::string kFffd(kReplacementCharacter);

TEST(Utf8Test, ValidTextIsKeptAsItIs) {
  for (std::string s : {std::string(""), std::string("plain ascii"),
                        std::string("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"),
                        std::string("\xF4\x8F\xBF\xBF"), std::string("a\0b", 3)}) {
    EXPECT_TRUE(IsValidUtf8(s)) << s;
    EXPECT_EQ(ValidUtf8(s), s);
  }
}

TEST(Utf8Test, InvalidSequencesAreReplacedOneMaximalSubpartEach) {
  EXPECT_EQ(ValidUtf8("a\xFF"
                      "b"),
            "a" + kFffd + "b");
  EXPECT_EQ(ValidUtf8("\x80\xBF"), kFffd + kFffd) << "lone continuation bytes";
  EXPECT_EQ(ValidUtf8("\xE2\x82"
                      "x"),
            kFffd + "x")
      << "a sequence that breaks off is one";
  EXPECT_EQ(ValidUtf8("\xF0\x9F\x98"), kFffd) << "truncated at the end";
  EXPECT_EQ(ValidUtf8("\xC0\xAF"), kFffd + kFffd) << "overlong '/'";
  EXPECT_EQ(ValidUtf8("\xE0\x80\xAF"), kFffd + kFffd + kFffd) << "overlong three bytes";
  EXPECT_EQ(ValidUtf8("\xED\xA0\x80"), kFffd + kFffd + kFffd) << "a surrogate";
  EXPECT_EQ(ValidUtf8("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd) << "past U+10FFFF";
  EXPECT_EQ(ValidUtf8("\xF5\xFE"), kFffd + kFffd);
  for (const char* bad : {"\xFF", "\xC3", "\xED\xA0\x80", "\xC0\x80"}) {
    EXPECT_FALSE(IsValidUtf8(bad)) << bad;
    EXPECT_TRUE(IsValidUtf8(ValidUtf8(bad))) << bad;
  }
}

TEST(Utf8Test, CutsNeverSplitACharacter) {
  const std::string euro = "\xE2\x82\xAC";  // three bytes
  const std::string text = "ab" + euro + "cd";
  EXPECT_EQ(CutUtf8(text, 100), text);
  EXPECT_EQ(CutUtf8(text, 2), "ab");
  EXPECT_EQ(CutUtf8(text, 3), "ab") << "inside the euro sign";
  EXPECT_EQ(CutUtf8(text, 4), "ab");
  EXPECT_EQ(CutUtf8(text, 5), "ab" + euro);
  EXPECT_EQ(CutUtf8("\xF0\x9F\x98\x80", 3), "");
  EXPECT_EQ(CutUtf8Tail(text, 100), text);
  EXPECT_EQ(CutUtf8Tail(text, 2), "cd");
  EXPECT_EQ(CutUtf8Tail(text, 3), "cd") << "starts inside the euro sign";
  EXPECT_EQ(CutUtf8Tail(text, 4), "cd");
  EXPECT_EQ(CutUtf8Tail(text, 5), euro + "cd");
  for (size_t n = 0; n <= text.size(); ++n) {
    EXPECT_TRUE(IsValidUtf8(CutUtf8(text, n))) << n;
    EXPECT_TRUE(IsValidUtf8(CutUtf8Tail(text, n))) << n;
  }
}

TEST(Utf8Test, TerminalControlsAreEscaped) {
  // OSC 0 (set the window title) ended by BEL, a screen clear, CR overwriting a line.
  EXPECT_EQ(EscapeForTerminal("\x1b]0;pwned\x07"), "^[]0;pwned\\u0007");
  EXPECT_EQ(EscapeForTerminal("\x1b[2J\x1b[H"), "^[[2J^[[H");
  EXPECT_EQ(EscapeForTerminal("ok\rfake"), "ok\\rfake");
  EXPECT_EQ(EscapeForTerminal("a\x7f"
                              "b\x08"),
            "a\\u007fb\\u0008");
  // C1 controls as characters: CSI (U+009B) and OSC (U+009D).
  EXPECT_EQ(EscapeForTerminal("\xC2\x9B"
                              "2J\xC2\x9D"),
            "\\u009b2J\\u009d");
  // A raw 0x9B byte is not UTF-8: it is replaced, never passed to an 8-bit terminal.
  EXPECT_EQ(EscapeForTerminal("\x9B"
                              "2J"),
            kFffd + "2J");
  // Lines, tabs and printable text beyond Latin-1 stay.
  EXPECT_EQ(EscapeForTerminal("a\tb\ncaf\xC3\xA9 \xC2\xA0"), "a\tb\ncaf\xC3\xA9 \xC2\xA0");
  for (unsigned char c = 0; c < 0x20; ++c) {
    if (c == '\n' || c == '\t') continue;
    EXPECT_EQ(EscapeForTerminal(std::string(1, static_cast<char>(c))).find(static_cast<char>(c)),
              std::string::npos)
        << static_cast<int>(c);
  }
}

TEST(Utf8Test, EscapedJsonStaysTheSameDocument) {
  const std::string value = "del\x7f c1\xC2\x9B text \xC3\xA9";
  const std::string doc = JsonText(nlohmann::json{{"m", value}});
  auto back = nlohmann::json::parse(EscapeForTerminal(doc));
  EXPECT_EQ(back["m"], value);
}

TEST(Utf8Test, JsonTextNeverThrowsOnInvalidBytes) {
  nlohmann::json doc = {{"message", "bad \xFF\xFE bytes \xE2\x82"}};
  EXPECT_THROW(doc.dump(), nlohmann::json::type_error) << "what JsonText is there for";
  std::string text;
  ASSERT_NO_THROW(text = JsonText(doc, 2));
  EXPECT_TRUE(IsValidUtf8(text));
  EXPECT_EQ(nlohmann::json::parse(text)["message"], "bad " + kFffd + kFffd + " bytes " + kFffd);
}

}  // namespace
}  // namespace nodelet
