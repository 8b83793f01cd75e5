/* ctune-supervise: the per-trial supervisor as a program of its own
 * (execwrap.h). It links libc alone, statically where it can
 * (worker/CMakeLists.txt): every trial's start pays for its loading. */
#include "execwrap.h"

int main(int argc, char **argv) { return execwrap_main(argc, argv, 1); }
