// farcall's UCX data plane building block: one UCX context and worker,
// progressed by a thread of its own, moving tensor bytes with tagged sends
// and receives straight from and into the caller's memory (UCX picks the
// path: shared memory or CMA on one host, TCP, RDMA where there is one).
// Peers are named by their worker addresses (bytes that travel out of band,
// in gRPC); endpoints to them are made on first use and kept.
//
//   auto a = ucx::Worker::Create();  auto b = ucx::Worker::Create();
//   auto rx = (*b)->StartReceive(tag, dst, n);
//   auto tx = (*a)->StartSend((*b)->address(), tag, src, n);
//   absl::Status s = (*tx)->Wait(deadline);  // then (*rx)->Wait(deadline)
//
// Every UCX call runs on the worker's thread (UCX in its single-thread
// mode): other threads hand it commands, and wait on a Transfer. A transfer
// that ends early (Cancel, or Wait's deadline) is cancelled on that thread,
// and Wait returns only once UCX has let go of the memory.
//
// UCX can take back a receive but not a send its peer may have started to
// take. A cancelled send is left to end by itself, which it does at once
// when the peer has cancelled its receive too (it throws the message away)
// or takes it; only a send still going Options::send_cancel_grace later (the
// peer is gone or stuck) has its endpoint closed by force, which ends every
// send on it. Closing endpoints at every cancel would break the connection
// under the peer's receives already under way (UCX notices only at its next
// keepalive, tens of seconds on) and under the next call's messages.
//
// A worker that never expects a message it has not posted a receive for
// (Options::discard_unexpected: farcall's agents and clients, whose peers
// send only after being told to) throws away whatever arrives unasked, so
// that a peer cannot make it hold memory by sending.
//
// Thread safety: all methods may be called from any thread.
#ifndef FARCALL_CORE_UCX_UCX_WORKER_H_
#define FARCALL_CORE_UCX_UCX_WORKER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace farcall::ucx {

class Worker;

// One tagged send or receive.
class Transfer : public std::enable_shared_from_this<Transfer> {
 public:
  // Waits for the end; at `deadline` cancels the transfer, waits for UCX to
  // let go of its memory, and returns DEADLINE_EXCEEDED.
  absl::Status Wait(absl::Time deadline);
  // Ends it early (CANCELLED), unless it ended already.
  void Cancel();
  // Bytes a finished receive got.
  size_t received_bytes() const;
  // Whether it ended.
  bool done() const;

 private:
  friend class Worker;
  explicit Transfer(Worker* worker) : worker_(worker) {}
  void Finish(absl::Status status, size_t bytes);

  Worker* const worker_;
  size_t size_ = 0;     // the bytes asked for
  std::string peer_;    // a send's peer; empty for a receive
  void* ep_ = nullptr;  // a send's endpoint (worker's thread only)
  // Called on the worker's thread once the transfer ended (after Wait would
  // return).
  std::function<void(const absl::Status&)> on_end_;
  // On the worker's thread only: the UCX request once its call returned,
  // and an end that UCX reported before that call returned.
  void* request_ = nullptr;
  bool ended_early_ = false;
  int early_status_ = 0;
  size_t early_bytes_ = 0;
  mutable absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

class Worker {
 public:
  struct Options {
    // UCX transports to use (UCX_TLS's syntax, e.g. "tcp"); empty: UCX's
    // choice, or the UCX_TLS environment variable.
    std::string transports;
    // Throw away tagged messages that match no posted receive.
    bool discard_unexpected = false;
    // Endpoints open at most (each is a peer's connection and its memory);
    // the least recently used idle ones close to make room. Past it, with
    // every one held or busy, a send to a new peer fails UNAVAILABLE.
    size_t max_endpoints = 1024;
    // How long a cancelled send may take to end before its endpoint is
    // closed by force.
    absl::Duration send_cancel_grace = absl::Seconds(5);
  };

