#pragma once
// One-line diagnostics on stderr: "[poseidon <who>] <message>". Used for
// rejected connections, aborts and (when verbose) connection events.
// Thread-safe: each line is written with a single call under a lock.

#include <string>

namespace poseidon {

void log_line(const std::string& who, const std::string& message);

}  // namespace poseidon
