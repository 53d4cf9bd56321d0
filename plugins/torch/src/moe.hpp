// The exchanges of switchyard.torch.MoE: a plan and a route of moe.h on the
// communicator of a SwitchyardBackend (a "switchyard" group's backend).
// They move rows and nothing else; the gate, the experts and the autograd Functions are Python
// (moe.py). Part of the extension's one translation unit (module.cpp).
//
// Every call here is collective over the group (moe.h) and blocking; it
// runs without the GIL. Rows and gate weights are float32, or float64
// (what gradcheck needs), as the plan's dtype says.

#pragma once

#include <switchyard/moe.h>

#include <memory>
#include <string>
#include <tuple>

#include "backend.hpp"

namespace switchyard_torch {

inline void checkMoeCall(swy_status_t status, const char* call) {
  TORCH_CHECK(status == SWY_OK, "switchyard: ", call, " failed: ",
              swy_status_string(status), ": ", swy_last_error(nullptr));
}

inline at::Tensor checkedRows(const at::Tensor& t, at::ScalarType type,
                              int64_t rows, int64_t cols, const char* call,
                              const char* arg) {
  checkTensor(t, call, arg);
  TORCH_CHECK(t.scalar_type() == type, "switchyard: ", call, ": ", arg,
              " must be ", type, " (the MoE plan's dtype), got ",
              t.scalar_type());
  TORCH_CHECK(t.dim() == 2 && t.size(0) == rows && t.size(1) == cols,
              "switchyard: ", call, ": ", arg, " must be [", rows, ", ", cols,
              "], got ", t.sizes());
  return t.contiguous();
}

class MoeRoute;

class MoePlan : public std::enable_shared_from_this<MoePlan> {
 public:
  // dtype: "float32" or "float64", the rows' and gate weights' type.
  MoePlan(c10::intrusive_ptr<SwitchyardBackend> group,
          int experts_per_rank, int hidden, int top_k,
          double capacity_factor, const std::string& dtype)
      : group_(std::move(group)), hidden_(hidden), top_k_(top_k) {
    TORCH_CHECK(dtype == "float32" || dtype == "float64",
                "switchyard: MoE plan: dtype '", dtype,
                "' is not 'float32' or 'float64'");
    type_ = dtype == "float64" ? at::kDouble : at::kFloat;
    swy_comm_t comm = group_->liveComm();
    TORCH_CHECK(comm != nullptr,
                "switchyard: MoE plan: the group was aborted");
    swy_moe_config_t cfg = SWY_MOE_CONFIG_INIT;
    cfg.experts_per_rank = experts_per_rank;
    cfg.hidden = hidden;
    cfg.dtype = type_ == at::kDouble ? SWY_FLOAT64 : SWY_FLOAT32;
    cfg.top_k = top_k;
    cfg.capacity_factor = capacity_factor;
    swy_status_t status;
    {
      py::gil_scoped_release no_gil;
      status = swy_moe_plan_create(comm, &cfg, &plan_);
    }
    checkMoeCall(status, "swy_moe_plan_create");
  }

  ~MoePlan() {
    swy_moe_plan_destroy(plan_);
  }

  std::shared_ptr<MoeRoute> route(const at::Tensor& topk_idx);

  swy_moe_plan_t plan_ = nullptr;
  // Held so that the communicator outlives the plan.
  c10::intrusive_ptr<SwitchyardBackend> group_;
  int hidden_;
  int top_k_;
  at::ScalarType type_;  // of rows and gate weights
};

// One batch's routing; holds its plan. Used by one thread at a time.
class MoeRoute {
 public:
  MoeRoute(std::shared_ptr<MoePlan> plan, swy_moe_route_t route, int tokens)
      : plan_(std::move(plan)), route_(route), tokens_(tokens) {
    layout_.struct_size = sizeof layout_;
    checkMoeCall(swy_moe_route_layout(route_, &layout_),
                 "swy_moe_route_layout");
  }

  ~MoeRoute() {
    swy_moe_route_destroy(route_);
  }

  int64_t recvRows() const {
    return layout_.recv_rows;
  }

  // Local expert e's rows of the expert-side tensors are
  // [offsets[e], offsets[e+1]).
  std::vector<int64_t> expertOffsets() const {
    return std::vector<int64_t>(
        layout_.expert_offset,
        layout_.expert_offset + layout_.num_local_experts + 1);
  }

  at::Tensor dispatch(const at::Tensor& tokens) {
    const char* call = "MoE dispatch";
    at::Tensor in = checkedRows(tokens, type(), tokens_, hidden(), call,
                                "tokens");
    at::Tensor expert_in = at::empty({recvRows(), hidden()}, type());
    run(call, [&](const swy_op_attr_t* attr) {
      return swy_moe_dispatch(route_, in.data_ptr(), expert_in.data_ptr(),
                              attr, SWY_MOE_BLOCKING);
    });
    return expert_in;
  }

