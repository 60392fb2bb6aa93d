#pragma once
// The handshake every connection starts with. The dialing side sends HELLO
// (its role and rank in the header; the cluster token and its listen address
// in the payload); the listening side accepts nothing else first, checks the
// protocol version, the token (constant-time) and the identity, then answers
// HELLO_ACK, or ERROR with the reason and drops the connection.

#include <functional>
#include <string>

#include "poseidon/internal/deadline.h"
#include "poseidon/internal/node_id.h"
#include "poseidon/internal/transport.h"

namespace poseidon {

// Compares in time that depends only on the lengths, not on where the
// strings differ, so the token cannot be guessed byte by byte from timing.
bool constant_time_equal(const std::string& a, const std::string& b);

// Dialing side. Blocks until HELLO_ACK or `deadline`. Returns the listening
// node's identity. Throws ProtocolError carrying the other side's reason when
// rejected ("server 0 (...) rejected the handshake: wrong cluster token"),
// TransportError on I/O failure.
NodeId client_handshake(Connection& conn, const NodeId& self, const std::string& token,
                        Deadline deadline);

// Returns "" to admit the node, else the reason to refuse it.
using AdmitFn = std::function<std::string(const NodeId&)>;

// Listening side. Blocks until the handshake completes or `deadline`.
// Returns the dialer's identity (address = the listen address it declared).
// Throws ProtocolError (bad frame, wrong version or token, refused by
// `admit`) or TransportError (EOF, timeout); before throwing it sends ERROR
// with the reason when the connection still works.
NodeId server_handshake(Connection& conn, const NodeId& self, const std::string& token,
                        const AdmitFn& admit, Deadline deadline);

}  // namespace poseidon
