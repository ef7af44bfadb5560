// What a call asks for, as a digest: two headers that ask an agent for the
// same work (handler, platforms, specs, aliases, attributes, side effects)
// have the same digest, whatever their call_id and however their tensors
// travel (chunks, shared memory or UCX, which differ between a call and its
// retry). The exactly-once ledger keeps it, so that a call_id reused for
// other work is refused rather than answered with another call's result.
#ifndef FARCALL_CORE_WIRE_HEADER_DIGEST_H_
#define FARCALL_CORE_WIRE_HEADER_DIGEST_H_

#include <string>

#include "farcall/v1/farcall.pb.h"

namespace farcall {

// The SHA-256 (32 raw bytes) of `header`'s deterministic encoding without
// call_id, shm and ucx.
std::string HeaderDigest(const v1::CallHeader& header);

}  // namespace farcall

#endif  // FARCALL_CORE_WIRE_HEADER_DIGEST_H_
