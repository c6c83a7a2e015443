// The elastic contract (elastic_contract.h): the node count's one parser and its two spellings, and
// the job id rule, which fleetrun and the operator share.
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fleet/runtime/elastic_contract.h"

namespace fleet {
namespace {

using ::testing::HasSubstr;

NpRange MustParse(const std::string& text) {
  auto np = ParseNpRange(text);
  EXPECT_TRUE(np.ok()) << "'" << text << "': " << np.error();
  return np.ok() ? *np : NpRange{};
}

TEST(ElasticNp, FixedAndRangeForms) {
  EXPECT_EQ(MustParse("3"), (NpRange{3, 3}));
  EXPECT_TRUE(MustParse("3").fixed());
  EXPECT_EQ(MustParse("2:4"), (NpRange{2, 4}));
  EXPECT_FALSE(MustParse("2:4").fixed());
  EXPECT_EQ(MustParse("2:2"), (NpRange{2, 2})) << "MIN:MAX with MIN == MAX is the fixed form";
  EXPECT_EQ(MustParse(" 2:4\n"), (NpRange{2, 4})) << "env values may carry surrounding whitespace";
}

TEST(ElasticNp, FormatsRoundTrip) {
  for (const NpRange np : {NpRange{1, 1}, NpRange{3, 3}, NpRange{2, 5}, NpRange{1, 10000}}) {
    EXPECT_EQ(MustParse(FormatNpRange(np)), np) << FormatNpRange(np);
    EXPECT_EQ(MustParse(FormatNpShort(np)), np) << FormatNpShort(np);
  }
  for (const std::string text : {"1", "7", "2:5", "1:10000"}) {
    EXPECT_EQ(FormatNpShort(MustParse(text)), text) << "the short form is the one a user writes";
  }
}

TEST(ElasticNp, RangeFormIsAlwaysMinColonMax) {
  // PADDLE_ELASTIC_NP as the operator writes it: Paddle's elastic launcher reads both bounds from it.
  EXPECT_EQ(FormatNpRange(NpRange{2, 5}), "2:5");
  EXPECT_EQ(FormatNpRange(NpRange{3, 3}), "3:3");
  EXPECT_EQ(FormatNpShort(NpRange{3, 3}), "3");
}

TEST(ElasticNp, MalformedValuesAreRefusedWithTheReason) {
  // Paddle turns 0 into 1 and a MAX below MIN into MIN silently; both are mistakes worth a message.
  struct Case {
    std::string text;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"", "whole numbers"},       {"two", "whole numbers"},     {"2.5", "whole numbers"},
      {"-1", "whole numbers"},     {"2:", "whole numbers"},      {":4", "whole numbers"},
      {"+2", "whole numbers"},     {"2:4x", "whole numbers"},    {"1:2:3", "must be N or MIN:MAX"},
      {"0", "at least 1 node"},    {"0:2", "at least 1 node"},   {"3:2", "MAX is below MIN"},
      {"99999999999", "whole numbers"},
  };
  for (const Case& c : cases) {
    auto np = ParseNpRange(c.text);
    ASSERT_FALSE(np.ok()) << "'" << c.text << "' accepted";
    EXPECT_THAT(np.error(), HasSubstr(c.why)) << "'" << c.text << "'";
    EXPECT_EQ(np.error().find('\n'), std::string::npos);
  }
}

TEST(ElasticJobId, NamesOneJobsKeys) {
  EXPECT_TRUE(CheckElasticJobId("train-3-0b9f6a3e").ok());
  auto nested = CheckElasticJobId("a/b");
  ASSERT_FALSE(nested.ok());
  EXPECT_THAT(nested.error(), HasSubstr("'a/b' must not contain '/'"));
  EXPECT_FALSE(CheckElasticJobId("").ok());
}

}  // namespace
}  // namespace fleet
