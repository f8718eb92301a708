// ReplayJournaledUpdate: how a durable store's recovery (server/store/durable_store.h) runs an
// in-place update its log recorded. The store cannot run ops itself; the server can, through the
// same PrepareOp every RPC uses, so a replayed update is checked, planned and computed exactly as
// the original call was (on the CPU, whose results the GPU's journaled updates match).
#ifndef TENSOROPS_SERVER_CORE_JOURNAL_REPLAY_H_
#define TENSOROPS_SERVER_CORE_JOURNAL_REPLAY_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "server/store/tensor_store.h"

namespace tensorops {

// ReplayJournaledUpdate runs `call` (a serialized tensorops.v1.OpRequest, as
// StoredOperands::JournalCall wrote it) in place on stored tensor `name` of namespace `ns`, which
// must be at `from_version`, on the CPU and without the call's update id (recovery remembers it).
// DATA_LOSS for a call that does not parse or names no op; otherwise the op's own errors.
absl::Status ReplayJournaledUpdate(TensorStore& store, std::string_view ns, std::string_view name,
                                   int64_t from_version, std::string_view call);

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_CORE_JOURNAL_REPLAY_H_
