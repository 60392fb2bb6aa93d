// TCP transport over POSIX sockets. Sockets are blocking but every call uses
// MSG_DONTWAIT and falls back to poll(2) only when the kernel buffer is
// empty/full, so a deadline costs no syscall on the fast path. shutdown(2)
// wakes threads blocked in poll on the same socket; the descriptor is closed
// only in the destructor, after every user thread is done with it, so a
// recycled descriptor number can never be read by a stale thread.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "poseidon/internal/transport.h"

namespace poseidon {
namespace {

using Kind = TransportError::Kind;

// Connections the kernel completes and queues before accept(2) takes them
// (capped by net.core.somaxconn). Deep, so that a burst of strangers' connects
// cannot fill the queue: past it the kernel drops SYNs, and a real peer's
// connect would wait a whole SYN retransmission (1 s) to get in.
constexpr int kListenBacklog = 4096;

std::string errno_text(int err) { return std::strerror(err); }

std::string format_sockaddr(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "?";
}

// "host:port" or "[v6]:port" -> resolved addresses. Throws on bad syntax.
struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) freeaddrinfo(list);
  }
};

void resolve(const std::string& address, bool passive, AddrInfo* out) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    throw TransportError(Kind::kOther, "bad TCP address '" + address + "' (want host:port)");
  }
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  const int rc =
      getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &out->list);
  if (rc != 0 || out->list == nullptr) {
    throw TransportError(Kind::kOther,
                         "cannot resolve '" + address + "': " + std::string(gai_strerror(rc)));
  }
}

void tune_socket(int fd, const TransportOptions& opt) {
  int one = 1;
  // Frames are written whole; Nagle would only delay the last segment of
  // each chunk and every small control frame.
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
#ifdef TCP_NOTSENT_LOWAT
  // Keep little unsent data in the kernel, so that the send queue's priorities
  // decide what goes on the wire next (a lower layer overtakes a big one's
  // chunks, every worker's frames leave in the same order) — without capping
  // the congestion window as a small SO_SNDBUF would. Otherwise autotuning
  // lets megabytes queue per connection, committed in arrival order.
  if (opt.notsent_lowat_bytes > 0) {
    int lowat = static_cast<int>(opt.notsent_lowat_bytes);
    setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof lowat);
  }
#endif
  if (opt.socket_buffer_bytes > 0) {
    int bytes = static_cast<int>(opt.socket_buffer_bytes);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  }
}

// Waits for `events` on fd until the deadline. Returns false on timeout.
bool wait_fd(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, deadline.poll_timeout_ms());
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return true;  // let the following I/O call report it
  }
}

class TcpConnection final : public Connection {
 public:
  TcpConnection(int fd, std::string remote) : fd_(fd), remote_(std::move(remote)) {}
  ~TcpConnection() override { ::close(fd_); }

  void write_frame(const uint8_t* header, size_t header_bytes, const void* payload,
                   size_t payload_bytes, Deadline deadline) override {
    iovec iov[2];
    iov[0].iov_base = const_cast<uint8_t*>(header);
    iov[0].iov_len = header_bytes;
    iov[1].iov_base = const_cast<void*>(payload);
    iov[1].iov_len = payload_bytes;
    int first = 0;
    const size_t total = header_bytes + payload_bytes;
    size_t sent = 0;
    while (sent < total) {
      if (shut_)
        throw TransportError(Kind::kClosed, "connection to " + remote_ + " closed locally");
      msghdr msg{};
      msg.msg_iov = iov + first;
      msg.msg_iovlen = static_cast<size_t>(payload_bytes > 0 ? 2 - first : 1 - first);
      const ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        size_t left = static_cast<size_t>(n);
        sent += left;
        while (left > 0 && first < 2) {
          if (left >= iov[first].iov_len) {
            left -= iov[first].iov_len;
            iov[first].iov_len = 0;
            ++first;
          } else {
            iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + left;
            iov[first].iov_len -= left;
            left = 0;
          }
        }
        continue;
      }
      const int err = errno;
      if (n < 0 && err == EINTR) continue;
      if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK)) {
        if (!wait_fd(fd_, POLLOUT, deadline)) {
          throw TransportError(Kind::kTimeout,
                               "send to " + remote_ + " stalled: " + std::to_string(sent) + " of " +
                                   std::to_string(total) + " bytes written before the deadline");
        }
        continue;
      }
      if (shut_)
        throw TransportError(Kind::kClosed, "connection to " + remote_ + " closed locally");
      throw TransportError(err == EPIPE || err == ECONNRESET ? Kind::kReset : Kind::kOther,
                           "send to " + remote_ + " failed: " + errno_text(err));
    }
  }

  void read_exact(void* dst, size_t bytes, Deadline deadline) override {
    auto* p = static_cast<uint8_t*>(dst);
    size_t got = 0;
    while (got < bytes) {
      const ssize_t n = ::recv(fd_, p + got, bytes - got, MSG_DONTWAIT);
      if (n > 0) {
        got += static_cast<size_t>(n);
        continue;
      }
      if (n == 0) {
        if (shut_) {
          throw TransportError(Kind::kClosed, "connection to " + remote_ + " closed locally");
        }
        throw TransportError(Kind::kClosed, "connection closed by " + remote_ + " (EOF) after " +
                                                std::to_string(got) + " of " +
                                                std::to_string(bytes) + " expected bytes");
      }
      const int err = errno;
      if (err == EINTR) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) {
        if (!wait_fd(fd_, POLLIN, deadline)) {
          throw TransportError(Kind::kTimeout, "read from " + remote_ + " timed out after " +
                                                   std::to_string(got) + " of " +
                                                   std::to_string(bytes) + " expected bytes");
        }
        continue;
      }
      if (shut_)
        throw TransportError(Kind::kClosed, "connection to " + remote_ + " closed locally");
      throw TransportError(err == ECONNRESET ? Kind::kReset : Kind::kOther,
                           "read from " + remote_ + " failed: " + errno_text(err) + " after " +
                               std::to_string(got) + " of " + std::to_string(bytes) + " bytes");
    }
  }

  void close_write() override { ::shutdown(fd_, SHUT_WR); }

  void shutdown() override {
    shut_ = true;
    ::shutdown(fd_, SHUT_RDWR);
  }

  std::string remote_address() const override { return remote_; }

  int readiness_fd() const override { return fd_; }

 private:
  const int fd_;
  const std::string remote_;
  std::atomic<bool> shut_{false};
};

