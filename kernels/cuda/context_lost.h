// ContextLost: how the CUDA executor tells an error that failed one call from one that poisoned
// the CUDA context (executor.h). Declared here, apart from the executor, so that the GPU tests can
// check the distinction on real errors of both kinds. CUDA builds only.
#ifndef TENSOROPS_KERNELS_CUDA_CONTEXT_LOST_H_
#define TENSOROPS_KERNELS_CUDA_CONTEXT_LOST_H_

#include <cuda_runtime.h>

namespace tensorops::cuda {

// ContextLost says whether `error`, just returned by a call on `stream`, left the CUDA context
// unusable, and clears it otherwise. Out-of-memory and launch-resource errors never do. Of the
// rest, a sticky error (an illegal address, a trap, a failed launch) poisons the context: the
// runtime then returns it from every later call, while an error that only failed its own call (an
// invalid argument at enqueue time, say) is gone once read. So a trivial call after clearing it
// tells the two apart, whatever the code.
bool ContextLost(cudaError_t error, cudaStream_t stream);

}  // namespace tensorops::cuda

#endif  // TENSOROPS_KERNELS_CUDA_CONTEXT_LOST_H_
