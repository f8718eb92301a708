// Early returns for absl::Status and absl::StatusOr, used everywhere a function chains fallible
// steps:
//
//   TENSOROPS_ASSIGN_OR_RETURN(TensorView input, DecodeTensor(request.input(), ...));
//   TENSOROPS_RETURN_IF_ERROR(CheckAxis(op, "axis", axis, rank));
//
// Abseil has no public form of these (its own are internal to Abseil), so the project keeps one.
#ifndef TENSOROPS_KERNELS_STATUS_MACROS_H_
#define TENSOROPS_KERNELS_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// TENSOROPS_RETURN_IF_ERROR returns `expr`'s status from the enclosing function when it is not OK.
// `expr` is an absl::Status (or anything with .ok() that converts to one).
#define TENSOROPS_RETURN_IF_ERROR(expr)                                       \
  do {                                                                        \
    if (::absl::Status tensorops_status_ = (expr); !tensorops_status_.ok()) { \
      return tensorops_status_;                                               \
    }                                                                         \
  } while (false)

// TENSOROPS_ASSIGN_OR_RETURN evaluates the absl::StatusOr `expr` and either returns its status
// from the enclosing function or moves its value into `lhs`, which may be a declaration
// (`TensorView input`) or an existing lvalue. `lhs` must not contain an unparenthesized comma.
#define TENSOROPS_ASSIGN_OR_RETURN(lhs, expr)                                                     \
  TENSOROPS_ASSIGN_OR_RETURN_IMPL_(TENSOROPS_STATUS_CONCAT_(tensorops_status_or_, __LINE__), lhs, \
                                   expr)

#define TENSOROPS_ASSIGN_OR_RETURN_IMPL_(status_or, lhs, expr) \
  auto status_or = (expr);                                     \
  if (!status_or.ok()) return std::move(status_or).status();   \
  lhs = *std::move(status_or)

#define TENSOROPS_STATUS_CONCAT_INNER_(a, b) a##b
#define TENSOROPS_STATUS_CONCAT_(a, b) TENSOROPS_STATUS_CONCAT_INNER_(a, b)

#endif  // TENSOROPS_KERNELS_STATUS_MACROS_H_
