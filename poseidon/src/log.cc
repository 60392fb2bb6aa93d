#include "poseidon/internal/log.h"

#include <cstdio>
#include <mutex>

namespace poseidon {

void log_line(const std::string& who, const std::string& message) {
  static std::mutex mu;
  const std::string line = "[poseidon " + who + "] " + message + "\n";
  std::lock_guard<std::mutex> lock(mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace poseidon
