// endpoint.h: the strict host / port / endpoint-list parsers. Every error names the offending entry.
#include "fleet/runtime/endpoint.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace fleet {
namespace {

template <typename Info>
std::string CaseName(const Info& info) { return info.param.name; }

// ---- ParseEndpoint ----

struct EndpointCase {
  std::string name;
  std::string input;
  std::string host;   // expected on success
  int port = 0;
  std::string error;  // expected message; empty = must succeed
};

class ParseEndpointTest : public ::testing::TestWithParam<EndpointCase> {};

TEST_P(ParseEndpointTest, ParsesOrNamesTheOffendingEntry) {
  const EndpointCase& c = GetParam();
  auto parsed = ParseEndpoint(c.input);
  if (c.error.empty()) {
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_EQ(parsed->host, c.host);
    EXPECT_EQ(parsed->port, c.port);
    EXPECT_EQ(parsed->ToString(), c.host + ":" + std::to_string(c.port));
  } else {
    ASSERT_FALSE(parsed.ok()) << "parsed as " << parsed->ToString();
    EXPECT_EQ(parsed.error(), c.error);
  }
}

const char kBadHostChars[] = "contains a character Paddle cannot parse in an endpoint (':' ',' ';', space or a control character)";

INSTANTIATE_TEST_SUITE_P(
    Endpoint, ParseEndpointTest,
    ::testing::Values(
        EndpointCase{"Ipv4", "10.0.0.1:6070", "10.0.0.1", 6070, ""},
        EndpointCase{"DnsName", "worker-0.job.svc:1", "worker-0.job.svc", 1, ""},
        EndpointCase{"HighestPort", "h:65535", "h", 65535, ""},
        EndpointCase{"LeadingZerosInPort", "h:080", "h", 80, ""},
        EndpointCase{"SurroundingWhitespaceTrimmed", " \t10.0.0.1:6070\r\n", "10.0.0.1", 6070, ""},
        EndpointCase{"NoPort", "10.0.0.1", "", 0, "endpoint '10.0.0.1' has no port (expected host:port)"},
        EndpointCase{"EmptyPort", "10.0.0.1:", "", 0,
                     "endpoint '10.0.0.1:' has a port that is not a number: ''"},
        EndpointCase{"PortZero", "10.0.0.1:0", "", 0,
                     "endpoint '10.0.0.1:0' has port 0, out of range 1-65535"},
        EndpointCase{"Port65536", "10.0.0.1:65536", "", 0,
                     "endpoint '10.0.0.1:65536' has port 65536, out of range 1-65535"},
        EndpointCase{"NegativePort", "10.0.0.1:-1", "", 0,
                     "endpoint '10.0.0.1:-1' has port -1, out of range 1-65535"},
        EndpointCase{"NonNumericPort", "10.0.0.1:http", "", 0,
                     "endpoint '10.0.0.1:http' has a port that is not a number: 'http'"},
        EndpointCase{"PortWithTrailingGarbage", "10.0.0.1:80x", "", 0,
                     "endpoint '10.0.0.1:80x' has a port that is not a number: '80x'"},
        EndpointCase{"PortBeyondLong", "h:99999999999999999999", "", 0,
                     "endpoint 'h:99999999999999999999' has a port that is not a number: "
                     "'99999999999999999999'"},
        EndpointCase{"Ipv6Literal", "[::1]:6070", "", 0,
                     "endpoint '[::1]:6070' has more than one ':' (IPv6 literals cannot be used: "
                     "Paddle splits on ':')"},
        EndpointCase{"EmptyHost", ":6070", "", 0, "endpoint ':6070': empty host name"},
        EndpointCase{"SpaceInHost", "a b:6070", "", 0,
                     "endpoint 'a b:6070': host 'a b' " + std::string(kBadHostChars)},
        EndpointCase{"SemicolonInHost", "a;b:6070", "", 0,
                     "endpoint 'a;b:6070': host 'a;b' " + std::string(kBadHostChars)}),
    CaseName<::testing::TestParamInfo<EndpointCase>>);

// ---- ParsePort / ParseHost ----

TEST(ParsePort, AcceptsOneTo65535AndNamesTheValueInErrors) {
  EXPECT_EQ(*ParsePort("1", "PADDLE_PORT"), 1);
  EXPECT_EQ(*ParsePort("65535", "PADDLE_PORT"), 65535);
  EXPECT_EQ(ParsePort("0", "PADDLE_PORT").error(), "PADDLE_PORT has port 0, out of range 1-65535");
  EXPECT_EQ(ParsePort("65536", "PADDLE_PORT").error(),
            "PADDLE_PORT has port 65536, out of range 1-65535");
  EXPECT_EQ(ParsePort("", "PADDLE_PORT").error(), "PADDLE_PORT has a port that is not a number: ''");
  EXPECT_EQ(ParsePort(" 80", "PADDLE_PORT").error(),
            "PADDLE_PORT has a port that is not a number: ' 80'");
  EXPECT_EQ(ParsePort("+80", "PADDLE_PORT").error(),
            "PADDLE_PORT has a port that is not a number: '+80'");
}

TEST(ParseHost, AcceptsNamesPaddleCanSplitAndRefusesSeparatorsAndWhitespace) {
  EXPECT_EQ(*ParseHost("10.0.0.1"), "10.0.0.1");
  EXPECT_EQ(*ParseHost("trainer-3.fleet.svc.cluster.local"), "trainer-3.fleet.svc.cluster.local");
  EXPECT_EQ(ParseHost("").error(), "empty host name");
  struct Bad { const char* name; std::string host; };
  // The header promises "no ':' or ',' or whitespace".
  // Control characters would corrupt the env entry the host ends up in.
  for (const Bad& bad : {Bad{"colon", "a:b"}, Bad{"comma", "a,b"}, Bad{"semicolon", "a;b"},
                         Bad{"space", "a b"}, Bad{"tab", "a\tb"}, Bad{"newline", "a\nb"},
                         Bad{"carriage_return", "a\rb"}}) {
    SCOPED_TRACE(bad.name);
    auto parsed = ParseHost(bad.host);
    ASSERT_FALSE(parsed.ok()) << "accepted " << *parsed;
    EXPECT_EQ(parsed.error(), "host '" + bad.host + "' " + kBadHostChars);
  }
}

// ---- ParseEndpointList / ParseEndpointListPortsOptional ----

struct ListCase {
  std::string name;
  std::string input;
  bool ports_optional = false;
  std::vector<Endpoint> expected;
  std::string error;
};

class ParseEndpointListTest : public ::testing::TestWithParam<ListCase> {};

TEST_P(ParseEndpointListTest, ParsesOrNamesTheOffendingEntry) {
  const ListCase& c = GetParam();
  auto parsed = c.ports_optional ? ParseEndpointListPortsOptional(c.input) : ParseEndpointList(c.input);
  if (c.error.empty()) {
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_EQ(*parsed, c.expected);
  } else {
    ASSERT_FALSE(parsed.ok()) << "parsed as " << JoinEndpoints(*parsed);
    EXPECT_EQ(parsed.error(), c.error);
  }
}

INSTANTIATE_TEST_SUITE_P(
    EndpointList, ParseEndpointListTest,
    ::testing::Values(
        ListCase{"EmptyStringIsEmptyList", "", false, {}, ""},
        ListCase{"BlankStringIsEmptyList", "  \t", false, {}, ""},
        ListCase{"OneEntry", "10.0.0.1:6070", false, {{"10.0.0.1", 6070}}, ""},
        ListCase{"KeepsOrder", "b:2,a:1,c:3", false, {{"b", 2}, {"a", 1}, {"c", 3}}, ""},
        ListCase{"TrimsEachEntry", " a:1 ,\tb:2 ", false, {{"a", 1}, {"b", 2}}, ""},
        ListCase{"SameHostDifferentPorts", "a:1,a:2", false, {{"a", 1}, {"a", 2}}, ""},
        ListCase{"EntryWithoutPort", "a:1,b", false, {},
                 "endpoint 'b' has no port (expected host:port)"},
        ListCase{"EntryWithPortZero", "a:1,b:0", false, {},
                 "endpoint 'b:0' has port 0, out of range 1-65535"},
        ListCase{"Ipv6Entry", "a:1,::1:2", false, {},
                 "endpoint '::1:2' has more than one ':' (IPv6 literals cannot be used: Paddle splits on ':')"},
        ListCase{"EmptyMiddleEntry", "a:1,,b:2", false, {},
                 "endpoint list 'a:1,,b:2' has an empty entry"},
        ListCase{"TrailingComma", "a:1,", false, {}, "endpoint list 'a:1,' has an empty entry"},
        ListCase{"BlankEntry", "a:1, ,b:2", false, {}, "endpoint list 'a:1, ,b:2' has an empty entry"},
        ListCase{"CommasOnly", ",,", false, {}, "endpoint list ',,' has an empty entry"},
        ListCase{"Duplicate", "a:1,b:2,a:1", false, {}, "endpoint 'a:1' appears twice in 'a:1,b:2,a:1'"},
        ListCase{"DuplicateAfterTrimming", "a:1, a:1", false, {},
                 "endpoint 'a:1' appears twice in 'a:1, a:1'"},
        ListCase{"OptionalBareHosts", "a, b", true, {{"a", 0}, {"b", 0}}, ""},
        ListCase{"OptionalBareHostsMayRepeat", "a,a", true, {{"a", 0}, {"a", 0}}, ""},
        ListCase{"OptionalAllWithPorts", "a:1,b:2", true, {{"a", 1}, {"b", 2}}, ""},
        ListCase{"OptionalMixed", "a:1,b", true, {},
                 "endpoint list 'a:1,b' mixes entries with and without ports; give a port for every "
                 "entry or for none"},
        ListCase{"OptionalMixedBareFirst", "a,b:2", true, {},
                 "endpoint list 'a,b:2' mixes entries with and without ports; give a port for every "
                 "entry or for none"},
        ListCase{"OptionalDuplicateWithPorts", "a:1,a:1", true, {},
                 "endpoint 'a:1' appears twice in 'a:1,a:1'"},
        ListCase{"OptionalBadBareHost", "a,b c", true, {}, "host 'b c' " + std::string(kBadHostChars)},
        ListCase{"OptionalBadPort", "a:1,b:65536", true, {},
                 "endpoint 'b:65536' has port 65536, out of range 1-65535"},
        ListCase{"OptionalEmptyEntry", "a,,b", true, {}, "endpoint list 'a,,b' has an empty entry"}),
    CaseName<::testing::TestParamInfo<ListCase>>);

TEST(JoinEndpoints, JoinsHostPortWithCommasAndRoundTripsThroughTheParser) {
  const std::vector<Endpoint> endpoints = {{"10.0.0.1", 6070}, {"node-b", 1}};
  EXPECT_EQ(JoinEndpoints(endpoints), "10.0.0.1:6070,node-b:1");
  EXPECT_EQ(JoinEndpoints({}), "");
  EXPECT_EQ(*ParseEndpointList(JoinEndpoints(endpoints)), endpoints);
}

}  // namespace
}  // namespace fleet