  at::Tensor combine(const at::Tensor& expert_out, const at::Tensor& topk_w) {
    const char* call = "MoE combine";
    at::Tensor out = checkedRows(expert_out, type(), recvRows(), hidden(),
                                 call, "expert_out");
    at::Tensor w = checkedRows(topk_w, type(), tokens_, plan_->top_k_, call,
                               "topk_w");
    at::Tensor tokens_out = at::empty({tokens_, hidden()}, type());
    run(call, [&](const swy_op_attr_t* attr) {
      return swy_moe_combine(route_, out.data_ptr(), w.data_ptr(),
                             tokens_out.data_ptr(), attr);
    });
    return tokens_out;
  }

  std::tuple<at::Tensor, at::Tensor> combineBackward(
      const at::Tensor& grad_tokens_out, const at::Tensor& topk_w) {
    const char* call = "MoE combine backward";
    at::Tensor grad = checkedRows(grad_tokens_out, type(), tokens_, hidden(),
                                  call, "grad_tokens_out");
    at::Tensor w = checkedRows(topk_w, type(), tokens_, plan_->top_k_, call,
                               "topk_w");
    at::Tensor grad_expert_out = at::empty({recvRows(), hidden()}, type());
    at::Tensor grad_topk_w = at::empty({tokens_, plan_->top_k_}, type());
    run(call, [&](const swy_op_attr_t* attr) {
      return swy_moe_combine_backward(
          route_, grad.data_ptr(), w.data_ptr(), grad_expert_out.data_ptr(),
          grad_topk_w.data_ptr(), attr, SWY_MOE_BLOCKING);
    });
    return std::make_tuple(grad_expert_out, grad_topk_w);
  }

  at::Tensor dispatchBackward(const at::Tensor& grad_expert_in) {
    const char* call = "MoE dispatch backward";
    at::Tensor grad = checkedRows(grad_expert_in, type(), recvRows(),
                                  hidden(), call, "grad_expert_in");
    at::Tensor grad_tokens = at::empty({tokens_, hidden()}, type());
    run(call, [&](const swy_op_attr_t* attr) {
      return swy_moe_dispatch_backward(route_, grad.data_ptr(),
                                       grad_tokens.data_ptr(), attr);
    });
    return grad_tokens;
  }

 private:
  int64_t hidden() const {
    return plan_->hidden_;
  }

  at::ScalarType type() const {
    return plan_->type_;
  }

  // The caller's priority scope applies (moe.h's default is high).
  void run(const char* call,
           const std::function<swy_status_t(const swy_op_attr_t*)>& exchange) {
    swy_op_attr_t attr_storage;
    const swy_op_attr_t* attr = scopeAttr(&attr_storage);
    swy_status_t status;
    {
      py::gil_scoped_release no_gil;
      status = exchange(attr);
    }
    checkMoeCall(status, call);
  }

  std::shared_ptr<MoePlan> plan_;
  swy_moe_route_t route_;
  int64_t tokens_;
  swy_moe_layout_t layout_{};
};

inline std::shared_ptr<MoeRoute> MoePlan::route(const at::Tensor& topk_idx) {
  const char* call = "MoE route";
  checkTensor(topk_idx, call, "topk_idx");
  TORCH_CHECK(topk_idx.dim() == 2 && topk_idx.size(1) == top_k_,
              "switchyard: ", call, ": topk_idx must be [tokens, ", top_k_,
              "], got ", topk_idx.sizes());
  TORCH_CHECK(topk_idx.size(0) <= INT32_MAX, "switchyard: ", call, ": ",
              topk_idx.size(0), " tokens are more than an int counts");
  at::Tensor idx = topk_idx.to(at::kInt).contiguous();
  const int tokens = static_cast<int>(idx.size(0));
  swy_moe_route_t route = nullptr;
  swy_status_t status;
  {
    py::gil_scoped_release no_gil;
    status = swy_moe_route(plan_, idx.data_ptr<int>(), tokens, &route);
  }
  checkMoeCall(status, "swy_moe_route");
  return std::make_shared<MoeRoute>(shared_from_this(), route, tokens);
}

// TA-MoE's per-expert weights of the balance loss for this rank (moe.h).
inline std::vector<double> taExpertWeights(
    const c10::intrusive_ptr<SwitchyardBackend>& group,
    int experts_per_rank) {
  swy_comm_t comm = group->liveComm();
  TORCH_CHECK(comm != nullptr, "switchyard: ta_target: the group was aborted");
  std::vector<double> weights(
      static_cast<size_t>(group->getSize()) * experts_per_rank);
  checkMoeCall(swy_moe_ta_target(comm, experts_per_rank, nullptr,
                                 weights.data()),
               "swy_moe_ta_target");
  return weights;
}

}  // namespace switchyard_torch
