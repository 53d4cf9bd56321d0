// The "switchyard" torch.distributed backend: a c10d::Backend over the
// public C API (switchyard.h), for torch 2.x. Part of the extension's one
// translation unit (module.cpp).
//
// Threads: ops are posted from the caller's thread and never block; one
// completion thread per group tests the outstanding requests and hands each
// finished Work to the process's delivery thread (work.hpp), which copies
// results back where a temporary was needed and completes the Work and its
// Future, so DDP's comm hooks run without anyone calling wait(). Only the
// completion thread touches a request after its post (the C API allows one
// tester at a time), and it holds no reference that could be the last one
// of a Work, a tensor or a group (work.hpp says why). comm_mutex_ pairs
// every C call with the swy_last_error() that explains it, since that text
// is kept per communicator.

#pragma once

#include <switchyard/switchyard.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#ifdef SWY_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "priority.hpp"
#include "tensors.hpp"
#include "work.hpp"

namespace switchyard_torch {

// The timeout torch passed with the op being posted on this thread (its
// options' `timeout`), read by newWork(); unset outside an op.
inline thread_local std::chrono::milliseconds tls_op_timeout =
    c10d::kUnsetTimeout;

struct OpTimeout {
  explicit OpTimeout(std::chrono::milliseconds t) : previous(tls_op_timeout) {
    tls_op_timeout = t;
  }
  ~OpTimeout() {
    tls_op_timeout = previous;
  }
  std::chrono::milliseconds previous;
};

class SwitchyardBackend : public c10d::Backend {
 public:
  // The options a caller passes (init_process_group/new_group's
  // pg_options, switchyard.torch.Options): torch's timeout, plus settings
  // for swy_comm_configure() (SWY_POLICY, SWY_P2P_MATCH, ...) applied to
  // the group's engine when the group is made.
  struct Options : c10d::Backend::Options {
    explicit Options(std::chrono::milliseconds timeout = kBackendDefaultTimeout)
        : c10d::Backend::Options("switchyard", timeout) {}
    c10::intrusive_ptr<c10d::Backend::Options> clone() const override {
      return c10::make_intrusive<Options>(*this);
    }
    std::map<std::string, std::string> config;
  };

  // A group of `size` ranks: split off `parent` (color 0, key = rank)
  // when torch offers one (its split hook), else a rendezvous of its own
  // through the group's store (torch prefixes it per group), as
  // ProcessGroupNCCL does; either way the communicator shares the
  // process's engine with the earlier ones.
  static c10::intrusive_ptr<SwitchyardBackend> create(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
      std::chrono::milliseconds timeout,
      const c10::intrusive_ptr<c10d::Backend>& parent,
      const c10::intrusive_ptr<Options>& given) {
    auto options = given ? c10::static_intrusive_pointer_cast<Options>(
                               given->clone())
                         : c10::make_intrusive<Options>(timeout);
    if (!given) {
      options->timeout = timeout;
    }
    swy_comm_t comm = nullptr;
    auto* from = dynamic_cast<SwitchyardBackend*>(parent.get());
    if (from != nullptr) {
      comm = from->splitComm(0, rank);
      if (swy_comm_rank(comm) != rank || swy_comm_size(comm) != size) {
        const int got_rank = swy_comm_rank(comm);
        const int got_size = swy_comm_size(comm);
        swy_comm_abort(comm);
        TORCH_CHECK(false, "switchyard: the split communicator is rank ",
                    got_rank, " of ", got_size, ", torch's group rank ", rank,
                    " of ", size);
      }
    } else {
      comm = rendezvous(store, rank, size);
    }
    auto backend =
        c10::make_intrusive<SwitchyardBackend>(comm, rank, size, options);
    backend->split_ = from != nullptr;
    return backend;
  }

  SwitchyardBackend(swy_comm_t comm, int rank, int size,
                    c10::intrusive_ptr<Options> options)
      : c10d::Backend(rank, size), comm_(comm), options_(std::move(options)) {
    try {
      configure();
    } catch (...) {
      swy_comm_abort(comm_);
      comm_ = nullptr;
      throw;
    }
    init();
    completion_thread_ = std::thread([this] { completionLoop(); });
  }

  ~SwitchyardBackend() override {
    shutdown();
  }

  const std::string getBackendName() const override {
    return "switchyard";
  }

  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override {
    return options_;
  }

  bool supportsSplitting() const override {
    return true;
  }

  bool supportsCoalescing() const override {
    return true;
  }

  void setTimeout(std::chrono::milliseconds timeout) override {
    options_->timeout = timeout;
  }

  // torch's split_group: every rank of this group calls it with the ranks
  // (of this group) of its own new group; a rank outside `ranks` gets no
  // group (NULL). Collective over this group.
  c10::intrusive_ptr<c10d::Backend> split(
      const c10::intrusive_ptr<c10d::Store>& /*store*/,
      const std::vector<int>& ranks,
      const c10::intrusive_ptr<c10d::Backend::Options>& opts) override {
    auto at = std::find(ranks.begin(), ranks.end(), rank_);
    if (at == ranks.end()) {
      performNocolorSplit();
      return nullptr;
    }
    // Disjoint splits: the smallest member names each.
    const int color = *std::min_element(ranks.begin(), ranks.end());
    const int key = static_cast<int>(at - ranks.begin());
    swy_comm_t comm = splitComm(color, key);
    auto options = c10::make_intrusive<Options>(*options_);
    if (opts) {
      options->timeout = opts->timeout;
      if (auto* ours = dynamic_cast<Options*>(opts.get())) {
        options->config = ours->config;
      }
    }
    auto backend = c10::make_intrusive<SwitchyardBackend>(
        comm, key, static_cast<int>(ranks.size()), options);
    backend->split_ = true;
    return backend;
  }

  // The split of a rank that joins no new group (torch calls it on the
  // default group's backend for new_group's non-members when it split the
  // members' group off it).
  void performNocolorSplit() {
    splitComm(SWY_SPLIT_NOCOLOR, 0);
  }

  void abort() override {
    requestAbort("aborted by the caller");
    shutdown();
  }

  // Lets the outstanding ops finish (or fail: a dead peer, the group's
  // timeout or the library's SWY_TIMEOUT_S ends them), then destroys the
  // communicator; after a failure the peers may never arrive at a
  // collective destroy, so abort. Runs without the GIL (the delivery
  // thread may need it to finish the last Works). Idempotent.
  void shutdown() override {
    if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release no_gil;
      shutdownNoGil();
    } else {
      shutdownNoGil();
    }
  }

