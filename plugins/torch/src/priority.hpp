// The priority of the ops a thread posts: switchyard.torch.priority()
// sets it, the process group and the MoE exchanges read it. Part of the
// extension's one translation unit (module.cpp).

#pragma once

#include <switchyard/switchyard.h>

#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>

#include <string>

namespace py = pybind11;

namespace switchyard_torch {

struct PriorityScope {
  bool set = false;
  int priority = -1;
  int64_t order = 0;
  std::string name;
};

inline thread_local PriorityScope tls_priority;

// Fills *attr from the caller's priority scope; NULL keeps the library's
// defaults (all-to-all high, allreduce low).
inline const swy_op_attr_t* scopeAttr(swy_op_attr_t* attr) {
  if (!tls_priority.set) {
    return nullptr;
  }
  *attr = SWY_OP_ATTR_INIT;
  attr->priority = tls_priority.priority;
  attr->order = tls_priority.order;
  attr->name = tls_priority.name.empty() ? nullptr : tls_priority.name.c_str();
  return attr;
}

// Sets this thread's priority scope; returns the previous one so that the
// Python context manager can restore it (scopes nest).
inline py::tuple setPriority(bool set, int priority, int64_t order,
                             const std::string& name) {
  if (set) {
    TORCH_CHECK(priority >= 0 && priority <= 1000,
                "switchyard: priority must be within 0..1000, got ",
                priority);
  }
  PriorityScope previous = tls_priority;
  tls_priority.set = set;
  tls_priority.priority = priority;
  tls_priority.order = order;
  tls_priority.name = name;
  return py::make_tuple(previous.set, previous.priority, previous.order,
                        previous.name);
}

}  // namespace switchyard_torch
