// StatusFromResponse: HTTP codes and API Status bodies map to codes with their reasons, causes and
// Retry-After; bodies that are not a Status (or not JSON at all) never throw.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fleet/kube/status.h"

namespace fleet::kube {
namespace {

std::string StatusBody(int code, const std::string& reason, const std::string& message,
                       const nlohmann::json& details = nullptr) {
  nlohmann::json body = {{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Failure"},
                         {"code", code},     {"reason", reason},  {"message", message}};
  if (!details.is_null()) body["details"] = details;
  return body.dump();
}

TEST(StatusFromResponseTest, SuccessCodesAreOk) {
  EXPECT_TRUE(StatusFromResponse(200, "{}").ok());
  EXPECT_TRUE(StatusFromResponse(201, "").ok());
  EXPECT_TRUE(StatusFromResponse(202, "not json").ok());
}

TEST(StatusFromResponseTest, NotFoundKeepsTheServersMessage) {
  ApiStatus s = StatusFromResponse(404, StatusBody(404, "NotFound", "pods \"x\" not found"));
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_EQ(s.message(), "pods \"x\" not found");
  EXPECT_EQ(s.reason(), "NotFound");
  EXPECT_EQ(s.http_status(), 404);
  EXPECT_FALSE(s.IsRetryable());
}

TEST(StatusFromResponseTest, ConflictTellsAlreadyExistsFromStaleUpdateByReason) {
  EXPECT_EQ(StatusFromResponse(409, StatusBody(409, "AlreadyExists", "exists")).code(), Code::kAlreadyExists);
  EXPECT_EQ(StatusFromResponse(409, StatusBody(409, "Conflict", "the object has been modified")).code(),
            Code::kConflict);
  EXPECT_EQ(StatusFromResponse(409, "").code(), Code::kConflict);
}

TEST(StatusFromResponseTest, InvalidCarriesFieldCauses) {
  const nlohmann::json details = nlohmann::json::parse(
      R"({"name":"p","kind":"pods","causes":[{"reason":"FieldValueRequired","field":"spec.containers",)"
      R"("message":"Required value"},{"reason":"FieldValueInvalid","field":"metadata.name","message":"bad"}]})");
  ApiStatus s = StatusFromResponse(422, StatusBody(422, "Invalid", "Pod \"p\" is invalid", details));
  EXPECT_EQ(s.code(), Code::kInvalid);
  ASSERT_EQ(s.causes().size(), 2u);
  EXPECT_EQ(s.causes()[0].type, "FieldValueRequired");
  EXPECT_EQ(s.causes()[0].field, "spec.containers");
  EXPECT_EQ(s.causes()[0].message, "Required value");
  EXPECT_EQ(s.causes()[1].field, "metadata.name");
  EXPECT_NE(s.ToString().find("spec.containers: Required value"), std::string::npos) << s.ToString();
}

TEST(StatusFromResponseTest, CauseTypeIsReadFromReasonOrType) {
  ApiStatus s = StatusFromResponse(
      422, StatusBody(422, "Invalid", "bad", {{"causes", {{{"type", "FieldValueInvalid"}, {"field", "spec.x"}}}}}));
  ASSERT_EQ(s.causes().size(), 1u);
  EXPECT_EQ(s.causes()[0].type, "FieldValueInvalid");
}

TEST(StatusFromResponseTest, TooManyRequestsHonoursRetryAfterHeaderOverBody) {
  ApiStatus from_header =
      StatusFromResponse(429, StatusBody(429, "TooManyRequests", "slow down", {{"retryAfterSeconds", 7}}),
                         std::chrono::seconds(2));
  EXPECT_EQ(from_header.code(), Code::kTooManyRequests);
  EXPECT_TRUE(from_header.IsRetryable());
  ASSERT_TRUE(from_header.retry_after());
  EXPECT_EQ(*from_header.retry_after(), std::chrono::seconds(2));

  ApiStatus from_body =
      StatusFromResponse(429, StatusBody(429, "TooManyRequests", "slow down", {{"retryAfterSeconds", 7}}));
  ASSERT_TRUE(from_body.retry_after());
  EXPECT_EQ(*from_body.retry_after(), std::chrono::seconds(7));

  EXPECT_FALSE(StatusFromResponse(429, "").retry_after());
}

TEST(StatusFromResponseTest, ServerErrorsAreUnavailableAndRetryable) {
  for (int code : {500, 502, 503, 504}) {
    ApiStatus s = StatusFromResponse(code, "<html>bad gateway</html>");
    EXPECT_EQ(s.code(), Code::kUnavailable) << code;
    EXPECT_TRUE(s.IsRetryable()) << code;
  }
}

TEST(StatusFromResponseTest, ClientErrorsMapToTheirCodes) {
  EXPECT_EQ(StatusFromResponse(400, "").code(), Code::kBadRequest);
  EXPECT_EQ(StatusFromResponse(401, "").code(), Code::kUnauthorized);
  EXPECT_EQ(StatusFromResponse(403, "").code(), Code::kForbidden);
  EXPECT_EQ(StatusFromResponse(405, "").code(), Code::kBadRequest);
  EXPECT_EQ(StatusFromResponse(410, StatusBody(410, "Expired", "too old resource version")).code(), Code::kGone);
  EXPECT_EQ(StatusFromResponse(415, "").code(), Code::kBadRequest);
}

TEST(StatusFromResponseTest, NonStatusBodyKeepsHttpMappingWithATrimmedExcerpt) {
  ApiStatus s = StatusFromResponse(503, "upstream\nconnect error " + std::string(1000, 'x'));
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_EQ(s.message().rfind("HTTP 503: upstream connect error", 0), 0u) << s.message();
  EXPECT_LT(s.message().size(), 260u);
}

TEST(StatusFromResponseTest, TruncatedOrGarbageBodiesNeverThrow) {
  const std::string full = StatusBody(404, "NotFound", "gone");
  for (size_t cut = 0; cut < full.size(); ++cut) {
    ApiStatus s = StatusFromResponse(404, full.substr(0, cut));
    EXPECT_EQ(s.code(), Code::kNotFound) << cut;
  }
  EXPECT_EQ(StatusFromResponse(500, std::string("\xff\xfe\x00{[", 5)).code(), Code::kUnavailable);
  EXPECT_EQ(StatusFromResponse(422, R"({"kind":"Status","details":{"causes":"not a list"}})").code(), Code::kInvalid);
  EXPECT_EQ(StatusFromResponse(422, R"({"kind":"Status","details":{"causes":[1,"x",null]}})").causes().size(), 0u);
  EXPECT_EQ(StatusFromResponse(404, std::string(100000, '[')).code(), Code::kNotFound);
}

TEST(StatusFromResponseTest, WatchErrorEventUsesTheCodeInsideTheStatus) {
  ApiStatus s = StatusFromResponse(0, StatusBody(410, "Expired", "too old resource version: 1 (5)"));
  EXPECT_EQ(s.code(), Code::kGone);
  EXPECT_EQ(s.reason(), "Expired");
  EXPECT_EQ(s.http_status(), 410);
}

TEST(StatusFromResponseTest, UnexpectedStatusLinesAreMalformed) {
  EXPECT_EQ(StatusFromResponse(302, "").code(), Code::kMalformed);
  EXPECT_EQ(StatusFromResponse(0, "").code(), Code::kMalformed);
}

TEST(ApiStatusTest, ToStringNamesCodeMessageAndHttpStatus) {
  EXPECT_EQ(ApiStatus().ToString(), "OK");
  EXPECT_EQ(ApiStatus(Code::kNotFound, "pods \"x\" not found", 404).ToString(),
            "NotFound: pods \"x\" not found (HTTP 404)");
  EXPECT_STREQ(CodeName(Code::kTooManyRequests), "TooManyRequests");
}

TEST(StatusOrTest, HoldsAValueOrAStatus) {
  StatusOr<int> value(5);
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, 5);
  StatusOr<int> error(ApiStatus(Code::kGone, "expired"));
  EXPECT_FALSE(error.ok());
  EXPECT_EQ(error.status().code(), Code::kGone);
}

}  // namespace
}  // namespace fleet::kube
