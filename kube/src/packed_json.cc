#include "packed_json.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace fleet::kube::internal {
namespace {

using Json = nlohmann::json;

void PutByte(std::string& out, uint8_t b) { out.push_back(static_cast<char>(b)); }

void PutBigEndian(std::string& out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// A length with its type byte: the fix form (`fix | n`) up to fix_max, else 8/16/32-bit forms
// (b8 == 0 where the type has no 8-bit form).
void PutLength(std::string& out, size_t n, uint8_t fix, size_t fix_max, uint8_t b8, uint8_t b16, uint8_t b32) {
  if (n <= fix_max) {
    PutByte(out, static_cast<uint8_t>(fix | n));
  } else if (b8 != 0 && n <= 0xff) {
    PutByte(out, b8);
    PutBigEndian(out, n, 1);
  } else if (n <= 0xffff) {
    PutByte(out, b16);
    PutBigEndian(out, n, 2);
  } else {
    PutByte(out, b32);
    PutBigEndian(out, n, 4);
  }
}

void PutString(std::string& out, const std::string& s) {
  PutLength(out, s.size(), 0xa0, 31, 0xd9, 0xda, 0xdb);
  out.append(s);
}

void Pack(const Json& j, std::string& out) {
  switch (j.type()) {
    case Json::value_t::null:
    case Json::value_t::discarded:
      PutByte(out, 0xc0);
      break;
    case Json::value_t::boolean:
      PutByte(out, j.get<bool>() ? 0xc3 : 0xc2);
      break;
    case Json::value_t::number_unsigned: {
      const uint64_t v = j.get<uint64_t>();
      if (v < 0x80) {
        PutByte(out, static_cast<uint8_t>(v));
      } else {
        const int bytes = v <= 0xff ? 1 : v <= 0xffff ? 2 : v <= 0xffffffffu ? 4 : 8;
        PutByte(out, bytes == 1 ? 0xcc : bytes == 2 ? 0xcd : bytes == 4 ? 0xce : 0xcf);
        PutBigEndian(out, v, bytes);
      }
      break;
    }
    case Json::value_t::number_integer: {
      // Non-negative signed values use the signed forms too, so they come back as signed.
      const int64_t v = j.get<int64_t>();
      if (v >= -32 && v < 0) {
        PutByte(out, static_cast<uint8_t>(v));
      } else {
        const int bytes = (v >= INT8_MIN && v <= INT8_MAX) ? 1 : (v >= INT16_MIN && v <= INT16_MAX) ? 2
                          : (v >= INT32_MIN && v <= INT32_MAX) ? 4 : 8;
        PutByte(out, bytes == 1 ? 0xd0 : bytes == 2 ? 0xd1 : bytes == 4 ? 0xd2 : 0xd3);
        PutBigEndian(out, static_cast<uint64_t>(v), bytes);
      }
      break;
    }
    case Json::value_t::number_float: {
      const double d = j.get<double>();
      uint64_t bits = 0;
      std::memcpy(&bits, &d, sizeof bits);
      PutByte(out, 0xcb);
      PutBigEndian(out, bits, 8);
      break;
    }
    case Json::value_t::string:
      PutString(out, j.get_ref<const std::string&>());
      break;
    case Json::value_t::array:
      PutLength(out, j.size(), 0x90, 15, 0, 0xdc, 0xdd);
      for (const Json& element : j) Pack(element, out);
      break;
    case Json::value_t::object:
      PutLength(out, j.size(), 0x80, 15, 0, 0xde, 0xdf);
      for (auto it = j.begin(); it != j.end(); ++it) {
        PutString(out, it.key());
        Pack(it.value(), out);
      }
      break;
    case Json::value_t::binary: {
      const auto& bin = j.get_binary();
      const int bytes = bin.size() <= 0xff ? 1 : bin.size() <= 0xffff ? 2 : 4;
      PutByte(out, bytes == 1 ? 0xc4 : bytes == 2 ? 0xc5 : 0xc6);
      PutBigEndian(out, bin.size(), bytes);
      out.append(reinterpret_cast<const char*>(bin.data()), bin.size());
      break;
    }
  }
}

class Reader {
 public:
  explicit Reader(std::string_view in)
      : p_(reinterpret_cast<const uint8_t*>(in.data())), end_(p_ + in.size()) {}

  bool AtEnd() const { return p_ == end_; }

  Json Value() {
    const uint8_t b = Byte();
    if (b < 0x80) return Json(static_cast<uint64_t>(b));
    if (b >= 0xe0) return Json(static_cast<int64_t>(static_cast<int8_t>(b)));
    if ((b & 0xe0) == 0xa0) return Json(String(b & 0x1fu));
    if ((b & 0xf0) == 0x90) return Array(b & 0x0fu);
    if ((b & 0xf0) == 0x80) return Object(b & 0x0fu);
    switch (b) {
      case 0xc0: return Json(nullptr);
      case 0xc2: return Json(false);
      case 0xc3: return Json(true);
      case 0xcc: return Json(BigEndian(1));
      case 0xcd: return Json(BigEndian(2));
      case 0xce: return Json(BigEndian(4));
      case 0xcf: return Json(BigEndian(8));
      case 0xd0: return Json(static_cast<int64_t>(static_cast<int8_t>(BigEndian(1))));
      case 0xd1: return Json(static_cast<int64_t>(static_cast<int16_t>(BigEndian(2))));
      case 0xd2: return Json(static_cast<int64_t>(static_cast<int32_t>(BigEndian(4))));
      case 0xd3: return Json(static_cast<int64_t>(BigEndian(8)));
      case 0xcb: {
        const uint64_t bits = BigEndian(8);
        double d = 0;
        std::memcpy(&d, &bits, sizeof d);
        return Json(d);
      }
      case 0xd9: return Json(String(BigEndian(1)));
      case 0xda: return Json(String(BigEndian(2)));
      case 0xdb: return Json(String(BigEndian(4)));
      case 0xc4: return Binary(BigEndian(1));
      case 0xc5: return Binary(BigEndian(2));
      case 0xc6: return Binary(BigEndian(4));
      case 0xdc: return Array(BigEndian(2));
      case 0xdd: return Array(BigEndian(4));
      case 0xde: return Object(BigEndian(2));
      case 0xdf: return Object(BigEndian(4));
      default: throw std::runtime_error("packed json: unexpected type byte");
    }
  }

 private:
  uint8_t Byte() {
    if (p_ == end_) throw std::runtime_error("packed json: truncated");
    return *p_++;
  }
  uint64_t BigEndian(int bytes) {
    if (end_ - p_ < bytes) throw std::runtime_error("packed json: truncated");
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = (v << 8) | *p_++;
    return v;
  }
  const uint8_t* Take(uint64_t n) {
    if (static_cast<uint64_t>(end_ - p_) < n) throw std::runtime_error("packed json: truncated");
    const uint8_t* at = p_;
    p_ += n;
    return at;
  }
  std::string String(uint64_t n) {
    const uint8_t* at = Take(n);
    return std::string(reinterpret_cast<const char*>(at), n);
  }
  std::string Key() {
    const uint8_t b = Byte();
    if ((b & 0xe0) == 0xa0) return String(b & 0x1fu);
    if (b == 0xd9) return String(BigEndian(1));
    if (b == 0xda) return String(BigEndian(2));
    if (b == 0xdb) return String(BigEndian(4));
    throw std::runtime_error("packed json: map key is not a string");
  }
  Json Binary(uint64_t n) {
    const uint8_t* at = Take(n);
    return Json::binary(Json::binary_t::container_type(at, at + n));
  }
  Json Array(uint64_t n) {
    Json j(Json::value_t::array);
    auto& array = j.get_ref<Json::array_t&>();
    array.reserve(std::min<uint64_t>(n, static_cast<uint64_t>(end_ - p_)));
    for (uint64_t i = 0; i < n; ++i) array.push_back(Value());
    return j;
  }
  Json Object(uint64_t n) {
    Json j(Json::value_t::object);
    auto& object = j.get_ref<Json::object_t&>();
    for (uint64_t i = 0; i < n; ++i) {
      std::string key = Key();
      // Keys were written in the map's sorted order: appending at the end is O(1).
      object.emplace_hint(object.end(), std::move(key), Value());
    }
    return j;
  }

  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace

std::string PackJson(const nlohmann::json& value) {
  std::string out;
  Pack(value, out);
  return out;
}

nlohmann::json UnpackJson(std::string_view packed) {
  Reader reader(packed);
  Json value = reader.Value();
  if (!reader.AtEnd()) throw std::runtime_error("packed json: trailing bytes");
  return value;
}

}  // namespace fleet::kube::internal
