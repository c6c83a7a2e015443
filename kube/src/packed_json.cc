#include "packed_json.h"

#include <algorithm>
#include <clocale>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
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

void PutString(std::string& out, std::string_view s) {
  PutLength(out, s.size(), 0xa0, 31, 0xd9, 0xda, 0xdb);
  out.append(s.data(), s.size());
}

void PutUnsigned(std::string& out, uint64_t v) {
  if (v < 0x80) {
    PutByte(out, static_cast<uint8_t>(v));
  } else {
    const int bytes = v <= 0xff ? 1 : v <= 0xffff ? 2 : v <= 0xffffffffu ? 4 : 8;
    PutByte(out, bytes == 1 ? 0xcc : bytes == 2 ? 0xcd : bytes == 4 ? 0xce : 0xcf);
    PutBigEndian(out, v, bytes);
  }
}

// Non-negative signed values use the signed forms too, so they come back as signed.
void PutSigned(std::string& out, int64_t v) {
  if (v >= -32 && v < 0) {
    PutByte(out, static_cast<uint8_t>(v));
  } else {
    const int bytes = (v >= INT8_MIN && v <= INT8_MAX) ? 1 : (v >= INT16_MIN && v <= INT16_MAX) ? 2
                      : (v >= INT32_MIN && v <= INT32_MAX) ? 4 : 8;
    PutByte(out, bytes == 1 ? 0xd0 : bytes == 2 ? 0xd1 : bytes == 4 ? 0xd2 : 0xd3);
    PutBigEndian(out, static_cast<uint64_t>(v), bytes);
  }
}

