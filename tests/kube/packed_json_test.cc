// packed_json.h: JSON text packed without a DOM must give exactly the bytes packing the DOM gives
// (and reject exactly what nlohmann::json::parse rejects); watch lines and list bodies; what the
// cache reads from packed objects.
#include "packed_json.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace fleet::kube::internal {
namespace {

using Json = nlohmann::json;

// nlohmann's verdict on `text`, packed from its DOM; nullopt-like empty + false when rejected.
bool PackViaDom(const std::string& text, std::string* packed) {
  Json dom = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (dom.is_discarded()) return false;
  *packed = PackJson(dom);
  return true;
}

::testing::AssertionResult SameAsDom(const std::string& text) {
  std::string via_dom, via_text, error;
  const bool dom_ok = PackViaDom(text, &via_dom);
  const bool text_ok = PackJsonText(text, &via_text, &error);
  if (dom_ok != text_ok) {
    return ::testing::AssertionFailure() << "nlohmann " << (dom_ok ? "accepts" : "rejects") << " but PackJsonText "
                                         << (text_ok ? "accepts" : "rejects (" + error + ")")
                                         << " the text: " << ::testing::PrintToString(text.substr(0, 300));
  }
  if (dom_ok && via_dom != via_text) {
    return ::testing::AssertionFailure() << "different bytes for " << ::testing::PrintToString(text.substr(0, 300));
  }
  if (dom_ok && UnpackJson(via_text) != Json::parse(text)) {
    return ::testing::AssertionFailure() << "does not unpack to the parsed value: " << text.substr(0, 300);
  }
  return ::testing::AssertionSuccess() << (dom_ok ? "accepted" : "rejected");
}

const char kRunningPod[] = R"({"metadata":{"annotations":{"fleet.paddlepaddle.org/spec-hash":"5d41402abc4b2a76b9719d911017c592"},"labels":{"app.kubernetes.io/name":"fleetjob","fleet.paddlepaddle.org/job-name":"trainer","fleet.paddlepaddle.org/replica-type":"worker"},"ownerReferences":[{"apiVersion":"fleet.paddlepaddle.org/v1alpha1","blockOwnerDeletion":true,"controller":true,"kind":"FleetJob","name":"trainer","uid":"3f1c2a4e-8f7b-4c1d-9a2e-6b5d4c3b2a19"}],"name":"trainer-worker-0","namespace":"default","uid":"1f025231-84ae-4041-a34a-33595d3e6050","creationTimestamp":"2026-11-21T03:54:02Z","generation":1,"resourceVersion":"15"},"spec":{"containers":[{"args":["--nnodes","4","train.py","--epochs","10"],"command":["python","-m","paddle.distributed.launch"],"env":[{"name":"PADDLE_TRAINER_ID","value":"0"},{"name":"POD_IP","valueFrom":{"fieldRef":{"fieldPath":"status.podIP"}}}],"image":"registry.example.com/paddle/paddle:2.6.1-gpu-cuda12.0","name":"paddle","ports":[{"containerPort":6170,"name":"master","protocol":"TCP"}],"resources":{"limits":{"cpu":"4","memory":"16Gi","nvidia.com/gpu":"1"}}}],"restartPolicy":"Never","terminationGracePeriodSeconds":30,"securityContext":{},"priority":0,"nodeName":"node-0"},"apiVersion":"v1","kind":"Pod","status":{"phase":"Running","conditions":[{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-21T03:54:02Z"}],"podIPs":[{"ip":"10.244.0.3"}],"containerStatuses":[{"name":"paddle","ready":true,"restartCount":0,"state":{"running":{"startedAt":"2026-11-21T03:54:02Z"}},"lastState":{},"started":true}]}})";

TEST(PackJsonTextTest, ARunningPodPacksToTheSameBytesAsItsDom) {
  EXPECT_TRUE(SameAsDom(kRunningPod));
  // As the Python fake writes it (", " and ": " separators) and pretty-printed.
  EXPECT_TRUE(SameAsDom(Json::parse(kRunningPod).dump(2)));
  EXPECT_TRUE(SameAsDom(" \t\r\n" + Json::parse(kRunningPod).dump(1, '\t') + "\n\n "));
}

