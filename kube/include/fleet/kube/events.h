// EventRecorder: core/v1 Events about an object, written asynchronously (never blocks the caller,
// bounded queue, drops and counts when full). Repeats of the same (object, type, reason, message)
// within the aggregation window update the existing Event's count and lastTimestamp instead of
// creating a new one, as the real event recorder does.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "fleet/kube/client.h"

namespace fleet::kube {

struct EventRecorderOptions {
  std::string component = "fleet-operator";
  size_t max_queue = 1000;
  std::chrono::minutes aggregation_window{10};
};

class EventRecorder {
 public:
  EventRecorder(std::shared_ptr<Client> client, EventRecorderOptions options = {});
  ~EventRecorder();   // flushes what is queued, then stops
  // `involved` is the object the event is about (its kind, apiVersion, metadata name/namespace/uid
  // are used). type is "Normal" or "Warning".
  void Record(const Json& involved, const std::string& type, const std::string& reason,
              const std::string& message);
  void Flush();       // waits until everything queued so far is written
  int64_t dropped() const;

 private:
  struct Pending {
    Json involved;
    std::string type, reason, message;
    std::chrono::system_clock::time_point at;
  };
  struct Seen {
    std::string event_name;
    int count = 0;
    std::chrono::system_clock::time_point first, last;
  };
  void Run();
  void Write(const Pending& pending);

  std::shared_ptr<Client> client_;
  EventRecorderOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<Pending> queue_;
  bool writing_ = false;
  bool stop_ = false;
  int64_t dropped_ = 0;
  std::map<std::string, Seen> seen_;  // aggregation key -> the Event written for it
  std::thread thread_;
};

}  // namespace fleet::kube
