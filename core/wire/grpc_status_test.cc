#include "core/wire/grpc_status.h"

#include "absl/strings/match.h"
#include "core/error_reason.h"
#include "farcall/v1/farcall.pb.h"
#include "gtest/gtest.h"

namespace farcall {
namespace {

TEST(GrpcStatusTest, AReasonCrossesTheWireInTheStatusDetails) {
  const absl::Status marked = WithReason(
      absl::UnavailableError("this agent is draining for shutdown and takes no new calls."),
      ErrorReason::kAgentDraining);
  const grpc::Status wire = ToGrpcStatus(marked);
  EXPECT_EQ(wire.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(wire.error_message(), marked.message());
  // The details are a google.rpc.Status: code, message, one ErrorDetail.
  v1::RpcStatus rpc;
  ASSERT_TRUE(rpc.ParseFromString(wire.error_details()));
  EXPECT_EQ(rpc.code(), 14);
  ASSERT_EQ(rpc.details_size(), 1);
  EXPECT_EQ(rpc.details(0).type_url(), "type.googleapis.com/farcall.v1.ErrorDetail");
  const absl::Status back = FromGrpcStatus(wire);
  EXPECT_EQ(back.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(back.message(), marked.message());
  EXPECT_EQ(ReasonOf(back), ErrorReason::kAgentDraining);
}

// What a caller may send again, decided from the reason that crossed the
// wire, never from the message.
TEST(GrpcStatusTest, WhatMaySendAgainFollowsTheReason) {
  auto across = [](absl::Status s) { return FromGrpcStatus(ToGrpcStatus(s)); };
  for (ErrorReason r : {ErrorReason::kAgentDraining, ErrorReason::kRouterDraining,
                        ErrorReason::kInputsNotDelivered, ErrorReason::kNoLiveAgent}) {
    absl::Status s = across(WithReason(absl::UnavailableError("x"), r));
    EXPECT_TRUE(DidNotRun(s)) << s;
    EXPECT_TRUE(MaySendAgain(s, /*has_side_effect=*/true)) << s;
  }
  const absl::Status broken = across(absl::UnavailableError("connection reset"));
  EXPECT_FALSE(DidNotRun(broken));
  EXPECT_TRUE(MaySendAgain(broken, false));
  EXPECT_FALSE(MaySendAgain(broken, true));  // it may have run
  const absl::Status raised =
      across(WithReason(absl::UnavailableError("my own"), ErrorReason::kHandlerError));
  EXPECT_FALSE(MaySendAgain(raised, false));
  EXPECT_FALSE(MaySendAgain(across(absl::InternalError("boom")), false));
  EXPECT_FALSE(MaySendAgain(absl::OkStatus(), false));
}

TEST(GrpcStatusTest, AHandlersTracebackCrossesTheWireBounded) {
  const std::string tb = "Traceback (most recent call last):\n  File \"h.py\", line 3, in f\n";
  absl::Status s = WithTraceback(
      WithReason(absl::InternalError("KeyError: 'x'"), ErrorReason::kHandlerError), tb);
  const absl::Status back = FromGrpcStatus(ToGrpcStatus(s));
  EXPECT_EQ(back.message(), "KeyError: 'x'");
  EXPECT_EQ(ReasonOf(back), ErrorReason::kHandlerError);
  EXPECT_EQ(TracebackOf(back), tb);
  // Longer than 8 KiB: its end is kept.
  const std::string big = std::string(20000, 'a') + "the end";
  EXPECT_EQ(TracebackOf(WithTraceback(absl::InternalError("x"), big)).size(), kMaxTracebackBytes);
  EXPECT_TRUE(absl::EndsWith(TracebackOf(WithTraceback(absl::InternalError("x"), big)), "the end"));
  EXPECT_EQ(TracebackOf(absl::InternalError("x")), "");
}

TEST(GrpcStatusTest, UnmarkedAndMalformedDetailsCarryNoReason) {
  EXPECT_TRUE(ToGrpcStatus(absl::InternalError("x")).error_details().empty());
  EXPECT_EQ(ReasonOf(FromGrpcStatus(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "m"))),
            ErrorReason::kUnspecified);
  EXPECT_EQ(ReasonOf(FromGrpcStatus(
                grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "m", "\xff\xff not a proto"))),
            ErrorReason::kUnspecified);
  // A reason this build does not know is no reason.
  v1::ErrorDetail d;
  d.set_reason(static_cast<v1::ErrorDetail::Reason>(99));
  v1::RpcStatus rpc;
  rpc.add_details()->set_type_url("type.googleapis.com/farcall.v1.ErrorDetail");
  rpc.mutable_details(0)->set_value(d.SerializeAsString());
  EXPECT_EQ(ReasonOf(FromGrpcStatus(
                grpc::Status(grpc::StatusCode::UNAVAILABLE, "m", rpc.SerializeAsString()))),
            ErrorReason::kUnspecified);
  EXPECT_TRUE(WithReason(absl::OkStatus(), ErrorReason::kAuthRefused).ok());
}

}  // namespace
}  // namespace farcall
