// IntDivider (kernels/int_divider.h) against the compiler's `/` and `%`, on the host, for the
// 32- and 64-bit forms: every divisor that shapes its magic number differently (1, powers of two
// and their neighbours, the largest values) crossed with the dividends where a wrong magic number
// or shift shows first (0, 1, the multiples of the divisor and their neighbours, the type's
// extremes), then random pairs of every magnitude.
#include "kernels/int_divider.h"

#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include "absl/random/random.h"
#include "gtest/gtest.h"

namespace tensorops {
namespace {

template <typename U>
class IntDividerTest : public ::testing::Test {};
using Widths = ::testing::Types<uint32_t, uint64_t>;
TYPED_TEST_SUITE(IntDividerTest, Widths);

template <typename U>
std::vector<U> EdgeDivisors() {
  constexpr U kMax = std::numeric_limits<U>::max();
  std::set<U> divisors = {1, 3, 5, 6, 7, 10, 11, 13, 25, 100, 641, 1000, 65535, 65537, 1000000007};
  for (int bit = 1; bit < std::numeric_limits<U>::digits; ++bit) {
    const U power = U{1} << bit;
    divisors.insert({power - 1, power, power + 1});
  }
  divisors.insert({U{(uint32_t{1} << 31) - 1}, U{uint32_t{1} << 31}, U{0xFFFFFFFFu}, kMax - 1, kMax,
                   kMax / 2, kMax / 3});
  return {divisors.begin(), divisors.end()};
}

template <typename U>
std::vector<U> EdgeDividends(U divisor) {
  constexpr U kMax = std::numeric_limits<U>::max();
  std::set<U> dividends = {0,
                           1,
                           2,
                           divisor - 1,
                           divisor,
                           U{(uint32_t{1} << 31) - 1},
                           U{uint32_t{1} << 31},
                           U{0xFFFFFFFFu},
                           kMax - 1,
                           kMax};
  if (divisor < kMax) dividends.insert(divisor + 1);
  for (int bit = 0; bit < std::numeric_limits<U>::digits; ++bit) {
    const U power = U{1} << bit;
    dividends.insert({power - 1, power, power + 1});
  }
  // The last multiples of the divisor below the top, where the quotient is largest.
  const U top = kMax / divisor * divisor;
  dividends.insert({top, top - 1});
  if (top < kMax) dividends.insert(top + 1);
  // Multiples of the divisor and their neighbours at every magnitude of the quotient.
  for (int bit = 0; bit < std::numeric_limits<U>::digits; ++bit) {
    const U quotient = U{1} << bit;
    if (quotient > kMax / divisor) break;
    const U multiple = quotient * divisor;
    dividends.insert({multiple - 1, multiple});
    if (multiple < kMax) dividends.insert(multiple + 1);
  }
  return {dividends.begin(), dividends.end()};
}

template <typename U>
void ExpectDivides(const IntDivider<U>& divider, U n) {
  const U d = divider.divisor();
  ASSERT_EQ(divider.Divide(n), n / d) << n << " / " << d;
  const auto [quotient, remainder] = divider.DivMod(n);
  ASSERT_EQ(quotient, n / d) << n << " / " << d;
  ASSERT_EQ(remainder, n % d) << n << " % " << d;
}

TYPED_TEST(IntDividerTest, DefaultDividesByOne) {
  using U = TypeParam;
  const IntDivider<U> divider;
  EXPECT_EQ(divider.divisor(), U{1});
  for (U n : {U{0}, U{1}, U{12345}, std::numeric_limits<U>::max()}) ExpectDivides(divider, n);
}

TYPED_TEST(IntDividerTest, EdgeDivisorsAndDividends) {
  using U = TypeParam;
  for (U divisor : EdgeDivisors<U>()) {
    const IntDivider<U> divider(divisor);
    for (U n : EdgeDividends(divisor)) {
      ExpectDivides(divider, n);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TYPED_TEST(IntDividerTest, RandomPairsOfEveryMagnitude) {
  using U = TypeParam;
  constexpr int kBits = std::numeric_limits<U>::digits;
  absl::BitGen random(std::seed_seq{38});
  // A random bit width first, so that small divisors and dividends are as common as large ones
  // (uniform values would almost all be of full width).
  const auto draw = [&random]() {
    const int bits = absl::Uniform<int>(absl::IntervalClosed, random, 1, kBits);
    const U top = bits == kBits ? std::numeric_limits<U>::max() : (U{1} << bits) - 1;
    return absl::Uniform<U>(absl::IntervalClosed, random, U{0}, top);
  };
  for (int pair = 0; pair < 200000; ++pair) {
    U divisor = draw();
    if (divisor == 0) divisor = 1;
    ExpectDivides(IntDivider<U>(divisor), draw());
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// The shapes a kernel divides by: every divisor up to 1024 against every dividend up to 2048 and
// the top of the 31-bit range that 32-bit indexing stops at.
TYPED_TEST(IntDividerTest, SmallDivisorsExhaustively) {
  using U = TypeParam;
  for (U divisor = 1; divisor <= 1024; ++divisor) {
    const IntDivider<U> divider(divisor);
    for (U n = 0; n <= 2048; ++n) ExpectDivides(divider, n);
    for (U n = (U{1} << 31) - 2048; n < (U{1} << 31); ++n) ExpectDivides(divider, n);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace tensorops
