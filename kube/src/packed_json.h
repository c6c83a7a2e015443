// Internal to fleet::kube: a compact byte form of a JSON value for the informer cache.
//
// A parsed nlohmann::json pod of ~3 KB of JSON text takes ~20 KB of heap (a node allocation per
// member and per string); its packed form takes ~2.7 KB. The format is MessagePack (nil, bool,
// the int/uint families, float64, str, bin, array, map), so nlohmann::json::from_msgpack reads it
// too; these hand-written codecs exist because they are 3-4x faster than nlohmann's own.
// Signed and unsigned integers keep their nlohmann type across a round trip; maps keep their
// (sorted) key order.
//
// JSON text can also be packed without a DOM (PackJsonText and the watch-line / list-body forms):
// a single pass of a hand-written parser writes the MessagePack bytes as it goes: ~8 us for a
// running pod (3.2 KB), where nlohmann::json::parse takes ~45 us and nlohmann::json::sax_parse
// ~21 us with a handler that does nothing. The bytes are exactly those that
// PackJson(nlohmann::json::parse(text)) gives: object keys sorted (bytewise, as std::map orders
// them), the last of duplicate keys kept, non-negative integers unsigned and negative ones signed,
// integers beyond 64 bits as float64 (strtod with the locale's decimal point, as nlohmann does).
// Text nlohmann::json::parse rejects is rejected: invalid UTF-8, unpaired
// surrogate escapes, raw control characters, bad escapes or numbers, non-finite numbers, trailing
// bytes; like nlohmann, a NUL byte after the value ends the text. One difference: nesting deeper
// than kMaxPackDepth is rejected (nlohmann has no limit; the Kubernetes API server's decoder stops
// at 10,000 too), so that unpacking never recurses unboundedly.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace fleet::kube::internal {

std::string PackJson(const nlohmann::json& value);
// Throws std::runtime_error on bytes PackJson did not produce (truncated, unknown type byte).
nlohmann::json UnpackJson(std::string_view packed);

constexpr size_t kMaxPackDepth = 10000;

// JSON text -> packed. False with *error (what and where) when nlohmann::json::parse would reject
// the text. *packed is left with exactly the bytes (no spare capacity).
bool PackJsonText(std::string_view text, std::string* packed, std::string* error);

// One line of a watch stream, {"type": T, "object": O, ...}: *type = T, *packed_object = O packed
// (written in place: a scratch string the caller reuses keeps its capacity, so its size is all
// that counts). False with *error when the line is not JSON, not an object, or T is not a string
// or O not an object (either missing). Other members are checked and ignored. T's value is not
// interpreted.
bool PackWatchLine(std::string_view line, std::string* type, std::string* packed_object, std::string* error);

// A list answer {"metadata": {...}, "items": [...], ...}.
struct ListBodyInfo {
  std::string resource_version;   // metadata.resourceVersion ("" when absent)
  std::string continue_token;     // metadata.continue ("" when absent)
};
// Hands each element of "items" to `on_item`, packed (the view is valid during the call only),
// in order; with an empty `on_item` the items are only checked. "items" may be absent or null.
// False with *error when the body is not a JSON object, "items" is not an array (or appears
// twice), or the text is not valid JSON; items handed over before such an error stay handed over.
bool PackListBody(std::string_view body, const std::function<void(std::string_view packed_item)>& on_item,
                  ListBodyInfo* info, std::string* error);

// What the informer's cache keys and indexes an object by, read from the packed form with the
// rules ObjectCache applies to a parsed object: metadata.{name,namespace,resourceVersion} when
// they are strings; the uid of every ownerReferences entry that is an object with a string uid;
// "key=value" for every label with a string value, in key order. Anything else is left empty.
struct PackedMeta {
  std::string name;
  std::string ns;
  std::string resource_version;
  std::vector<std::string> owner_uids;
  std::vector<std::string> labels;
};
PackedMeta ReadPackedMeta(std::string_view packed);

// The packed map without its members named in `names` (copied byte for byte, not unpacked): what
// packing the object without them gives. Anything but a well-formed map comes back unchanged.
std::string WithoutMembers(std::string_view packed_map, const std::vector<std::string>& names);

// True when the packed value is a map (a JSON object).
bool IsPackedMap(std::string_view packed);

}  // namespace fleet::kube::internal
