#include "kernels/reduction.h"

#include <string>

#include "absl/strings/ascii.h"

namespace tensorops {

std::string_view ReductionName(Reduction reduction) {
  switch (reduction) {
    case Reduction::kAssign:
      return "ASSIGN";
    case Reduction::kSum:
      return "SUM";
    case Reduction::kProd:
      return "PROD";
    case Reduction::kMean:
      return "MEAN";
    case Reduction::kAmax:
      return "AMAX";
    case Reduction::kAmin:
      return "AMIN";
  }
  return "UNKNOWN";
}

std::optional<Reduction> ParseReduction(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(std::string(name));
  if (lower == "assign" || lower == "update") return Reduction::kAssign;
  if (lower == "sum" || lower == "add") return Reduction::kSum;
  if (lower == "prod" || lower == "mul" || lower == "multiply") return Reduction::kProd;
  if (lower == "mean") return Reduction::kMean;
  if (lower == "amax" || lower == "max") return Reduction::kAmax;
  if (lower == "amin" || lower == "min") return Reduction::kAmin;
  return std::nullopt;
}

}  // namespace tensorops
