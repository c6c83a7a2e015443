// escape.h: text from outside made safe to print on one line, and bounded.
#include "fleet/base/escape.h"

#include <string>

#include <gtest/gtest.h>

namespace fleet {
namespace {

TEST(EscapeControl, EscapesEveryControlCharacterAndInvalidByteButKeepsPrintableUtf8) {
  EXPECT_EQ(EscapeControl("plain text, d\xc3\xa9j\xc3\xa0 vu \xe2\x9c\x93 \xf0\x9f\x9a\x80"),
            "plain text, d\xc3\xa9j\xc3\xa0 vu \xe2\x9c\x93 \xf0\x9f\x9a\x80");
  EXPECT_EQ(EscapeControl("a\nb\rc\td"), "a\\nb\\rc\\td");
  EXPECT_EQ(EscapeControl("\x1b[2J\x07\x7f"), "\\x1b[2J\\x07\\x7f");
  EXPECT_EQ(EscapeControl(std::string_view("\0", 1)), "\\x00");
  EXPECT_EQ(EscapeControl("\xc2\x9b" "31m"), "\\u009b31m");          // C1 CSI, as UTF-8
  EXPECT_EQ(EscapeControl("\x9b" "31m"), "\\x9b31m");                 // C1 CSI, a lone byte
  EXPECT_EQ(EscapeControl("\xe2\x9c"), "\\xe2\\x9c");                  // a cut sequence
  EXPECT_EQ(EscapeControl("\xc0\xaf"), "\\xc0\\xaf");                  // overlong '/'
  EXPECT_EQ(EscapeControl("\xed\xa0\x80"), "\\xed\\xa0\\x80");         // a surrogate
}

TEST(BoundText, CutsAtACharacterBoundaryWithinTheBound) {
  EXPECT_EQ(BoundText("short", 10), "short");
  EXPECT_EQ(BoundText("0123456789", 10), "0123456789");
  EXPECT_EQ(BoundText("0123456789a", 10), "0123456...");
  // "é" is 2 bytes: a cut that would split it keeps none of it.
  EXPECT_EQ(BoundText("abcd\xc3\xa9xyz", 8), "abcd...");
  EXPECT_EQ(BoundText("abc\xf0\x9f\x9a\x80xyz", 8), "abc...");
  EXPECT_EQ(BoundText(std::string(900 * 1024, 'x'), 1024).size(), 1024u);
  EXPECT_EQ(BoundText("abcdef", 2), "..");
}

}  // namespace
}  // namespace fleet
