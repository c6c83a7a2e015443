// dns.h: RFC 1123 labels and subdomains, at their edges.
#include "fleet/base/dns.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace fleet {
namespace {

TEST(IsDnsLabel, AcceptsLowerCaseLettersDigitsAndInnerHyphensUpTo63) {
  EXPECT_TRUE(IsDnsLabel("a"));
  EXPECT_TRUE(IsDnsLabel("0"));
  EXPECT_TRUE(IsDnsLabel("job-1"));
  EXPECT_TRUE(IsDnsLabel("1job"));   // RFC 1123 allows a leading digit
  EXPECT_TRUE(IsDnsLabel("a--b"));
  EXPECT_TRUE(IsDnsLabel(std::string(63, 'a')));
  EXPECT_FALSE(IsDnsLabel(std::string(64, 'a')));
}

TEST(IsDnsLabel, RefusesEmptyEdgeHyphensUpperCaseDotsAndOtherCharacters) {
  for (const std::string bad : {"", "-a", "a-", "-", "Job", "JOB", "a.b", "a_b", "a b", "a:b", "ä"}) {
    SCOPED_TRACE("'" + bad + "'");
    EXPECT_FALSE(IsDnsLabel(bad));
  }
}

TEST(IsDnsLabel, MaxSizeNarrowsTheLimitButNeverWidensIt) {
  EXPECT_TRUE(IsDnsLabel(std::string(40, 'a'), 40));
  EXPECT_FALSE(IsDnsLabel(std::string(41, 'a'), 40));
  EXPECT_FALSE(IsDnsLabel(std::string(64, 'a'), 100));
}

TEST(IsDnsSubdomain, AcceptsDotSeparatedLabelsUpTo253) {
  EXPECT_TRUE(IsDnsSubdomain("j-endpoints"));
  EXPECT_TRUE(IsDnsSubdomain("a.b.c"));
  const std::string label63(63, 'a');
  EXPECT_TRUE(IsDnsSubdomain(label63 + "." + label63));
  // 4 labels of 63 and one of 1, with 4 dots: 257 characters.
  const std::string long_name = label63 + "." + label63 + "." + label63 + "." + label63 + ".a";
  EXPECT_FALSE(IsDnsSubdomain(long_name));
  const std::string at_limit = long_name.substr(0, 253);
  ASSERT_EQ(at_limit.back(), 'a');
  EXPECT_TRUE(IsDnsSubdomain(at_limit));
}

TEST(IsDnsSubdomain, RefusesEmptyLabelsAndBadLabels) {
  const std::vector<std::string> bad_names = {"", ".", "a.", ".a", "a..b", "a.-b", "a.B",
                                               std::string(64, 'a') + ".b", "a,b", "a=b"};
  for (const std::string& bad : bad_names) {
    SCOPED_TRACE("'" + bad + "'");
    EXPECT_FALSE(IsDnsSubdomain(bad));
  }
}

}  // namespace
}  // namespace fleet
