import { loadNative } from '../native/index.js';
import { type CxxDemangler, useCxxDemangler } from '../symbols/index.js';

/**
 * This host's C++ demangler: libstdc++'s (libiberty's, what c++filt, gdb and perf show),
 * through the native layer, loaded when the first C++ name is demangled; none where the
 * native layer cannot be loaded (the WebAssembly demangler names every name then).
 */
export function hostCxxDemangler(): CxxDemangler | undefined {
  try {
    return loadNative().cxaDemangle;
  } catch {
    return undefined;
  }
}

// Every planning, listing and naming of upscope's reaches the host layer: its C++ names are
// demangled by the host's demangler from the start.
useCxxDemangler(hostCxxDemangler);
