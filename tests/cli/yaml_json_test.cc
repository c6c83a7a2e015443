#include "fleet/cli/yaml_json.h"

#include <gtest/gtest.h>

namespace fleet::cli {
namespace {

Json One(const std::string& text) {
  auto docs = ParseYamlDocuments(text);
  EXPECT_TRUE(docs.ok()) << docs.error();
  EXPECT_EQ(docs.ok() ? docs->size() : 0u, 1u);
  return docs.ok() && !docs->empty() ? (*docs)[0] : Json();
}

TEST(FleetctlYamlTest, PlainScalarsReadAsKubernetesReadsThem) {
  const Json v = One(R"(
a: 1
b: -42
c: 0x1F
d: 0o17
e: 017
f: 0b101
g: 1.5
h: 1e3
i: .inf
j: true
k: yes
l: Off
m: ~
n:
o: null
p: "1"
q: 'true'
r: !!str 12
s: v1.2
t: 6170-6179
u: 2024-01-02T03:04:05Z
)");
  EXPECT_EQ(v["a"], 1);
  EXPECT_EQ(v["b"], -42);
  EXPECT_EQ(v["c"], 31);
  EXPECT_EQ(v["d"], 15);
  EXPECT_EQ(v["e"], 15);
  EXPECT_EQ(v["f"], 5);
  EXPECT_EQ(v["g"], 1.5);
  EXPECT_EQ(v["h"], 1000.0);
  EXPECT_TRUE(v["i"].is_number_float());
  EXPECT_EQ(v["j"], true);
  EXPECT_EQ(v["k"], true);
  EXPECT_EQ(v["l"], false);
  EXPECT_TRUE(v["m"].is_null());
  EXPECT_TRUE(v["n"].is_null());
  EXPECT_TRUE(v["o"].is_null());
  EXPECT_EQ(v["p"], "1");
  EXPECT_EQ(v["q"], "true");
  EXPECT_EQ(v["r"], "12");
  EXPECT_EQ(v["s"], "v1.2");
  EXPECT_EQ(v["t"], "6170-6179");
  EXPECT_EQ(v["u"], "2024-01-02T03:04:05Z");
}

TEST(FleetctlYamlTest, DocumentsAnchorsAndErrors) {
  auto docs = ParseYamlDocuments("---\na: &x {b: [1, 2]}\nc: *x\n---\n---\n# only a comment\n---\nd: 1\n");
  ASSERT_TRUE(docs.ok()) << docs.error();
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[0]["c"], Json::parse(R"({"b": [1, 2]})"));
  EXPECT_EQ((*docs)[1], Json({{"d", 1}}));
  auto bad = ParseYamlDocuments("a: 1\nb: [1, 2\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().rfind("line 3, column 1: ", 0), 0u) << bad.error();
}

TEST(FleetctlYamlTest, WrittenYamlReadsBackAsTheSameJson) {
  const Json v = Json::parse(R"({
    "strings": ["1", "0x10", "true", "no", "null", "~", "", " padded ", "a: b", "# not a comment", "- dash",
                "line\nbreak", "tab\there", "{flow}", "[x]", "'quoted'", "\"dq\"", "6170-6179", "v1.2", "1e3",
                "nvidia.com/gpu", "*", "&a", "!tag", "%x", "@x", "`x"],
    "numbers": [0, -7, 3.25, 1e-9, 123456789012],
    "bools": [true, false], "nothing": null,
    "empty": {"map": {}, "list": []},
    "nested": [{"name": "paddle", "args": ["--lr=0.1"]}, [1, [2, []]]],
    "keys": {"1": "one", "true": "yes", "": "empty", "a b": "space", "x:y": "colon"}
  })");
  const std::string yaml = ToYaml(v);
  EXPECT_EQ(yaml.back(), '\n');
  EXPECT_EQ(One(yaml), v) << yaml;
}

TEST(FleetctlYamlTest, BlockStyleForPeople) {
  EXPECT_EQ(ToYaml(Json::parse(R"({"kind": "FleetJob", "spec": {"worker": {"replicas": 2}, "args": ["a", "1"]}})")),
            "kind: FleetJob\n"
            "spec:\n"
            "  args:\n"
            "    - a\n"
            "    - \"1\"\n"
            "  worker:\n"
            "    replicas: 2\n");
}

}  // namespace
}  // namespace fleet::cli
