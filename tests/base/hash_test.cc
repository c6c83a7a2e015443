#include "fleet/base/hash.h"

#include <gtest/gtest.h>

#include <string>

namespace fleet {
namespace {

// The published FNV-1a 64 test vectors (Fowler/Noll/Vo), so that checkpoints and digests written by
// one build are read back by another.
TEST(Fnv1a64, MatchesThePublishedVectors) {
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ull);
}

TEST(Fnv1a64, ContinuesOverPieces) {
  EXPECT_EQ(Fnv1a64("bar", Fnv1a64("foo")), Fnv1a64("foobar"));
  EXPECT_EQ(Fnv1a64(std::string("a\0b", 3)), Fnv1a64("b", Fnv1a64(std::string(1, '\0'), Fnv1a64("a"))));
  EXPECT_NE(Fnv1a64("ab"), Fnv1a64("ba"));
}

}  // namespace
}  // namespace fleet
