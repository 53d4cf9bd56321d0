// The Work of an op of the switchyard process group: completed (with its
// Future) by the group's completion thread. Part of the extension's one
// translation unit (module.cpp).

#pragma once

#include <switchyard/switchyard.h>

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace switchyard_torch {

class SwitchyardWork : public c10d::Work {
 public:
  SwitchyardWork(int rank, c10d::OpType type, const char* opname,
                 std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type),
        opname_(opname),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  std::vector<at::Tensor> result() override {
    return outputs_;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return future_;
  }

  // A receive's peer; for one from any source, whose send it matched
  // (set before complete(): a waiter reads it after wait()).
  int sourceRank() const override {
    TORCH_CHECK(source >= 0, "switchyard: sourceRank() of ", opname_,
                source == SWY_ANY_SOURCE ? ", which matched no send"
                                         : ", which is not a receive");
    return source;
  }

  // Ends the op: on success runs the copy-back first; then the waiters and
  // the Future's callbacks (which run on this thread) see the outcome.
  void complete(swy_status_t status, const std::string& detail) {
    std::exception_ptr error;
    if (status == SWY_OK) {
      try {
        if (on_success) {
          on_success();
        }
      } catch (...) {
        error = std::current_exception();
      }
    } else {
      error = std::make_exception_ptr(std::runtime_error(
          std::string("switchyard: ") + opname_ + " failed: " +
          swy_status_string(status) + ": " + detail));
    }
    on_success = nullptr;
    buffers.clear();
    finish(error);
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  }

  const char* opname_;
  swy_request_t request = nullptr;
  int source = -1;  // a receive's peer, or SWY_ANY_SOURCE until matched
  std::function<void()> on_success;  // copy results into the user's tensors
  std::vector<at::Tensor> buffers;   // what the library reads or writes

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

using WorkPtr = c10::intrusive_ptr<SwitchyardWork>;

}  // namespace switchyard_torch
