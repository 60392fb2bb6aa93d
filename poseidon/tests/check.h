#pragma once
// A minimal test harness for the C++ tests (no framework dependency).
// TEST(name) registers a case; CHECK* record a failure with file:line and
// keep going; REQUIRE* stop the case. main() comes from TEST_MAIN().

#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace ptest {

struct Case {
  const char* name;
  std::function<void()> fn;
};

inline std::vector<Case>& cases() {
  static std::vector<Case> all;
  return all;
}

inline int& failures() {
  static int n = 0;
  return n;
}

struct Register {
  Register(const char* name, std::function<void()> fn) { cases().push_back({name, std::move(fn)}); }
};

struct Abort {};  // thrown by REQUIRE to end a case

inline void fail(const char* file, int line, const std::string& what) {
  ++failures();
  std::fprintf(stderr, "%s:%d: FAILED: %s\n", file, line, what.c_str());
}

template <typename A, typename B>
std::string show(const A& a, const B& b) {
  std::ostringstream os;
  os << a << " vs " << b;
  return os.str();
}

inline int run_all(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  for (const Case& c : cases()) {
    if (!only.empty() && only != c.name) continue;
    const int before = failures();
    const auto t0 = std::chrono::steady_clock::now();
    try {
      c.fn();
    } catch (const Abort&) {
    } catch (const std::exception& e) {
      fail(c.name, 0, std::string("uncaught exception: ") + e.what());
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "[%s] %s (%.2f s)\n", failures() == before ? " ok " : "FAIL", c.name, s);
  }
  std::fprintf(stderr, "%d failure(s)\n", failures());
  return failures() == 0 ? 0 : 1;
}

}  // namespace ptest

#define PT_CAT2(a, b) a##b
#define PT_CAT(a, b) PT_CAT2(a, b)
#define TEST(name)                                        \
  static void name();                                     \
  static ptest::Register PT_CAT(reg_, name)(#name, name); \
  static void name()
#define TEST_MAIN() \
  int main(int argc, char** argv) { return ptest::run_all(argc, argv); }

#define CHECK(cond)                                      \
  do {                                                   \
    if (!(cond)) ptest::fail(__FILE__, __LINE__, #cond); \
  } while (0)
#define REQUIRE(cond)                         \
  do {                                        \
    if (!(cond)) {                            \
      ptest::fail(__FILE__, __LINE__, #cond); \
      throw ptest::Abort{};                   \
    }                                         \
  } while (0)
#define CHECK_EQ(a, b)                                                              \
  do {                                                                              \
    const auto& pt_a = (a);                                                         \
    const auto& pt_b = (b);                                                         \
    if (!(pt_a == pt_b))                                                            \
      ptest::fail(__FILE__, __LINE__, #a " == " #b ": " + ptest::show(pt_a, pt_b)); \
  } while (0)
// Runs `stmt`, which must throw `Type` whose what() contains `needle`.
#define CHECK_THROWS(stmt, Type, needle)                                                         \
  do {                                                                                           \
    bool pt_thrown = false;                                                                      \
    try {                                                                                        \
      stmt;                                                                                      \
    } catch (const Type& pt_e) {                                                                 \
      pt_thrown = true;                                                                          \
      if (std::string(pt_e.what()).find(needle) == std::string::npos)                            \
        ptest::fail(__FILE__, __LINE__,                                                          \
                    std::string(#stmt " threw without '") + (needle) + "': " + pt_e.what());     \
    } catch (const std::exception& pt_e) {                                                       \
      pt_thrown = true;                                                                          \
      ptest::fail(__FILE__, __LINE__, std::string(#stmt " threw another type: ") + pt_e.what()); \
    }                                                                                            \
    if (!pt_thrown) ptest::fail(__FILE__, __LINE__, #stmt " did not throw");                     \
  } while (0)
#define CHECK_CONTAINS(haystack, needle)                                                  \
  do {                                                                                    \
    const std::string pt_h = (haystack);                                                  \
    if (pt_h.find(needle) == std::string::npos)                                           \
      ptest::fail(__FILE__, __LINE__, std::string("'") + (needle) + "' not in: " + pt_h); \
  } while (0)
