#include "fleet/sidecar/log_tailer.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace fleet::sidecar {

struct LogTailer::File {
  std::string path;
  int rank_offset = 0;
  int fd = -1;
  dev_t dev = 0;
  ino_t ino = 0;
  off_t offset = 0;
  std::string partial;        // the start of a line whose newline has not been read (<= max_line_bytes)
  bool discarding = false;    // inside a line over max_line_bytes: skip to its newline
  bool caught_up = false;     // read to its end at least once

  ~File() {
    if (fd >= 0) ::close(fd);
  }
};

LogTailer::LogTailer(LogTailerOptions options) : options_(std::move(options)) {
  options_.max_line_bytes = std::max<size_t>(options_.max_line_bytes, 16);
  options_.read_bytes = std::max<size_t>(options_.read_bytes, 4096);
  buffer_.resize(options_.read_bytes + options_.max_line_bytes + 1);
  for (const std::string& path : options_.files) {
    auto f = std::make_unique<File>();
    f->path = path;
    // The launcher's per-process logs named one by one (the operator gives workerlog.0 .. K-1 of
    // paddle.distributed.launch's log dir): the same rank offsets as found in --log-dir.
    const size_t slash = path.rfind('/');
    const int by_name = DirRankOffset(slash == std::string::npos ? path : path.substr(slash + 1));
    f->rank_offset = options_.ranks > 1 ? std::max(0, by_name) : 0;
    files_.push_back(std::move(f));
  }
}

LogTailer::~LogTailer() = default;

int LogTailer::DirRankOffset(std::string_view name) {
  for (std::string_view prefix : {"workerlog.", "serverlog.", "heterlog."}) {
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string_view digits = name.substr(prefix.size());
    if (digits.size() > 4 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return -1;
    }
    int n = 0;
    std::from_chars(digits.data(), digits.data() + digits.size(), n);
    return n;
  }
  return -1;
}

size_t LogTailer::files_open() const {
  return static_cast<size_t>(std::count_if(files_.begin(), files_.end(), [](const auto& f) { return f->fd >= 0; }));
}

std::vector<std::string> LogTailer::Describe() const {
  std::vector<std::string> out;
  for (const auto& f : files_) {
    out.push_back(f->path + " (rank offset " + std::to_string(f->rank_offset) + ", " +
                  (f->fd < 0 ? std::string("not open") : "at byte " + std::to_string(f->offset)) + ")");
  }
  return out;
}

void LogTailer::Discover() {
  if (options_.dir.empty()) return;
  DIR* dir = ::opendir(options_.dir.c_str());
  if (!dir) return;  // not there yet (the trainer creates it)
  while (const dirent* entry = ::readdir(dir)) {
    const int offset = DirRankOffset(entry->d_name);
    if (offset < 0) continue;
    const std::string path = options_.dir + "/" + entry->d_name;
    if (std::any_of(files_.begin(), files_.end(), [&](const auto& f) { return f->path == path; })) continue;
    if (files_.size() >= options_.max_files + options_.files.size()) {
      dir_full_logged_ = true;
      continue;
    }
    auto f = std::make_unique<File>();
    f->path = path;
    f->rank_offset = offset;
    files_.push_back(std::move(f));
  }
  ::closedir(dir);
}

bool LogTailer::ReadFile(File& f, const LinesFn& on_lines) {
  size_t budget = options_.max_bytes_per_poll;
  char* const buffer = buffer_.data();
  const size_t max_line = options_.max_line_bytes;
  while (budget > 0) {
    const size_t carried = f.partial.size();
    if (carried) std::memcpy(buffer, f.partial.data(), carried);
    const ssize_t n = ::pread(f.fd, buffer + carried, options_.read_bytes, f.offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      ++stats_.read_errors;
      return false;
    }
    if (n == 0) {
      f.caught_up = true;
      return false;
    }
    const bool live = f.caught_up;
    f.offset += n;
    budget -= std::min(budget, static_cast<size_t>(n));
    stats_.bytes += static_cast<uint64_t>(n);
    const char* p = buffer;
    const char* const end = buffer + carried + static_cast<size_t>(n);
    if (f.discarding) {
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
      if (nl) {
        p = nl + 1;
        f.discarding = false;
      } else {
        p = end;
      }
    }
    while (p < end) {
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
      if (!nl) break;
      // A carriage return ends a line as a terminal shows it: progress bars (tqdm) rewrite their
      // line with '\r', and each state is a line of its own; "\r\n" is one end.
      for (const char* start = p; start < nl || start == p;) {
        const char* cr = static_cast<const char*>(std::memchr(start, '\r', static_cast<size_t>(nl - start)));
        const char* stop = cr ? cr : nl;
        const size_t length = static_cast<size_t>(stop - start);
        if (length > max_line) {
          ++stats_.long_lines;
        } else if (length > 0 || (start == p && !cr)) {  // an empty line stays a line; "\r\n" adds none
          lines_.emplace_back(start, length);
        }
        if (!cr) break;
        start = cr + 1;
      }
      p = nl + 1;
    }
    if (static_cast<size_t>(end - p) > max_line) {
      ++stats_.long_lines;
      f.discarding = true;
      p = end;
    }
    if (!lines_.empty()) {
      stats_.lines += lines_.size();
      on_lines(f.rank_offset, lines_, live);
      lines_.clear();
    }
    f.partial.assign(p, static_cast<size_t>(end - p));
    if (static_cast<size_t>(n) < options_.read_bytes) {
      f.caught_up = true;
      return false;
    }
  }
  return true;
}

void LogTailer::Rotate(File& f) {
  if (f.fd >= 0) ::close(f.fd);
  f.fd = -1;
  f.offset = 0;
  f.partial.clear();
  f.discarding = false;
}

bool LogTailer::Poll(const LinesFn& on_lines) {
  Discover();
  bool more = false;
  for (auto& owned : files_) {
    File& f = *owned;
    struct stat by_name {};
    const bool named = ::stat(f.path.c_str(), &by_name) == 0 && S_ISREG(by_name.st_mode);
    if (f.fd >= 0) {
      if (named && (by_name.st_dev != f.dev || by_name.st_ino != f.ino)) {
        // Rotated: finish the old file, then follow the new one from its start.
        while (ReadFile(f, on_lines)) {
        }
        if (!f.partial.empty() && !f.discarding) {
          lines_.emplace_back(f.partial);
          stats_.lines += 1;
          on_lines(f.rank_offset, lines_, true);
          lines_.clear();
        }
        Rotate(f);
        ++stats_.rotations;
      } else {
        struct stat open_stat {};
        if (::fstat(f.fd, &open_stat) == 0 && open_stat.st_size < f.offset) {
          f.offset = 0;  // truncated: what is there now is new
          f.partial.clear();
          f.discarding = false;
          ++stats_.truncations;
        }
      }
    }
    if (f.fd < 0) {
      if (!named) continue;  // not there (yet)
      f.fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
      if (f.fd < 0) {
        ++stats_.read_errors;
        continue;
      }
      struct stat open_stat {};
      if (::fstat(f.fd, &open_stat) != 0) {
        Rotate(f);
        ++stats_.read_errors;
        continue;
      }
      f.dev = open_stat.st_dev;
      f.ino = open_stat.st_ino;
      f.offset = 0;
      // A file that appears after the first poll (or replaces a rotated one) holds new lines.
      f.caught_up = polled_;
    }
    more = ReadFile(f, on_lines) || more;
  }
  polled_ = true;
  return more;
}

}  // namespace fleet::sidecar
