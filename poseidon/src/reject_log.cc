#include "poseidon/internal/reject_log.h"

#include <cstdio>
#include <utility>
#include <vector>

#include "poseidon/internal/log.h"

namespace poseidon {

std::string remote_host(const std::string& remote) {
  const size_t colon = remote.rfind(':');
  if (colon == std::string::npos || colon == 0) return remote;
  const std::string host = remote.substr(0, colon);
  // "inproc-client#3" has no port; "[v6]" keeps its brackets.
  if (host.find(':') != std::string::npos && host.front() != '[') return remote;
  return host;
}

RejectLog::RejectLog(std::string who, int window_ms, int first_bytes_timeout_ms)
    : who_(std::move(who)),
      window_(std::chrono::milliseconds(window_ms)),
      first_bytes_timeout_ms_(first_bytes_timeout_ms) {}

void RejectLog::open_window_locked(Clock::time_point now) {
  if (open_) return;
  open_ = true;
  opened_ = now;
  lines_ = 0;
}

void RejectLog::rejected(const std::string& remote, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    open_window_locked(Clock::now());
    if (lines_ >= kRejectLinesPerWindow) {
      Counts& c = counts_[remote_host(remote)];
      ++c.rejected;
      c.last_reason = reason;
      return;
    }
    ++lines_;
  }
  log_line(who_, "rejected connection from " + remote + ": " + reason);
}

void RejectLog::dropped_silent(const std::string& remote, bool evicted) {
  std::lock_guard<std::mutex> lock(mu_);
  open_window_locked(Clock::now());
  Counts& c = counts_[remote_host(remote)];
  ++(evicted ? c.evicted : c.timed_out);
}

Clock::time_point RejectLog::flush(bool force) {
  const Clock::time_point now = Clock::now();
  std::vector<std::string> lines;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_) return now + window_;
    if (!force && now < opened_ + window_) return opened_ + window_;
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f s",
                  std::chrono::duration<double>(now - opened_).count());
    for (const auto& [host, c] : counts_) {
      const int64_t silent = c.timed_out + c.evicted;
      if (silent > 0) {
        std::string parts;
        if (c.timed_out > 0) {
          parts += std::to_string(c.timed_out) + " sent nothing within " +
                   std::to_string(first_bytes_timeout_ms_) + " ms";
        }
        if (c.evicted > 0) {
          if (!parts.empty()) parts += ", ";
          parts += std::to_string(c.evicted) + " dropped to make room for newer ones";
        }
        lines.push_back("dropped " + std::to_string(silent) + " silent connection" +
                        (silent == 1 ? "" : "s") + " from " + host + " in the last " + seconds +
                        " (" + parts + ")");
      }
      if (c.rejected > 0) {
        lines.push_back("rejected " + std::to_string(c.rejected) + " more connection" +
                        (c.rejected == 1 ? "" : "s") + " from " + host + " in the last " + seconds +
                        " (the last: " + c.last_reason + ")");
      }
    }
    counts_.clear();
    open_ = false;
  }
  for (const std::string& line : lines) log_line(who_, line);
  return now + window_;
}

}  // namespace poseidon
