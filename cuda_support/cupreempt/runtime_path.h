// cupreempt host side: the runtime library's path, for programs whose link step does not name
// it (runtime_library.h). The compiler launcher writes its own copy of this file, defining
// CUPREEMPT_RUNTIME_LIBRARY as the library it links; built otherwise, nothing is defined here
// and the program finds the runtime only where it is linked, preloaded or named by the
// environment's CUPREEMPT_RUNTIME_LIBRARY.
#pragma once
