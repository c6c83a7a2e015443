#include "fleet/sidecar/step_parser.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include <re2/re2.h>

#include "fleet/api/log_pattern.h"

namespace fleet::sidecar {
namespace {

using Json = nlohmann::json;

// A field's name and what it stands for are the API's (fleet/api/log_pattern.h): one vocabulary for
// logs, reports and the patterns the operator checks.
using Key = api::StepField;
Key Classify(std::string_view key) { return api::ClassifyStepField(key); }
bool EqualsIgnoringCase(std::string_view a, std::string_view lower) { return api::IsFieldName(a, lower); }

inline bool IsDigit(char c) { return c >= '0' && c <= '9'; }
inline bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
inline bool IsAlnum(char c) { return IsDigit(c) || IsAlpha(c); }

// Characters of a log field's key (spaces too: "total time cost").
struct KeyChars {
  bool table[256] = {};
  constexpr KeyChars() {
    for (int c = 0; c < 256; ++c) {
      table[c] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                 c == '-' || c == '.' || c == '/' || c == ' ' || c == '@';
    }
  }
};
constexpr KeyChars kKeyChars;
inline bool IsKeyChar(char c) { return kKeyChars.table[static_cast<unsigned char>(c)]; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Appends the digits at text[*i...] to *mantissa; returns how many there were.
inline int Digits(std::string_view text, size_t* i, uint64_t* mantissa) {
  const char* p = text.data();
  const size_t n = text.size();
  size_t at = *i;
  uint64_t m = *mantissa;
  while (at < n && p[at] >= '0' && p[at] <= '9') {
    m = m * 10 + static_cast<uint64_t>(p[at] - '0');
    ++at;
  }
  const int count = static_cast<int>(at - *i);
  *i = at;
  *mantissa = m;
  return count;
}

// The common case of a log's numbers, "-12.345678": at most 15 significant digits, no exponent. The
// digits as an integer are exact in a double, and so are powers of ten up to 1e22, so one division
// gives the correctly rounded value (Clinger's fast path). False: leave it to from_chars.
bool FastDecimal(std::string_view text, size_t* pos, double* value) {
  static constexpr double kPow10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8,
                                      1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
  size_t i = *pos;
  const size_t n = text.size();
  const bool negative = i < n && text[i] == '-';
  if (negative) ++i;
  uint64_t mantissa = 0;
  int digits = Digits(text, &i, &mantissa);
  if (digits == 0) return false;
  int fraction = 0;
  if (i < n && text[i] == '.') {
    ++i;
    fraction = Digits(text, &i, &mantissa);
    digits += fraction;
  }
  if (digits > 15 || (i < n && (text[i] == 'e' || text[i] == 'E'))) return false;
  const double v = static_cast<double>(mantissa) / kPow10[fraction];
  *value = negative ? -v : v;
  *pos = i;
  return true;
}

// A number at text[*pos]: optionally wrapped as a one-element array ("[0.69]"), optionally followed
// at once by a unit ("0.5s", "12ms"). On success *pos is past it (and its unit).
bool ParseNumber(std::string_view text, size_t* pos, double* value, std::string_view* unit) {
  size_t i = *pos;
  const size_t n = text.size();
  bool bracket = false;
  if (i < n && text[i] == '[') {
    bracket = true;
    ++i;
    while (i < n && text[i] == ' ') ++i;
  }
  if (i < n && text[i] == '+') ++i;
  if (!FastDecimal(text, &i, value)) {
    const char* begin = text.data() + i;
    const char* end = text.data() + n;
    auto [ptr, ec] = std::from_chars(begin, end, *value);
    if (ec != std::errc()) {
      if (ec != std::errc::result_out_of_range) return false;
      // Out of double's range: from_chars still moves past it; the value is not usable.
      *value = std::nan("");
    }
    i = static_cast<size_t>(ptr - text.data());
  }
  const size_t unit_begin = i;
  while (i < n && (IsAlpha(text[i]) || text[i] == '/')) ++i;
  if (unit) *unit = text.substr(unit_begin, i - unit_begin);
  if (bracket) {
    while (i < n && text[i] == ' ') ++i;
    if (i >= n || text[i] != ']') return false;
    ++i;
  }
  *pos = i;
  return true;
}

bool AsCount(double v, int64_t* out) {
  if (!(v >= 0) || v > static_cast<double>(kMaxStepCount) || v != std::floor(v)) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

// The digits text[begin, end) as a count: false past kMaxStepCount.
bool ReadCount(std::string_view text, size_t begin, size_t end, int64_t* out) {
  int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data() + begin, text.data() + end, value);
  if (ec != std::errc() || ptr != text.data() + end || value > kMaxStepCount) return false;
  *out = value;
  return true;
}

// "step 2000/1000": a record that contradicts itself, whose step cannot be trusted to count the
// rank's progress (a trainer's line never passes its own total).
bool StepPastItsTotal(const StepRecord& r) {
  return r.Has(StepRecord::kStep) && r.Has(StepRecord::kTotalSteps) && r.step > r.total_steps;
}

std::string PastItsTotal(const StepRecord& r) {
  return "step " + std::to_string(r.step) + " is past total_steps " + std::to_string(r.total_steps);
}

bool NonNegativeFinite(double v) { return v >= 0 && std::isfinite(v); }

// Applies one field. False: the value does not fit the field (the record is malformed).
bool ApplyField(Key key, std::string_view name, double value, std::string_view unit, bool from_log, StepRecord* r) {
  switch (key) {
    case Key::kStep:
      if (!AsCount(value, &r->step)) return false;
      r->fields |= StepRecord::kStep;
      return true;
    case Key::kSteps:
      if (!AsCount(value, &r->steps)) return false;
      r->fields |= StepRecord::kSteps;
      return true;
    case Key::kEpoch:
      if (!AsCount(value, &r->epoch)) return false;
      r->fields |= StepRecord::kEpoch;
      return true;
    case Key::kLoss:
      if (std::isinf(value)) value = std::nan("");  // a diverged loss: NaN is what it means
      r->loss = value;
      r->fields |= StepRecord::kLoss;
      return true;
    case Key::kStepTime:
      if (!NonNegativeFinite(value)) return false;
      if (unit == "ms") value /= 1e3;
      else if (unit == "us") value /= 1e6;
      r->step_time = value;
      r->fields |= StepRecord::kStepTime;
      return true;
    case Key::kStepsPerSecond:
      if (!NonNegativeFinite(value)) return false;
      // PaddleNLP rounds the rate to 4 decimals: a step slower than 20000 s reads 0, a rate that
      // says nothing of the step's time (the wall clock between lines says it instead).
      if (value == 0 || !std::isfinite(1 / value)) return true;
      r->step_time = 1 / value;
      r->fields |= StepRecord::kStepTime;
      return true;
    case Key::kSamples:
      if (!NonNegativeFinite(value)) return false;
      r->samples = value;
      r->fields |= StepRecord::kSamples;
      return true;
    case Key::kSamplesPerSecond:
      if (!NonNegativeFinite(value)) return false;
      r->samples_per_second = value;
      r->fields |= StepRecord::kSamplesPerSecond;
      return true;
    case Key::kTotalTime:
      if (!NonNegativeFinite(value)) return false;
      r->total_time = value;
      r->fields |= StepRecord::kTotalTime;
      return true;
    case Key::kTotalSteps:
      if (!AsCount(value, &r->total_steps)) return false;
      r->fields |= StepRecord::kTotalSteps;
      return true;
    case Key::kRank: {
      if (from_log) return true;  // a log's rank is its file's
      if (!AsCount(value, &r->rank) || r->rank > (1 << 20)) return false;
      r->fields |= StepRecord::kRank;
      return true;
    }
    case Key::kIgnored:
      return true;
    case Key::kScalar:
      if (std::isinf(value)) value = std::nan("");
      r->AddScalar(name, value);
      return true;
  }
  return true;
}

size_t FindOr(std::string_view text, char c, size_t from, size_t none) {
  if (from >= text.size()) return none;
  const void* hit = std::memchr(text.data() + from, c, text.size() - from);
  return hit ? static_cast<size_t>(static_cast<const char*>(hit) - text.data()) : none;
}

// Where the general parser found the numbers it used, for LineParser's template of the line.
struct TraceSlot {
  size_t begin = 0, end = 0;       // the number's text
  Key key = Key::kIgnored;
  bool integer = false;            // digits only (the step token, the epoch header)
  bool token = false;              // the step token: applied after every field
  size_t name_begin = 0, name_length = 0;   // a scalar's name in the line
};
struct Trace {
  std::vector<TraceSlot> slots;
  bool usable = true;              // false: a number the template cannot replay (units, exponents, ...)
};

// Exactly a number FastDecimal reads (what a template slot replays), spanning [begin, end).
bool IsFastDecimal(std::string_view text, size_t begin, size_t end);

// The "key: value" fields of a log line between [begin, end). Returns false when a known field has
// a value it cannot use; *found counts the fields taken. A field's key is the run of key characters
// (letters, digits, _ - . / @ and inner spaces) just before its ':' or '='; whatever precedes it
// ("TRAIN --->", ", ") is read past. The separators are found with memchr, not byte by byte.
// `global_step`: the line's step counts from the start of training, and its epoch is a fraction of
// epochs done ("epoch: 0.1356", older PaddleNLP's name for progress_or_epoch): a custom scalar.
bool ParseLogFields(std::string_view line, size_t begin, size_t end, StepRecord* r, int* found, Trace* trace,
                    bool global_step = false) {
  const std::string_view text = line.substr(0, end);
  size_t colon = FindOr(text, ':', begin, end);
  size_t equals = FindOr(text, '=', begin, end);
  size_t i = begin;
  while (true) {
    const size_t sep = std::min(colon, equals);
    if (sep >= end) break;
    size_t key_begin = sep;
    while (key_begin > i && IsKeyChar(text[key_begin - 1])) --key_begin;
    std::string_view key = Trim(text.substr(key_begin, sep - key_begin));
    i = sep + 1;
    while (i < end && (text[i] == ' ' || text[i] == '\t' || text[i] == '=')) ++i;
    Key k = Key::kScalar;
    bool usable = !key.empty() && IsAlpha(key.front());
    if (usable) k = Classify(key);
    if (!usable || k == Key::kScalar) {
      // "Epoch 3 done loss" -> "loss", "[INFO] - loss" -> "loss": a field's key is the last word
      // before its separator.
      const size_t space = key.rfind(' ');
      if (space != std::string_view::npos) {
        key = key.substr(space + 1);
        usable = IsAlpha(key.front());
        k = Classify(key);
      }
    }
    if (global_step && k == Key::kEpoch) k = Key::kScalar;
    if (!usable || k == Key::kIgnored) {
      // Not a field, or one read past: its value, whatever it is, too.
      const size_t value_begin = i;
      while (i < end && text[i] != ',' && text[i] != ' ') ++i;
      if (trace && usable && IsFastDecimal(text, value_begin, i)) {
        trace->slots.push_back({value_begin, i, Key::kIgnored, false, false, 0, 0});
      }
    } else {
      double value = 0;
      std::string_view unit;
      size_t after = i;
      const bool number = ParseNumber(text, &after, &value, &unit) &&
                          (after >= end || !IsKeyChar(text[after]) || text[after] == ' ');
      if (!number) {
        if (k != Key::kScalar) return false;
        while (i < end && text[i] != ',' && text[i] != ' ') ++i;  // some other value: read past it
      } else {
        const bool named = k != Key::kScalar || IsScalarName(key);
        if (trace) {
          if (IsFastDecimal(text, i, after)) {
            trace->slots.push_back({i, after, named ? k : Key::kIgnored, false, false,
                                    static_cast<size_t>(key.data() - line.data()), key.size()});
          } else {
            trace->usable = false;
          }
        }
        i = after;
        if (named) {
          if (!ApplyField(k, key, value, unit, /*from_log=*/true, r)) return false;
          ++*found;
        }
      }
    }
    if (colon < i) colon = FindOr(text, ':', i, end);
    if (equals < i) equals = FindOr(text, '=', i, end);
  }
  return true;
}

// Where FindStepToken found a step's total ("step 10/1000"); begin == end: none.
struct TotalToken {
  size_t begin = 0, end = 0;
  int64_t value = 0;
};

// "step" as a word, then optional spaces, ':' or '=', then digits ending the word, optionally
// followed by "/<total>" (*total).
bool FindStepToken(std::string_view line, std::string_view word, size_t* begin, size_t* end, int64_t* step,
                   size_t* digits_begin, TotalToken* total) {
  for (size_t p = line.find(word); p != std::string_view::npos; p = line.find(word, p + 1)) {
    if (p > 0 && (IsAlnum(line[p - 1]) || line[p - 1] == '_')) continue;
    size_t i = p + word.size();
    while (i < line.size() && line[i] == ' ') ++i;
    if (i < line.size() && (line[i] == ':' || line[i] == '=')) {
      ++i;
      while (i < line.size() && line[i] == ' ') ++i;
    }
    const size_t digits = i;
    while (i < line.size() && IsDigit(line[i])) ++i;
    if (i == digits) continue;
    if (i < line.size() && (IsAlpha(line[i]) || line[i] == '_' || line[i] == '.')) continue;
    if (!ReadCount(line, digits, i, step)) *step = -1;  // past the bound: malformed
    *digits_begin = digits;
    *begin = p;
    *end = i;
    *total = {};
    if (i + 1 < line.size() && line[i] == '/' && IsDigit(line[i + 1])) {
      size_t t = i + 1;
      while (t < line.size() && IsDigit(line[t])) ++t;
      const bool word_ends = t == line.size() || !(IsAlpha(line[t]) || line[t] == '_' || line[t] == '.');
      if (word_ends && ReadCount(line, i + 1, t, &total->value)) {
        *total = {i + 1, t, total->value};
      }
    }
    return true;
  }
  return false;
}

size_t SkipSpaces(std::string_view s, size_t i) {
  while (i < s.size() && s[i] == ' ') ++i;
  return i;
}

// `key` as a field's whole key ("global_step: 120", "global_step=120"), anywhere in the line.
bool HasFieldKey(std::string_view line, std::string_view key) {
  for (size_t p = line.find(key); p != std::string_view::npos; p = line.find(key, p + 1)) {
    if (p > 0 && (IsAlnum(line[p - 1]) || line[p - 1] == '_')) continue;
    const size_t after = SkipSpaces(line, p + key.size());
    if (after < line.size() && (line[after] == ':' || line[after] == '=')) return true;
  }
  return false;
}

// "[...] [    INFO] -   Total optimization steps = 1,000" (the PaddleNLP / PaddleFormers Trainer, and
// Hugging Face's, as training starts): the run's total, in a record of no steps.
ParseOutcome ParseTotalStepsLine(std::string_view line, StepRecord* r, Trace* trace) {
  constexpr std::string_view kMarker = "Total optimization steps = ";
  const size_t at = line.find(kMarker);
  if (at == std::string_view::npos) return ParseOutcome::kNone;
  uint64_t total = 0;
  int digits = 0;
  for (size_t i = at + kMarker.size(); i < line.size(); ++i) {
    if (IsDigit(line[i])) {
      if (++digits > 15) return ParseOutcome::kMalformed;   // exact in a double, as every count here
      total = total * 10 + static_cast<uint64_t>(line[i] - '0');
    } else if (line[i] != ',' || digits == 0) {           // "1,000": thousands separators
      break;
    }
  }
  if (digits == 0) return ParseOutcome::kMalformed;
  r->total_steps = static_cast<int64_t>(total);
  r->steps = 0;
  r->fields |= StepRecord::kTotalSteps | StepRecord::kSteps;
  if (trace) trace->usable = false;   // printed once: no template to learn
  return ParseOutcome::kStep;
}

bool ReadInt(std::string_view s, size_t* i, int64_t* out) {
  const size_t begin = *i;
  while (*i < s.size() && IsDigit(s[*i])) ++*i;
  return *i > begin && ReadCount(s, begin, *i, out);
}

// "[Epoch 0, batch 5]" at `open`: epoch and step; *end is past ']'. kNone when it is not that header.
ParseOutcome ParseEpochHeader(std::string_view line, size_t open, StepRecord* r, size_t* end, Trace* trace) {
  size_t i = SkipSpaces(line, open + 6);  // past "[Epoch"
  if (i < line.size() && line[i] == ':') i = SkipSpaces(line, i + 1);
  if (i >= line.size() || !IsDigit(line[i])) return ParseOutcome::kNone;
  const size_t epoch_begin = i;
  if (!ReadInt(line, &i, &r->epoch)) return ParseOutcome::kMalformed;
  const size_t epoch_end = i;
  i = SkipSpaces(line, i);
  if (i >= line.size() || line[i] != ',') return ParseOutcome::kNone;
  i = SkipSpaces(line, i + 1);
  const size_t word = i;
  while (i < line.size() && IsAlpha(line[i])) ++i;
  const std::string_view name = line.substr(word, i - word);
  if (!EqualsIgnoringCase(name, "batch") && !EqualsIgnoringCase(name, "step") && !EqualsIgnoringCase(name, "iter")) {
    return ParseOutcome::kNone;
  }
  i = SkipSpaces(line, i);
  if (i < line.size() && line[i] == ':') i = SkipSpaces(line, i + 1);
  if (i >= line.size() || !IsDigit(line[i])) return ParseOutcome::kNone;
  const size_t step_begin = i;
  if (!ReadInt(line, &i, &r->step)) return ParseOutcome::kMalformed;
  const size_t step_end = i;
  i = SkipSpaces(line, i);
  if (i >= line.size() || line[i] != ']') return ParseOutcome::kNone;
  r->fields |= StepRecord::kEpoch | StepRecord::kStep;
  if (trace) {
    trace->slots.push_back({epoch_begin, epoch_end, Key::kEpoch, true, false, 0, 0});
    trace->slots.push_back({step_begin, step_end, Key::kStep, true, false, 0, 0});
  }
  *end = i + 1;
  return ParseOutcome::kStep;
}

}  // namespace

void StepRecord::Clear() {
  fields = 0;
  step = 0;
  steps = 1;
  epoch = 0;
  rank = 0;
  loss = step_time = samples = samples_per_second = total_time = 0;
  total_steps = 0;
  scalar_count = 0;
  scalars_dropped = 0;
}

void StepRecord::AddScalar(std::string_view name, double value) {
  for (size_t i = 0; i < scalar_count; ++i) {
    if (scalars[i].name == name) {
      scalars[i].value = value;
      return;
    }
  }
  if (scalar_count == kMaxScalars) {
    ++scalars_dropped;
    return;
  }
  scalars[scalar_count++] = {name, value};
}

namespace {

ParseOutcome ParseStepLineFields(std::string_view line, StepRecord* record, Trace* trace) {
  record->Clear();
  // "[Epoch 0, batch 5] loss: ..." (dygraph examples)
  for (std::string_view marker : {std::string_view("[Epoch"), std::string_view("[epoch")}) {
    const size_t open = line.find(marker);
    if (open == std::string_view::npos) continue;
    size_t end = 0;
    const ParseOutcome header = ParseEpochHeader(line, open, record, &end, trace);
    if (header == ParseOutcome::kMalformed) return header;
    if (header == ParseOutcome::kNone) {
      record->Clear();
      if (trace) trace->slots.clear();
      break;
    }
    int found = 0;
    return ParseLogFields(line, end, line.size(), record, &found, trace) ? ParseOutcome::kStep
                                                                          : ParseOutcome::kMalformed;
  }
  // "TRAIN ---> pass: 0 loss: 0.69" (static-graph parameter-server examples): one step per line.
  const size_t train = line.find("TRAIN --->");
  if (train != std::string_view::npos) {
    int found = 0;
    if (!ParseLogFields(line, train + 10, line.size(), record, &found, trace)) return ParseOutcome::kMalformed;
    return found > 0 ? ParseOutcome::kStep : ParseOutcome::kNone;
  }
  // "... step11, train_loss: ..." / "step 12 cost=0.53" (Fleet examples).
  size_t begin = 0, end = 0, digits = 0;
  int64_t step = 0;
  TotalToken total;
  if (!FindStepToken(line, "step", &begin, &end, &step, &digits, &total) &&
      !FindStepToken(line, "Step", &begin, &end, &step, &digits, &total)) {
    // "[2024-05-01 10:00:00,123] [    INFO] - loss: 2.12, learning_rate: 3e-05, global_step: 120, ...,
    // interval_samples_per_second: 31.04, interval_steps_per_second: 0.97, progress_or_epoch: 0.0625"
    // (the PaddleNLP / PaddleFormers Trainer's log line, on the rank that logs): its fields only.
    if (!HasFieldKey(line, "global_step")) return ParseTotalStepsLine(line, record, trace);
    int found = 0;
    if (!ParseLogFields(line, 0, line.size(), record, &found, trace, /*global_step=*/true)) {
      return ParseOutcome::kMalformed;
    }
    if (record->Has(StepRecord::kStep)) return ParseOutcome::kStep;
    record->Clear();  // "train/global_step: 3": another name
    return ParseOutcome::kNone;
  }
  int found = 0;
  if (!ParseLogFields(line, 0, begin, record, &found, trace)) return ParseOutcome::kMalformed;
  // The total is applied where it stands in the line, as the template replays it.
  const bool has_total = total.end > total.begin;
  if (has_total) {
    record->total_steps = total.value;
    record->fields |= StepRecord::kTotalSteps;
    if (trace) trace->slots.push_back({total.begin, total.end, Key::kTotalSteps, true, false, 0, 0});
  }
  if (!ParseLogFields(line, has_total ? total.end : end, line.size(), record, &found, trace)) {
    return ParseOutcome::kMalformed;
  }
  if (found == 0) {   // "step 3 of the setup": no numbers, not a training step
    record->Clear();
    return ParseOutcome::kNone;
  }
  if (step < 0) return ParseOutcome::kMalformed;
  record->step = step;
  record->fields |= StepRecord::kStep;
  if (trace) trace->slots.push_back({digits, end, Key::kStep, true, true, 0, 0});
  return ParseOutcome::kStep;
}

bool IsFastDecimal(std::string_view text, size_t begin, size_t end) {
  size_t i = begin;
  double value = 0;
  return FastDecimal(text.substr(0, end), &i, &value) && i == end;
}

ParseOutcome ParseStepLineTraced(std::string_view line, StepRecord* record, Trace* trace) {
  const ParseOutcome outcome = ParseStepLineFields(line, record, trace);
  return outcome == ParseOutcome::kStep && StepPastItsTotal(*record) ? ParseOutcome::kMalformed : outcome;
}

}  // namespace

ParseOutcome ParseStepLine(std::string_view line, StepRecord* record) {
  return ParseStepLineTraced(line, record, nullptr);
}

// ---- LineParser ----

struct LineParser::Slot {
  size_t literal_begin = 0, literal_length = 0;   // in text_: what precedes the number
  Key key = Key::kIgnored;
  bool integer = false;
  bool token = false;
  size_t name_offset = 0, name_length = 0;        // a scalar's name, from the literal's start
};

LineParser::LineParser() = default;
LineParser::~LineParser() = default;
LineParser::LineParser(LineParser&&) noexcept = default;
LineParser& LineParser::operator=(LineParser&&) noexcept = default;

bool LineParser::Replay(std::string_view line, StepRecord* r) const {
  r->Clear();
  size_t p = 0;
  const char* text = text_.data();
  bool has_token = false;
  int64_t token = 0;
  for (const Slot& slot : slots_) {
    if (line.size() - p < slot.literal_length ||
        std::memcmp(line.data() + p, text + slot.literal_begin, slot.literal_length) != 0) {
      return false;
    }
    const size_t literal_at = p;
    p += slot.literal_length;
    double value = 0;
    if (slot.integer) {
      uint64_t digits = 0;
      const int count = Digits(line, &p, &digits);
      if (count == 0 || count > 15) return false;
      const int64_t n = static_cast<int64_t>(digits);
      if (slot.token) {
        has_token = true;
        token = n;
        continue;
      }
      value = static_cast<double>(n);
    } else if (slot.key == Key::kIgnored) {
      // Its value is not used: the general parser reads past it up to the literal that follows.
      if (p < line.size() && line[p] == '-') ++p;
      const size_t int_begin = p;
      while (p < line.size() && IsDigit(line[p])) ++p;
      if (p == int_begin) return false;
      if (p < line.size() && line[p] == '.') {
        ++p;
        while (p < line.size() && IsDigit(line[p])) ++p;
      }
      continue;
    } else if (!FastDecimal(line, &p, &value)) {
      return false;
    }
    const std::string_view name = line.substr(literal_at + slot.name_offset, slot.name_length);
    if (!ApplyField(slot.key, name, value, std::string_view(), /*from_log=*/true, r)) return false;
  }
  if (line.size() - p != tail_.size() || std::memcmp(line.data() + p, tail_.data(), tail_.size()) != 0) return false;
  if (has_token) {
    r->step = token;
    r->fields |= StepRecord::kStep;
  }
  return !StepPastItsTotal(*r);   // else the general parser says why
}

ParseOutcome LineParser::Parse(std::string_view line, StepRecord* record) {
  if (valid_ && Replay(line, record)) return ParseOutcome::kStep;
  Trace trace;
  const ParseOutcome outcome = ParseStepLineTraced(line, record, &trace);
  if (outcome != ParseOutcome::kStep || !trace.usable) return outcome;
  // Learn this line's shape: the text between its numbers, and what each number is.
  valid_ = false;
  text_.clear();
  slots_.clear();
  std::vector<TraceSlot> ordered = trace.slots;
  std::sort(ordered.begin(), ordered.end(), [](const TraceSlot& a, const TraceSlot& b) { return a.begin < b.begin; });
  size_t p = 0;
  for (const TraceSlot& t : ordered) {
    if (t.begin < p || t.end <= t.begin) return outcome;  // overlapping: not a shape to replay
    Slot slot;
    slot.literal_begin = text_.size();
    slot.literal_length = t.begin - p;
    text_.append(line.data() + p, t.begin - p);
    slot.key = t.key;
    slot.integer = t.integer;
    slot.token = t.token;
    if (t.name_length) {
      if (t.name_begin < p || t.name_begin + t.name_length > t.begin) return outcome;  // the name must be literal
      slot.name_offset = t.name_begin - p;
      slot.name_length = t.name_length;
    }
    slots_.push_back(slot);
    p = t.end;
  }
  tail_.assign(line.data() + p, line.size() - p);
  valid_ = true;
  return outcome;
}

// ---- user patterns ----

// The pattern's grammar (which group names it may use, and how) is the API's: the operator checks
// spec.sidecar.patterns with the same CompileLogPattern.
struct StepPattern::Compiled : api::LogPattern {};

Result<StepPattern> StepPattern::Compile(std::string_view source) {
  auto compiled = api::CompileLogPattern(source);
  if (!compiled) return Error{"--pattern " + compiled.error()};
  StepPattern pattern;
  pattern.source_ = std::string(source);
  pattern.compiled_ = std::make_shared<const Compiled>(Compiled{std::move(*compiled)});
  return pattern;
}

ParseOutcome StepPattern::Match(std::string_view line, StepRecord* record) const {
  record->Clear();
  std::vector<re2::StringPiece> m(static_cast<size_t>(compiled_->submatches));
  if (!compiled_->regex->Match(re2::StringPiece(line.data(), line.size()), 0, line.size(), re2::RE2::UNANCHORED,
                               m.data(), compiled_->submatches)) {
    return ParseOutcome::kNone;
  }
  for (const api::LogPattern::Group& g : compiled_->groups) {
    const re2::StringPiece& group = m[static_cast<size_t>(g.index)];
    if (group.data() == nullptr) continue;  // its part of the pattern did not take part in the match
    const std::string_view value_text = Trim(std::string_view(group.data(), group.size()));
    size_t pos = 0;
    double value = 0;
    std::string_view unit;
    if (!ParseNumber(value_text, &pos, &value, &unit) || pos != value_text.size()) return ParseOutcome::kMalformed;
    if (!ApplyField(g.field, g.name, value, unit, /*from_log=*/true, record)) return ParseOutcome::kMalformed;
  }
  return StepPastItsTotal(*record) ? ParseOutcome::kMalformed : ParseOutcome::kStep;
}

// ---- push API ----

ParseOutcome ParseTextReport(std::string_view line, StepRecord* record, std::string* error) {
  record->Clear();
  int found = 0;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    if (i >= line.size()) break;
    const size_t begin = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
    const std::string_view token = line.substr(begin, i - begin);
    const size_t eq = token.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      *error = "expected key=value, got '" + std::string(token.substr(0, 64)) + "'";
      return ParseOutcome::kMalformed;
    }
    const std::string_view key = token.substr(0, eq);
    const std::string_view text = token.substr(eq + 1);
    const Key k = Classify(key);
    if (k == Key::kScalar && !IsScalarName(key)) {
      *error = "bad name '" + std::string(key.substr(0, 64)) + "' (1-64 of A-Z a-z 0-9 _ . : / -)";
      return ParseOutcome::kMalformed;
    }
    size_t pos = 0;
    double value = 0;
    std::string_view unit;
    if (!ParseNumber(text, &pos, &value, &unit) || pos != text.size() || !unit.empty()) {
      *error = std::string(key.substr(0, 64)) + ": not a number";
      return ParseOutcome::kMalformed;
    }
    if (k == Key::kIgnored || k == Key::kTotalTime) {
      *error = std::string(key) + " is not a report field";
      return ParseOutcome::kMalformed;
    }
    if (!ApplyField(k, key, value, unit, /*from_log=*/false, record)) {
      *error = std::string(key) + ": the value does not fit (counts are whole numbers >= 0, times >= 0)";
      return ParseOutcome::kMalformed;
    }
    ++found;
  }
  if (StepPastItsTotal(*record)) {
    *error = PastItsTotal(*record);
    return ParseOutcome::kMalformed;
  }
  return found == 0 ? ParseOutcome::kNone : ParseOutcome::kStep;
}