  // UNAVAILABLE when UCX cannot start here (no usable transport).
  static absl::StatusOr<std::unique_ptr<Worker>> Create(const Options& options);
  static absl::StatusOr<std::unique_ptr<Worker>> Create() { return Create(Options{}); }
  // Cancels what is in flight, closes the endpoints and stops the thread.
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // This worker's address, for peers to send to.
  const std::string& address() const { return address_; }
  // Whether every message goes eagerly, without rendezvous: set for a
  // worker on TCP alone (Options::transports, or UCX_TLS when that is
  // empty), unless UCX_RNDV_THRESH says otherwise. Over TCP a rendezvous
  // costs a round trip per message, whose reply waits in the link's queue
  // behind whatever the other direction moves: two calls that overlap (one
  // uploading while the other downloads) then ran at half the link's rate
  // each way between hosts. Eager messages need no reply, and farcall posts
  // every receive before its message may come (transfer_set.h), so they
  // land straight in place.
  bool eager() const { return eager_; }

  // Starts sending `size` bytes at `data` to the worker at `peer` under
  // `tag`; `data` must stay valid until the transfer ends.
  // `on_end`, if given, runs on the worker's thread when it ended: it must
  // not block (it may start transfers). A cancelled send ends CANCELLED
  // once the peer took it or threw it away, or the grace ran out.
  using OnEnd = std::function<void(const absl::Status&)>;
  std::shared_ptr<Transfer> StartSend(const std::string& peer, uint64_t tag, const void* data,
                                      size_t size, OnEnd on_end = nullptr);
  // Starts receiving exactly `size` bytes sent under exactly `tag` into
  // `data`. A message of another length is an error: OUT_OF_RANGE for more,
  // DATA_LOSS for fewer (the rest of `data` would keep whatever it held,
  // another call's bytes perhaps, so it is never taken as received).
  std::shared_ptr<Transfer> StartReceive(uint64_t tag, void* data, size_t size,
                                         OnEnd on_end = nullptr);
  // Keeps the endpoint to `peer` open while the returned handle lives: past
  // max_endpoints, endpoints are closed to make room only when no handle
  // holds them and no send is on them (when none may close, a new peer
  // gets no endpoint). A call holds its peer for its whole
  // life, between its transfers too. Any thread; drop every handle before
  // the worker.
  std::shared_ptr<void> HoldPeer(const std::string& peer);
  // Returns once everything started before it was handed to UCX: a receive
  // started before Flush() is posted when it returns.
  void Flush();
  // Runs `f` on the worker's thread (it must not block), after what was
  // started before.
  void RunOnThread(std::function<void()> f) { Post(std::move(f)); }
  // Whether the caller is the worker's thread.
  bool OnThread() const { return std::this_thread::get_id() == thread_.get_id(); }

  // Transfers in flight now (for tests: none once all have ended).
  int in_flight() const;
  // Unasked messages thrown away so far, and endpoints open now.
  int64_t discarded() const;
  size_t endpoints() const;

 private:
  friend class Transfer;
  struct Ucx;  // the UCX handles, touched on the worker's thread only
  Worker() = default;
  void Post(std::function<void()> command);
  void Loop();
  // On the worker's thread.
  // After a UCX call that started `t` returned `r` (a request, null for
  // done at once with `done_bytes`, or an error).
  void Settle(const std::shared_ptr<Transfer>& t, void* r, size_t done_bytes);
  void CancelNow(Transfer* t);
  // Closes the endpoints under cancelled sends past their grace; returns
  // when the next one runs out (InfiniteFuture: none waits).
  absl::Time CloseStuckSends(absl::Time now);
  // A request's completion (UCX's callback); `status` is a ucs_status_t.
  void Ended(Transfer* t, void* request, int status, size_t bytes);
  // A send no longer counts against its endpoint.
  void SendEnded(Transfer* t);
  // Throws away what arrived unasked (discard_unexpected).
  void Discard();

  std::unique_ptr<Ucx> ucx_;
  Options options_;
  std::string address_;
  bool eager_ = false;
  int wake_fd_ = -1;  // an eventfd that wakes the loop for commands
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> commands_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::map<Transfer*, std::shared_ptr<Transfer>> in_flight_ ABSL_GUARDED_BY(mu_);
  size_t in_flight_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t discarded_ ABSL_GUARDED_BY(mu_) = 0;
  size_t endpoint_count_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace farcall::ucx

#endif  // FARCALL_CORE_UCX_UCX_WORKER_H_
