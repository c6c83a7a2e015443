// strings.h: the helpers every component splits, trims, quotes, parses integers and base64s with.
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

TEST(ParsePositiveSeconds, AcceptsPositiveDecimalsUpToTenMillion) {
  EXPECT_EQ(ParsePositiveSeconds("120"), 120.0);
  EXPECT_EQ(ParsePositiveSeconds("0.5"), 0.5);
  EXPECT_EQ(ParsePositiveSeconds("1e3"), 1000.0);
  EXPECT_EQ(ParsePositiveSeconds("10000000"), 1e7);
  for (const std::string bad : {"", "0", "0.0", "-1", "+1", " 1", "1 ", "1s", "inf", "nan", "0x10", "10000001",
                                "1e400"}) {
    SCOPED_TRACE("'" + bad + "'");
    EXPECT_EQ(ParsePositiveSeconds(bad), std::nullopt);
  }
}

TEST(Base64, RoundTripsEveryLengthAndMatchesRfc4648) {
  // RFC 4648 section 10's test vectors.
  const std::vector<std::pair<std::string, std::string>> vectors = {
      {"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"}, {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(EncodeBase64(plain), encoded);
    EXPECT_EQ(DecodeBase64(encoded), plain);
  }
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  EXPECT_EQ(DecodeBase64(EncodeBase64(bytes)), bytes);
  EXPECT_EQ(DecodeBase64("Zm9v\nYmE"), "fooba") << "whitespace ignored, padding optional";
  for (const std::string bad : {"Zm9v!", "Zg==Zg", "Z"}) EXPECT_EQ(DecodeBase64(bad), std::nullopt) << bad;
}

}  // namespace
}  // namespace fleet
