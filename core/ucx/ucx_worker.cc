#include "core/ucx/ucx_worker.h"

#include <dlfcn.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/base/call_once.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "ucp/api/ucp.h"
#include "ucs/config/global_opts.h"

namespace farcall::ucx {
namespace {

// Bytes in flight from which the worker polls longest before it sleeps.
constexpr size_t kPollFromBytes = size_t{256} << 10;

absl::Status FromUcs(ucs_status_t s) {
  switch (s) {
    case UCS_OK:
      return absl::OkStatus();
    case UCS_ERR_CANCELED:
      return absl::CancelledError("ucx: the transfer was cancelled.");
    case UCS_ERR_MESSAGE_TRUNCATED:
      return absl::OutOfRangeError("ucx: more bytes arrived than the receive buffer holds.");
    default:
      return absl::UnavailableError(absl::StrCat("ucx: ", ucs_status_string(s), "."));
  }
}

// A UCX that a wheel bundles (auditwheel copies it into farcall.libs/) must
// not load the host's UCX modules (libuct_ib.so, libuct_cma.so, ...): they
// link the host's libucs, and a second libucs in the process aborts it. Such
// a UCX looks for modules beside itself, in farcall.libs/ucx/, which holds
// none: it runs with the transports built into libuct (self, tcp, posix and
// sysv shared memory). UCX_MODULE_DIR, when set, is left as the user set it.
void KeepBundledUcxToItsOwnModules() {
  static absl::once_flag once;
  absl::call_once(once, [] {
    if (std::getenv("UCX_MODULE_DIR") != nullptr) return;
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&ucp_init_version), &info) == 0 ||
        info.dli_fname == nullptr) {
      return;
    }
    const std::string lib = info.dli_fname;
    const size_t slash = lib.rfind('/');
    if (slash == std::string::npos) return;
    const std::string dir = lib.substr(0, slash);
    if (dir.size() < 13 || dir.compare(dir.size() - 13, 13, "/farcall.libs") != 0) return;
    ucs_global_opts_set_value("MODULE_DIR", (dir + "/ucx").c_str());
  });
}

}  // namespace

struct Worker::Ucx {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  int epoll_fd = -1;
  struct Endpoint {
    ucp_ep_h ep = nullptr;
    int sends = 0;      // sends in flight on it
    uint64_t used = 0;  // when it was last used (a counter)
  };
  std::map<std::string, Endpoint> endpoints;  // by peer address
  std::map<std::string, int> holds;           // HoldPeer's handles, by peer
  uint64_t uses = 0;
  std::vector<uint8_t> scratch;  // where unasked messages are thrown
  // Cancelled sends still going, and when their grace runs out (only the
  // worker's thread).
  std::map<Transfer*, absl::Time> cancelled_sends;

  ~Ucx() {
    if (worker != nullptr) ucp_worker_destroy(worker);
    if (context != nullptr) ucp_cleanup(context);
    if (epoll_fd >= 0) close(epoll_fd);
  }

  // The endpoint to `peer`, made on first use; null when UCX refuses it.
  // Past `max` endpoints, the least recently used one with no sends in
  // flight and no hold is closed first; when every one is busy or held,
  // none is made (UCS_ERR_EXCEEDS_LIMIT): `max` is a hard cap.
  Endpoint* Get(const std::string& peer, size_t max, ucs_status_t* status) {
    auto it = endpoints.find(peer);
    if (it != endpoints.end()) {
      it->second.used = ++uses;
      return &it->second;
    }
    while (endpoints.size() >= std::max<size_t>(max, 1)) {
      auto oldest = endpoints.end();
      for (auto e = endpoints.begin(); e != endpoints.end(); ++e) {
        const bool held = holds.count(e->first) != 0;
        if (e->second.sends == 0 && !held &&
            (oldest == endpoints.end() || e->second.used < oldest->second.used)) {
          oldest = e;
        }
      }
      if (oldest == endpoints.end()) {  // all busy or held
        *status = UCS_ERR_EXCEEDS_LIMIT;
        return nullptr;
      }
      Close(oldest->first);
    }
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                   UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.address = reinterpret_cast<const ucp_address_t*>(peer.data());
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    // A peer that goes away fails the transfers on its endpoint (their
    // callbacks say so); nothing else is to be done here.
    p.err_handler.cb = [](void*, ucp_ep_h, ucs_status_t) {};
    p.err_handler.arg = nullptr;
    ucp_ep_h ep = nullptr;
    *status = ucp_ep_create(worker, &p, &ep);
    if (*status != UCS_OK) return nullptr;
    Endpoint& e = endpoints[peer];
    e.ep = ep;
    e.used = ++uses;
    return &e;
  }

