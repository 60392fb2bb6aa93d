#pragma once
// Captures everything written to fd 2 while alive, for tests that check what
// a node logged (test_protocol_abuse, test_handshake_flood).

#include <unistd.h>

#include <cstdio>
#include <string>

namespace ptest {

class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    saved_ = dup(2);
    file_ = std::tmpfile();
    dup2(fileno(file_), 2);
  }
  // Restores fd 2 and returns what was written meanwhile. Call once.
  std::string finish() {
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    std::rewind(file_);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, file_)) > 0) out.append(buf, n);
    std::fclose(file_);
    return out;
  }

 private:
  int saved_ = -1;
  std::FILE* file_ = nullptr;
};

}  // namespace ptest
