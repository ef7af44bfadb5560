// A turn to poll for an answer without sleeping (CallOptions::busy_poll).
// Few threads may poll at once, so that polling callers never take every
// core from the work they wait for (a same-host agent, XLA's other
// threads): a thread that gets no turn sleeps as it would without polling.
//
//   PollingSlot slot;  // the process's turns: half its cores, at least one
//   if (slot.held()) { ... poll ... }
//   // the turn is given back when `slot` goes
//
// Thread safety: any thread may take a turn; each PollingSlot is its own.
#ifndef FARCALL_CLIENT_POLLING_SLOT_H_
#define FARCALL_CLIENT_POLLING_SLOT_H_

#include <atomic>

namespace farcall::client_internal {

class PollingSlot {
 public:
  // One of the process's turns, if one is free.
  PollingSlot();
  // One of `turns` turns counted in `polling` (for tests).
  PollingSlot(std::atomic<int>& polling, int turns);
  ~PollingSlot();
  PollingSlot(const PollingSlot&) = delete;
  PollingSlot& operator=(const PollingSlot&) = delete;

  bool held() const { return polling_ != nullptr; }

 private:
  std::atomic<int>* polling_ = nullptr;  // null: no turn
};

}  // namespace farcall::client_internal

#endif  // FARCALL_CLIENT_POLLING_SLOT_H_