  // The number of ops posted on this group: the same on every rank while
  // the ranks agree (torch compares them to find a desynchronized rank).
  uint64_t getSequenceNumberForGroup() override {
    return seq_.load();
  }

  void setSequenceNumberForGroup() override {}  // counts from 0 anyway

  // Whether the communicator was split off a parent's (else it made its
  // own rendezvous).
  bool madeBySplit() const {
    return split_;
  }

  // A setting in effect on the group's engine (swy_comm_query).
  std::string query(const std::string& name) {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    TORCH_CHECK(comm_ != nullptr, "switchyard: query: the group was aborted");
    char value[256] = "";
    swy_status_t status = swy_comm_query(comm_, name.c_str(), value,
                                         sizeof value);
    TORCH_CHECK(status == SWY_OK, "switchyard: query(", name, ") failed: ",
                swy_status_string(status), ": ", swy_last_error(comm_));
    return value;
  }

  // The communicator, for the MoE exchanges (moe.hpp); NULL once the
  // group was aborted.
  swy_comm_t liveComm() {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    return comm_;
  }

  void startCoalescing() override {
    TORCH_CHECK(!coalescing_, "switchyard: startCoalescing: this group is "
                "already coalescing");
    swy_status_t status = swy_group_start();
    TORCH_CHECK(status == SWY_OK, "switchyard: startCoalescing: "
                "swy_group_start failed: ", swy_status_string(status), ": ",
                swy_last_error(nullptr));
    coalescing_ = true;
  }