void PutFloat(std::string& out, double d) {
  uint64_t bits = 0;
  std::memcpy(&bits, &d, sizeof bits);
  PutByte(out, 0xcb);
  PutBigEndian(out, bits, 8);
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
    case Json::value_t::number_unsigned:
      PutUnsigned(out, j.get<uint64_t>());
      break;
    case Json::value_t::number_integer:
      PutSigned(out, j.get<int64_t>());
      break;
    case Json::value_t::number_float:
      PutFloat(out, j.get<double>());
      break;
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


// ---- JSON text -> packed, without a DOM ----

// Writes MessagePack as a parser reports values. Containers get a one-byte header when they open
// (their size is not known yet); when they close, the header is fixed up, widened when the size
// needs it, and an object's members are put in key order (and duplicates dropped, the last kept)
// if the text did not already have them so.
class Packer {
 public:
  void Reset(std::string* out) {
    out_ = out;
    out_->clear();
    frames_.clear();
    members_.clear();
  }

  void Null() { Element(); PutByte(*out_, 0xc0); }
  void Bool(bool b) { Element(); PutByte(*out_, b ? 0xc3 : 0xc2); }
  void Unsigned(uint64_t v) { Element(); PutUnsigned(*out_, v); }
  void Signed(int64_t v) { Element(); PutSigned(*out_, v); }
  void Float(double d) { Element(); PutFloat(*out_, d); }
  void String(std::string_view s) { Element(); PutString(*out_, s); }

  void StartObject() {
    Element();
    frames_.push_back({out_->size(), members_.size(), 0, true, true});
    PutByte(*out_, 0x80);
  }
  void Key(std::string_view key) {
    Frame& frame = frames_.back();
    const size_t begin = out_->size();
    PutString(*out_, key);
    const Member member{begin, out_->size() - key.size(), key.size()};
    if (frame.sorted && frame.count > 0 && !(KeyOf(members_.back()) < key)) frame.sorted = false;
    members_.push_back(member);
    ++frame.count;
  }
  void EndObject() {
    const Frame frame = frames_.back();
    frames_.pop_back();
    if (frame.sorted) {
      SetHeader(frame.start, frame.count, 0x80, 0xde, 0xdf);
    } else {
      Reorder(frame);
    }
    members_.resize(frame.first_member);
  }
  void StartArray() {
    Element();
    frames_.push_back({out_->size(), 0, 0, false, true});
    PutByte(*out_, 0x90);
  }
  void EndArray() {
    const Frame frame = frames_.back();
    frames_.pop_back();
    SetHeader(frame.start, frame.count, 0x90, 0xdc, 0xdd);
  }
  size_t Retained() const {
    return scratch_.capacity() + members_.capacity() * sizeof(Member) + frames_.capacity() * sizeof(Frame) +
           order_.capacity() * sizeof(size_t);
  }

 private:
  struct Frame {
    size_t start;          // offset of the header byte
    size_t first_member;   // objects: index of the first member in members_
    size_t count;          // members or elements so far
    bool is_object;
    bool sorted;           // objects: keys strictly increasing so far
  };
  struct Member {
    size_t begin;          // offset of the key's header; the member runs to the next one's begin
    size_t key_offset;     // offset of the key's bytes
    size_t key_size;
  };

  void Element() {
    if (!frames_.empty() && !frames_.back().is_object) ++frames_.back().count;
  }
  std::string_view KeyOf(const Member& m) const { return std::string_view(out_->data() + m.key_offset, m.key_size); }

  // Turns the placeholder at `start` into the header for `n` entries.
  void SetHeader(size_t start, size_t n, uint8_t fix, uint8_t b16, uint8_t b32) {
    if (n <= 15) {
      (*out_)[start] = static_cast<char>(fix | n);
      return;
    }
    char wide[5];
    const int extra = n <= 0xffff ? 2 : 4;
    wide[0] = static_cast<char>(extra == 2 ? b16 : b32);
    for (int i = 0; i < extra; ++i) wide[1 + i] = static_cast<char>((n >> (8 * (extra - 1 - i))) & 0xff);
    out_->replace(start, 1, wide, static_cast<size_t>(1 + extra));
  }

  // Rewrites an object whose keys were not in order: header, then the members sorted by key, the
  // last of equal keys kept (what std::map gets from repeated assignments).
  void Reorder(const Frame& frame) {
    const size_t n = frame.count;
    order_.resize(n);
    for (size_t i = 0; i < n; ++i) order_[i] = frame.first_member + i;
    std::stable_sort(order_.begin(), order_.end(),
                     [this](size_t a, size_t b) { return KeyOf(members_[a]) < KeyOf(members_[b]); });
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
      if (i + 1 < n && KeyOf(members_[order_[i]]) == KeyOf(members_[order_[i + 1]])) continue;
      order_[kept++] = order_[i];
    }
    scratch_.clear();
    PutLength(scratch_, kept, 0x80, 15, 0, 0xde, 0xdf);
    for (size_t k = 0; k < kept; ++k) {
      const size_t m = order_[k];
      const size_t begin = members_[m].begin;
      const size_t end = m + 1 < members_.size() ? members_[m + 1].begin : out_->size();
      scratch_.append(out_->data() + begin, end - begin);
    }
    out_->resize(frame.start);
    out_->append(scratch_);
  }

  std::string* out_ = nullptr;
  std::vector<Frame> frames_;
  std::vector<Member> members_;
  std::vector<size_t> order_;
  std::string scratch_;
};

// Checks values and writes nothing: for members a caller does not keep.
struct Skipper {
  void Null() {}
  void Bool(bool) {}
  void Unsigned(uint64_t) {}
  void Signed(int64_t) {}
  void Float(double) {}
  void String(std::string_view) {}
  void StartObject() {}
  void Key(std::string_view) {}
  void EndObject() {}
  void StartArray() {}
  void EndArray() {}
};

// A JSON parser (RFC 8259, with nlohmann::json::parse's choices where it has to make them) that
// reports values to a writer. Iterative: nesting costs heap, not stack.
class TextParser {
 public:
  void Reset(std::string_view text) {
    begin_ = text.data();
    p_ = begin_;
    end_ = begin_ + text.size();
    error_.clear();
    stack_.clear();
  }
  const std::string& error() const { return error_; }

