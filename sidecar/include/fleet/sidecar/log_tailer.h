// LogTailer: follows the trainer's log files by polling (no inotify: the trainer logs many lines
// between two polls, so one read takes them all, and polling works on every volume type).
//
//   - In --log-dir, fleetrun's and paddle.distributed.launch's per-process logs workerlog.N,
//     serverlog.N, heterlog.N as rank offset N (discovered as they appear; at most max_files); files
//     named with --log-file by the same rule in a pod of several ranks (".../workerlog.2" is rank
//     offset 2), else as rank offset 0 (a pod of one rank has no other, whatever the file's name). A
//     named file that is not there yet is opened when it appears (the launcher creates its logs
//     when it starts its processes).
//   - Existing content is read from the start; then new lines as they are written.
//   - Truncation (copytruncate, or a new run writing over the file, as the launcher does with
//     --log_overwrite when it restarts its processes): the size drops below the read offset; reading
//     starts again at 0. (A file truncated and then written past the old offset between two polls
//     looks grown: its lines from the old offset on are read.) A new run appending (the launcher's
//     default) is a file that grows.
//   - Rotation (the name now points to another file, or to none): the old file is read to its end,
//     then the new one from its start.
//   - Lines are bounded: a line longer than max_line_bytes is skipped (counted), never buffered whole.
//     A last line without its newline waits for it (the writer may be mid-line), unless the file is
//     rotated away.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fleet::sidecar {

struct LogTailerOptions {
  std::vector<std::string> files;
  std::string dir;
  int ranks = 1;                           // the pod's processes (--ranks): see the rank offsets above
  size_t max_line_bytes = 8192;
  size_t max_files = 64;
  size_t read_bytes = 256 * 1024;          // one read(2)
  size_t max_bytes_per_poll = 16u << 20;   // per file, so one busy file cannot starve the others
};

struct TailStats {
  uint64_t lines = 0;
  uint64_t bytes = 0;
  uint64_t long_lines = 0;
  uint64_t truncations = 0;
  uint64_t rotations = 0;
  uint64_t read_errors = 0;
};

class LogTailer {
 public:
  // The lines of one read of one file: complete lines without their newline. `live`: the file had
  // been read to its end before (these were just written), false while catching up on a backlog.
  using LinesFn = std::function<void(int rank_offset, const std::vector<std::string_view>& lines, bool live)>;

  explicit LogTailer(LogTailerOptions options);
  ~LogTailer();
  LogTailer(const LogTailer&) = delete;
  LogTailer& operator=(const LogTailer&) = delete;

  // Reads what is new. True when a file has more to read right away (the per-poll cap was hit).
  bool Poll(const LinesFn& on_lines);

  const TailStats& stats() const { return stats_; }
  size_t files_open() const;
  // For /status: "path (rank offset N, offset B)" per followed file.
  std::vector<std::string> Describe() const;
  // A name in --log-dir that is followed, with its rank offset; -1 when it is not.
  static int DirRankOffset(std::string_view name);

 private:
  struct File;
  void Discover();
  bool ReadFile(File& f, const LinesFn& on_lines);
  void Rotate(File& f);

  LogTailerOptions options_;
  std::vector<std::unique_ptr<File>> files_;
  std::vector<char> buffer_;
  std::vector<std::string_view> lines_;
  TailStats stats_;
  bool dir_full_logged_ = false;
  bool polled_ = false;               // the first poll is done: files appearing later are new
};

}  // namespace fleet::sidecar