  // Posts the ops since startCoalescing together (swy_group_end) and
  // returns one Work that completes when all of them have.
  c10::intrusive_ptr<c10d::Work> endCoalescing() override {
    TORCH_CHECK(coalescing_, "switchyard: endCoalescing without "
                "startCoalescing");
    coalescing_ = false;
    std::vector<WorkPtr> members = std::move(coalesced_);
    coalesced_.clear();
    swy_status_t status;
    std::string detail;
    {
      std::lock_guard<std::mutex> lock(comm_mutex_);
      status = swy_group_end();
      if (status != SWY_OK) {
        detail = swy_last_error(comm_);
      }
    }
    std::vector<at::Tensor> outputs;
    for (const auto& m : members) {
      for (const auto& t : m->result()) {
        outputs.push_back(t);
      }
    }
    auto whole = c10::make_intrusive<SwitchyardWork>(
        rank_, c10d::OpType::COALESCED, "coalesced ops", outputs);
    whole->timeout = resolveTimeout(c10d::kUnsetTimeout);
    whole->deadline = std::chrono::steady_clock::now() + whole->timeout;
    whole->members_pending = static_cast<int>(members.size());
#ifdef SWY_TORCH_CUDA
    // Members on a CUDA device were posted on one stream: the last one's
    // event covers them all.
    for (const auto& m : members) {
      if (m->cuda_done) {
        whole->cuda_done = m->cuda_done;
      }
    }
    if (whole->cuda_done) {
      whole->useDevice(
          c10::Device(c10::kCUDA, whole->cuda_done->device_index()));
    }
#endif
    for (auto& m : members) {
      m->coalesced_into = whole.get();
    }
    if (status != SWY_OK) {
      requestAbort(std::string("coalesced ops: ") + detail);
    }
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      for (auto& m : members) {
        posted_.push_back(std::move(m));
      }
      posted_.push_back(whole);
    }
    queue_cv_.notify_one();
    return whole;
  }

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts) override {
    const OpTimeout op_timeout(opts.timeout);
    const char* op = "broadcast";
    checkOneTensor(tensors, op, "tensors");
    checkRoot(opts.rootRank, op);
    TORCH_CHECK(opts.rootTensor == 0, "switchyard: ", op,
                ": rootTensor must be 0, got ", opts.rootTensor);
    at::Tensor user = tensors[0];
    at::Tensor buf = contiguousFor(user);
    auto work = newWork(c10d::OpType::BROADCAST, op, tensors, {buf});
    if (!buf.is_same(user)) {
      work->on_success = [user, buf]() mutable { user.copy_(buf); };
    }
    const Movement move = movement(buf.scalar_type());
    return post(work, [&](const swy_op_attr_t* attr, swy_request_t* req) {
      return swy_broadcast(buf.data_ptr(), tensorBytes(buf) / move.unit,
                           move.dtype, static_cast<int>(opts.rootRank), comm_,
                           attr, req);
    });
  }

  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts) override {
    const OpTimeout op_timeout(opts.timeout);
    const char* op = "allreduce";
    checkOneTensor(tensors, op, "tensors");
    return postAllreduce(c10d::OpType::ALLREDUCE, op, tensors, tensors[0],
                         opts.reduceOp, nullptr);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts) override {
    const OpTimeout op_timeout(opts.timeout);
    const char* op = "allreduce_coalesced";
    TORCH_CHECK(!tensors.empty(), "switchyard: ", op, ": tensors is empty");
    for (const auto& t : tensors) {
      checkTensor(t, op, "tensors");
      TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(), "switchyard: ",
                  op, ": tensors mix dtypes ", tensors[0].scalar_type(),
                  " and ", t.scalar_type());
    }
    // One reduction over the concatenation, then each slice back.
    std::vector<at::Tensor> flat_parts;
    for (const auto& t : tensors) {
      flat_parts.push_back(t.reshape({-1}));
    }
    at::Tensor flat = at::cat(flat_parts);
    std::vector<at::Tensor> users = tensors;
    auto copy_back = [users, flat]() mutable {
      int64_t at_elem = 0;
      for (auto& t : users) {
        t.copy_(flat.narrow(0, at_elem, t.numel()).view(t.sizes()));
        at_elem += t.numel();
      }
    };
    return postAllreduce(c10d::OpType::ALLREDUCE_COALESCED, op, tensors, flat,
                         opts.reduceOp, copy_back);
  }

  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts) override {
    const OpTimeout op_timeout(opts.timeout);
    const char* op = "reduce";
    checkOneTensor(tensors, op, "tensors");
    checkRoot(opts.rootRank, op);
    TORCH_CHECK(opts.rootTensor == 0, "switchyard: ", op,
                ": rootTensor must be 0, got ", opts.rootTensor);
    const swy_redop_t redop = toRedop(opts.reduceOp, op);
    size_t per_element = 1;
    const swy_dtype_t dtype =
        reduceDtype(tensors[0].scalar_type(), redop, op, &per_element);
    const int root = static_cast<int>(opts.rootRank);
    at::Tensor user = tensors[0];
    at::Tensor buf = contiguousFor(user);
    auto work = newWork(c10d::OpType::REDUCE, op, tensors, {buf});
    if (root == rank_ && !buf.is_same(user)) {
      work->on_success = [user, buf]() mutable { user.copy_(buf); };
    }
    const size_t count = static_cast<size_t>(buf.numel()) * per_element;
    // In place on the root; the other ranks' tensors are left as they were.
    return post(work, [&](const swy_op_attr_t* attr, swy_request_t* req) {
      return swy_reduce(buf.data_ptr(),
                        root == rank_ ? buf.data_ptr() : nullptr, count,
                        dtype, redop, root, comm_, attr, req);
    });
  }

  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    const OpTimeout op_timeout(opts.timeout);
    const char* op = "allgather";
    checkOneTensor(inputs, op, "input_tensors");
    TORCH_CHECK(outputs.size() == 1, "switchyard: ", op,
                ": output_tensors must hold one list per process, got ",
                outputs.size());
    checkGatherList(outputs[0], inputs[0], op, "output_tensors[0]");
    at::Tensor in = contiguousFor(inputs[0]);
    at::Tensor gathered = at::empty({size_ * in.numel()}, in.options());
    std::vector<at::Tensor> users = outputs[0];
    auto work = newWork(c10d::OpType::ALLGATHER, op, users, {in, gathered});
    work->on_success = [users, gathered]() mutable {
      const int64_t n = users.empty() ? 0 : users[0].numel();
      for (size_t r = 0; r < users.size(); ++r) {
        users[r].copy_(gathered.narrow(0, r * n, n).view(users[r].sizes()));
      }
    };
    const Movement move = movement(in.scalar_type());
    return post(work, [&](const swy_op_attr_t* attr, swy_request_t* req) {
      return swy_allgather(in.data_ptr(), gathered.data_ptr(),
                           tensorBytes(in) / move.unit, move.dtype, comm_,
                           attr, req);
    });
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts) override {
    const OpTimeout op_timeout(opts.timeout);
    const char* op = "_allgather_base";
    checkTensor(output, op, "output_tensor");
    checkTensor(input, op, "input_tensor");
    checkSameDtype(output, input, op);
    TORCH_CHECK(output.numel() == size_ * input.numel(), "switchyard: ", op,
                ": output has ", output.numel(), " elements, expected ",
                size_, " x ", input.numel());
    at::Tensor in = contiguousFor(input);
    at::Tensor out = contiguousFor(output);
    auto work = newWork(c10d::OpType::_ALLGATHER_BASE, op, {output}, {in, out});
    if (!out.is_same(output)) {
      at::Tensor user = output;
      work->on_success = [user, out]() mutable { user.copy_(out); };
    }
    const Movement move = movement(in.scalar_type());
    return post(work, [&](const swy_op_attr_t* attr, swy_request_t* req) {
      return swy_allgather(in.data_ptr(), out.data_ptr(),
                           tensorBytes(in) / move.unit, move.dtype, comm_,
                           attr, req);
    });
  }

  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    const OpTimeout op_timeout(opts.timeout);
    const char* op = "allgather_coalesced";
    TORCH_CHECK(output_lists.size() == static_cast<size_t>(size_),
                "switchyard: ", op, ": output_tensor_lists must hold ", size_,
                " lists (one per rank), got ", output_lists.size());
    for (const auto& list : output_lists) {
      TORCH_CHECK(list.size() == inputs.size(), "switchyard: ", op,
                  ": each output list must hold ", inputs.size(),
                  " tensors (as input_tensor_list), got ", list.size());
      for (size_t i = 0; i < list.size(); ++i) {
        checkTensor(list[i], op, "output_tensor_lists");
        checkSameShape(list[i], inputs[i], op);
      }
    }
    // Each rank's inputs as one run of bytes; one allgather of the runs.
    std::vector<at::Tensor> byte_parts;
    for (const auto& t : inputs) {
      checkTensor(t, op, "input_tensor_list");
      byte_parts.push_back(
          contiguousFor(t).reshape({-1}).view(at::kByte));
    }
    at::Tensor packed = byte_parts.empty()
                            ? at::empty({0}, at::kByte)
                            : at::cat(byte_parts);
    at::Tensor gathered = at::empty({size_ * packed.numel()}, at::kByte);
    std::vector<at::Tensor> flat_outputs;
    for (const auto& list : output_lists) {
      flat_outputs.insert(flat_outputs.end(), list.begin(), list.end());
    }
    auto work = newWork(c10d::OpType::ALLGATHER_COALESCED, op, flat_outputs,
                        {packed, gathered});
    std::vector<std::vector<at::Tensor>> users = output_lists;
    const int64_t run = packed.numel();
    work->on_success = [users, gathered, run]() mutable {
      for (size_t r = 0; r < users.size(); ++r) {
        int64_t at_byte = r * run;
        for (auto& t : users[r]) {
          const int64_t n = tensorBytes(t);
          t.copy_(gathered.narrow(0, at_byte, n)
                      .view(t.scalar_type())
                      .view(t.sizes()));
          at_byte += n;
        }
      }
    };
    return post(work, [&](const swy_op_attr_t* attr, swy_request_t* req) {
      return swy_allgather(packed.data_ptr(), gathered.data_ptr(),
                           static_cast<size_t>(run), SWY_UINT8, comm_, attr,
                           req);
    });
  }

  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts) override {
    const OpTimeout op_timeout(opts.timeout);
    const char* op = "gather";
    checkOneTensor(inputs, op, "input_tensors");
    checkRoot(opts.rootRank, op);
    const int root = static_cast<int>(opts.rootRank);
    std::vector<at::Tensor> users;
    if (root == rank_) {
      TORCH_CHECK(outputs.size() == 1, "switchyard: ", op,
                  ": the root's output_tensors must hold one list, got ",
                  outputs.size());
      checkGatherList(outputs[0], inputs[0], op, "output_tensors[0]");
      users = outputs[0];
    } else {
      TORCH_CHECK(outputs.empty() || (outputs.size() == 1 &&
                                      outputs[0].empty()),
                  "switchyard: ", op, ": only the root (rank ", root,
                  ") passes output tensors; rank ", rank_, " passed some");
    }
    at::Tensor in = contiguousFor(inputs[0]);
    at::Tensor gathered = root == rank_
                              ? at::empty({size_ * in.numel()}, in.options())
                              : at::empty({0}, in.options());
    auto work = newWork(c10d::OpType::GATHER, op, users, {in, gathered});
    if (root == rank_) {
      work->on_success = [users, gathered]() mutable {
        const int64_t n = users.empty() ? 0 : users[0].numel();
        for (size_t r = 0; r < users.size(); ++r) {
          users[r].copy_(gathered.narrow(0, r * n, n).view(users[r].sizes()));
        }
      };
    }
    const Movement move = movement(in.scalar_type());
    return post(work, [&](const swy_op_attr_t* attr, swy_request_t* req) {
      return swy_gather(in.data_ptr(),
                        root == rank_ ? gathered.data_ptr() : nullptr,
                        tensorBytes(in) / move.unit, move.dtype, root, comm_,
                        attr, req);
    });
  }

  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts) override {
    const OpTimeout op_timeout(opts.timeout);
    const char* op = "scatter";
    checkOneTensor(outputs, op, "output_tensors");
    checkRoot(opts.rootRank, op);
    const int root = static_cast<int>(opts.rootRank);
    at::Tensor packed = at::empty({0}, outputs[0].options());
    if (root == rank_) {
      TORCH_CHECK(inputs.size() == 1, "switchyard: ", op,
                  ": the root's input_tensors must hold one list, got ",
                  inputs.size());
      checkGatherList(inputs[0], outputs[0], op, "input_tensors[0]");
      std::vector<at::Tensor> parts;
      for (const auto& t : inputs[0]) {
        parts.push_back(t.reshape({-1}));
      }
      packed = at::cat(parts);
    } else {
      TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                  "switchyard: ", op, ": only the root (rank ", root,
                  ") passes input tensors; rank ", rank_, " passed some");
    }
    at::Tensor user = outputs[0];
    at::Tensor out = contiguousFor(user);
    auto work = newWork(c10d::OpType::SCATTER, op, outputs, {packed, out});
    if (!out.is_same(user)) {
      work->on_success = [user, out]() mutable { user.copy_(out); };
    }
    const Movement move = movement(out.scalar_type());
    return post(work, [&](const swy_op_attr_t* attr, swy_request_t* req) {
      return swy_scatter(root == rank_ ? packed.data_ptr() : nullptr,
                         out.data_ptr(), tensorBytes(out) / move.unit,
                         move.dtype, root, comm_, attr, req);
    });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    const OpTimeout op_timeout(opts.timeout);
    const char* op = "reduce_scatter";
    checkOneTensor(outputs, op, "output_tensors");
    TORCH_CHECK(inputs.size() == 1, "switchyard: ", op,
                ": input_tensors must hold one list per process, got ",
                inputs.size());
    checkGatherList(inputs[0], outputs[0], op, "input_tensors[0]");
    std::vector<at::Tensor> parts;
    for (const auto& t : inputs[0]) {
      parts.push_back(t.reshape({-1}));
    }
    return postReduceScatter(c10d::OpType::REDUCE_SCATTER, op, outputs,
                             at::cat(parts), outputs[0], opts.reduceOp);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts) override {
    const OpTimeout op_timeout(opts.timeout);
    const char* op = "_reduce_scatter_base";
    checkTensor(output, op, "output_tensor");
    checkTensor(input, op, "input_tensor");
    checkSameDtype(output, input, op);
    TORCH_CHECK(input.numel() == size_ * output.numel(), "switchyard: ", op,
                ": input has ", input.numel(), " elements, expected ", size_,
                " x ", output.numel());
    std::vector<at::Tensor> users = {output};
    return postReduceScatter(c10d::OpType::_REDUCE_SCATTER_BASE, op, users,
                             contiguousFor(input), output, opts.reduceOp);
  }

  // swy_alltoallv of byte counts and displacements (alltoall and
  // alltoall_base), converted to the elements of dtype's movement.
  c10::intrusive_ptr<c10d::Work> postAlltoallv(
      const WorkPtr& work, at::ScalarType dtype,
      const at::Tensor& send, const at::Tensor& recv,
      std::vector<size_t>& send_counts, std::vector<size_t>& send_displs,
      std::vector<size_t>& recv_counts, std::vector<size_t>& recv_displs) {
    const Movement move = movement(dtype);
    for (auto* v : {&send_counts, &send_displs, &recv_counts, &recv_displs}) {
      for (auto& bytes : *v) {
        bytes /= move.unit;
      }
    }
    return post(work, [&](const swy_op_attr_t* attr, swy_request_t* req) {
      return swy_alltoallv(send.data_ptr(), send_counts.data(),
                           send_displs.data(), recv.data_ptr(),
                           recv_counts.data(), recv_displs.data(), move.dtype,
                           comm_, attr, req);
    });
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input,
      std::vector<int64_t>& output_splits, std::vector<int64_t>& input_splits,
      const c10d::AllToAllOptions& opts) override {
    const OpTimeout op_timeout(opts.timeout);
    const char* op = "alltoall_base";
    checkTensor(output, op, "output");
    checkTensor(input, op, "input");
    checkSameDtype(output, input, op);
    std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;
    splitBytes(input, input_splits, "input_split_sizes", op, &send_counts,
               &send_displs);
    splitBytes(output, output_splits, "output_split_sizes", op, &recv_counts,
               &recv_displs);
    at::Tensor in = contiguousFor(input);
    at::Tensor out = contiguousFor(output);
    auto work = newWork(c10d::OpType::ALLTOALL_BASE, op, {output}, {in, out});
    if (!out.is_same(output)) {
      at::Tensor user = output;
      work->on_success = [user, out]() mutable { user.copy_(out); };
    }
    return postAlltoallv(work, in.scalar_type(), in, out, send_counts,
                         send_displs, recv_counts, recv_displs);
  }

  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& opts) override {
    const OpTimeout op_timeout(opts.timeout);
    const char* op = "alltoall";
    TORCH_CHECK(outputs.size() == static_cast<size_t>(size_) &&
                    inputs.size() == static_cast<size_t>(size_),
                "switchyard: ", op, ": expected ", size_,
                " input and output tensors (one per rank), got ",
                inputs.size(), " and ", outputs.size());
    std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;
    std::vector<at::Tensor> send_parts;
    size_t send_total = 0, recv_total = 0;
    for (int r = 0; r < size_; ++r) {
      checkTensor(inputs[r], op, "input_tensor_list");
      checkTensor(outputs[r], op, "output_tensor_list");
      TORCH_CHECK(inputs[r].scalar_type() == inputs[0].scalar_type() &&
                      outputs[r].scalar_type() == inputs[0].scalar_type(),
                  "switchyard: ", op, ": tensors mix dtypes ",
                  inputs[0].scalar_type(), " and ",
                  inputs[r].scalar_type(), "/", outputs[r].scalar_type());
      send_parts.push_back(
          contiguousFor(inputs[r]).reshape({-1}).view(at::kByte));
      send_counts.push_back(tensorBytes(inputs[r]));
      send_displs.push_back(send_total);
      send_total += send_counts.back();
      recv_counts.push_back(tensorBytes(outputs[r]));
      recv_displs.push_back(recv_total);
      recv_total += recv_counts.back();
    }
    at::Tensor packed = at::cat(send_parts);
    at::Tensor received =
        at::empty({static_cast<int64_t>(recv_total)}, at::kByte);
    auto work =
        newWork(c10d::OpType::ALLTOALL, op, outputs, {packed, received});
    std::vector<at::Tensor> users = outputs;
    work->on_success = [users, received, recv_displs]() mutable {
      for (size_t r = 0; r < users.size(); ++r) {
        auto& t = users[r];
        t.copy_(received.narrow(0, recv_displs[r], tensorBytes(t))
                    .view(t.scalar_type())
                    .view(t.sizes()));
      }
    };
    return postAlltoallv(work, inputs[0].scalar_type(), packed, received,
                         send_counts, send_displs, recv_counts, recv_displs);
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors,
                                      int dst, int tag) override {
    const char* op = "send";
    checkOneTensor(tensors, op, "tensor");
    checkPeer(dst, tag, op);
    at::Tensor buf = contiguousFor(tensors[0]);
    auto work = newWork(c10d::OpType::SEND, op, tensors, {buf});
    const Movement move = movement(buf.scalar_type());
    return post(work, [&](const swy_op_attr_t* attr, swy_request_t* req) {
      return swy_send_tagged(buf.data_ptr(), tensorBytes(buf) / move.unit,
                             move.dtype, dst, tag, comm_, attr, req);
    });
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors,
                                      int src, int tag) override {
    checkPeer(src, tag, "recv");
    return postRecv(tensors, src, tag, c10d::OpType::RECV, "recv");
  }

  // The first send to arrive from any rank (swy_recv from SWY_ANY_SOURCE);
  // the Work's sourceRank() says whose it was.
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override {
    TORCH_CHECK(tag >= 0, "switchyard: recvAnysource: tag ", tag,
                " is negative");
    return postRecv(tensors, SWY_ANY_SOURCE, tag,
                    c10d::OpType::RECVANYSOURCE, "recvAnysource");
  }

  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts) override {
    return postBarrier("barrier", opts.timeout);
  }

  // One swy_allgather per pair, posted together (swy_group_start/end).
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    const OpTimeout op_timeout(opts.timeout);
    TORCH_CHECK(outputs.size() == inputs.size(), "switchyard: "
                "allgather_into_tensor_coalesced: ", outputs.size(),
                " outputs for ", inputs.size(), " inputs");
    return coalesce([&] {
      for (size_t i = 0; i < inputs.size(); ++i) {
        _allgather_base(outputs[i], inputs[i], opts);
      }
    });
  }

  // One swy_reduce_scatter per pair, posted together.
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    const OpTimeout op_timeout(opts.timeout);
    TORCH_CHECK(outputs.size() == inputs.size(), "switchyard: "
                "reduce_scatter_tensor_coalesced: ", outputs.size(),
                " outputs for ", inputs.size(), " inputs");
    return coalesce([&] {
      for (size_t i = 0; i < inputs.size(); ++i) {
        _reduce_scatter_base(outputs[i], inputs[i], opts);
      }
    });
  }

  // A barrier that the caller waits for within opts.timeout (the group's
  // when unset); past it the barrier fails on this rank and the group is
  // aborted, so the ranks that did arrive fail too. It cannot name the
  // ranks that did not arrive (gloo's can).
  void monitoredBarrier(const c10d::BarrierOptions& opts,
                        bool /*waitAllRanks*/) override {
    auto work = postBarrier("monitoredBarrier", opts.timeout);
    work->wait();
  }

 private:
  // Runs `post_ops` between startCoalescing and endCoalescing.
  c10::intrusive_ptr<c10d::Work> coalesce(
      const std::function<void()>& post_ops) {
    startCoalescing();
    try {
      post_ops();
    } catch (...) {
      endCoalescing();
      throw;
    }
    return endCoalescing();
  }

  c10::intrusive_ptr<c10d::Work> postBarrier(
      const char* op, std::chrono::milliseconds timeout) {
    // swy_barrier() blocks; a one-element allreduce is the same rendezvous
    // without blocking the caller.
    at::Tensor token = at::zeros({1}, at::kInt);
    auto work = newWork(c10d::OpType::BARRIER, op, {}, {token}, timeout);
    return post(work, [&](const swy_op_attr_t* attr, swy_request_t* req) {
      return swy_allreduce(token.data_ptr(), token.data_ptr(), 1, SWY_INT32,
                           SWY_SUM, comm_, attr, req);
    });
  }

  void checkRoot(int64_t root, const char* op) const {
    TORCH_CHECK(root >= 0 && root < size_, "switchyard: ", op, ": root rank ",
                root, " is outside 0..", size_ - 1);
  }

  c10::intrusive_ptr<c10d::Work> postRecv(std::vector<at::Tensor>& tensors,
                                          int src, int tag, c10d::OpType type,
                                          const char* op) {
    checkOneTensor(tensors, op, "tensor");
    at::Tensor user = tensors[0];
    at::Tensor buf = contiguousFor(user);
    auto work = newWork(type, op, tensors, {buf});
    work->source = src;
    if (!buf.is_same(user)) {
      work->on_success = [user, buf]() mutable { user.copy_(buf); };
    }
    const Movement move = movement(buf.scalar_type());
    return post(work, [&](const swy_op_attr_t* attr, swy_request_t* req) {
      return swy_recv_tagged(buf.data_ptr(), tensorBytes(buf) / move.unit,
                             move.dtype, src, tag, comm_, attr, req);
    });
  }

  void checkPeer(int peer, int tag, const char* op) const {
    TORCH_CHECK(peer >= 0 && peer < size_ && peer != rank_, "switchyard: ",
                op, ": peer rank ", peer, " is not another rank of 0..",
                size_ - 1, " (this is rank ", rank_, ")");
    // Tags are matched on, as gloo's (SWY_P2P_MATCH=tag, set at init).
    TORCH_CHECK(tag >= 0, "switchyard: ", op, ": tag ", tag,
                " is negative");
  }

  static void checkSameDtype(const at::Tensor& out, const at::Tensor& in,
                             const char* op) {
    TORCH_CHECK(out.scalar_type() == in.scalar_type(), "switchyard: ", op,
                ": output dtype ", out.scalar_type(),
                " differs from input dtype ", in.scalar_type());
  }

  static void checkSameShape(const at::Tensor& out, const at::Tensor& in,
                             const char* op) {
    checkSameDtype(out, in, op);
    TORCH_CHECK(out.numel() == in.numel(), "switchyard: ", op, ": output has ",
                out.numel(), " elements, input ", in.numel());
  }

  void checkGatherList(const std::vector<at::Tensor>& list,
                       const at::Tensor& in, const char* op,
                       const char* arg) const {
    TORCH_CHECK(list.size() == static_cast<size_t>(size_), "switchyard: ", op,
                ": ", arg, " must hold ", size_,
                " tensors (one per rank), got ", list.size());
    for (const auto& t : list) {
      checkTensor(t, op, arg);
      checkSameShape(t, in, op);
    }
  }

  // Byte counts and displacements of an all-to-all's blocks: split_sizes
  // counts rows of dimension 0; empty means equal blocks.
  void splitBytes(const at::Tensor& t, const std::vector<int64_t>& splits,
                  const char* arg, const char* op, std::vector<size_t>* counts,
                  std::vector<size_t>* displs) const {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const size_t row_bytes =
        rows == 0 ? 0 : tensorBytes(t) / static_cast<size_t>(rows);
    std::vector<int64_t> row_counts = splits;
    if (row_counts.empty()) {
      TORCH_CHECK(rows % size_ == 0, "switchyard: ", op, ": ", t.size(0),
                  " rows do not split evenly over ", size_,
                  " ranks; pass ", arg);
      row_counts.assign(size_, rows / size_);
    }
    TORCH_CHECK(row_counts.size() == static_cast<size_t>(size_),
                "switchyard: ", op, ": ", arg, " has ", row_counts.size(),
                " entries, expected ", size_);
    int64_t total = 0;
    for (int64_t n : row_counts) {
      TORCH_CHECK(n >= 0, "switchyard: ", op, ": ", arg,
                  " holds a negative size ", n);
      counts->push_back(static_cast<size_t>(n) * row_bytes);
      displs->push_back(static_cast<size_t>(total) * row_bytes);
      total += n;
    }
    TORCH_CHECK(total == rows, "switchyard: ", op, ": ", arg, " sums to ",
                total, " rows but the tensor has ", rows);
  }

  c10::intrusive_ptr<c10d::Work> postAllreduce(
      c10d::OpType type, const char* op, std::vector<at::Tensor>& users,
      const at::Tensor& target, const c10d::ReduceOp& reduce_op,
      std::function<void()> copy_back) {
    const swy_redop_t redop = toRedop(reduce_op, op);
    size_t per_element = 1;
    const swy_dtype_t dtype =
        reduceDtype(target.scalar_type(), redop, op, &per_element);
    at::Tensor buf = contiguousFor(target);
    auto work = newWork(type, op, users, {buf});
    if (copy_back) {
      work->on_success = std::move(copy_back);
    } else if (!buf.is_same(target)) {
      at::Tensor user = target;
      work->on_success = [user, buf]() mutable { user.copy_(buf); };
    }
    const size_t count = static_cast<size_t>(buf.numel()) * per_element;
    return post(work, [&](const swy_op_attr_t* attr, swy_request_t* req) {
      return swy_allreduce(buf.data_ptr(), buf.data_ptr(), count, dtype, redop,
                           comm_, attr, req);
    });
  }

  // Reduces `packed` (size_ blocks of target's size, contiguous) and
  // leaves this rank's block in target.
  c10::intrusive_ptr<c10d::Work> postReduceScatter(
      c10d::OpType type, const char* op, std::vector<at::Tensor>& users,
      const at::Tensor& packed, const at::Tensor& target,
      const c10d::ReduceOp& reduce_op) {
    const swy_redop_t redop = toRedop(reduce_op, op);
    size_t per_element = 1;
    const swy_dtype_t dtype =
        reduceDtype(target.scalar_type(), redop, op, &per_element);
    at::Tensor out = contiguousFor(target);
    auto work = newWork(type, op, users, {packed, out});
    if (!out.is_same(target)) {
      at::Tensor user = target;
      work->on_success = [user, out]() mutable { user.copy_(out); };
    }
    const size_t count = static_cast<size_t>(out.numel()) * per_element;
    return post(work, [&](const swy_op_attr_t* attr, swy_request_t* req) {
      return swy_reduce_scatter(packed.data_ptr(), out.data_ptr(), count,
                                dtype, redop, comm_, attr, req);
    });
  }

  // torch's per-op timeout when the caller gave one, else the group's.
  std::chrono::milliseconds resolveTimeout(std::chrono::milliseconds t) const {
    return t == c10d::kUnsetTimeout ? options_->timeout : t;
  }

  WorkPtr newWork(c10d::OpType type, const char* op,
                  std::vector<at::Tensor> outputs,
                  std::vector<at::Tensor> buffers,
                  std::chrono::milliseconds timeout = tls_op_timeout) {
    auto work = c10::make_intrusive<SwitchyardWork>(rank_, type, op,
                                                    std::move(outputs));
    work->buffers = std::move(buffers);
    work->timeout = resolveTimeout(timeout);
    work->deadline = std::chrono::steady_clock::now() + work->timeout;
    ++seq_;
    return work;
  }

  c10::intrusive_ptr<c10d::Work> post(
      const WorkPtr& work,
      const std::function<swy_status_t(const swy_op_attr_t*, swy_request_t*)>&
          start) {
    swy_op_attr_t attr_storage;
    const swy_op_attr_t* attr = scopeAttr(&attr_storage);
#ifdef SWY_TORCH_CUDA
    // CUDA tensors: the op goes to the library's device path on torch's
    // current stream of their device.
    std::optional<c10::cuda::CUDAStream> stream;
    std::optional<c10::cuda::CUDAGuard> device_guard;
    const std::optional<c10::Device> device = opDevice(*work);
    if (device) {
      device_guard.emplace(*device);
      stream = c10::cuda::getCurrentCUDAStream(device->index());
      if (attr == nullptr) {
        attr_storage = SWY_OP_ATTR_INIT;
      }
      attr_storage.stream = stream->stream();
      attr = &attr_storage;
    }
#endif
    swy_request_t request = nullptr;
    swy_status_t status = SWY_ERR_ABORTED;
    std::string detail;
    {
      std::lock_guard<std::mutex> lock(comm_mutex_);
      if (comm_ != nullptr) {
        status = start(attr, &request);
        if (status != SWY_OK) {
          detail = swy_last_error(comm_);
        }
      } else {
        std::lock_guard<std::mutex> queue_lock(queue_mutex_);
        detail = "the group was aborted after an earlier failure: " +
                 first_error_;
      }
    }
    if (status != SWY_OK) {
      // The peers posted this op, or will: they would wait for this rank
      // until the timeout. Aborting tells them now.
      requestAbort(std::string(work->opname_) + ": " + detail);
      TORCH_CHECK(false, "switchyard: ", work->opname_, " failed: ",
                  swy_status_string(status), ": ", detail);
    }
    work->request = request;
#ifdef SWY_TORCH_CUDA
    if (stream) {
      // The copy-back is queued on the stream behind the op (not run at
      // completion on the delivery thread); the event marks both.
      if (work->on_success) {
        work->on_success();
        work->on_success = nullptr;
      }
      work->useDevice(stream->device());
      work->cuda_done = std::make_shared<at::cuda::CUDAEvent>();
      work->cuda_done->record(*stream);
    }
#endif
    if (coalescing_) {
      // Tested once endCoalescing posted the group (swy_group_end).
      coalesced_.push_back(work);
      return work;
    }
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      posted_.push_back(work);
    }
    queue_cv_.notify_one();
    return work;
  }

