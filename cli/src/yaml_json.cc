#include "fleet/cli/yaml_json.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <regex>

namespace fleet::cli {
namespace {

bool OneOf(const std::string& s, std::initializer_list<const char*> words) {
  for (const char* w : words) {
    if (s == w) return true;
  }
  return false;
}

bool IsNull(const std::string& s) { return OneOf(s, {"", "~", "null", "Null", "NULL"}); }
bool IsTrue(const std::string& s) {
  return OneOf(s, {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", "y", "Y"});
}
bool IsFalse(const std::string& s) {
  return OneOf(s, {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", "n", "N"});
}

// An integer in one of YAML 1.1's notations; false when `s` is none (or out of range).
bool ParseInteger(const std::string& s, int64_t* out) {
  static const std::regex kInteger("[-+]?(0|[1-9][0-9]*|0[xX][0-9a-fA-F]+|0[oO]?[0-7]+|0[bB][01]+)");
  if (!std::regex_match(s, kInteger)) return false;
  size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  int base = 10;
  std::string digits = s.substr(i);
  if (digits.size() > 1 && digits[0] == '0') {
    const char k = digits[1];
    if (k == 'x' || k == 'X') {
      base = 16, digits = digits.substr(2);
    } else if (k == 'b' || k == 'B') {
      base = 2, digits = digits.substr(2);
    } else if (k == 'o' || k == 'O') {
      base = 8, digits = digits.substr(2);
    } else {
      base = 8, digits = digits.substr(1);
    }
  }
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(digits.c_str(), &end, base);
  if (errno == ERANGE || *end != '\0') return false;
  *out = s[0] == '-' ? -v : v;
  return true;
}

bool ParseFloat(const std::string& s, double* out) {
  static const std::regex kFloat(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  static const std::regex kSpecial(R"([-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN))");
  if (std::regex_match(s, kSpecial)) {
    if (s.find('n') != std::string::npos || s.find('N') != std::string::npos) {
      *out = std::nan("");
    } else {
      *out = s[0] == '-' ? -HUGE_VAL : HUGE_VAL;
    }
    return true;
  }
  if (!std::regex_match(s, kFloat)) return false;
  *out = std::strtod(s.c_str(), nullptr);
  return true;
}

Json PlainScalar(const std::string& s) {
  if (IsNull(s)) return nullptr;
  if (IsTrue(s)) return true;
  if (IsFalse(s)) return false;
  int64_t i = 0;
  if (ParseInteger(s, &i)) return i;
  double d = 0;
  if (ParseFloat(s, &d)) return d;
  return s;
}

Json ToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return nullptr;
    case YAML::NodeType::Sequence: {
      Json out = Json::array();
      for (const auto& item : node) out.push_back(ToJson(item));
      return out;
    }
    case YAML::NodeType::Map: {
      Json out = Json::object();
      for (const auto& kv : node) {
        // Keys as written: field names, never read as booleans or numbers ("n:", "1:").
        const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : ToJson(kv.first).dump();
        out[key] = ToJson(kv.second);
      }
      return out;
    }
    case YAML::NodeType::Scalar:
      break;
  }
  const std::string& tag = node.Tag();
  const std::string& text = node.Scalar();
  if (tag == "!" || tag == "tag:yaml.org,2002:str") return text;   // quoted, or !!str
  if (tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" || tag == "tag:yaml.org,2002:bool" ||
      tag == "tag:yaml.org,2002:null" || tag == "?") {
    return PlainScalar(text);
  }
  return text;
}

// Would this string read back as something else than the same string?
bool NeedsQuotes(const std::string& s) {
  if (s.empty()) return true;
  if (!PlainScalar(s).is_string()) return true;
  for (char c : s) {
    if (c == '\n' || c == '\r' || c == '\t' || static_cast<unsigned char>(c) < 0x20) return true;
  }
  return s.front() == ' ' || s.back() == ' ';
}

void Emit(YAML::Emitter& out, const Json& v) {
  switch (v.type()) {
    case Json::value_t::object:
      if (v.empty()) {
        out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
        return;
      }
      out << YAML::BeginMap;
      for (const auto& [key, value] : v.items()) {
        out << YAML::Key;
        if (NeedsQuotes(key)) out << YAML::DoubleQuoted;
        out << key << YAML::Value;
        Emit(out, value);
      }
      out << YAML::EndMap;
      return;
    case Json::value_t::array:
      if (v.empty()) {
        out << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
        return;
      }
      out << YAML::BeginSeq;
      for (const auto& item : v) Emit(out, item);
      out << YAML::EndSeq;
      return;
    case Json::value_t::string: {
      const auto& s = v.get_ref<const std::string&>();
      if (NeedsQuotes(s)) out << YAML::DoubleQuoted;
      out << s;
      return;
    }
    case Json::value_t::boolean:
      out << (v.get<bool>() ? "true" : "false");
      return;
    case Json::value_t::number_integer:
      out << v.get<int64_t>();
      return;
    case Json::value_t::number_unsigned:
      out << v.get<uint64_t>();
      return;
    case Json::value_t::number_float:
      out << v.dump();   // shortest text that reads back as the same double
      return;
    default:
      out << YAML::Null;
      return;
  }
}

}  // namespace

Result<std::vector<Json>> ParseYamlDocuments(const std::string& text) {
  try {
    std::vector<Json> docs;
    for (const YAML::Node& node : YAML::LoadAll(text)) {
      Json doc = ToJson(node);
      if (!doc.is_null()) docs.push_back(std::move(doc));
    }
    return docs;
  } catch (const YAML::Exception& e) {
    return Error{"line " + std::to_string(e.mark.line + 1) + ", column " + std::to_string(e.mark.column + 1) + ": " +
                 e.msg};
  }
}

std::string ToYaml(const Json& value) {
  YAML::Emitter out;
  out.SetIndent(2);
  out.SetSeqFormat(YAML::Block);
  Emit(out, value);
  std::string text = out.c_str();
  if (text.empty() || text.back() != '\n') text += '\n';
  return text;
}

}  // namespace fleet::cli
