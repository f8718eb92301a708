// StoredOperands: the stored tensors one request references (Tensor.stored), taken together
// before any of its arguments is decoded, and the shared-memory regions its arguments are in
// (Tensor.shared_memory), held until the call is done.
//
//   TENSOROPS_ASSIGN_OR_RETURN(std::shared_ptr<StoredOperands> operands,
//                              StoredOperands::Acquire("scatter", request, stored));
//   TENSOROPS_ASSIGN_OR_RETURN(TensorView src, operands->View(request.src(), "src"));
//
// Taking them all at once, in one order, is what keeps calls from deadlocking on each other: a
// tensor's lock prefers a waiting updater to new readers, so two calls that each held one
// tensor and then asked for the other (or one call asking twice for a tensor an updater waits
// on) would wait forever. Here each name is taken once per request, and names are taken in
// sorted order, so no two calls can wait on each other in a cycle.
//
// Device memory (--store_device=cuda). A stored tensor in device memory has a view the CPU must
// not read. A call placed on the GPU reads it in place (MarkResident); a call that runs on the
// CPU (no GPU kernel, or a fallback) first copies its operands to the host (MirrorOnHost), plans
// again on the copies, and copies an in-place result back (WriteBack). Arguments in a CUDA
// shared-memory region (the client's GPU buffer) are device memory the same way.
#ifndef TENSOROPS_SERVER_CORE_STORED_OPERANDS_H_
#define TENSOROPS_SERVER_CORE_STORED_OPERANDS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "kernels/device_call.h"
#include "kernels/tensor.h"
#include "server/shared_memory/regions.h"
#include "server/store/tensor_store.h"
#include "tensorops/v1/tensor.pb.h"

namespace tensorops {

// StoredTensors is where a request's references to stored tensors are read from.
struct StoredTensors {
  // Null: every reference fails with FAILED_PRECONDITION.
  TensorStore* store = nullptr;
  // The caller's namespace (StoreNamespace, server/core/op_call.h).
  std::string_view ns;
  // Where arguments and results in shared memory are found (Tensor.shared_memory,
  // ResultOptions.shared_memory). Null: every such reference fails with FAILED_PRECONDITION.
  const SharedMemoryRegions* regions = nullptr;
  // kTry: a tensor whose lock would make the call wait fails it at once with a status
  // IsStoreBusy recognises, and so does an in-place update whose journal record would wait for
  // the disk (--store_dir: with --store_sync=always, or a full queue of records; see
  // StoreJournal::LogUpdate). For a first try on a thread that must not block (OpCall::Start).
  LockWait lock_wait = LockWait::kWait;
};

// InPlaceTarget names the one argument a call updates in place: `tensor` (a field of the
// request) is taken exclusively (TensorStore::UpdateHandle), with `update_id` so that a retry of
// an update already applied is recognised under the lock.
struct InPlaceTarget {
  const v1::Tensor* tensor = nullptr;
  std::string_view update_id;
};

// ReferencesStoredTensors is true when any Tensor of `request` (nested messages included) names a
// stored tensor, found by the walk that Acquire takes (the codec fuzzer drives it with arbitrary
// messages).
bool ReferencesStoredTensors(const google::protobuf::Message& request);

// SharedMemoryView is the tensor `tensor` places in a shared-memory region (Tensor.shared_memory
// set), in `region`: dtype and shape are required, data must be empty, byte_size exactly the
// tensor's bytes and offset a multiple of its item size (INVALID_ARGUMENT naming `op` and `arg`
// otherwise), and the bytes inside the region.
absl::StatusOr<MutableTensorView> SharedMemoryView(const v1::Tensor& tensor,
                                                   const MappedRegion& region, std::string_view op,
                                                   std::string_view arg);

// StoredOperands holds a handle on every stored tensor a request references until it is
// destroyed, so the bytes an op reads stay one version for the whole call. Not thread-safe.
class StoredOperands {
 public:
  // Acquire finds every Tensor with `stored` or `shared_memory` set in `request` (nested messages
  // included: the forward call of a BackwardRequest). It holds each region named (NOT_FOUND
  // naming `op`, the argument and the region when it is not registered in `stored.ns`), and
  // takes one handle per distinct stored name, in name order:
  // a ReadHandle, or the UpdateHandle of `in_place`, whose tensor no other argument may name.
  // Errors name `op` and the argument (the field's name): INVALID_ARGUMENT for a reference that
  // carries data, two references to one name that expect different versions, or another
  // argument naming the tensor updated in place; NOT_FOUND for a name that does not exist
  // (RESOURCE_EXHAUSTED saying the store is off when it is: --store_memory_bytes=0);
  // FAILED_PRECONDITION for a version mismatch or when `stored.store` is null.
  static absl::StatusOr<std::shared_ptr<StoredOperands>> Acquire(
      std::string_view op, const google::protobuf::Message& request, const StoredTensors& stored,
      const InPlaceTarget& in_place = {});

  // View returns the value `tensor` references (it must have `stored` or `shared_memory` set and
  // have been part of the request Acquire walked). When a stored reference also sets dtype or
  // shape, they must be the stored tensor's (INVALID_ARGUMENT naming `op`, `arg` and both); a
  // tensor in shared memory is checked as SharedMemoryView says, and read where it is (or from
  // its copy, after CopySharedMemory).
  absl::StatusOr<TensorView> View(const v1::Tensor& tensor, std::string_view arg) const;