TEST(PackJsonTextTest, UnicodeAndEscapes) {
  EXPECT_TRUE(SameAsDom(u8R"({"utf8":"żółć ✓ 𝄞 日本語","key ✓":1,"ż":2,"z":3,"é":4})"));
  EXPECT_TRUE(SameAsDom(R"({"escaped":"\u017c\u00f3\u0142\u0107 \u2713 \ud834\udd1e \uD83D\uDE00"})"));
  EXPECT_TRUE(SameAsDom(R"(["\"","\\","\/","\b","\f","\n","\r","\t","\u0000","a\u0000b","\u001f","\u007f","\u0080"])"));
  EXPECT_TRUE(SameAsDom(R"({"mixed":"plain then \"quoted\" then \u00e9 then raw é then \\ end"})"));
  EXPECT_TRUE(SameAsDom(R"({"\u006b\u0065\u0079":"escaped key","key":"plain key, same bytes: a duplicate"})"));
  EXPECT_TRUE(SameAsDom("\"\xf4\x8f\xbf\xbf\""));   // U+10FFFF, the last code point
  EXPECT_TRUE(SameAsDom("\"\xef\xbf\xbf\""));       // U+FFFF
  EXPECT_TRUE(SameAsDom("\"\xed\x9f\xbf\""));       // U+D7FF, just below the surrogates
  EXPECT_TRUE(SameAsDom("\xef\xbb\xbf{\"bom\":true}"));   // a byte order mark is skipped, as nlohmann does
}

TEST(PackJsonTextTest, NumbersKeepTheirTypeAtEveryBoundary) {
  for (const char* n :
       {"0", "-0", "1", "127", "128", "255", "256", "65535", "65536", "4294967295", "4294967296",
        "9223372036854775807", "9223372036854775808", "18446744073709551615", "18446744073709551616",
        "100000000000000000000000", "-1", "-31", "-32", "-33", "-128", "-129", "-32768", "-32769", "-2147483648",
        "-2147483649", "-9223372036854775807", "-9223372036854775808", "-9223372036854775809",
        "-100000000000000000000000", "0.0", "-0.0", "1.5", "0.1", "1e10", "1E10", "1e+10", "1e-10", "123.456e+7",
        "5e-324", "2.2250738585072014e-308", "1.7976931348623157e308", "1e-400", "0e0", "-0e-0",
        "3.141592653589793238462643383279"}) {
    EXPECT_TRUE(SameAsDom(n));
    EXPECT_TRUE(SameAsDom(std::string("{\"n\":[") + n + "," + n + "]}"));
  }
  std::string packed, error;
  ASSERT_TRUE(PackJsonText("[18446744073709551616,-9223372036854775809,-0,0]", &packed, &error));
  const Json back = UnpackJson(packed);
  EXPECT_TRUE(back[0].is_number_float());
  EXPECT_TRUE(back[1].is_number_float());
  EXPECT_TRUE(back[2].is_number_integer());
  EXPECT_TRUE(back[3].is_number_unsigned());
  std::string digits(400, '9');
  EXPECT_TRUE(SameAsDom(digits)) << "overflows to infinity: rejected by both";
  EXPECT_TRUE(SameAsDom("1e400"));
  EXPECT_TRUE(SameAsDom("-1e400"));
}

