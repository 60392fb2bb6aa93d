#include "poseidon/version.h"

namespace poseidon {
const char* version() { return "0.1.0"; }
}  // namespace poseidon
