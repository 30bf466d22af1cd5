// cupreempt host side: where the runtime's functions are. In objects the compiler launcher
// compiles (its runtime_path.h defines CUPREEMPT_RUNTIME_LIBRARY), the code that transformed
// launches run (launch.cuh) and the registration of a unit's wrapper module name no runtime
// function at link time; they look each one up here, once. So such an object also links where
// the link step is the host compiler's and does not name the runtime (a Makefile's
// `g++ -o prog *.o -lcudart`), and runs preemptible there.
#pragma once
#include <dlfcn.h>
#include <cstdlib>
#include "runtime_path.h"

// Weak: before glibc 2.34 they are libdl's, which a host compiler's link step may not name;
// then there is no runtime to find, and launches run their originals.
#if defined(__GNUC__) || defined(__clang__)
#pragma weak dlopen
#pragma weak dlsym
#endif

// The library that holds the runtime (`handle`): the program itself where it is linked with
// -lcupreempt_runtime or preloaded (its functions are then in the global scope), else the
// library the environment's CUPREEMPT_RUNTIME_LIBRARY names, else the one the compiler launcher
// linked (CUPREEMPT_RUNTIME_LIBRARY, runtime_path.h), loaded; null where none is found.
// `tried`: the path loaded or tried, null where the program held the runtime or none was named.
struct CupreemptRuntimeLibrary {
  void* handle;
  const char* tried;
};

inline CupreemptRuntimeLibrary cupreempt_open_runtime() {
  if (!&dlopen || !&dlsym) return {nullptr, nullptr};
  // A handle to the global scope, never closed.
  void* self = dlopen(nullptr, RTLD_NOW);
  if (self && dlsym(self, "cupreempt_rt_plan")) return {self, nullptr};
  const char* named = std::getenv("CUPREEMPT_RUNTIME_LIBRARY");
#ifdef CUPREEMPT_RUNTIME_LIBRARY
  if (!named || !*named) named = CUPREEMPT_RUNTIME_LIBRARY;
#endif
  if (!named || !*named) return {nullptr, nullptr};
  return {dlopen(named, RTLD_NOW | RTLD_GLOBAL), named};
}

// Found once per program.
inline const CupreemptRuntimeLibrary& cupreempt_runtime_library() {
  static const CupreemptRuntimeLibrary lib = cupreempt_open_runtime();
  return lib;
}

// A runtime function by name, or null where there is no runtime.
inline void* cupreempt_runtime_symbol(const char* name) {
  const CupreemptRuntimeLibrary& lib = cupreempt_runtime_library();
  return lib.handle ? dlsym(lib.handle, name) : nullptr;
}