TEST(PackJsonTextTest, NestedArraysObjectsAndKeyOrder) {
  EXPECT_TRUE(SameAsDom(R"([[],{},[[]],[{}],{"a":[]},[[[[[[1]]]]]],[1,[2,[3,[4,{"x":[5]}]]]]])"));
  EXPECT_TRUE(SameAsDom(R"({"z":1,"y":{"b":[3,2,1],"a":{"d":4,"c":3}},"x":[{"q":1,"p":2},{"n":[{"m":0,"l":1}]}]})"));
  EXPECT_TRUE(SameAsDom(R"({"b":1,"a":2,"b":3,"a":{"z":1},"c":[1],"c":{"x":{"y":2,"x":1}}})"))
      << "duplicates: the last wins, in sorted position";
  EXPECT_TRUE(SameAsDom(R"({"":0,"a":1,"A":2,"aa":3,"a\u0000":4,"_":5,"~":6,"\u00ff":7,"0":8})"));
  // Sizes past the one-byte headers: 16 and 65536 members / elements, 32, 256 and 65536-byte strings.
  for (size_t n : {15u, 16u, 65535u, 65536u}) {
    Json array = Json::array();
    for (size_t i = 0; i < n; ++i) array.push_back(i % 3 == 0 ? Json(i) : Json(std::to_string(i)));
    std::string text = "{";   // keys unsorted in the text

    for (size_t i = 0; i < n; ++i) text += (i ? "," : "") + std::string("\"k") + std::to_string((i * 7919) % n) + "\":" + std::to_string(i);
    text += "}";
    EXPECT_TRUE(SameAsDom(text)) << n << " members";
    EXPECT_TRUE(SameAsDom(array.dump())) << n << " elements";
  }
  for (size_t n : {31u, 32u, 255u, 256u, 65535u, 65536u}) {
    EXPECT_TRUE(SameAsDom(Json{{std::string(n, 'k'), std::string(n, 'v')}}.dump())) << n << "-byte strings";
  }
}

TEST(PackJsonTextTest, RejectsWhatNlohmannRejects) {
  for (const std::string& text : std::vector<std::string>{
       "", " ", "{", "}", "[", "]", "[1,]", "{\"a\":1,}", "{\"a\"}", "{\"a\" 1}", "{1:2}", "[1 2]", "01", "-", "+1",
        ".5", "1.", "1.e5", "1e", "1e+", "--1", "0x10", "NaN", "Infinity", "tru", "nul", "truex", "[true false]",
        "\"abc", "\"\\x\"", "\"\\u12\"", "\"\\u12G4\"", "\"\\ud800\"", "\"\\ud800x\"", "\"\\ud800\\u0041\"",
        "\"\\udc00\"", "\"a\tb\"", std::string("\"a\0b\"", 5), "\"\x01\"", "\"\x80\"", "\"\xc0\x80\"", "\"\xc1\xbf\"",
        "\"\xe0\x80\x80\"", "\"\xed\xa0\x80\"", "\"\xf0\x80\x80\x80\"", "\"\xf4\x90\x80\x80\"", "\"\xf5\x80\x80\x80\"",
        "\"\xff\"", "\"\xc3\"", "\"\xe2\x9c\"", "{} {}", "[1] x", "1 2", "\xef\xbb{}", "\xef{}", "{}\xef\xbb\xbf",
        "/* c */ 1", "[1,2", "{\"a\":[1,{\"b\":}]}", "'a'", "[\"a\",]"}) {
    EXPECT_TRUE(SameAsDom(text));
    std::string packed, error;
    EXPECT_FALSE(PackJsonText(text, &packed, &error)) << ::testing::PrintToString(text);
  }
}

TEST(PackJsonTextTest, NestingDeeperThanTheLimitIsRejected) {
  EXPECT_TRUE(SameAsDom(std::string(500, '[') + std::string(500, ']')));
  // At the limit (compared with the bytes expected, not with the DOM: packing and unpacking DOMs
  // recurse, which a sanitizer's larger stack frames do not survive 10,000 levels deep).
  std::string packed, error;
  const std::string ok = std::string(kMaxPackDepth, '[') + std::string(kMaxPackDepth, ']');
  ASSERT_TRUE(PackJsonText(ok, &packed, &error)) << error;
  EXPECT_EQ(packed, std::string(kMaxPackDepth - 1, '\x91') + '\x90');
  const std::string deep = std::string(kMaxPackDepth + 1, '[') + std::string(kMaxPackDepth + 1, ']');
  EXPECT_FALSE(PackJsonText(deep, &packed, &error));
  EXPECT_NE(error.find("nesting"), std::string::npos) << error;
  std::string type;
  EXPECT_FALSE(PackWatchLine(R"({"type":"ADDED","object":{"a":)" + deep + "}}", &type, &packed, &error));
}

// Random JSON text with the features above (and duplicate keys, odd whitespace), then random
// damage to it: the two parsers must agree on every one.
class RandomJson {
 public:
  explicit RandomJson(uint32_t seed) : rng_(seed) {}

