#include <cstdio>
#include <cstring>

#include "poseidon/version.h"

int main() {
  if (std::strlen(poseidon::version()) == 0) {
    std::fprintf(stderr, "empty version\n");
    return 1;
  }
  return 0;
}