  // nlohmann skips a UTF-8 byte order mark at the very start, and rejects a partial one.
  bool SkipBom() {
    if (p_ < end_ && static_cast<unsigned char>(*p_) == 0xef) {
      if (end_ - p_ < 3 || static_cast<unsigned char>(p_[1]) != 0xbb || static_cast<unsigned char>(p_[2]) != 0xbf) {
        return Fail("invalid byte order mark");
      }
      p_ += 3;
    }
    return true;
  }
  void SkipSpace() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  // After the last value: only whitespace may follow. A NUL byte ends the input there, as in
  // nlohmann's lexer (which stops at one, for C strings): what comes after it is not looked at.
  bool End() {
    SkipSpace();
    return p_ == end_ || *p_ == '\0' || Fail("unexpected bytes after the JSON value");
  }
  // Skips whitespace; consumes `c` when it is next.
  bool Take(char c) {
    SkipSpace();
    if (p_ < end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }
  bool Expect(char c) {
    if (Take(c)) return true;
    std::string what = "expected '";
    what.push_back(c);
    what += "'";
    return Fail(what.c_str());
  }
  bool Fail(const char* what) {
    if (error_.empty()) {
      error_ = std::string(what) + " at byte " + std::to_string(p_ - begin_);
    }
    return false;
  }

  // A member name and its colon (whitespace first); *key is valid until the next string.
  bool Key(std::string_view* key) {
    SkipSpace();
    if (p_ == end_ || *p_ != '"') return Fail("expected a string as member name");
    return String(key) && Expect(':');
  }
  // Literal `null` next (after whitespace): consumes it.
  bool TakeNull() {
    SkipSpace();
    if (end_ - p_ >= 4 && std::memcmp(p_, "null", 4) == 0) {
      p_ += 4;
      return true;
    }
    return false;
  }
  // Whitespace, then whether the next value is a string / an array (not consumed).
  bool NextIs(char c) {
    SkipSpace();
    return p_ < end_ && *p_ == c;
  }

  // One value (whitespace first), reported to `w`.
  template <typename W>
  bool Value(W& w) {
    const size_t base = stack_.size();
    for (;;) {
      SkipSpace();
      if (p_ == end_) return Fail("unexpected end of input");
      switch (*p_) {
        case '{': {
          ++p_;
          if (stack_.size() - base >= kMaxPackDepth) return Fail("nesting too deep");
          w.StartObject();
          if (Take('}')) {
            w.EndObject();
            break;
          }
          stack_.push_back('{');
          std::string_view key;
          if (!Key(&key)) return false;
          w.Key(key);
          continue;  // to the member's value
        }
        case '[':
          ++p_;
          if (stack_.size() - base >= kMaxPackDepth) return Fail("nesting too deep");
          w.StartArray();
          if (Take(']')) {
            w.EndArray();
            break;
          }
          stack_.push_back('[');
          continue;  // to the first element
        case '"': {
          std::string_view s;
          if (!String(&s)) return false;
          w.String(s);
          break;
        }
        case 't':
          if (!Literal("true", 4)) return false;
          w.Bool(true);
          break;
        case 'f':
          if (!Literal("false", 5)) return false;
          w.Bool(false);
          break;
        case 'n':
          if (!Literal("null", 4)) return false;
          w.Null();
          break;
        default:
          if (!Number(w)) return false;
          break;
      }
      // A value is complete: close the containers it completes, then go to the next value.
      for (;;) {
        if (stack_.size() == base) return true;
        SkipSpace();
        if (p_ == end_) return Fail("unexpected end of input");
        const char c = *p_++;
        if (stack_.back() == '{') {
          if (c == ',') {
            std::string_view key;
            if (!Key(&key)) return false;
            w.Key(key);
            break;
          }
          if (c != '}') return Fail("expected ',' or '}'");
          w.EndObject();
        } else {
          if (c == ',') break;
          if (c != ']') return Fail("expected ',' or ']'");
          w.EndArray();
        }
        stack_.pop_back();
      }
    }
  }

 private:
  bool Literal(const char* word, size_t n) {
    if (static_cast<size_t>(end_ - p_) < n || std::memcmp(p_, word, n) != 0) return Fail("invalid literal");
    p_ += n;
    return true;
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? ; integers that fit 64 bits exactly, the rest
  // through strtod like nlohmann's lexer (which also rejects what overflows to infinity).
  template <typename W>
  bool Number(W& w) {
    const char* start = p_;
    const bool negative = *p_ == '-';
    if (negative) ++p_;
    auto digit = [this] { return p_ < end_ && *p_ >= '0' && *p_ <= '9'; };
    if (!digit()) return Fail("invalid literal");
    uint64_t magnitude = 0;
    bool overflow = false;
    if (*p_ == '0') {
      ++p_;
    } else {
      while (digit()) {
        const uint64_t d = static_cast<uint64_t>(*p_ - '0');
        if (magnitude > (UINT64_MAX - d) / 10) overflow = true;
        magnitude = magnitude * 10 + d;
        ++p_;
      }
    }
    bool is_float = false;
    if (p_ < end_ && *p_ == '.') {
      ++p_;
      if (!digit()) return Fail("invalid number: expected a digit after '.'");
      while (digit()) ++p_;
      is_float = true;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (!digit()) return Fail("invalid number: expected a digit in the exponent");
      while (digit()) ++p_;
      is_float = true;
    }
    if (!is_float && !overflow) {
      if (!negative) {
        w.Unsigned(magnitude);
        return true;
      }
      if (magnitude <= (uint64_t{1} << 63)) {
        w.Signed(magnitude == (uint64_t{1} << 63) ? INT64_MIN : -static_cast<int64_t>(magnitude));
        return true;
      }
    }
    // strtod on the token with the locale's decimal point, as nlohmann's lexer does.
    number_.assign(start, static_cast<size_t>(p_ - start));
    const char point = *std::localeconv()->decimal_point;
    if (point != '.') std::replace(number_.begin(), number_.end(), '.', point);
    const double value = std::strtod(number_.c_str(), nullptr);
    if (!std::isfinite(value)) return Fail("number overflow");
    w.Float(value);
    return true;
  }

  // Validates one multi-byte UTF-8 sequence at *p (RFC 3629 table, as nlohmann's lexer) and
  // steps over it.
  bool Utf8Sequence(const char** p) const {
    const auto* q = reinterpret_cast<const unsigned char*>(*p);
    const unsigned char c = q[0];
    size_t more = 0;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
      more = 1;
    } else if (c == 0xe0) {
      more = 2;
      lo = 0xa0;
    } else if ((c >= 0xe1 && c <= 0xec) || c == 0xee || c == 0xef) {
      more = 2;
    } else if (c == 0xed) {
      more = 2;
      hi = 0x9f;
    } else if (c == 0xf0) {
      more = 3;
      lo = 0x90;
    } else if (c >= 0xf1 && c <= 0xf3) {
      more = 3;
    } else if (c == 0xf4) {
      more = 3;
      hi = 0x8f;
    } else {
      return false;
    }
    if (static_cast<size_t>(end_ - *p) <= more) return false;
    if (q[1] < lo || q[1] > hi) return false;
    for (size_t i = 2; i <= more; ++i) {
      if (q[i] < 0x80 || q[i] > 0xbf) return false;
    }
    *p += 1 + more;
    return true;
  }

  // A string at p_ (the opening quote). Without escapes *out views the input; else the decoded
  // text in decoded_ (valid until the next string).
 public:
  bool String(std::string_view* out) {
    const char* start = ++p_;
    while (p_ < end_) {
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        *out = std::string_view(start, static_cast<size_t>(p_ - start));
        ++p_;
        return true;
      }
      if (c == '\\') return EscapedString(start, out);
      if (c < 0x20) return Fail("invalid string: control character must be escaped");
      if (c < 0x80) {
        ++p_;
      } else if (!Utf8Sequence(&p_)) {
        return Fail("invalid string: ill-formed UTF-8 byte");
      }
    }
    return Fail("invalid string: missing closing quote");
  }