  // CopySharedMemory copies every argument in shared memory into the server's own memory, and
  // checks the regions after the copy: from then on View gives the copies, so that a call that
  // changes the store never reads a region its owner may change (or shrink) while the kernel
  // writes the store's bytes. Errors as View's and CheckSharedMemory's.
  absl::Status CopySharedMemory();
  // CheckSharedMemory checks every region the call read (MappedRegion::CheckIntact): run it
  // after the kernel, before the answer says what it computed.
  absl::Status CheckSharedMemory() const;
  // uses_shared_memory: some argument is in a shared-memory region.
  bool uses_shared_memory() const { return !regions_.empty(); }

  // HoldResultRegion finds the region `ref` names, where the call writes its result (errors start
  // with `what`: "gather: result_options.shared_memory"; NOT_FOUND when it is not registered in
  // `stored.ns`), and holds it until the call is done. A region an argument is in is that one:
  // one name stands for one region for the whole call, though it may be unregistered and
  // registered again meanwhile.
  absl::Status HoldResultRegion(const v1::SharedMemoryRef& ref, const StoredTensors& stored,
                                std::string_view what);
  // The region HoldResultRegion holds; null before.
  const std::shared_ptr<const MappedRegion>& result_region() const { return result_region_; }
  // CheckResultApart is INVALID_ARGUMENT, naming the argument, when bytes [offset, offset +
  // bytes) of the result's region share memory with an argument in shared memory: the kernels
  // read their arguments while they write the result, and an overlap would give neither.
  absl::Status CheckResultApart(int64_t offset, int64_t bytes, std::string_view what) const;

  // The handle on the tensor updated in place; null without one.
  TensorStore::UpdateHandle* update() { return update_.has_value() ? &*update_ : nullptr; }

  // on_device: some operand's View is in device memory (not yet mirrored on the host): a stored
  // tensor in the store's device memory or an argument in a CUDA region.
  bool on_device() const;
  // in_host_memory: some operand lives in the store's host memory (--store_device=cpu).
  bool in_host_memory() const;
  // MarkResident marks the call's inputs that are operands in device memory as resident.
  void MarkResident(DeviceCall& call) const;

  // MirrorOnHost copies every operand in device memory (arguments in CUDA regions included) to the
  // host (the update's too with `include_update`); from then on View (and UpdateHostView) give the
  // copies. Errors are the device's. Idempotent.
  absl::Status MirrorOnHost(bool include_update = true);
  // UpdateHostView is the tensor updated in place as the CPU may write it: its host copy when
  // MirrorOnHost made one, else its own bytes (which must then be host memory).
  MutableTensorView UpdateHostView();
  // WriteBack copies the host copy of the tensor updated in place back to its device memory
  // (nothing when there is none). Call before committing the update.
  absl::Status WriteBack();

  // JournalCall is what a store's journal records of this call, an in-place update made by
  // `request`, the message of OpRequest's field `op_field`: a serialized v1::OpRequest in which
  // every stored argument but the updated one carries its bytes inline, since recovery replays
  // the update after those tensors may have changed. Those operands must be in host memory
  // (MirrorOnHost). INVALID_ARGUMENT when it would exceed kMaxJournalCallBytes.
  absl::StatusOr<std::string> JournalCall(int op_field,
                                          const google::protobuf::Message& request) const;

  // The most bytes a journaled call may have: protobuf serializes and parses messages below 2 GiB.
  static constexpr size_t kMaxJournalCallBytes = size_t{INT32_MAX};

 private:
  explicit StoredOperands(std::string_view op) : op_(op) {}
  // JournalTooLarge is JournalCall's error for a call of `bytes`.
  absl::Status JournalTooLarge(size_t bytes) const;
  // Unmirrored: the tensor `name`, in `memory`, is device memory with no host copy yet;
  // UpdateUnmirrored: so is the tensor updated in place.
  bool Unmirrored(const std::string& name, const TensorMemory& memory) const;
  bool UpdateUnmirrored() const;
  // RegionOf is the region `tensor`, an argument in shared memory, is in; InDeviceRegion: it is a
  // CUDA region, and the argument has no host copy yet.
  const MappedRegion& RegionOf(const v1::Tensor& tensor) const;
  bool InDeviceRegion(const v1::Tensor& tensor) const;
  // CopyRegionArg copies `tensor`, an argument in shared memory, to the server's memory (once).
  absl::Status CopyRegionArg(const v1::Tensor& tensor, std::string_view arg);
  // InlineReads replaces every Tensor of `message` (nested ones too) that names one of reads_, or
  // a region, with its bytes.
  absl::Status InlineReads(google::protobuf::Message* message) const;
  // Mirror copies `view` (the whole stored tensor `name`, in `memory`) to a host copy.
  absl::Status Mirror(const std::string& name, const TensorView& view, const TensorMemory& memory);

  std::string_view op_;
  absl::btree_map<std::string, TensorStore::ReadHandle> reads_;
  // The regions arguments are in, by region name, held until the call is done.
  absl::btree_map<std::string, std::shared_ptr<const MappedRegion>> regions_;
  // Where the result is written (HoldResultRegion); null when it is not in shared memory.
  std::shared_ptr<const MappedRegion> result_region_;
  // The request's tensors in shared memory, and their fields' names.
  std::vector<std::pair<const v1::Tensor*, std::string_view>> shared_memory_args_;
  // Copies of the arguments in shared memory (CopySharedMemory), by the serialized Tensor that
  // places them: the journal's copy of the request finds them too.
  absl::flat_hash_map<std::string, Tensor> shared_memory_copies_;
  std::optional<TensorStore::UpdateHandle> update_;
  // Host copies of operands in device memory, by name (MirrorOnHost).
  absl::btree_map<std::string, Tensor> mirrors_;
};

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_CORE_STORED_OPERANDS_H_