  std::string Text() {
    std::string out;
    Value(&out, 0);
    return out;
  }
  std::string Damage(std::string text) {
    if (text.empty()) return text;
    const size_t at = Pick(text.size());
    switch (Pick(5)) {
      case 0: text[at] = static_cast<char>(Pick(256)); break;
      case 1: text.erase(at, 1); break;
      case 2: {
        static const char kBytes[] = "{}[]\":,\\u0-e.\x80\xc3\xed\xf0 ";
        text.insert(at, 1, kBytes[Pick(sizeof kBytes - 1)]);
        break;
      }
      case 3: text.resize(at); break;
      default: text.insert(at, Pick(2) ? "\\ud800" : "\xef\xbf"); break;
    }
    return text;
  }

 private:
  size_t Pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  void Space(std::string* out) {
    static const char* kSpace[] = {"", "", "", " ", "\n", "\t", "\r\n  "};
    *out += kSpace[Pick(7)];
  }
  void String(std::string* out) {
    static const std::vector<std::string> kPieces = {
        "a",  "metadata", "name", "Z", "0", " ", "\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t",
        "\\u0000", "\\u00e9", "\\u2713", "\\uD834\\uDD1E", "\\uffff", "\xc3\xa9", "\xe2\x9c\x93", "\xf0\x9d\x84\x9e",
        "\x7f", "long-enough-to-leave-the-small-string-buffer"};
    *out += '"';
    for (size_t n = Pick(6); n > 0; --n) *out += kPieces[Pick(kPieces.size())];
    *out += '"';
  }
  void Number(std::string* out) {
    static const std::vector<std::string> kNumbers = {
        "0", "-0", "7", "-7", "127", "128", "-33", "255", "256", "-129", "65536", "-32769", "4294967296",
        "-2147483649", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
        "18446744073709551615", "18446744073709551616", "1.5", "-0.0", "1e3", "2.5E-3", "6.02e+23", "1e-320",
        "123456789012345678901234567890"};
    *out += kNumbers[Pick(kNumbers.size())];
  }
  void Value(std::string* out, int depth) {
    Space(out);
    const size_t kind = depth > 5 ? Pick(5) : Pick(8);
    switch (kind) {
      case 0: *out += Pick(2) ? "true" : "false"; break;
      case 1: *out += "null"; break;
      case 2: case 3: Number(out); break;
      case 4: String(out); break;
      case 5: case 6: {
        *out += '{';
        const size_t n = Pick(4) == 0 ? 16 + Pick(4) : Pick(6);
        static const char* kKeys[] = {"\"a\"", "\"b\"", "\"metadata\"", "\"name\"", "\"\"", "\"\\u0061\"", "\"z\"",
                                      "\"\xc3\xa9\"", "\"k1\"", "\"k10\"", "\"k2\"", "\"A\""};
        for (size_t i = 0; i < n; ++i) {
          if (i) *out += ',';
          Space(out);
          if (Pick(3) == 0) {
            String(out);
          } else {
            *out += kKeys[Pick(12)];
          }
          Space(out);
          *out += ':';
          Value(out, depth + 1);
        }
        Space(out);
        *out += '}';
        break;
      }
      default: {
        *out += '[';
        const size_t n = Pick(4) == 0 ? 15 + Pick(3) : Pick(5);
        for (size_t i = 0; i < n; ++i) {
          if (i) *out += ',';
          Value(out, depth + 1);
        }
        Space(out);
        *out += ']';
      }
    }
    Space(out);
  }

  std::mt19937 rng_;
};

TEST(PackJsonTextTest, RandomTextsAndDamagedOnesAgreeWithTheDom) {
  RandomJson random(20240611);
  int accepted = 0, rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    const std::string text = random.Text();
    ASSERT_TRUE(SameAsDom(text));
    for (int d = 0; d < 4; ++d) {
      const std::string damaged = random.Damage(text);
      ::testing::AssertionResult same = SameAsDom(damaged);
      ASSERT_TRUE(same);
      (std::string(same.message()) == "accepted" ? accepted : rejected)++;
    }
  }
  EXPECT_GT(accepted, 500) << "the damage should leave some texts valid";
  EXPECT_GT(rejected, 5000);
}

// ---- watch lines ----