  // Heap the parser keeps between uses.
  size_t Retained() const { return decoded_.capacity() + number_.capacity() + stack_.capacity(); }

 private:
  bool Hex4(uint32_t* cp) {
    if (end_ - p_ < 4) return false;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = *p_++;
      v <<= 4;
      if (h >= '0' && h <= '9') {
        v |= static_cast<uint32_t>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        v |= static_cast<uint32_t>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        v |= static_cast<uint32_t>(h - 'A' + 10);
      } else {
        return false;
      }
    }
    *cp = v;
    return true;
  }

  void AppendUtf8(uint32_t cp) {
    if (cp < 0x80) {
      decoded_.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      decoded_.push_back(static_cast<char>(0xc0 | (cp >> 6)));
      decoded_.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      decoded_.push_back(static_cast<char>(0xe0 | (cp >> 12)));
      decoded_.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      decoded_.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      decoded_.push_back(static_cast<char>(0xf0 | (cp >> 18)));
      decoded_.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      decoded_.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      decoded_.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }

  bool EscapedString(const char* start, std::string_view* out) {
    decoded_.assign(start, static_cast<size_t>(p_ - start));
    while (p_ < end_) {
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        *out = decoded_;
        return true;
      }
      if (c == '\\') {
        if (++p_ == end_) break;
        switch (*p_++) {
          case '"': decoded_.push_back('"'); break;
          case '\\': decoded_.push_back('\\'); break;
          case '/': decoded_.push_back('/'); break;
          case 'b': decoded_.push_back('\b'); break;
          case 'f': decoded_.push_back('\f'); break;
          case 'n': decoded_.push_back('\n'); break;
          case 'r': decoded_.push_back('\r'); break;
          case 't': decoded_.push_back('\t'); break;
          case 'u': {
            uint32_t cp = 0;
            if (!Hex4(&cp)) return Fail("invalid string: '\\u' must be followed by 4 hex digits");
            if (cp >= 0xd800 && cp <= 0xdbff) {
              uint32_t low = 0;
              if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') {
                return Fail("invalid string: surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF");
              }
              p_ += 2;
              if (!Hex4(&low)) return Fail("invalid string: '\\u' must be followed by 4 hex digits");
              if (low < 0xdc00 || low > 0xdfff) {
                return Fail("invalid string: surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF");
              }
              cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
              return Fail("invalid string: surrogate U+DC00..U+DFFF must follow U+D800..U+DBFF");
            }
            AppendUtf8(cp);
            break;
          }
          default:
            return Fail("invalid string: forbidden character after backslash");
        }
        continue;
      }
      if (c < 0x20) return Fail("invalid string: control character must be escaped");
      if (c < 0x80) {
        decoded_.push_back(static_cast<char>(c));
        ++p_;
      } else {
        const char* q = p_;
        if (!Utf8Sequence(&p_)) return Fail("invalid string: ill-formed UTF-8 byte");
        decoded_.append(q, static_cast<size_t>(p_ - q));
      }
    }
    return Fail("invalid string: missing closing quote");
  }

  const char* begin_ = nullptr;
  const char* p_ = nullptr;
  const char* end_ = nullptr;
  std::string error_;
  std::vector<char> stack_;   // '{' / '[' of the open containers
  std::string decoded_;
  std::string number_;
};

