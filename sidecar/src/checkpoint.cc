#include "fleet/sidecar/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "fleet/api/checkpoint.h"
#include "fleet/base/strings.h"
#include "fleet/base/time.h"

namespace fleet::sidecar {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// A done file holds one integer: anything longer is not a step.
constexpr size_t kMaxDoneBytes = 64;

std::string Seconds(Clock::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count()) + "s";
}

// The directory, made writable for the trainer (another user): the volume only this pod mounts is
// what keeps others out.
bool EnsureDir(const std::string& dir, std::string* error) {
  if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) {
    *error = "cannot create " + dir + ": " + std::strerror(errno);
    return false;
  }
  ::chmod(dir.c_str(), 0777);   // mkdir's mode is cut by the umask
  return true;
}

// Writes `text` to `path` through a temporary file and a rename: a reader sees all or nothing.
bool WriteAtomically(const std::string& path, const std::string& text, std::string* error) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << text;
    if (!out.flush()) {
      *error = "cannot write " + temporary;
      return false;
    }
  }
  ::chmod(temporary.c_str(), 0644);
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    *error = "cannot rename " + temporary + " to " + path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

// The done file's first bytes (at most kMaxDoneBytes + 1); nullopt while there is none.
std::optional<std::string> ReadDone(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(kMaxDoneBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

// A reason as a request may name it: a word of at most 32 letters, digits, '-' and '_'.
bool IsReasonWord(std::string_view s) {
  return !s.empty() && s.size() <= 32 && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  });
}

// The reason a request names (?reason=WORD), else "request".
std::string ReasonOf(const std::string& query) {
  for (size_t begin = 0; begin <= query.size();) {
    size_t end = query.find('&', begin);
    if (end == std::string::npos) end = query.size();
    const std::string_view item(query.data() + begin, end - begin);
    if (item.substr(0, 7) == "reason=" && IsReasonWord(item.substr(7))) {
      return std::string(item.substr(7));
    }
    begin = end + 1;
  }
  return "request";
}

}  // namespace

Checkpointer::Checkpointer(CheckpointOptions options, Logger log, Record record)
    : options_(std::move(options)), log_(std::move(log)), record_(std::move(record)) {}

std::optional<CheckpointOutcome> Checkpointer::Request(const std::string& reason) {
  std::unique_lock<std::mutex> lock(mu_);
  if (pending_) {
    if (joiners_ >= kMaxJoiners) return std::nullopt;
    ++joiners_;
    const uint64_t joined = answered_;
    cv_.wait(lock, [&] { return answered_ != joined; });
    --joiners_;
    return *last_;
  }
  if (last_ && Clock::now() - answered_at_ < options_.timeout) return *last_;
  pending_ = true;
  lock.unlock();
  CheckpointOutcome outcome;
  try {
    outcome = Ask(reason);
  } catch (const std::exception& e) {   // a full disk, allocation: answered, never thrown through the server
    outcome = {api::kCheckpointInvalid, std::nullopt, std::string("the checkpoint request failed: ") + e.what()};
  }
  log_("checkpoint " + outcome.result + ": " + outcome.message);
  RecordOutcome(outcome);
  lock.lock();
  last_ = outcome;
  pending_ = false;
  ++answered_;
  answered_at_ = Clock::now();
  cv_.notify_all();
  return outcome;
}

// On a thread of its own: this one is usually one of the HTTP server's, whose stack is too small
// for the agent's record, an API request (http_server.h). Not recorded is logged, never thrown: the
// request is answered, and the next one is not left waiting for this one.
void Checkpointer::RecordOutcome(const CheckpointOutcome& outcome) {
  if (!record_) return;
  try {
    httpd::RunOnOwnThread([&] { record_(outcome); });
  } catch (const std::exception& e) {
    log_(std::string("cannot record the checkpoint: ") + e.what());
  }
}

CheckpointOutcome Checkpointer::Ask(const std::string& reason) {
  const auto started = Clock::now();
  std::string error;
  const std::string done = options_.dir + "/done";
  if (!EnsureDir(options_.dir, &error)) return {api::kCheckpointInvalid, std::nullopt, error};
  std::remove(done.c_str());   // an earlier request's answer
  const auto deadline = std::chrono::system_clock::now() + options_.timeout;
  const Json request = {{"reason", reason},
                        {"deadline", FormatRfc3339(deadline)},
                        {"timeoutSeconds", std::chrono::duration_cast<std::chrono::seconds>(options_.timeout).count()}};
  if (!WriteAtomically(options_.dir + "/request", request.dump() + "\n", &error)) {
    return {api::kCheckpointInvalid, std::nullopt, error};
  }
  log_("asked the trainer for a checkpoint (" + reason + "): waiting up to " + Seconds(options_.timeout) + " for " + done);
  CheckpointOutcome outcome = Wait(started);
  std::remove((options_.dir + "/request").c_str());   // answered: a trainer that looks now sees none
  return outcome;
}

CheckpointOutcome Checkpointer::Wait(Clock::time_point started) {
  const std::string done = options_.dir + "/done";
  const auto deadline = started + options_.timeout;
  while (true) {
    // An empty file is one being written in place: looked at again (the contract asks for a rename).
    if (const auto text = ReadDone(done); text && !text->empty()) {
      if (auto step = api::ParseCheckpointStep(*text); step && text->size() <= kMaxDoneBytes) {
        return {api::kCheckpointSaved, step, api::CheckpointMessage(*step, " in " + Seconds(Clock::now() - started))};
      }
      const std::string shown = text->size() > kMaxDoneBytes ? "more than " + std::to_string(kMaxDoneBytes) + " bytes"
                                                             : Quote(*text);
      return {api::kCheckpointInvalid, std::nullopt,
              done + " holds " + shown + ", not a step (an integer from 0 to 2^53): no checkpoint recorded"};
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      return {api::kCheckpointTimedOut, std::nullopt,
              "the trainer wrote no " + done + " within " + Seconds(options_.timeout) +
                  " (spec.checkpoint.timeoutSeconds): no checkpoint recorded"};
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(options_.poll_interval, deadline - now));
  }
}

std::optional<CheckpointOutcome> Checkpointer::last() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_;
}

int Checkpointer::joiners() const {
  std::lock_guard<std::mutex> lock(mu_);
  return joiners_;
}

httpd::Route Checkpointer::Route() {
  return {"/checkpoint", {"GET"}, [this](const httpd::Request& request) {
            const std::optional<CheckpointOutcome> answered = Request(ReasonOf(request.query));
            if (!answered) return httpd::Response::Text(429, "a checkpoint request is pending; too many wait for it\n");
            const CheckpointOutcome& outcome = *answered;
            Json body = {{"result", outcome.result}, {"message", outcome.message}};
            if (outcome.step) body["step"] = *outcome.step;
            return httpd::Response{200, "application/json",
                                   body.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n"};
          }};
}

}  // namespace fleet::sidecar
