// DispatchItemSize: for kernels that move elements without looking at them (Gather, GatherNd,
// MaskedScatter), one instantiation per element size instead of one per dtype.
//
//   DispatchItemSize(ItemSize(dtype), [&]<typename Elem>(TypeTag<Elem>) { Copy<Elem>(...); });
#ifndef TENSOROPS_KERNELS_CPU_ITEM_SIZE_H_
#define TENSOROPS_KERNELS_CPU_ITEM_SIZE_H_

#include <cstdint>

#include "kernels/dispatch.h"

namespace tensorops::cpu {

// Bytes is element storage of one size, aligned like the dtypes of that size.
template <int kBytes>
struct alignas(kBytes < 16 ? kBytes : 8) Bytes {
  unsigned char bytes[kBytes];
};

// DispatchItemSize calls `fn(TypeTag<E>{})` with an unsigned integer type of `itemsize` bytes
// (1, 2, 4 or 8), or Bytes<16> for complex128.
template <typename Fn>
decltype(auto) DispatchItemSize(int64_t itemsize, Fn&& fn) {
  switch (itemsize) {
    case 1:
      return fn(TypeTag<uint8_t>{});
    case 2:
      return fn(TypeTag<uint16_t>{});
    case 4:
      return fn(TypeTag<uint32_t>{});
    case 8:
      return fn(TypeTag<uint64_t>{});
    default:
      return fn(TypeTag<Bytes<16>>{});
  }
}

}  // namespace tensorops::cpu

#endif  // TENSOROPS_KERNELS_CPU_ITEM_SIZE_H_
