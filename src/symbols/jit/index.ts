export { type JitEntry, JitSymbols, parseJitDump, parsePerfMap } from './jit-symbols.js';
