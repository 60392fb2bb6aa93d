#include "poseidon/internal/transport.h"

namespace poseidon {

std::unique_ptr<Transport> make_transport(const std::string& kind,
                                          const TransportOptions& options) {
  if (kind == "tcp") return make_tcp_transport(options);
  if (kind == "inproc") return make_inproc_transport();
  throw ConfigError("unknown transport '" + kind + "' (known: tcp, inproc)");
}

}  // namespace poseidon