  // Closes the endpoint to `peer` by force, waiting for UCX to be done with
  // it: the sends still on it end (cancelled).
  void Close(const std::string& peer) {
    auto it = endpoints.find(peer);
    if (it == endpoints.end()) return;
    ucp_ep_h ep = it->second.ep;
    endpoints.erase(it);
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* r = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(r)) {
      while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(worker);
      ucp_request_free(r);
    }
  }

  void CloseEndpoints() {
    while (!endpoints.empty()) Close(endpoints.begin()->first);
  }
};

// ---------------------------------------------------------------------------
// Transfer

void Transfer::Finish(absl::Status status, size_t bytes) {
  if (status.ok() && peer_.empty() && bytes != size_) {
    // A short message would leave the rest of the receiver's memory as it
    // was: never OK.
    status = absl::DataLossError(
        absl::StrCat("ucx: a message of ", bytes, " bytes came where ", size_, " were expected."));
  }
  std::function<void(const absl::Status&)> on_end = std::move(on_end_);
  absl::Status copy = on_end ? status : absl::OkStatus();
  {
    absl::MutexLock l(&mu_);
    done_ = true;
    status_ = std::move(status);
    bytes_ = bytes;
  }
  if (on_end) on_end(copy);
}

absl::Status Transfer::Wait(absl::Time deadline) {
  absl::MutexLock l(&mu_);
  if (mu_.AwaitWithDeadline(absl::Condition(&done_), deadline)) return status_;
  mu_.Unlock();
  Cancel();
  mu_.Lock();
  // A cancelled receive ends at once; a send once the peer let go of it,
  // or when its grace runs out.
  mu_.Await(absl::Condition(&done_));
  if (status_.ok()) return status_;  // it ended just before the cancel
  return absl::DeadlineExceededError("ucx: the transfer did not end before its deadline.");
}

void Transfer::Cancel() {
  std::shared_ptr<Transfer> self = shared_from_this();
  worker_->Post([self] { self->worker_->CancelNow(self.get()); });
}

bool Transfer::done() const {
  absl::MutexLock l(&mu_);
  return done_;
}

size_t Transfer::received_bytes() const {
  absl::MutexLock l(&mu_);
  return bytes_;
}

// ---------------------------------------------------------------------------
// Worker

