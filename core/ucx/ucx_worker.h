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

 private:
  friend class Worker;
  explicit Transfer(Worker* worker) : worker_(worker) {}
  void Finish(absl::Status status, size_t bytes);

  Worker* const worker_;
  size_t size_ = 0;  // the bytes asked for
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

  // Starts sending `size` bytes at `data` to the worker at `peer` under
  // `tag`; `data` must stay valid until the transfer ends.
  std::shared_ptr<Transfer> StartSend(const std::string& peer, uint64_t tag, const void* data,
                                      size_t size);
  // Starts receiving up to `size` bytes sent under exactly `tag` into
  // `data` (more is an error: OUT_OF_RANGE).
  std::shared_ptr<Transfer> StartReceive(uint64_t tag, void* data, size_t size);

  // Transfers in flight now (for tests: none once all have ended).
  int in_flight() const;

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
  // A request's completion (UCX's callback); `status` is a ucs_status_t.
  void Ended(Transfer* t, void* request, int status, size_t bytes);

  std::unique_ptr<Ucx> ucx_;
  std::string address_;
  int wake_fd_ = -1;  // an eventfd that wakes the loop for commands
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> commands_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::map<Transfer*, std::shared_ptr<Transfer>> in_flight_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace farcall::ucx

#endif  // FARCALL_CORE_UCX_UCX_WORKER_H_
