#include "client/polling_slot.h"

#include <algorithm>
#include <thread>

namespace farcall::client_internal {
namespace {

std::atomic<int> process_polling{0};

int ProcessTurns() {
  static const int turns = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2);
  return turns;
}

}  // namespace

PollingSlot::PollingSlot() : PollingSlot(process_polling, ProcessTurns()) {}

PollingSlot::PollingSlot(std::atomic<int>& polling, int turns) {
  int n = polling.load(std::memory_order_relaxed);
  while (n < turns && !polling.compare_exchange_weak(n, n + 1)) {
  }
  if (n < turns) polling_ = &polling;
}

PollingSlot::~PollingSlot() {
  if (polling_ != nullptr) polling_->fetch_sub(1);
}

}  // namespace farcall::client_internal
