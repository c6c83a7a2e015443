// ParseFlags for tests whose command lines are meant to parse: the options, or a test failure.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fleet/launcher/flags.h"

namespace fleet::launcher {

inline LaunchOptions MustParse(const std::vector<std::string>& args) {
  auto parsed = ParseFlags(args);
  EXPECT_TRUE(parsed.ok()) << parsed.error();
  return parsed.ok() ? *parsed : LaunchOptions{};
}

}  // namespace fleet::launcher