#ifdef SWY_TORCH_CUDA
  // The CUDA device of an op's tensors, or none for CPU tensors; an op
  // must not mix them (its temporaries follow its inputs' device, except
  // those of the list forms that pack bytes on the CPU: those ops take CPU
  // tensors only).
  static std::optional<c10::Device> opDevice(const SwitchyardWork& work) {
    std::optional<c10::Device> device;
    bool cpu = false;
    for (const auto& t : work.buffers) {
      if (!t.defined()) {
        continue;
      }
      if (t.device().is_cuda()) {
        TORCH_CHECK(!device || *device == t.device(), "switchyard: ",
                    work.opname_, ": tensors on ", *device, " and ",
                    t.device());
        device = t.device();
      } else {
        cpu = true;
      }
    }
    TORCH_CHECK(!(device && cpu), "switchyard: ", work.opname_,
                ": mixes CPU and CUDA tensors (", work.opname_,
                " takes CUDA tensors only where all of its tensors are)");
    return device;
  }
#endif

  // Aborts the communicator once this rank's outstanding ops have ended
  // (their requests must not outlive it); the completion thread does it.
  void requestAbort(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      if (!abort_requested_) {
        abort_requested_ = true;
        first_error_ = why;
      }
    }
    failed_ = true;
    queue_cv_.notify_one();
  }

  void abortNow() {
    {
      std::lock_guard<std::mutex> lock(comm_mutex_);
      if (comm_ != nullptr) {
        swy_comm_abort(comm_);
        comm_ = nullptr;
      }
    }
    std::lock_guard<std::mutex> lock(queue_mutex_);
    aborted_ = true;
  }

  // Hands a finished Work to the delivery thread (work.hpp), and counts it
  // towards the coalesced Work it belongs to, which follows it there once
  // its last member ended.
  static void deliver(WorkPtr&& work, swy_status_t status,
                      std::string detail) {
    SwitchyardWork* whole = work->coalesced_into;
    if (whole != nullptr) {
      if (status != SWY_OK && whole->members_status == SWY_OK) {
        whole->members_status = status;
        whole->members_detail = std::string(work->opname_) + ": " + detail;
      }
      --whole->members_pending;
    }
    Delivery::instance().push(std::move(work), status, std::move(detail));
  }

  // Tests every outstanding request, newest included, so that an op that
  // the scheduler finishes early (a high-priority all-to-all) completes
  // early. The library has no wait-any: poll, backing off while idle. An
  // op past its timeout fails, and the communicator is aborted so that the
  // peers' ops fail at once too.
  void completionLoop() {
    std::vector<WorkPtr> active;
    auto idle = std::chrono::microseconds(10);
    const auto max_idle = std::chrono::microseconds(1000);
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(queue_mutex_);
        if (active.empty() && abort_requested_ && !aborted_ &&
            posted_.empty()) {
          lock.unlock();
          abortNow();
          lock.lock();
        }
        if (active.empty()) {
          queue_cv_.wait(lock, [this] {
            return stop_ || !posted_.empty() ||
                   (abort_requested_ && !aborted_);
          });
          if (posted_.empty()) {
            if (stop_) {
              return;  // nothing outstanding
            }
            continue;  // an abort to carry out
          }
        }
        while (!posted_.empty()) {
          active.push_back(std::move(posted_.front()));
          posted_.pop_front();
          idle = std::chrono::microseconds(10);
        }
      }
      bool progressed = false;
      const auto now = std::chrono::steady_clock::now();
      for (size_t i = 0; i < active.size();) {
        WorkPtr& work = active[i];
        int done = 0;
        swy_status_t status = SWY_OK;
        std::string detail;
        if (work->request == nullptr) {
          // A coalesced Work: done when its members are.
          done = work->members_pending == 0;
          status = work->members_status;
          detail = work->members_detail;
        } else {
          std::lock_guard<std::mutex> lock(comm_mutex_);
          status = swy_test(work->request, &done);
          if (done && status != SWY_OK) {
            detail = swy_last_error(comm_);
          }
        }
        if (!done) {
          if (now > work->deadline) {
            timeOut(active, *work);
            progressed = true;
            break;
          }
          ++i;
          continue;
        }
        if (work->request != nullptr) {
          if (work->source == SWY_ANY_SOURCE) {
            swy_request_source(work->request, &work->source);
          }
          swy_request_free(work->request);
          work->request = nullptr;
        }
        if (status != SWY_OK) {
          failed_ = true;
          std::lock_guard<std::mutex> lock(queue_mutex_);
          if (first_error_.empty()) {
            first_error_ = std::string(work->opname_) + ": " + detail;
          }
        }
        WorkPtr finished = std::move(work);
        active.erase(active.begin() + i);
        deliver(std::move(finished), status, detail);
        progressed = true;
      }
      if (progressed) {
        idle = std::chrono::microseconds(10);
      } else {
        std::unique_lock<std::mutex> lock(queue_mutex_);
        queue_cv_.wait_for(lock, idle, [this] { return !posted_.empty(); });
        idle = std::min(idle * 2, max_idle);
      }
    }
  }

  // `late` outlived its timeout: every outstanding op of this group fails
  // with the reason, and the communicator is aborted (the peers' ops fail
  // with SWY_ERR_REMOTE). The Works are delivered before the abort, which
  // can take long (a rendezvous root waits for its peers to hear of it);
  // their buffers stay alive until the abort ended, since the library may
  // write into them until then, and are released on the delivery thread.
  // Members of a coalesced Work go first.
  void timeOut(std::vector<WorkPtr>& active, const SwitchyardWork& late) {
    const std::string why =
        std::string(late.opname_) + " did not complete within its timeout of " +
        std::to_string(late.timeout.count()) + " ms";
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      abort_requested_ = true;
      if (first_error_.empty()) {
        first_error_ = why;
      }
      // Ops posted since this loop last looked: on the same communicator.
      while (!posted_.empty()) {
        active.push_back(std::move(posted_.front()));
        posted_.pop_front();
      }
    }
    failed_ = true;
    auto held = c10::make_intrusive<SwitchyardWork>(
        rank_, c10d::OpType::UNKNOWN, "timed-out buffers",
        std::vector<at::Tensor>{});
    for (auto& work : active) {
      if (work->request != nullptr) {
        swy_request_free(work->request);  // released when the abort ends it
        work->request = nullptr;
      }
      for (auto& t : work->buffers) {
        held->buffers.push_back(std::move(t));
      }
      work->buffers.clear();
    }
    std::stable_partition(active.begin(), active.end(), [](const WorkPtr& w) {
      return w->coalesced_into != nullptr;
    });
    for (auto& work : active) {
      deliver(std::move(work), SWY_ERR_TIMEOUT, why);
    }
    active.clear();
    abortNow();
    Delivery::instance().push(std::move(held), SWY_OK, "");
  }

  void shutdownNoGil() {
    std::lock_guard<std::mutex> once(shutdown_mutex_);
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      stop_ = true;
    }
    queue_cv_.notify_one();
    if (completion_thread_.joinable()) {
      completion_thread_.join();
    }
    if (failed_) {
      abortNow();
    } else {
      std::lock_guard<std::mutex> lock(comm_mutex_);
      swy_comm_destroy(comm_);
      comm_ = nullptr;
    }
  }

  // A rendezvous through the group's store: rank 0 puts a unique id there.
  static swy_comm_t rendezvous(const c10::intrusive_ptr<c10d::Store>& store,
                               int rank, int size) {
    static const char* const key = "switchyard/unique_id";
    swy_unique_id_t id;
    if (rank == 0) {
      swy_status_t status = swy_get_unique_id(&id);
      TORCH_CHECK(status == SWY_OK, "switchyard: swy_get_unique_id failed: ",
                  swy_status_string(status), ": ", swy_last_error(nullptr));
      store->set(key, std::vector<uint8_t>(id.bytes, id.bytes + sizeof id));
    } else {
      std::vector<uint8_t> bytes = store->get(key);
      TORCH_CHECK(bytes.size() == sizeof id, "switchyard: the store's ", key,
                  " holds ", bytes.size(), " bytes, expected ", sizeof id);
      std::memcpy(id.bytes, bytes.data(), sizeof id);
    }
    swy_comm_t comm = nullptr;
    swy_status_t status = swy_comm_init_rank(&comm, size, &id, rank);
    TORCH_CHECK(status == SWY_OK, "switchyard: swy_comm_init_rank(rank ",
                rank, " of ", size, ") failed: ", swy_status_string(status),
                ": ", swy_last_error(nullptr));
    return comm;
  }

  // swy_comm_split of this group's communicator; collective over it.
  swy_comm_t splitComm(int color, int key) {
    swy_comm_t comm = liveComm();
    TORCH_CHECK(comm != nullptr, "switchyard: split: the parent group was "
                "aborted");
    swy_comm_t child = nullptr;
    swy_status_t status;
    if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release no_gil;
      status = swy_comm_split(comm, color, key, &child);
    } else {
      status = swy_comm_split(comm, color, key, &child);
    }
    TORCH_CHECK(status == SWY_OK, "switchyard: split: swy_comm_split(",
                color, ", ", key, ") failed: ", swy_status_string(status),
                ": ", swy_last_error(comm));
    return child;
  }

  // The caller's settings (Options.config), then gloo's rule for tags: a
  // receive takes the first send from its source that carries its tag
  // (SWY_P2P_MATCH=tag), unless the environment or the caller chose. The
  // settings are the engine's, which this communicator may share with
  // earlier groups: set while nothing is in flight.
  void configure() {
    for (const auto& [name, value] : options_->config) {
      swy_status_t status =
          swy_comm_configure(comm_, name.c_str(), value.c_str());
      TORCH_CHECK(status == SWY_OK, "switchyard: swy_comm_configure(", name,
                  "=", value, ") failed: ", swy_status_string(status), ": ",
                  swy_last_error(comm_));
    }
    if (std::getenv("SWY_P2P_MATCH") != nullptr ||
        options_->config.count("SWY_P2P_MATCH") != 0) {
      return;
    }
    char mode[16] = "";
    if (swy_comm_query(comm_, "SWY_P2P_MATCH", mode, sizeof mode) ==
            SWY_OK &&
        std::strcmp(mode, "tag") == 0) {
      return;
    }
    swy_status_t status = swy_comm_configure(comm_, "SWY_P2P_MATCH", "tag");
    TORCH_CHECK(status == SWY_OK, "switchyard: swy_comm_configure("
                "SWY_P2P_MATCH=tag) failed: ", swy_status_string(status), ": ",
                swy_last_error(comm_));
  }

  swy_comm_t comm_ = nullptr;
  std::mutex comm_mutex_;
  std::atomic<bool> failed_{false};
  c10::intrusive_ptr<Options> options_;

  // Coalescing (the caller's thread only, as torch's coalescing manager).
  bool coalescing_ = false;
  std::vector<WorkPtr> coalesced_;

  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<WorkPtr> posted_;
  bool stop_ = false;
  bool abort_requested_ = false;
  bool aborted_ = false;
  std::string first_error_;  // what failed the group, for later posts
  std::thread completion_thread_;
  std::mutex shutdown_mutex_;
  bool split_ = false;
  std::atomic<uint64_t> seq_{0};
};

}  // namespace switchyard_torch