// Parser, packer and buffers, kept per thread so that packing allocates (almost) only its result.
struct Workspace {
  TextParser parser;
  Packer packer;
  Skipper skipper;
  std::string buffer;   // the packer's output, copied out at its exact size
  bool busy = false;
};

// The thread's workspace, or a fresh one when a callback re-enters while it is in use.
class WorkspaceLease {
 public:
  WorkspaceLease() {
    thread_local Workspace shared;
    if (!shared.busy) {
      ws_ = &shared;
    } else {
      own_ = std::make_unique<Workspace>();
      ws_ = own_.get();
    }
    ws_->busy = true;
  }
  ~WorkspaceLease() {
    // One huge object must not pin its buffers for the thread's lifetime.
    if (ws_->buffer.capacity() + ws_->parser.Retained() + ws_->packer.Retained() > (1u << 20)) *ws_ = Workspace();
    ws_->busy = false;
  }
  WorkspaceLease(const WorkspaceLease&) = delete;
  WorkspaceLease& operator=(const WorkspaceLease&) = delete;
  Workspace* operator->() const { return ws_; }

 private:
  std::unique_ptr<Workspace> own_;
  Workspace* ws_ = nullptr;
};

// Reads packed bytes without materializing them.
class Cursor {
 public:
  explicit Cursor(std::string_view s)
      : p_(reinterpret_cast<const uint8_t*>(s.data())), end_(p_ + s.size()) {}