TEST(PackWatchLineTest, TypeAndObjectAreTakenAndTheRestIgnored) {
  std::string type, packed, error;
  const std::string line = std::string(R"({"type":"MODIFIED","object":)") + kRunningPod + "}";
  ASSERT_TRUE(PackWatchLine(line, &type, &packed, &error)) << error;
  EXPECT_EQ(type, "MODIFIED");
  EXPECT_EQ(packed, PackJson(Json::parse(kRunningPod)));

  ASSERT_TRUE(PackWatchLine(R"( { "object" : {"b":1,"a":[2]} , "extra":[1,{"x":null}], "type" : "ADD\u0045D" } )",
                            &type, &packed, &error))
      << error;
  EXPECT_EQ(type, "ADDED");
  EXPECT_EQ(packed, PackJson(Json::parse(R"({"a":[2],"b":1})")));

  // Repeated members: the last one counts, as in the DOM.
  ASSERT_TRUE(PackWatchLine(R"({"type":"X","object":{"v":1},"type":"DELETED","object":{"v":2}})", &type, &packed,
                            &error));
  EXPECT_EQ(type, "DELETED");
  EXPECT_EQ(UnpackJson(packed), Json::parse(R"({"v":2})"));
}

TEST(PackWatchLineTest, LinesThatAreNotWatchEventsAreRejected) {
  for (const char* line : {"", "not json", "[1]", "\"str\"", "{}", R"({"type":"ADDED"})", R"({"object":{}})",
                           R"({"type":1,"object":{}})", R"({"type":"ADDED","object":[]})",
                           R"({"type":"ADDED","object":null})", R"({"type":"ADDED","object":{}} trailing)",
                           R"({"type":"ADDED","object":{"a":}})", R"({"type":"ADDED","object":{},"object":1})",
                           R"({"type":"ADDED","type":null,"object":{}})", "{\"type\":\"\xff\",\"object\":{}}"}) {
    std::string type, packed, error;
    EXPECT_FALSE(PackWatchLine(line, &type, &packed, &error)) << line;
    EXPECT_FALSE(error.empty()) << line;
  }
}

// ---- list bodies ----