class TcpListener final : public Listener {
 public:
  TcpListener(int fd, std::string address, TransportOptions opt)
      : fd_(fd), address_(std::move(address)), opt_(opt) {}
  ~TcpListener() override { ::close(fd_); }

  std::unique_ptr<Connection> accept() override {
    for (;;) {
      if (closed_) return nullptr;
      wait_fd(fd_, POLLIN, Deadline::never());
      if (closed_) return nullptr;
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      const int fd =
          ::accept4(fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
        if (closed_) return nullptr;
        // EMFILE and friends: back off instead of spinning.
        ::poll(nullptr, 0, 10);
        continue;
      }
      // Blocking mode with MSG_DONTWAIT per call (see the file comment).
      const int flags = fcntl(fd, F_GETFL, 0);
      fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
      tune_socket(fd, opt_);
      return std::make_unique<TcpConnection>(fd, format_sockaddr(ss));
    }
  }

  void close() override {
    closed_ = true;
    ::shutdown(fd_, SHUT_RDWR);  // wakes poll() in accept() on Linux
  }

  std::string address() const override { return address_; }

 private:
  const int fd_;
  const std::string address_;
  const TransportOptions opt_;
  std::atomic<bool> closed_{false};
};

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(TransportOptions opt) : opt_(opt) {}

  std::unique_ptr<Listener> listen(const std::string& address) override {
    AddrInfo ai;
    resolve(address, true, &ai);
    int last_err = 0;
    for (addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) {
        last_err = errno;
        continue;
      }
      int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (opt_.socket_buffer_bytes > 0) {  // inherited by accepted sockets
        int bytes = static_cast<int>(opt_.socket_buffer_bytes);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
      }
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, kListenBacklog) == 0) {
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
        return std::make_unique<TcpListener>(fd, format_sockaddr(ss), opt_);
      }
      last_err = errno;
      ::close(fd);
    }
    throw TransportError(Kind::kOther, "cannot listen on " + address + ": " + errno_text(last_err));
  }

  std::unique_ptr<Connection> connect(const std::string& address, Deadline deadline) override {
    AddrInfo ai;
    resolve(address, false, &ai);
    std::string last = "no address";
    Kind last_kind = Kind::kOther;
    for (addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
      const int fd =
          ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
      if (fd < 0) {
        last = errno_text(errno);
        continue;
      }
      tune_socket(fd, opt_);
      int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
      int err = rc == 0 ? 0 : errno;
      if (rc != 0 && err == EINPROGRESS) {
        if (!wait_fd(fd, POLLOUT, deadline)) {
          ::close(fd);
          throw TransportError(Kind::kTimeout, "connect to " + address + " timed out");
        }
        socklen_t len = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      }
      if (err == 0) {
        const int flags = fcntl(fd, F_GETFL, 0);
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len);
        return std::make_unique<TcpConnection>(fd, format_sockaddr(ss));
      }
      last = errno_text(err);
      last_kind = err == ECONNREFUSED ? Kind::kRefused : Kind::kOther;
      ::close(fd);
    }
    throw TransportError(last_kind, "cannot connect to " + address + ": " + last);
  }

 private:
  TransportOptions opt_;
};

}  // namespace

std::unique_ptr<Transport> make_tcp_transport(const TransportOptions& options) {
  return std::make_unique<TcpTransport>(options);
}

}  // namespace poseidon
