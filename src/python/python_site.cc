#include "src/python/python_site.h"

#include <Python.h>
#include <frameobject.h>

#include <mutex>
#include <set>
#include <string>
#include <string_view>

namespace replicator::python {
namespace {

// Frames of these files are the machinery between the user's line and the backend: torch's
// package and replicator's own Python files.
bool machinery(std::string_view file) {
  for (std::string_view part : {"-packages/torch/", "/replicator/__init__.py",
                                "/replicator/torch.py", "/replicator/_threads.py"}) {
    if (file.find(part) != std::string_view::npos) return true;
  }
  return file.starts_with("<frozen");
}

// A name that lives as long as the process: CallSite keeps a plain pointer.
const char* interned(const std::string& file) {
  static std::mutex mu;
  static std::set<std::string>* names = new std::set<std::string>();
  std::lock_guard lock(mu);
  return names->insert(file).first->c_str();
}

}  // namespace

CallSite python_caller() noexcept {
  if (!Py_IsInitialized() || PyGILState_GetThisThreadState() == nullptr) return {};
  try {
    const PyGILState_STATE gil = PyGILState_Ensure();
    CallSite site;
    PyFrameObject* frame = PyEval_GetFrame();  // borrowed
    Py_XINCREF(frame);
    while (frame != nullptr) {
      PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
      const char* file = PyUnicode_AsUTF8(code->co_filename);
      if (file != nullptr && !machinery(file)) {
        site = CallSite{interned(file), static_cast<std::uint32_t>(PyFrame_GetLineNumber(frame))};
        Py_DECREF(code);
        break;
      }
      if (file == nullptr) PyErr_Clear();
      Py_DECREF(code);
      PyFrameObject* back = PyFrame_GetBack(frame);  // new reference
      Py_DECREF(frame);
      frame = back;
    }
    Py_XDECREF(frame);
    PyGILState_Release(gil);
    return site;
  } catch (...) {
    return {};
  }
}

}  // namespace replicator::python
