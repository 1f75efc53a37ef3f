// Writing to a peer that died raises SIGPIPE, whose default action ends the process, and Gloo's
// transport writes without MSG_NOSIGNAL. A library does not get to choose its host's signal
// handling, so instead of ignoring SIGPIPE process-wide, the guard blocks it on the calling thread
// for its scope (a write then fails with EPIPE, which Gloo reports) and takes back a SIGPIPE that
// became pending meanwhile. Threads started inside the scope (Gloo's device loop) inherit the
// blocked mask for good. Compiled into each plugin that uses it (plugins/common).
#pragma once

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <cerrno>

namespace wt::plugins {

class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlocked() {
    if (!was_pending_) {
      sigset_t pending;
      sigemptyset(&pending);
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec zero{0, 0};
        while (sigtimedwait(&pipe_, nullptr, &zero) == -1 && errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

}  // namespace wt::plugins