absl::StatusOr<std::unique_ptr<Worker>> Worker::Create(const Options& options) {
  std::unique_ptr<Worker> w(new Worker());
  w->options_ = options;
  w->ucx_ = std::make_unique<Ucx>();
  if (options.discard_unexpected) w->ucx_->scratch.resize(64 << 10);
  ucp_config_t* config = nullptr;
  KeepBundledUcxToItsOwnModules();
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return absl::UnavailableError(absl::StrCat("ucx: ", ucs_status_string(s)));
  if (!options.transports.empty()) {
    s = ucp_config_modify(config, "TLS", options.transports.c_str());
    if (s != UCS_OK) {
      ucp_config_release(config);
      return absl::InvalidArgumentError(
          absl::StrCat("ucx: transports '", options.transports, "': ", ucs_status_string(s)));
    }
  }
  // TCP alone: every message eagerly (see eager()).
  const char* env_tls = std::getenv("UCX_TLS");
  const std::string tls = !options.transports.empty() ? options.transports
                          : env_tls != nullptr        ? env_tls
                                                      : "";
  if (!tls.empty() && std::getenv("UCX_RNDV_THRESH") == nullptr &&
      absl::c_all_of(absl::StrSplit(tls, ','), [](absl::string_view t) { return t == "tcp"; })) {
    s = ucp_config_modify(config, "RNDV_THRESH", "inf");
    w->eager_ = s == UCS_OK;
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  s = ucp_init(&params, config, &w->ucx_->context);
  ucp_config_release(config);
  if (s != UCS_OK) {
    return absl::UnavailableError(absl::StrCat("ucx: cannot start: ", ucs_status_string(s)));
  }
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // only the loop's thread touches it
  s = ucp_worker_create(w->ucx_->context, &wp, &w->ucx_->worker);
  if (s != UCS_OK) {
    return absl::UnavailableError(absl::StrCat("ucx: no worker: ", ucs_status_string(s)));
  }
  ucp_address_t* address = nullptr;
  size_t length = 0;
  s = ucp_worker_get_address(w->ucx_->worker, &address, &length);
  if (s != UCS_OK) {
    return absl::UnavailableError(absl::StrCat("ucx: no address: ", ucs_status_string(s)));
  }
  w->address_.assign(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(w->ucx_->worker, address);
  int ucx_fd = -1;
  s = ucp_worker_get_efd(w->ucx_->worker, &ucx_fd);
  if (s != UCS_OK) {
    return absl::UnavailableError(absl::StrCat("ucx: no event fd: ", ucs_status_string(s)));
  }
  w->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  w->ucx_->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  if (w->wake_fd_ < 0 || w->ucx_->epoll_fd < 0) {
    return absl::InternalError("ucx: cannot make the worker's event fds.");
  }
  for (int fd : {ucx_fd, w->wake_fd_}) {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = fd;
    if (epoll_ctl(w->ucx_->epoll_fd, EPOLL_CTL_ADD, fd, &e) != 0) {
      return absl::InternalError("ucx: cannot watch the worker's event fds.");
    }
  }
  Worker* raw = w.get();
  w->thread_ = std::thread([raw] { raw->Loop(); });
  return w;
}

Worker::~Worker() {
  if (thread_.joinable()) {
    Post([this] {
      std::vector<Transfer*> all;
      {
        absl::MutexLock l(&mu_);
        for (auto& [t, keep] : in_flight_) all.push_back(t);
      }
      for (Transfer* t : all) CancelNow(t);
    });
    {
      absl::MutexLock l(&mu_);
      stopping_ = true;
    }
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  ucx_.reset();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void Worker::Post(std::function<void()> command) {
  {
    absl::MutexLock l(&mu_);
    commands_.push_back(std::move(command));
  }
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

std::shared_ptr<void> Worker::HoldPeer(const std::string& peer) {
  Post([this, peer] { ++ucx_->holds[peer]; });
  return std::shared_ptr<void>(nullptr, [this, peer](void*) {
    Post([this, peer] {
      auto it = ucx_->holds.find(peer);
      if (it != ucx_->holds.end() && --it->second <= 0) ucx_->holds.erase(it);
    });
  });
}

void Worker::Flush() {
  absl::Notification done;
  Post([&done] { done.Notify(); });
  done.WaitForNotification();
}

void Worker::Discard() {
  // Every unasked message there is, so that no peer can park bytes here
  // faster than they go; bounded per turn only so that a flood cannot keep
  // the thread from its commands.
  for (int i = 0; i < (1 << 16); ++i) {
    ucp_tag_recv_info_t info;
    ucp_tag_message_h m = ucp_tag_probe_nb(ucx_->worker, 0, 0, /*remove=*/1, &info);
    if (m == nullptr) return;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
    p.cb.recv = [](void* request, ucs_status_t, const ucp_tag_recv_info_t*, void*) {
      ucp_request_free(request);
    };
    // Into a scratch buffer, cut short: the bytes are not wanted, and UCX
    // then lets the sender go (its send ends, truncated here).
    const size_t n = std::min(info.length, ucx_->scratch.size());
    void* r = ucp_tag_msg_recv_nbx(ucx_->worker, ucx_->scratch.data(), n, m, &p);
    (void)r;  // done at once, failed, or freed by the callback
    absl::MutexLock l(&mu_);
    ++discarded_;
  }
}

void Worker::Loop() {
  absl::Time last_event = absl::InfinitePast();
  for (;;) {
    std::deque<std::function<void()>> commands;
    bool stop = false;
    {
      absl::MutexLock l(&mu_);
      commands.swap(commands_);
      stop = stopping_;
    }
    for (std::function<void()>& c : commands) c();
    // Bounded: a connection that keeps failing (a peer gone) can make
    // progress report events without end; commands must still run.
    int events = 0;
    for (int i = 0; i < 64; ++i) {
      const unsigned n = ucp_worker_progress(ucx_->worker);
      if (n == 0) break;
      events += static_cast<int>(n);
    }
    if (options_.discard_unexpected) Discard();
    {
      absl::MutexLock l(&mu_);
      endpoint_count_ = ucx_->endpoints.size();
    }
    if (stop) {
      // Closing the endpoints by force ends the sends still on them, so
      // that a peer that went away holds up nothing.
      ucx_->CloseEndpoints();
      bool idle = false;
      {
        absl::MutexLock l(&mu_);
        idle = in_flight_.empty() && commands_.empty();
      }
      if (idle) return;
      continue;  // cancels land as the worker progresses
    }
    // While transfers move, poll: sleeping for each event of a TCP stream
    // (and waking for it) halves what UCX moves, and a wake-up costs a small
    // call more than its bytes do. Only briefly for small transfers, whose
    // peers need the CPU too; not at all once nothing happened for that
    // long (a peer that sends nothing keeps no thread busy).
    const absl::Time now = absl::Now();
    if (events > 0) last_event = now;
    const absl::Time next_close = CloseStuckSends(now);
    {
      absl::MutexLock l(&mu_);
      if (!commands_.empty()) continue;
      const absl::Duration poll = in_flight_bytes_ >= kPollFromBytes ? absl::Milliseconds(2)
                                  : !in_flight_.empty()              ? absl::Microseconds(200)
                                                                     : absl::ZeroDuration();
      if (now - last_event < poll) continue;
    }
    if (ucp_worker_arm(ucx_->worker) == UCS_ERR_BUSY) continue;  // more to progress
    const absl::Duration wait =
        std::clamp(next_close - now, absl::ZeroDuration(), absl::Seconds(1));
    epoll_event ready[2];
    const int wait_ms = static_cast<int>(absl::ToInt64Milliseconds(wait)) + 1;
    if (epoll_wait(ucx_->epoll_fd, ready, 2, wait_ms) > 0) {
      uint64_t n;
      (void)!read(wake_fd_, &n, sizeof(n));
    }
  }
}

void Worker::SendEnded(Transfer* t) {
  if (t->peer_.empty()) return;
  auto it = ucx_->endpoints.find(t->peer_);
  if (it != ucx_->endpoints.end() && it->second.ep == t->ep_ && it->second.sends > 0) {
    --it->second.sends;
  }
}

void Worker::Settle(const std::shared_ptr<Transfer>& t, void* r, size_t done_bytes) {
  if (UCS_PTR_IS_ERR(r)) {
    SendEnded(t.get());
    return t->Finish(FromUcs(UCS_PTR_STATUS(r)), 0);
  }
  if (r == nullptr) {
    SendEnded(t.get());
    return t->Finish(absl::OkStatus(), done_bytes);
  }
  if (t->ended_early_) {  // the callback ran inside the call
    SendEnded(t.get());
    ucp_request_free(r);
    const auto s = static_cast<ucs_status_t>(t->early_status_);
    return t->Finish(FromUcs(s), s == UCS_OK ? t->early_bytes_ : 0);
  }
  t->request_ = r;
  absl::MutexLock l(&mu_);
  in_flight_.emplace(t.get(), t);
  in_flight_bytes_ += t->size_;
}

void Worker::CancelNow(Transfer* t) {
  if (t->request_ == nullptr) return;
  if (t->peer_.empty()) {
    ucp_request_cancel(ucx_->worker, t->request_);
  } else {
    // A second cancel keeps the first one's grace.
    ucx_->cancelled_sends.emplace(t, absl::Now() + options_.send_cancel_grace);
  }
}

absl::Time Worker::CloseStuckSends(absl::Time now) {
  absl::Time next = absl::InfiniteFuture();
  std::vector<std::pair<std::string, void*>> stuck;
  for (const auto& [t, until] : ucx_->cancelled_sends) {
    if (until <= now) {
      stuck.emplace_back(t->peer_, t->ep_);
    } else {
      next = std::min(next, until);
    }
  }
  for (const auto& [peer, ep] : stuck) {
    auto it = ucx_->endpoints.find(peer);
    // Ends the sends on it (their callbacks drop them from cancelled_sends).
    if (it != ucx_->endpoints.end() && it->second.ep == ep) ucx_->Close(peer);
  }
  return next;
}

int Worker::in_flight() const {
  absl::MutexLock l(&mu_);
  return static_cast<int>(in_flight_.size());
}

int64_t Worker::discarded() const {
  absl::MutexLock l(&mu_);
  return discarded_;
}

size_t Worker::endpoints() const {
  absl::MutexLock l(&mu_);
  return endpoint_count_;
}

// Runs on the worker's thread, from ucp_worker_progress.
void Worker::Ended(Transfer* t, void* request, int status, size_t bytes) {
  if (t->request_ == nullptr) {  // still inside the call that started it: Settle ends it
    t->ended_early_ = true;
    t->early_status_ = status;
    t->early_bytes_ = bytes;
    return;
  }
  t->request_ = nullptr;
  ucp_request_free(request);  // UCX is done with the caller's memory
  SendEnded(t);
  if (ucx_->cancelled_sends.erase(t) > 0 && status == UCS_OK) {
    status = UCS_ERR_CANCELED;  // a cancelled send the peer took late
  }
  const auto failed = static_cast<ucs_status_t>(status);
  if (!t->peer_.empty() && failed != UCS_OK && failed != UCS_ERR_CANCELED) {
    // The connection broke (the peer went, or closed it): the next send to
    // that peer makes a new one. Later, not inside UCX's callback.
    Post([this, peer = t->peer_, ep = t->ep_] {
      auto it = ucx_->endpoints.find(peer);
      if (it != ucx_->endpoints.end() && it->second.ep == ep) ucx_->Close(peer);
    });
  }
  std::shared_ptr<Transfer> keep;
  {
    absl::MutexLock l(&mu_);
    auto it = in_flight_.find(t);
    if (it != in_flight_.end()) {
      keep = std::move(it->second);
      in_flight_.erase(it);
      in_flight_bytes_ -= t->size_;
    }
  }
  const auto s = static_cast<ucs_status_t>(status);
  t->Finish(FromUcs(s), s == UCS_OK ? bytes : 0);  // wakes Wait, after all of the above
}

std::shared_ptr<Transfer> Worker::StartSend(const std::string& peer, uint64_t tag, const void* data,
                                            size_t size, OnEnd on_end) {
  std::shared_ptr<Transfer> t(new Transfer(this));
  t->size_ = size;
  t->peer_ = peer;
  t->on_end_ = std::move(on_end);
  Post([this, t, tag, data, size] {
    ucs_status_t s = UCS_OK;
    Ucx::Endpoint* e = ucx_->Get(t->peer_, options_.max_endpoints, &s);
    if (e == nullptr) {
      t->peer_.clear();  // no endpoint counts it
      if (s == UCS_ERR_EXCEEDS_LIMIT) {
        return t->Finish(absl::UnavailableError(absl::StrCat(
                             "ucx: all ", options_.max_endpoints,
                             " of this worker's endpoints are in use (--ucx_max_endpoints)."
                             " This peer gets none now.")),
                         0);
      }
      return t->Finish(FromUcs(s), 0);
    }
    ++e->sends;
    t->ep_ = e->ep;
    ucp_ep_h ep = e->ep;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = [](void* request, ucs_status_t status, void* user_data) {
      auto* tr = static_cast<Transfer*>(user_data);
      tr->worker_->Ended(tr, request, status, tr->size_);
    };
    p.user_data = t.get();
    Settle(t, ucp_tag_send_nbx(ep, data, size, tag, &p), size);
  });
  return t;
}

std::shared_ptr<Transfer> Worker::StartReceive(uint64_t tag, void* data, size_t size,
                                               OnEnd on_end) {
  std::shared_ptr<Transfer> t(new Transfer(this));
  t->size_ = size;
  t->on_end_ = std::move(on_end);
  Post([this, t, tag, data, size] {
    ucp_request_param_t p{};
    // Always through the callback, which says how many bytes came.
    p.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.cb.recv = [](void* request, ucs_status_t status, const ucp_tag_recv_info_t* i,
                   void* user_data) {
      auto* tr = static_cast<Transfer*>(user_data);
      tr->worker_->Ended(tr, request, status, i != nullptr ? i->length : 0);
    };
    p.user_data = t.get();
    Settle(t, ucp_tag_recv_nbx(ucx_->worker, data, size, tag, ~uint64_t{0}, &p), 0);
  });
  return t;
}

}  // namespace farcall::ucx
