// Status propagation macros. Abseil 20220623 ships none of its own.
#ifndef FARCALL_CORE_STATUS_MACROS_H_
#define FARCALL_CORE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define FARCALL_STATUS_CONCAT_INNER_(a, b) a##b
#define FARCALL_STATUS_CONCAT_(a, b) FARCALL_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` is not OK.
#define FARCALL_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::absl::Status farcall_status_ = (expr);           \
    if (!farcall_status_.ok()) return farcall_status_; \
  } while (0)

// `lhs = value of expr`, or returns its status if `expr` failed.
#define FARCALL_ASSIGN_OR_RETURN(lhs, expr) \
  FARCALL_ASSIGN_OR_RETURN_IMPL_(FARCALL_STATUS_CONCAT_(farcall_statusor_, __LINE__), lhs, expr)
#define FARCALL_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return std::move(tmp).status();       \
  lhs = std::move(tmp).value()

#endif  // FARCALL_CORE_STATUS_MACROS_H_
