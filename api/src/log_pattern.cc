#include "fleet/api/log_pattern.h"

#include <algorithm>
#include <cstring>
#include <map>

#include <re2/re2.h>

namespace fleet::api {
namespace {

inline char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

}  // namespace

bool IsFieldName(std::string_view a, std::string_view lower) {
  if (a.size() != lower.size()) return false;
  if (std::memcmp(a.data(), lower.data(), a.size()) == 0) return true;  // the common case: as written
  for (size_t i = 0; i < a.size(); ++i) {
    if (Lower(a[i]) != lower[i]) return false;
  }
  return true;
}

namespace {
bool Is(std::string_view key, std::string_view lower) { return IsFieldName(key, lower); }
}  // namespace

// A switch on the length and first letter: a log line has several keys, and this runs for each of them.
StepField ClassifyStepField(std::string_view key) {
  if (key.empty()) return StepField::kScalar;
  const char c = Lower(key.front());
  switch (key.size()) {
    case 3:
      if (c == 'i' && Is(key, "ips")) return StepField::kSamplesPerSecond;
      break;
    case 4:
      switch (c) {
        case 's': if (Is(key, "step")) return StepField::kStep; break;
        case 'i': if (Is(key, "iter")) return StepField::kStep; break;
        case 'p': if (Is(key, "pass")) return StepField::kEpoch; break;
        case 'l': if (Is(key, "loss")) return StepField::kLoss; break;
        case 'c': if (Is(key, "cost")) return StepField::kLoss; break;
        case 'r': if (Is(key, "rank")) return StepField::kRank; break;
        default: break;
      }
      break;
    case 5:
      switch (c) {
        case 'b': if (Is(key, "batch")) return StepField::kStep; break;
        case 's':
          if (Is(key, "steps")) return StepField::kSteps;
          if (Is(key, "speed")) return StepField::kSamplesPerSecond;
          break;
        case 'e': if (Is(key, "epoch")) return StepField::kEpoch; break;
        default: break;
      }
      break;
    case 7:
      if (c == 's' && Is(key, "samples")) return StepField::kSamples;
      break;
    case 8:
      if (c == 'a') {
        if (Is(key, "avg_cost") || Is(key, "avg_loss")) return StepField::kLoss;
      }
      break;
    case 9:
      if (c == 'i' && Is(key, "iteration")) return StepField::kStep;
      if (c == 's' && Is(key, "step_time")) return StepField::kStepTime;
      break;
    case 10:
      if (c == 't' && Is(key, "train_loss")) return StepField::kLoss;
      if (c == 'b' && (Is(key, "batch_time") || Is(key, "batch_cost"))) return StepField::kStepTime;
      break;
    case 11:
      if (c == 'g' && Is(key, "global_step")) return StepField::kStep;
      if (c == 't' && Is(key, "total_steps")) return StepField::kTotalSteps;
      break;
    case 12:
      if (c == 'w' && Is(key, "worker_index")) return StepField::kIgnored;
      break;
    case 15:
      if (c == 't' && Is(key, "total time cost")) return StepField::kTotalTime;
      if (c == 's' && Is(key, "step per second")) return StepField::kIgnored;
      break;
    case 18:
      if (c == 's' && Is(key, "samples_per_second")) return StepField::kSamplesPerSecond;
      break;
    case 25:  // PaddleNLP / PaddleFormers: over the steps since their last log line
      if (c == 'i' && Is(key, "interval_steps_per_second")) return StepField::kStepsPerSecond;
      break;
    case 27:
      if (c == 'i' && Is(key, "interval_samples_per_second")) return StepField::kSamplesPerSecond;
      break;
    default:
      break;
  }
  return StepField::kScalar;
}

namespace {

bool IsAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsAlnum(c) || c == '_'; }

}  // namespace

bool IsScalarName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!(IsAlnum(c) || c == '_' || c == '.' || c == ':' || c == '/' || c == '-')) return false;
  }
  return true;
}

Result<std::shared_ptr<const re2::RE2>> CompileUserRegex(std::string_view source) {
  re2::RE2::Options options;
  options.set_encoding(re2::RE2::Options::EncodingLatin1);
  options.set_log_errors(false);  // the error is returned, and said once by the caller
  auto regex = std::make_shared<const re2::RE2>(re2::StringPiece(source.data(), source.size()), options);
  if (!regex->ok()) return Error{regex->error()};
  return regex;
}

Result<LogPattern> CompileLogPattern(std::string_view source) {
  const std::string quoted = "'" + std::string(source) + "'";
  struct Named {
    std::string name;
    StepField field;
  };
  std::vector<Named> named;
  // RE2 (Debian 12's) knows only the (?P<name>...) form of a named group: (?<name>...) is written
  // as that. The names are checked here, where a bad one can be said plainly.
  std::string re2_source;
  bool in_class = false;
  for (size_t i = 0; i < source.size(); ++i) {
    const char c = source[i];
    if (c == '\\') {
      // An escaped character, or a quote "\Q...\E" (to its end or the pattern's): literal text.
      size_t end = std::min(i + 2, source.size());
      if (!in_class && source.compare(i, 2, "\\Q") == 0) end = std::min(source.find("\\E", i + 2), source.size());
      re2_source.append(source.substr(i, end - i));
      i = end - 1;
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      re2_source += c;
      continue;
    }
    if (c == '[') {
      in_class = true;
      re2_source += c;
      if (i + 1 < source.size() && source[i + 1] == '^') re2_source += source[++i];
      if (i + 1 < source.size() && source[i + 1] == ']') re2_source += source[++i];  // "[]...]": a literal ']'
      continue;
    }
    size_t name_at = 0;
    if (source.compare(i, 4, "(?P<") == 0) name_at = i + 4;
    else if (source.compare(i, 3, "(?<") == 0 && i + 3 < source.size() && IsNameStart(source[i + 3])) name_at = i + 3;
    if (name_at == 0) {  // not a named group
      re2_source += c;
      continue;
    }
    size_t close = name_at;
    while (close < source.size() && IsNameChar(source[close])) ++close;
    if (close == name_at || close >= source.size() || source[close] != '>' || !IsNameStart(source[name_at])) {
      return Error{quoted + ": a group name must be a word ((?P<name>...) or (?<name>...))"};
    }
    std::string name(source.substr(name_at, close - name_at));
    for (const Named& n : named) {
      if (n.name == name) return Error{quoted + ": the group name '" + name + "' is used twice"};
    }
    const StepField field = ClassifyStepField(name);
    if (field == StepField::kIgnored || field == StepField::kTotalTime) {
      return Error{quoted + ": the group name '" + name + "' cannot be used"};
    }
    if (field == StepField::kScalar && !IsScalarName(name)) {
      return Error{quoted + ": the group name '" + name + "' is too long"};
    }
    re2_source += "(?P<" + name + ">";
    named.push_back({std::move(name), field});
    i = close;
  }
  if (named.empty()) {
    return Error{quoted + ": it has no named group; name what it captures, e.g. (?P<loss>[0-9.]+)"};
  }
  auto regex = CompileUserRegex(re2_source);
  if (!regex) return Error{quoted + ": not a valid regular expression: " + regex.error()};
  LogPattern pattern;
  pattern.regex = *regex;
  const std::map<std::string, int>& indices = pattern.regex->NamedCapturingGroups();
  for (Named& n : named) {
    const int index = indices.at(n.name);  // every name above was written as (?P<name>
    pattern.groups.push_back({index, std::move(n.name), n.field});
    pattern.submatches = std::max(pattern.submatches, index + 1);
  }
  return pattern;
}

}  // namespace fleet::api