TEST(PackListBodyTest, ItemsArePackedOneByOneAndTheMetadataRead) {
  const Json list = {{"kind", "PodList"},
                     {"apiVersion", "v1"},
                     {"metadata", {{"resourceVersion", "42"}, {"continue", "tok"}, {"remainingItemCount", 3}}},
                     {"items", Json::array({Json::parse(kRunningPod), {{"metadata", {{"name", "b"}}}}, 7})}};
  for (const std::string& body : {list.dump(), list.dump(2)}) {
    std::vector<std::string> items;
    ListBodyInfo info;
    std::string error;
    ASSERT_TRUE(PackListBody(body, [&](std::string_view item) { items.emplace_back(item); }, &info, &error)) << error;
    ASSERT_EQ(items.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(items[i], PackJson(Json::parse(body)["items"][i]));
    EXPECT_EQ(info.resource_version, "42");
    EXPECT_EQ(info.continue_token, "tok");
    // Without a consumer the items are only checked.
    ListBodyInfo skimmed;
    ASSERT_TRUE(PackListBody(body, {}, &skimmed, &error)) << error;
    EXPECT_EQ(skimmed.continue_token, "tok");
  }
  for (const char* body : {R"({"metadata":{"resourceVersion":"5"}})", R"({"items":null,"metadata":{}})",
                           R"({"items":[]})", "{}"}) {
    ListBodyInfo info;
    std::string error;
    int n = 0;
    EXPECT_TRUE(PackListBody(body, [&](std::string_view) { ++n; }, &info, &error)) << body << ": " << error;
    EXPECT_EQ(n, 0);
    EXPECT_EQ(info.continue_token, "");
  }
}

TEST(PackListBodyTest, BodiesThatAreNotListsAreRejected) {
  for (const char* body : {"", "[]", "null", R"({"items":{}})", R"({"items":"x"})", R"({"items":[1,]})",
                           R"({"items":[1],"items":[2]})", R"({"items":[1]} x)", R"({"metadata":{"continue":}})"}) {
    ListBodyInfo info;
    std::string error;
    EXPECT_FALSE(PackListBody(body, {}, &info, &error)) << body;
    EXPECT_FALSE(error.empty());
  }
  ListBodyInfo info;
  std::string error;
  EXPECT_FALSE(PackListBody(R"({"items":{"a":1}})", {}, &info, &error));
  EXPECT_NE(error.find("not an array"), std::string::npos) << error;
}

// ---- what the cache reads from packed objects ----

TEST(WithoutMembersTest, GivesThePackedObjectWithoutThem) {
  const Json pod = Json::parse(kRunningPod);
  Json without = pod;
  without.erase("spec");
  without.erase("kind");
  EXPECT_EQ(WithoutMembers(PackJson(pod), {"spec", "kind", "absent"}), PackJson(without));
  EXPECT_EQ(WithoutMembers(PackJson(pod), {}), PackJson(pod));
  Json wide = Json::object();   // more than 15 members: a map16 header, which may shrink to a fixmap
  for (int i = 0; i < 17; ++i) wide["m" + std::to_string(i)] = i;
  Json narrow = wide;
  narrow.erase("m1");
  narrow.erase("m2");
  EXPECT_EQ(WithoutMembers(PackJson(wide), {"m1", "m2"}), PackJson(narrow));
  EXPECT_EQ(WithoutMembers(PackJson(Json::array({1, 2})), {"spec"}), PackJson(Json::array({1, 2}))) << "not a map";
  const std::string truncated = PackJson(pod).substr(0, 100);
  EXPECT_EQ(WithoutMembers(truncated, {"spec"}), truncated);
}

TEST(ReadPackedMetaTest, FollowsTheRulesTheCacheAppliesToParsedObjects) {
  PackedMeta meta = ReadPackedMeta(PackJson(Json::parse(kRunningPod)));
  EXPECT_EQ(meta.name, "trainer-worker-0");
  EXPECT_EQ(meta.ns, "default");
  EXPECT_EQ(meta.resource_version, "15");
  EXPECT_EQ(meta.owner_uids, std::vector<std::string>{"3f1c2a4e-8f7b-4c1d-9a2e-6b5d4c3b2a19"});
  EXPECT_EQ(meta.labels, (std::vector<std::string>{"app.kubernetes.io/name=fleetjob",
                                                   "fleet.paddlepaddle.org/job-name=trainer",
                                                   "fleet.paddlepaddle.org/replica-type=worker"}));

  const Json odd = Json::parse(R"({"metadata":{"name":7,"namespace":"ns","resourceVersion":["1"],
      "labels":{"z":"last","n":1,"a":"first","e":"","o":{"x":"y"}},
      "ownerReferences":[{"uid":"u1"},"u2",{"uid":3},{"name":"no uid"},{"uid":"u5","controller":true},null]}})");
  meta = ReadPackedMeta(PackJson(odd));
  EXPECT_EQ(meta.name, "");
  EXPECT_EQ(meta.ns, "ns");
  EXPECT_EQ(meta.resource_version, "");
  EXPECT_EQ(meta.labels, (std::vector<std::string>{"a=first", "e=", "z=last"}));
  EXPECT_EQ(meta.owner_uids, (std::vector<std::string>{"u1", "u5"}));

  for (const char* nothing : {R"({"metadata":"x"})", R"({"metadata":null})", "[1,2]", "\"s\"", R"({"spec":{}})",
                              R"({"metadata":{"labels":[],"ownerReferences":{}}})"}) {
    meta = ReadPackedMeta(PackJson(Json::parse(nothing)));
    EXPECT_TRUE(meta.name.empty() && meta.ns.empty() && meta.resource_version.empty() && meta.labels.empty() &&
                meta.owner_uids.empty())
        << nothing;
  }
  EXPECT_TRUE(ReadPackedMeta("").name.empty()) << "no bytes: nothing, no crash";
  EXPECT_TRUE(ReadPackedMeta("\x81\xa8metadata\x83").name.empty()) << "truncated: nothing, no crash";
  EXPECT_TRUE(IsPackedMap(PackJson(Json::object())));
  EXPECT_FALSE(IsPackedMap(PackJson(Json::array())));
}

}  // namespace
}  // namespace fleet::kube::internal
