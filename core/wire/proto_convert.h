// Conversions between the wire messages (farcall.v1) and core's types.
#ifndef FARCALL_CORE_WIRE_PROTO_CONVERT_H_
#define FARCALL_CORE_WIRE_PROTO_CONVERT_H_

#include "core/call_validation.h"
#include "core/tensor_spec.h"
#include "farcall/v1/farcall.pb.h"

namespace farcall {

// An unknown dtype number is kept as is, so that validation can name it.
TensorSpec SpecFromProto(const v1::TensorSpec& p);
v1::TensorSpec SpecToProto(const TensorSpec& s);

CallDescriptor DescriptorFromProto(const v1::CallHeader& h);

}  // namespace farcall

#endif  // FARCALL_CORE_WIRE_PROTO_CONVERT_H_
