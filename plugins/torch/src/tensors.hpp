// How tensors map to the library's calls: argument checks, element types,
// reduction ops. Part of the extension's one translation unit (module.cpp).

#pragma once

#include <switchyard/switchyard.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>
#include <vector>

namespace switchyard_torch {

inline void checkTensor(const at::Tensor& t, const char* op,
                        const char* arg) {
  TORCH_CHECK(t.defined(), "switchyard: ", op, ": ", arg, " is undefined");
#ifdef SWY_TORCH_CUDA
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "switchyard: ", op,
              ": ", arg, " is on ", t.device(),
              "; this backend takes CPU and CUDA tensors");
#else
  TORCH_CHECK(t.device().is_cpu(), "switchyard: ", op, ": ", arg, " is on ",
              t.device(), "; this build of the backend takes CPU tensors "
              "only (it was built without torch's CUDA headers)");
#endif
  TORCH_CHECK(t.layout() == at::kStrided, "switchyard: ", op, ": ", arg,
              " has layout ", t.layout(), "; only dense tensors are supported");
}

inline void checkOneTensor(const std::vector<at::Tensor>& ts, const char* op,
                        const char* arg) {
  TORCH_CHECK(ts.size() == 1, "switchyard: ", op, ": ", arg,
              " must hold exactly one tensor per process, got ", ts.size());
  checkTensor(ts[0], op, arg);
}

inline size_t tensorBytes(const at::Tensor& t) {
  return static_cast<size_t>(t.numel()) * t.element_size();
}

inline swy_redop_t toRedop(const c10d::ReduceOp& op, const char* opname) {
  switch (static_cast<c10d::ReduceOp::RedOpType>(op)) {
    case c10d::ReduceOp::SUM:
      return SWY_SUM;
    case c10d::ReduceOp::AVG:
      return SWY_AVG;
    case c10d::ReduceOp::PRODUCT:
      return SWY_PROD;
    case c10d::ReduceOp::MIN:
      return SWY_MIN;
    case c10d::ReduceOp::MAX:
      return SWY_MAX;
    default:
      break;
  }
  static const char* const names[] = {"SUM",  "AVG", "PRODUCT",
                                      "MIN",  "MAX", "BAND",
                                      "BOR",  "BXOR", "PREMUL_SUM"};
  const unsigned code = static_cast<unsigned>(
      static_cast<c10d::ReduceOp::RedOpType>(op));
  TORCH_CHECK(false, "switchyard: ", opname, ": ReduceOp ",
              code < 9 ? names[code] : std::to_string(code).c_str(),
              " is not supported (SUM, AVG, PRODUCT, MIN and MAX are)");
}

// A reduction's element type and how many of them one torch element holds
// (a complex number is reduced as two reals, which is right for SUM and AVG
// only; torch itself refuses the other ops on complex tensors).
inline swy_dtype_t reduceDtype(at::ScalarType type, swy_redop_t op,
                               const char* opname, size_t* per_element) {
  *per_element = 1;
  switch (type) {
    case at::kChar:
      return SWY_INT8;
    case at::kByte:
      return SWY_UINT8;
    case at::kInt:
      return SWY_INT32;
    case at::kLong:
      return SWY_INT64;
    case at::kHalf:
      return SWY_FLOAT16;
    case at::kBFloat16:
      return SWY_BFLOAT16;
    case at::kFloat:
      return SWY_FLOAT32;
    case at::kDouble:
      return SWY_FLOAT64;
    case at::kComplexFloat:
    case at::kComplexDouble:
      TORCH_CHECK(op == SWY_SUM || op == SWY_AVG, "switchyard: ", opname,
                  ": complex tensors reduce with SUM or AVG only, got ",
                  type);
      *per_element = 2;
      return type == at::kComplexFloat ? SWY_FLOAT32 : SWY_FLOAT64;
    default:
      TORCH_CHECK(false, "switchyard: ", opname, ": dtype ", type,
                  " cannot be reduced (int8, uint8, int32, int64, float16, "
                  "bfloat16, float32, float64, complex64 and complex128 can)");
  }
}

// How a tensor's bytes travel: as its own element type where the library
// has it (so that a mismatch report names the dtype), else as bytes.
struct Movement {
  swy_dtype_t dtype;
  size_t unit;  // bytes per element of dtype
};

inline Movement movement(at::ScalarType type) {
  switch (type) {
    case at::kChar:
      return {SWY_INT8, 1};
    case at::kByte:
      return {SWY_UINT8, 1};
    case at::kInt:
      return {SWY_INT32, 4};
    case at::kLong:
      return {SWY_INT64, 8};
    case at::kHalf:
      return {SWY_FLOAT16, 2};
    case at::kBFloat16:
      return {SWY_BFLOAT16, 2};
    case at::kFloat:
      return {SWY_FLOAT32, 4};
    case at::kDouble:
      return {SWY_FLOAT64, 8};
    default:
      return {SWY_UINT8, 1};
  }
}

// A contiguous tensor standing for t: t itself, or a copy.
inline at::Tensor contiguousFor(const at::Tensor& t) {
  return t.is_contiguous() ? t : t.contiguous();
}

}  // namespace switchyard_torch
