// Streaming (non-temporal) stores, for kernels whose result is too large to stay in cache.
//
// A plain store to a line that is not in cache first reads the line from memory (read for
// ownership), only to overwrite it. When a kernel writes a result larger than the last-level
// cache, the line would be evicted before anything read it again, so that read is wasted memory
// traffic: a streaming store writes through a write-combining buffer instead, without reading.
//
//   if (ShouldStream(result_bytes)) {
//     for (...) StreamStore(out + i, value);
//     StreamFence();  // before the stores may be read by another thread
//   }
//
// Streaming stores are weakly ordered: a thread that wrote with them must call StreamFence before
// another thread may rely on seeing the data (the end of a parallel task is such a point).
#ifndef TENSOROPS_KERNELS_CPU_STREAMING_STORE_H_
#define TENSOROPS_KERNELS_CPU_STREAMING_STORE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace tensorops::cpu {

// kCanStream<Elem>: whether StreamStore writes Elem without the cache on this target (4- and
// 8-byte elements on x86-64, through MOVNTI); elsewhere it is a plain store.
#if defined(__SSE2__) && defined(__x86_64__)
template <typename Elem>
inline constexpr bool kCanStream = sizeof(Elem) == 4 || sizeof(Elem) == 8;
#else
template <typename Elem>
inline constexpr bool kCanStream = false;
#endif

// kStreamingMinBytes: results from this size on are written with streaming stores. It stands for
// "larger than the last-level cache": 32 MiB is the L3 of the machines measured here (one AMD
// CCD). It is a constant rather than sysconf(_SC_LEVEL3_CACHE_SIZE) because a VM reports its
// host's total there (320 MiB on the 32 MiB machine of bench/README.md).
inline constexpr int64_t kStreamingMinBytes = int64_t{32} << 20;

inline bool ShouldStream(int64_t bytes) { return bytes >= kStreamingMinBytes; }

template <typename Elem>
inline void StreamStore(Elem* dest, Elem value) {
#if defined(__SSE2__) && defined(__x86_64__)
  if constexpr (sizeof(Elem) == 4) {
    int bits;
    std::memcpy(&bits, &value, sizeof(bits));
    _mm_stream_si32(reinterpret_cast<int*>(dest), bits);
    return;
  } else if constexpr (sizeof(Elem) == 8) {
    long long bits;
    std::memcpy(&bits, &value, sizeof(bits));
    _mm_stream_si64(reinterpret_cast<long long*>(dest), bits);
    return;
  }
#endif
  *dest = value;
}

// kStreamLanes<Elem>: the elements StreamStoreLanes writes at once (16 bytes of them).
template <typename Elem>
inline constexpr int64_t kStreamLanes = 16 / static_cast<int64_t>(sizeof(Elem));

// StreamStoreLanes writes kStreamLanes<Elem> elements, `lane(k)` for k = 0, 1, ..., to `dest`
// (16-byte aligned; kCanStream<Elem> must hold) with one 16-byte streaming store. The elements
// are built in a register, not stored and reloaded: a wide load of bytes that narrower stores
// just wrote waits for them (store forwarding fails), which made such a loop slower than
// streaming each element alone.
template <typename Elem, typename Lane>
inline void StreamStoreLanes(Elem* dest, const Lane& lane) {
  static_assert(kCanStream<Elem>);
#if defined(__SSE2__) && defined(__x86_64__)
  const auto bits = [&](int k) {
    std::conditional_t<sizeof(Elem) == 4, int, long long> word;
    const Elem value = lane(k);
    std::memcpy(&word, &value, sizeof(word));
    return word;
  };
  __m128i lanes;
  if constexpr (sizeof(Elem) == 4) {
    lanes = _mm_setr_epi32(bits(0), bits(1), bits(2), bits(3));
  } else {
    lanes = _mm_set_epi64x(bits(1), bits(0));
  }
  _mm_stream_si128(reinterpret_cast<__m128i*>(dest), lanes);
#endif
}

// StreamCopy copies `bytes` from `source` to `dest` (not overlapping), writing the 16-byte
// aligned part of `dest` with streaming stores; a plain memcpy where they are not available.
inline void StreamCopy(void* dest, const void* source, int64_t bytes) {
#if defined(__SSE2__)
  auto* out = static_cast<char*>(dest);
  const auto* in = static_cast<const char*>(source);
  const int64_t misalignment = static_cast<int64_t>(reinterpret_cast<uintptr_t>(out) % 16);
  const int64_t head = std::min<int64_t>(bytes, misalignment == 0 ? 0 : 16 - misalignment);
  std::memcpy(out, in, static_cast<size_t>(head));
  int64_t i = head;
  for (; i + 64 <= bytes; i += 64) {
#pragma GCC unroll 4
    for (int64_t k = 0; k < 64; k += 16) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(out + i + k),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + k)));
    }
  }
  for (; i + 16 <= bytes; i += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
  }
  std::memcpy(out + i, in + i, static_cast<size_t>(bytes - i));
#else
  std::memcpy(dest, source, static_cast<size_t>(bytes));
#endif
}

inline void StreamFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace tensorops::cpu

#endif  // TENSOROPS_KERNELS_CPU_STREAMING_STORE_H_
