#pragma once
// The lines a listening node writes about connections it refused, limited so
// that a flood of strangers cannot flood stderr. In each window (it opens at
// the first refusal after a quiet spell and lasts `window_ms`) the first
// kRejectLinesPerWindow refusals get a line each, naming the remote address
// and the reason:
//   rejected connection from 127.0.0.1:50142: wrong cluster token
// The refusals past those, and every connection dropped before it sent a
// byte, are only counted per remote host, and summarised once the window has
// lasted `window_ms`:
//   dropped 250 silent connections from 127.0.0.1 in the last 5.0 s (248 sent
//   nothing within 1000 ms, 2 dropped to make room for newer ones)
//   rejected 40 more connections from 127.0.0.1 in the last 5.0 s (the last:
//   wrong cluster token)

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "poseidon/internal/deadline.h"

namespace poseidon {

inline constexpr int kRejectLinesPerWindow = 10;
inline constexpr int kRejectLogWindowMs = 5000;

class RejectLog {
 public:
  // Writes through log_line(who, ...). `first_bytes_timeout_ms` only words
  // the summaries ("sent nothing within 1000 ms").
  RejectLog(std::string who, int window_ms, int first_bytes_timeout_ms);

  // A connection refused during its handshake: a line of its own while the
  // window has lines left, else counted. Thread-safe; blocks only on a short
  // lock and on writing the line.
  void rejected(const std::string& remote, const std::string& reason);
  // A connection dropped before its first byte, after the first-bytes
  // timeout or (`evicted`) to make room for a newer one. Never a line of its
  // own. Thread-safe; never blocks but on a short lock.
  void dropped_silent(const std::string& remote, bool evicted);
  // Writes the summaries once the window has lasted window_ms, or at once
  // when `force` (the node stops), and closes the window. Returns when the
  // next call is useful: the end of the open window, else `window_ms` from
  // now. Thread-safe; blocks on writing the lines.
  Clock::time_point flush(bool force);

 private:
  struct Counts {
    int64_t timed_out = 0;  // silent past the first-bytes timeout
    int64_t evicted = 0;    // silent, dropped to make room
    int64_t rejected = 0;   // refusals past the window's lines
    std::string last_reason;
  };
  void open_window_locked(Clock::time_point now);

  const std::string who_;
  const Clock::duration window_;
  const int first_bytes_timeout_ms_;
  std::mutex mu_;
  bool open_ = false;
  Clock::time_point opened_;
  int lines_ = 0;                         // lines written in the open window
  std::map<std::string, Counts> counts_;  // by remote host
};

// "127.0.0.1:5000" -> "127.0.0.1", "[::1]:5000" -> "[::1]"; anything without
// a port as it is.
std::string remote_host(const std::string& remote);

}  // namespace poseidon
