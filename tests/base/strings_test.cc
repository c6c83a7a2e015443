// strings.h: the helpers every component splits, trims, quotes and parses integers with.
#include "fleet/base/strings.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace fleet {
namespace {

TEST(StringHelpers, SplitKeepsEmptyPiecesAndTrimRemovesOnlyTheEnds) {
  EXPECT_EQ(SplitString("a,,b", ','), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(SplitString("", ','), (std::vector<std::string>{""}));
  EXPECT_EQ(TrimWhitespace(" \t a b \r\n"), "a b");
  EXPECT_EQ(TrimWhitespace(" \t "), "");
  EXPECT_EQ(JoinStrings({"a", "b", "c"}, ", "), "a, b, c");
  EXPECT_EQ(JoinStrings({}, ", "), "");
  EXPECT_EQ(Quote("a b"), "'a b'");
}

TEST(ParseNonNegativeInt, AcceptsPlainDecimalsOnly) {
  EXPECT_EQ(*ParseNonNegativeInt("0", "N"), 0);
  EXPECT_EQ(*ParseNonNegativeInt("42", "N"), 42);
  EXPECT_EQ(*ParseNonNegativeInt("2147483647", "N"), 2147483647);
  // The header promises "no sign, no whitespace, no overflow".
  // Digits only: std::from_chars alone would accept "-0".
  for (const std::string bad : {"", "-1", "-0", "+1", " 1", "1 ", "1x", "0x10", "2147483648",
                                "99999999999999999999"}) {
    SCOPED_TRACE("'" + bad + "'");
    auto parsed = ParseNonNegativeInt(bad, "PADDLE_TRAINER_ID");
    ASSERT_FALSE(parsed.ok()) << "accepted as " << *parsed;
    EXPECT_EQ(parsed.error(), "PADDLE_TRAINER_ID must be a non-negative integer, got '" + bad + "'");
  }
}

}  // namespace
}  // namespace fleet
