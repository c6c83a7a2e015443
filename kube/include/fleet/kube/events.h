// EventRecorder: core/v1 Events about an object, written asynchronously (never blocks the caller,
// bounded queue, drops and counts when full). Repeats of the same (object, type, reason, message)
// within the aggregation window update the existing Event's count and lastTimestamp instead of
// creating a new one (a JSON merge patch of count + lastTimestamp), as the real event recorder
// does. Event names are "<object name>.<unique hex suffix>"; the namespace is the object's
// ("default" for cluster-scoped objects). Writes that fail after the client's own retries are
// dropped: events are best-effort.
#pragma once

#include <chrono>
#include <cstdint>
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
  ~EventRecorder();   // writes what is queued, then stops (as slow as the API server)
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
  std::string UniqueName(const std::string& object_name);
  void Prune(std::chrono::system_clock::time_point now);   // bounds seen_

  std::shared_ptr<Client> client_;
  EventRecorderOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<Pending> queue_;
  bool writing_ = false;
  bool stop_ = false;
  int64_t dropped_ = 0;
  // Writer-thread state (no lock): aggregation key -> the Event written for it.
  std::map<std::string, Seen> seen_;
  uint64_t last_suffix_ = 0;
  std::thread thread_;
};

}  // namespace fleet::kube
