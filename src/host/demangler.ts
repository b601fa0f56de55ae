import { loadNative } from '../native/index.js';
import { type CxxDemangler, useBackgroundDemangler, useCxxDemangler } from '../symbols/index.js';
import { backgroundDemangler } from './background-demangler.js';

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
// Many names at once (a pattern's 50,000 matches) are demangled on another thread meanwhile.
useBackgroundDemangler(backgroundDemangler);
