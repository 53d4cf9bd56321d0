// The Work of an op of the switchyard backend, and the delivery thread that
// completes Works. Part of the extension's one translation unit
// (module.cpp).
//
// Lifetimes: a group's completion thread (backend.hpp) only tests requests;
// it never completes a Work and never drops a reference to one. It hands
// each finished Work to the process's delivery thread, which runs the
// copy-back, completes the Work and its Future (so the Future's callbacks,
// DDP's comm hooks among them, run there) and then drops the reference.
// Whatever that drop releases (the Work, its tensors, an autograd graph
// that holds the process group, the group itself) ends on the delivery
// thread, which no group owns or joins: a group destroyed there joins its
// own completion thread, never the thread it runs on.

#pragma once

#include <switchyard/switchyard.h>

#include <torch/csrc/distributed/c10d/Work.hpp>

#ifdef SWY_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>

#include <memory>
#endif

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
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

  std::chrono::milliseconds getTimeout() const override {
    return timeout;
  }

  // A receive's peer; for one from any source, whose send it matched
  // (set before complete(): a waiter reads it after wait()).
  int sourceRank() const override {
    TORCH_CHECK(source >= 0, "switchyard: sourceRank() of ", opname_,
                source == SWY_ANY_SOURCE ? ", which matched no send"
                                         : ", which is not a receive");
    return source;
  }

#ifdef SWY_TORCH_CUDA
  // An op on CUDA tensors is ordered on the stream that was current when it
  // was posted (the library holds that stream until the op completed), as
  // ProcessGroupNCCL's: wait() makes the caller's current stream wait for
  // it and returns without blocking the CPU, unless the op already failed.
  bool wait(std::chrono::milliseconds timeout) override {
    if (!cuda_done) {
      return c10d::Work::wait(timeout);
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (exception_) {
        std::rethrow_exception(exception_);
      }
    }
    cuda_done->block(c10::cuda::getCurrentCUDAStream(cuda_done->device_index()));
    return true;
  }

  void synchronize() override {
    if (cuda_done) {
      cuda_done->block(
          c10::cuda::getCurrentCUDAStream(cuda_done->device_index()));
    }
  }

  // The Future of an op on a CUDA device must know the device (c10's
  // Future checks the tensors it completes with against it). Before the
  // Work is returned: nobody holds the Future yet.
  void useDevice(c10::Device device) {
    future_ = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()),
        std::vector<c10::Device>{device});
  }

  // Recorded on the op's stream right after the post (and the copy-back).
  std::shared_ptr<at::cuda::CUDAEvent> cuda_done;
#endif

  // Ends the op (on the delivery thread): on success runs the copy-back
  // first; then the waiters and the Future's callbacks see the outcome.
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
  std::chrono::milliseconds timeout{0};
  std::chrono::steady_clock::time_point deadline;
  // Coalesced ops (startCoalescing ... endCoalescing): each member points
  // to the Work endCoalescing returned, which completes after all of them
  // (the completion thread alone reads and writes these).
  SwitchyardWork* coalesced_into = nullptr;
  int members_pending = 0;
  swy_status_t members_status = SWY_OK;
  std::string members_detail;

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

using WorkPtr = c10::intrusive_ptr<SwitchyardWork>;

// The process's delivery thread (see the top of this file). Made on first
// use and never destroyed or joined, so that no group's destructor can
// wait for it and no static destructor races it at exit.
class Delivery {
 public:
  static Delivery& instance() {
    static Delivery* const delivery = new Delivery();
    return *delivery;
  }

  // Takes the caller's reference: the caller (a completion thread) keeps
  // none, so the last one cannot drop there.
  void push(WorkPtr&& work, swy_status_t status, std::string detail) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(Item{std::move(work), status, std::move(detail)});
    }
    cv_.notify_one();
  }

 private:
  struct Item {
    WorkPtr work;
    swy_status_t status;
    std::string detail;
  };

  Delivery() {
    std::thread([this] { loop(); }).detach();
  }

  void loop() {
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this] { return !queue_.empty(); });
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      item.work->complete(item.status, item.detail);
      // item's reference drops here, on this thread.
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
};

}  // namespace switchyard_torch
