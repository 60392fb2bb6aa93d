#pragma once

namespace poseidon {
// Library version string; never null, static storage.
const char* version();
}  // namespace poseidon