  // Consume a map / array / str header when the next value is one; false (nothing consumed) else.
  bool Map(uint64_t* n) {
    if (p_ == end_) return false;
    const uint8_t b = *p_;
    if ((b & 0xf0) == 0x80) return Advance(1) && Set(n, b & 0x0fu);
    if (b == 0xde) return Length(2, n);
    if (b == 0xdf) return Length(4, n);
    return false;
  }
  bool Array(uint64_t* n) {
    if (p_ == end_) return false;
    const uint8_t b = *p_;
    if ((b & 0xf0) == 0x90) return Advance(1) && Set(n, b & 0x0fu);
    if (b == 0xdc) return Length(2, n);
    if (b == 0xdd) return Length(4, n);
    return false;
  }
  bool Str(std::string_view* s) {
    if (p_ == end_) return false;
    const uint8_t b = *p_;
    uint64_t n = 0;
    const uint8_t* save = p_;
    if ((b & 0xe0) == 0xa0) {
      ++p_;
      n = b & 0x1fu;
    } else if (b == 0xd9 || b == 0xda || b == 0xdb) {
      if (!Length(b == 0xd9 ? 1 : b == 0xda ? 2 : 4, &n)) return false;
    } else {
      return false;
    }
    if (static_cast<uint64_t>(end_ - p_) < n) {
      p_ = save;
      return false;
    }
    *s = std::string_view(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return true;
  }
  const char* position() const { return reinterpret_cast<const char*>(p_); }
  // Steps over one value, however nested (iteratively). False on truncated or unknown bytes.
  bool Skip() {
    uint64_t pending = 1;
    while (pending > 0) {
      --pending;
      if (p_ == end_) return false;
      const uint8_t b = *p_++;
      uint64_t n = 0;
      if (b < 0x80 || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) continue;
      if ((b & 0xe0) == 0xa0) {
        if (!Bytes(b & 0x1fu)) return false;
        continue;
      }
      if ((b & 0xf0) == 0x90) {
        pending += b & 0x0fu;
        continue;
      }
      if ((b & 0xf0) == 0x80) {
        pending += 2 * static_cast<uint64_t>(b & 0x0fu);
        continue;
      }
      switch (b) {
        case 0xcc: case 0xd0: if (!Bytes(1)) return false; break;
        case 0xcd: case 0xd1: if (!Bytes(2)) return false; break;
        case 0xce: case 0xd2: if (!Bytes(4)) return false; break;
        case 0xcf: case 0xd3: case 0xcb: if (!Bytes(8)) return false; break;
        case 0xd9: case 0xc4: if (!BigEndian(1, &n) || !Bytes(n)) return false; break;
        case 0xda: case 0xc5: if (!BigEndian(2, &n) || !Bytes(n)) return false; break;
        case 0xdb: case 0xc6: if (!BigEndian(4, &n) || !Bytes(n)) return false; break;
        case 0xdc: if (!BigEndian(2, &n)) return false; pending += n; break;
        case 0xdd: if (!BigEndian(4, &n)) return false; pending += n; break;
        case 0xde: if (!BigEndian(2, &n)) return false; pending += 2 * n; break;
        case 0xdf: if (!BigEndian(4, &n)) return false; pending += 2 * n; break;
        default: return false;
      }
    }
    return true;
  }

 private:
  static bool Set(uint64_t* n, uint64_t v) {
    *n = v;
    return true;
  }
  bool Advance(size_t k) {
    if (static_cast<size_t>(end_ - p_) < k) return false;
    p_ += k;
    return true;
  }
  bool Bytes(uint64_t k) { return Advance(static_cast<size_t>(k)); }
  bool BigEndian(int bytes, uint64_t* v) {
    if (end_ - p_ < bytes) return false;
    *v = 0;
    for (int i = 0; i < bytes; ++i) *v = (*v << 8) | *p_++;
    return true;
  }
  // A header byte followed by a `bytes`-wide length.
  bool Length(int bytes, uint64_t* n) {
    const uint8_t* save = p_;
    ++p_;
    if (!BigEndian(bytes, n)) {
      p_ = save;
      return false;
    }
    return true;
  }

  const uint8_t* p_;
  const uint8_t* end_;
};

// The string member `key` of a packed map ("" when absent or not a string).
std::string StringMember(std::string_view packed_map, std::string_view key) {
  Cursor c(packed_map);
  uint64_t n = 0;
  if (!c.Map(&n)) return "";
  for (uint64_t i = 0; i < n; ++i) {
    std::string_view k, v;
    if (!c.Str(&k)) return "";
    if (k == key) return c.Str(&v) ? std::string(v) : std::string();
    if (!c.Skip()) return "";
  }
  return "";
}

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

bool PackJsonText(std::string_view text, std::string* packed, std::string* error) {
  WorkspaceLease ws;
  ws->parser.Reset(text);
  ws->packer.Reset(&ws->buffer);
  if (!ws->parser.SkipBom() || !ws->parser.Value(ws->packer) || !ws->parser.End()) {
    *error = ws->parser.error();
    return false;
  }
  packed->assign(ws->buffer);
  packed->shrink_to_fit();
  return true;
}

bool PackWatchLine(std::string_view line, std::string* type, std::string* packed_object, std::string* error) {
  WorkspaceLease ws;
  TextParser& p = ws->parser;
  p.Reset(line);
  bool have_type = false, have_object = false;
  auto fail = [&] {
    *error = p.error();
    return false;
  };
  if (!p.SkipBom()) return fail();
  if (!p.Take('{')) {
    // Not an object: still say why it is not JSON when it is not.
    if (p.Value(ws->skipper) && p.End()) p.Fail("the watch event is not a JSON object");
    return fail();
  }
  if (!p.Take('}')) {
    do {
      std::string_view key;
      if (!p.Key(&key)) return fail();
      if (key == "object") {
        have_object = p.NextIs('{');
        ws->packer.Reset(packed_object);
        if (!(have_object ? p.Value(ws->packer) : p.Value(ws->skipper))) return fail();
      } else if (key == "type") {
        have_type = p.NextIs('"');
        if (have_type) {
          std::string_view s;
          if (!p.String(&s)) return fail();
          type->assign(s.data(), s.size());
        } else if (!p.Value(ws->skipper)) {
          return fail();
        }
      } else if (!p.Value(ws->skipper)) {
        return fail();
      }
    } while (p.Take(','));
    if (!p.Expect('}')) return fail();
  }
  if (!p.End()) return fail();
  if (!have_type || !have_object) {
    *error = "watch event without a string type or an object";
    return false;
  }
  return true;
}

bool PackListBody(std::string_view body, const std::function<void(std::string_view packed_item)>& on_item,
                  ListBodyInfo* info, std::string* error) {
  WorkspaceLease ws;
  TextParser& p = ws->parser;
  p.Reset(body);
  *info = ListBodyInfo();
  bool seen_items = false;
  auto fail = [&] {
    *error = p.error();
    return false;
  };
  if (!p.SkipBom()) return fail();
  if (!p.Take('{')) {
    if (p.Value(ws->skipper) && p.End()) p.Fail("the list is not a JSON object");
    return fail();
  }
  if (!p.Take('}')) {
    do {
      std::string_view key;
      if (!p.Key(&key)) return fail();
      if (key == "items") {
        if (seen_items) {
          p.Fail("\"items\" appears twice");
          return fail();
        }
        seen_items = true;
        if (p.TakeNull()) continue;
        if (!p.Take('[')) {
          p.Fail("\"items\" is not an array");
          return fail();
        }
        if (p.Take(']')) continue;
        do {
          if (on_item) {
            ws->packer.Reset(&ws->buffer);
            if (!p.Value(ws->packer)) return fail();
            on_item(ws->buffer);
          } else if (!p.Value(ws->skipper)) {
            return fail();
          }
        } while (p.Take(','));
        if (!p.Expect(']')) return fail();
      } else if (key == "metadata") {
        std::string packed_meta;
        Packer meta_packer;
        meta_packer.Reset(&packed_meta);
        if (!p.Value(meta_packer)) return fail();
        info->resource_version = StringMember(packed_meta, "resourceVersion");
        info->continue_token = StringMember(packed_meta, "continue");
      } else if (!p.Value(ws->skipper)) {
        return fail();
      }
    } while (p.Take(','));
    if (!p.Expect('}')) return fail();
  }
  if (!p.End()) return fail();
  return true;
}

PackedMeta ReadPackedMeta(std::string_view packed) {
  PackedMeta meta;
  Cursor c(packed);
  uint64_t n = 0;
  if (!c.Map(&n)) return meta;
  for (uint64_t i = 0; i < n; ++i) {
    std::string_view key;
    if (!c.Str(&key)) return meta;
    if (key != "metadata") {
      if (!c.Skip()) return meta;
      continue;
    }
    uint64_t fields = 0;
    if (!c.Map(&fields)) return meta;
    for (uint64_t f = 0; f < fields; ++f) {
      std::string_view field, value;
      if (!c.Str(&field)) return meta;
      std::string* target = field == "name" ? &meta.name
                            : field == "namespace" ? &meta.ns
                            : field == "resourceVersion" ? &meta.resource_version : nullptr;
      uint64_t count = 0;
      if (target != nullptr && c.Str(&value)) {
        target->assign(value.data(), value.size());
      } else if (field == "labels" && c.Map(&count)) {
        for (uint64_t l = 0; l < count; ++l) {
          std::string_view label;
          if (!c.Str(&label)) return meta;
          if (c.Str(&value)) {
            std::string term;
            term.reserve(label.size() + 1 + value.size());
            term.append(label.data(), label.size()).append(1, '=').append(value.data(), value.size());
            meta.labels.push_back(std::move(term));
          } else if (!c.Skip()) {
            return meta;
          }
        }
      } else if (field == "ownerReferences" && c.Array(&count)) {
        for (uint64_t r = 0; r < count; ++r) {
          uint64_t members = 0;
          if (!c.Map(&members)) {
            if (!c.Skip()) return meta;
            continue;
          }
          for (uint64_t m = 0; m < members; ++m) {
            std::string_view member;
            if (!c.Str(&member)) return meta;
            if (member == "uid" && c.Str(&value)) {
              meta.owner_uids.emplace_back(value.data(), value.size());
            } else if (!c.Skip()) {
              return meta;
            }
          }
        }
      } else if (!c.Skip()) {
        return meta;
      }
    }
    return meta;   // keys are unique: there is no second metadata
  }
  return meta;
}

std::string WithoutMembers(std::string_view packed_map, const std::vector<std::string>& names) {
  Cursor c(packed_map);
  uint64_t n = 0;
  if (!c.Map(&n)) return std::string(packed_map);
  std::string members;
  members.reserve(packed_map.size());
  size_t kept = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const char* start = c.position();
    std::string_view key;
    if (!c.Str(&key) || !c.Skip()) return std::string(packed_map);
    if (std::find(names.begin(), names.end(), key) != names.end()) continue;
    members.append(start, c.position());
    ++kept;
  }
  std::string out;
  PutLength(out, kept, 0x80, 15, 0, 0xde, 0xdf);
  return out + members;
}

bool IsPackedMap(std::string_view packed) {
  uint64_t n = 0;
  return Cursor(packed).Map(&n);
}

}  // namespace fleet::kube::internal
