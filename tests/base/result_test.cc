// result.h: Result/Status and the return-on-error macros, through functions that use them.
#include "fleet/base/result.h"

#include <memory>
#include <string>

#include <gtest/gtest.h>

namespace fleet {
namespace {

Result<int> Half(int n) {
  if (n % 2 != 0) return Error{std::to_string(n) + " is odd"};
  return n / 2;
}

Status CheckEven(int n) {
  FLEET_RETURN_IF_ERROR(Half(n));
  return OkStatus();
}

Result<int> Quarter(int n) {
  FLEET_ASSIGN_OR_RETURN(const int half, Half(n));
  FLEET_ASSIGN_OR_RETURN(int quarter, Half(half));   // two in one scope: distinct temporaries
  return quarter;
}

// The value is moved out, so move-only values pass through.
Result<std::unique_ptr<int>> Boxed(int n) {
  if (n < 0) return Error{"negative"};
  return std::make_unique<int>(n);
}

Result<int> Unbox(int n) {
  std::unique_ptr<int> box;
  FLEET_ASSIGN_OR_RETURN(box, Boxed(n));   // assigns an existing variable
  return *box;
}

TEST(Result, HoldsAValueOrAnError) {
  const Result<int> value = Half(8);
  ASSERT_TRUE(value.ok());
  EXPECT_TRUE(static_cast<bool>(value));
  EXPECT_EQ(*value, 4);
  const Result<int> error = Half(3);
  EXPECT_FALSE(error.ok());
  EXPECT_EQ(error.error(), "3 is odd");
  EXPECT_TRUE(OkStatus().ok());
}

TEST(ReturnIfError, PassesTheErrorUpUnchangedAndContinuesOnSuccess) {
  EXPECT_TRUE(CheckEven(4).ok());
  const Status odd = CheckEven(5);
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.error(), "5 is odd");
}

TEST(AssignOrReturn, DeclaresOrAssignsTheValueAndReturnsTheFirstError) {
  EXPECT_EQ(*Quarter(12), 3);
  EXPECT_EQ(Quarter(7).error(), "7 is odd");
  EXPECT_EQ(Quarter(6).error(), "3 is odd");   // the second step's error
  EXPECT_EQ(*Unbox(5), 5);
  EXPECT_EQ(Unbox(-1).error(), "negative");
}

TEST(AssignOrReturn, EvaluatesItsExpressionOnce) {
  int calls = 0;
  auto counted = [&calls]() -> Result<int> {
    ++calls;
    return 1;
  };
  auto use = [&]() -> Result<int> {
    FLEET_ASSIGN_OR_RETURN(int v, counted());
    FLEET_RETURN_IF_ERROR(counted());
    return v;
  };
  EXPECT_EQ(*use(), 1);
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace fleet