namespace {

Status JsonRecord(const Json& object, StepRecord* r) {
  if (!object.is_object()) return Error{"a report must be a JSON object"};
  for (auto it = object.begin(); it != object.end(); ++it) {
    const std::string& key = it.key();
    if (key == "scalars") {
      if (!it->is_object()) return Error{"scalars must be an object of numbers"};
      for (auto s = it->begin(); s != it->end(); ++s) {
        if (!IsScalarName(s.key())) return Error{"bad scalar name '" + s.key().substr(0, 64) + "'"};
        if (!s->is_number()) return Error{"scalar " + s.key() + " is not a number"};
        r->AddScalar(s.key(), s->get<double>());
      }
      continue;
    }
    const Key k = Classify(key);
    if (k == Key::kIgnored || k == Key::kTotalTime) return Error{key + " is not a report field"};
    if (k == Key::kScalar && !IsScalarName(key)) return Error{"bad field name '" + key.substr(0, 64) + "'"};
    if (!it->is_number()) return Error{key + " is not a number"};
    if (!ApplyField(k, key, it->get<double>(), "", /*from_log=*/false, r)) {
      return Error{key + ": the value does not fit (counts are whole numbers >= 0, times >= 0)"};
    }
  }
  if (StepPastItsTotal(*r)) return Error{PastItsTotal(*r)};
  return OkStatus();
}

}  // namespace

Result<std::vector<StepRecord>> ParseJsonReport(const Json& body, size_t max_records) {
  std::vector<StepRecord> records;
  if (body.is_array()) {
    if (body.size() > max_records) {
      return Error{"at most " + std::to_string(max_records) + " reports per request"};
    }
    records.resize(body.size());
    for (size_t i = 0; i < body.size(); ++i) {
      if (auto s = JsonRecord(body[i], &records[i]); !s) return Error{"report " + std::to_string(i) + ": " + s.error()};
    }
    return records;
  }
  records.resize(1);
  if (auto s = JsonRecord(body, &records[0]); !s) return Error{s.error()};
  return records;
}

}  // namespace fleet::sidecar
